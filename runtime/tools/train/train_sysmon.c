/* Per-rank system metrics from /proc (train_sysmon.h). Everything here is
 * a cheap read of a few small files once per step; nothing blocks. */
#define _GNU_SOURCE
#include "train_sysmon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "whale/clock.h"

/* utime + stime (fields 14 and 15 of /proc/self/stat), in seconds. The
 * command name (field 2) may hold spaces and ')': parse after the last ')'. */
static int proc_cpu_s(double *out)
{
    char buf[2048];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long ut = 0, st = 0;
    /* after ')': state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    *out = (double)(ut + st) / (double)(hz > 0 ? hz : 100);
    return 0;
}

/* The node-wide "cpu" line of /proc/stat: total, idle (+ iowait) and iowait jiffies. */
static int node_stat(uint64_t *total, uint64_t *idle, uint64_t *iowait)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[10] = { 0 };
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (n < 5)
        return -1;
    /* guest and guest_nice (8, 9) are already inside user and nice */
    uint64_t t = 0;
    for (int i = 0; i < 8 && i < n; i++)
        t += v[i];
    *total = t;
    *idle = v[3] + v[4];
    *iowait = v[4];
    return 0;
}

/* Bytes (rx + tx) through this network namespace's interfaces: loopback
 * apart (ranks of one node that talk over tcp), the rest is traffic that
 * leaves the node. Shared-memory transfers never show here. */
static int net_bytes(uint64_t *tcp, uint64_t *lo)
{
    FILE *f = fopen("/proc/net/dev", "r");
    if (!f)
        return -1;
    char line[512];
    uint64_t t = 0, l = 0;
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue; /* the two header lines */
        *colon = '\0';
        char *name = line;
        while (*name == ' ')
            name++;
        unsigned long long rx, tx;
        /* rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes ... */
        if (sscanf(colon + 1, "%llu %*u %*u %*u %*u %*u %*u %*u %llu", &rx, &tx) != 2)
            continue;
        if (!strcmp(name, "lo"))
            l += rx + tx;
        else
            t += rx + tx;
        found = 1;
    }
    fclose(f);
    if (!found)
        return -1;
    *tcp = t;
    *lo = l;
    return 0;
}

static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    unsigned long size = 0, res = 0;
    int n = fscanf(f, "%lu %lu", &size, &res);
    fclose(f);
    if (n != 2)
        return -1;
    return (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

void train_sysmon_init(struct train_sysmon *m)
{
    memset(m, 0, sizeof *m);
    m->ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (m->ncpu < 1)
        m->ncpu = 1;
    m->wall0 = whale_now_s();
    if (proc_cpu_s(&m->proc_cpu0))
        m->proc_cpu0 = -1;
    m->have_stat = !node_stat(&m->node_total0, &m->node_idle0, &m->node_iowait0) &&
                   m->node_total0 > 0;
    if (m->have_stat) {
        m->node_util_last = 1.0 - (double)m->node_idle0 / (double)m->node_total0;
        m->iowait_last = (double)m->node_iowait0 / (double)m->node_total0;
    }
    m->have_net = !net_bytes(&m->net_tcp0, &m->net_lo0);
    m->nvml = train_nvml_open();
}

void train_sysmon_sample(struct train_sysmon *m, struct train_sys *o)
{
    memset(o, 0, sizeof *o);
    double now = whale_now_s(), dt = now - m->wall0, cpu;
    o->cpu_util = -1;
    if (m->proc_cpu0 >= 0 && !proc_cpu_s(&cpu) && dt > 0) {
        o->cpu_util = (cpu - m->proc_cpu0) / dt;
        m->proc_cpu0 = cpu;
    }
    m->wall0 = now;
    o->rss_mb = rss_mb();
    uint64_t tot, idle, iow;
    if (m->have_stat && !node_stat(&tot, &idle, &iow)) {
        /* A window of fewer than 4 ticks per CPU is too coarse (and may hold
         * none): keep it open and report the last full window's figures. */
        if (tot < m->node_total0) {
            /* counters went back (a CPU went offline): start a new window */
            m->node_total0 = tot;
            m->node_idle0 = idle;
            m->node_iowait0 = iow;
        } else if (tot >= m->node_total0 + 4 * (uint64_t)m->ncpu) {
            double d = (double)(tot - m->node_total0);
            /* idle and iowait come partly from nohz time, not from the same
             * ticks as total, and proc(5) says iowait may even go back:
             * signed differences, clamped */
            double u = 1.0 - ((double)idle - (double)m->node_idle0) / d;
            double w = ((double)iow - (double)m->node_iowait0) / d;
            m->node_util_last = u < 0 ? 0 : u > 1 ? 1 : u;
            m->iowait_last = w < 0 ? 0 : w > 1 ? 1 : w;
            m->node_total0 = tot;
            m->node_idle0 = idle;
            m->node_iowait0 = iow;
        }
        o->node_cpu_util = m->node_util_last;
        o->iowait = m->iowait_last;
        o->have_node = true;
    }
    uint64_t tcp, lo;
    if (m->have_net && !net_bytes(&tcp, &lo)) {
        o->net_tcp_mb = (double)(tcp - m->net_tcp0) / 1048576.0;
        o->net_lo_mb = (double)(lo - m->net_lo0) / 1048576.0;
        o->have_net = tcp >= m->net_tcp0 && lo >= m->net_lo0; /* counters may wrap or reset */
        m->net_tcp0 = tcp;
        m->net_lo0 = lo;
    }
    if (m->nvml && !train_nvml_sample(m->nvml, &o->gpu_util, &o->gpu_mem_mb))
        o->have_gpu = true;
}

void train_sys_json(const struct train_sys *s, json_t *j)
{
    if (s->cpu_util >= 0)
        json_object_set_new(j, "cpu_util", json_real(s->cpu_util));
    if (s->rss_mb >= 0)
        json_object_set_new(j, "rss_mb", json_real(s->rss_mb));
    if (s->have_node) {
        json_object_set_new(j, "node_cpu_util", json_real(s->node_cpu_util));
        json_object_set_new(j, "iowait", json_real(s->iowait));
    }
    if (s->have_net) {
        json_object_set_new(j, "net_tcp_mb", json_real(s->net_tcp_mb));
        json_object_set_new(j, "net_lo_mb", json_real(s->net_lo_mb));
    }
    if (s->have_gpu) {
        json_object_set_new(j, "gpu_util", json_real(s->gpu_util));
        json_object_set_new(j, "gpu_mem_mb", json_real(s->gpu_mem_mb));
    }
}

void train_sysmon_free(struct train_sysmon *m)
{
    train_nvml_close(m->nvml);
    m->nvml = NULL;
}
