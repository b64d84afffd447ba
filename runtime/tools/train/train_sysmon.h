/* System metrics of one rank for the metrics JSONL (train_sysmon.c):
 * CPU use of this process and of the node, I/O wait, RSS, network bytes
 * by link class, and, where a GPU and its driver are present, GPU
 * utilization and memory through NVML (loaded at run time). */
#ifndef WHALE_TRAIN_SYSMON_H
#define WHALE_TRAIN_SYSMON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct train_nvml; /* train_nvml.c */

struct train_sysmon {
    double wall0;            /* CLOCK_MONOTONIC seconds at the last sample */
    double proc_cpu0;        /* utime + stime of this process, seconds */
    uint64_t node_total0, node_idle0, node_iowait0; /* /proc/stat "cpu" jiffies */
    /* The node figures of the last window that was long enough (or, before
     * the first, since boot, as top's first frame): /proc/stat moves in
     * 10 ms ticks per CPU, so a step shorter than a few ticks sees no or one
     * tick and gets these instead of an absent or 0/1 figure. */
    double node_util_last, iowait_last;
    uint64_t net_tcp0, net_lo0;                     /* /proc/net/dev bytes (rx + tx) */
    bool have_stat, have_net;
    int ncpu;
    struct train_nvml *nvml; /* NULL: no NVML (no driver, no GPU) */
};

/* One sample set between two calls of train_sysmon_sample. */
struct train_sys {
    double cpu_util;     /* cores this process kept busy (1.0 = one core) */
    double node_cpu_util;/* fraction of all the node's CPUs busy, 0..1 */
    double iowait;       /* fraction of the node's CPU time in I/O wait, 0..1 */
    double rss_mb;       /* resident set now */
    double net_tcp_mb;   /* bytes through the node's network interfaces (inter-node: tcp) */
    double net_lo_mb;    /* bytes through loopback (same node over tcp) */
    bool have_node, have_net;
    bool have_gpu;
    double gpu_util;     /* 0..1, the GPU this rank uses */
    double gpu_mem_mb;   /* used device memory */
};

void train_sysmon_init(struct train_sysmon *m);
/* Figures since the previous call (or init). Never fails: what cannot be
 * read is left out (have_* false). */
void train_sysmon_sample(struct train_sysmon *m, struct train_sys *out);
/* Adds the fields that were measured to a metrics record (never zero for
 * "could not measure": the field is absent then). */
void train_sys_json(const struct train_sys *s, json_t *j);
void train_sysmon_free(struct train_sysmon *m);

/* train_nvml.c: NULL when libnvidia-ml.so.1 or a GPU is absent. */
struct train_nvml *train_nvml_open(void);
int train_nvml_sample(struct train_nvml *n, double *util, double *mem_mb);
void train_nvml_close(struct train_nvml *n);

#endif
