/* WHALE_TRACE: Chrome trace-event JSON per rank.
 *
 * Timestamps are CLOCK_MONOTONIC microseconds, one clock for every process
 * of a machine, so the ranks' files line up when merged.
 *
 * Each recording thread appends to its own buffer (no lock, no I/O on the
 * hot path: two clock reads and a store per span); buffers are registered
 * once under a mutex and written out at close. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/outfile.h"
#include "whale/trace.h"

#define TRACE_MAX_EVENTS_PER_THREAD (8u << 20)

struct tev {
    const char *cat, *name;
    uint64_t t0, t1;
    int32_t chunk, mb;
};

struct tbuf {
    struct tbuf *next;
    int tid;
    char tname[48];
    size_t n, cap;
    uint64_t dropped;
    struct tev *ev;
};

static atomic_bool trace_enabled;
static atomic_uint trace_gen = 1;     /* bumped at close: thread-local buffers go stale */
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tbuf *trace_bufs;
static int trace_ntid;
static int trace_rank;
static char trace_file[4096];
static __thread struct tbuf *my_buf;
static __thread unsigned my_gen;

uint64_t whale_trace_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool whale_trace_on(void)
{
    return atomic_load_explicit(&trace_enabled, memory_order_relaxed);
}

const char *whale_trace_path(void)
{
    return whale_trace_on() ? trace_file : NULL;
}

static struct tbuf *thread_buf(void)
{
    unsigned g = atomic_load_explicit(&trace_gen, memory_order_acquire);
    if (my_buf && my_gen == g)
        return my_buf;
    struct tbuf *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    pthread_mutex_lock(&trace_mu);
    b->tid = trace_ntid++;
    snprintf(b->tname, sizeof b->tname, b->tid == 0 ? "main" : "thread %d", b->tid);
    b->next = trace_bufs;
    trace_bufs = b;
    pthread_mutex_unlock(&trace_mu);
    my_buf = b;
    my_gen = g;
    return b;
}

void whale_trace_thread_name(const char *name)
{
    if (!whale_trace_on())
        return;
    struct tbuf *b = thread_buf();
    if (b)
        snprintf(b->tname, sizeof b->tname, "%s", name);
}

void whale_trace_span_at(const char *cat, const char *name, uint64_t t0, uint64_t t1, int chunk,
                         int mb)
{
    if (!whale_trace_on())
        return;
    struct tbuf *b = thread_buf();
    if (!b)
        return;
    if (b->n == b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 4096;
        if (nc > TRACE_MAX_EVENTS_PER_THREAD)
            nc = TRACE_MAX_EVENTS_PER_THREAD;
        struct tev *e = nc > b->cap ? realloc(b->ev, nc * sizeof *e) : NULL;
        if (!e) {
            b->dropped++;
            return;
        }
        b->ev = e;
        b->cap = nc;
    }
    b->ev[b->n++] = (struct tev){ cat, name, t0, t1, chunk, mb };
}

void whale_trace_span(const char *cat, const char *name, uint64_t t0, int chunk, int mb)
{
    if (whale_trace_on())
        whale_trace_span_at(cat, name, t0, whale_trace_now(), chunk, mb);
}

/* FILE -> per-rank file name (see whale/parallel.h). */
static int resolve(const char *path, int rank, int world, char *out, size_t len)
{
    const char *pr = strstr(path, "%r");
    int k;
    if (pr) {
        k = snprintf(out, len, "%.*s%d%s", (int)(pr - path), path, rank, pr + 2);
    } else if (world <= 1) {
        k = snprintf(out, len, "%s", path);
    } else {
        const char *slash = strrchr(path, '/');
        const char *dot = strrchr(path, '.');
        if (dot && (!slash || dot > slash + 1))
            k = snprintf(out, len, "%.*s-rank%d%s", (int)(dot - path), path, rank, dot);
        else
            k = snprintf(out, len, "%s-rank%d", path, rank);
    }
    return k < 0 || (size_t)k >= len ? WHALE_ERANGE : 0;
}

int whale_trace_open(const char *path, int rank, int world)
{
    if (!path || !*path) {
        whale_error("WHALE_TRACE: empty file name");
        return WHALE_EINVAL;
    }
    if (whale_trace_on())
        whale_trace_close();
    if (resolve(path, rank, world, trace_file, sizeof trace_file)) {
        whale_error("WHALE_TRACE: file name too long: %s", path);
        return WHALE_ERANGE;
    }
    /* Fail now, not at the end of a long run. */
    FILE *f = whale_fopen_output(trace_file, whale_output_private());
    if (!f) {
        whale_error("WHALE_TRACE: cannot write %s: %s", trace_file, whale_output_strerror(errno));
        return WHALE_EIO;
    }
    whale_output_close(f);
    trace_rank = rank;
    atomic_store(&trace_enabled, true);
    whale_trace_thread_name("main");
    return 0;
}

int whale_trace_init(int rank, int world)
{
    const char *p = getenv(WHALE_ENV_TRACE);
    if (!p || !*p)
        return 0;
    return whale_trace_open(p, rank, world);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s < 0x20)
            continue;
        fputc(*s, f);
    }
    fputc('"', f);
}

int whale_trace_close(void)
{
    if (!whale_trace_on())
        return 0;
    atomic_store(&trace_enabled, false);
    pthread_mutex_lock(&trace_mu);
    struct tbuf *bufs = trace_bufs;
    trace_bufs = NULL;
    trace_ntid = 0;
    atomic_fetch_add(&trace_gen, 1);
    pthread_mutex_unlock(&trace_mu);

    int rc = 0;
    FILE *f = whale_fopen_output(trace_file, whale_output_private());
    if (!f) {
        whale_error("WHALE_TRACE: cannot write %s: %s", trace_file, whale_output_strerror(errno));
        rc = WHALE_EIO;
    } else {
        fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"name\":\"rank %d\"}},\n"
                   "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"sort_index\":%d}}",
                trace_rank, trace_rank, trace_rank, trace_rank);
        uint64_t dropped = 0;
        for (struct tbuf *b = bufs; b; b = b->next) {
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":", trace_rank, b->tid);
            json_str(f, b->tname);
            fprintf(f, "}}");
            dropped += b->dropped;
            for (size_t i = 0; i < b->n; i++) {
                const struct tev *e = &b->ev[i];
                fprintf(f, ",\n{\"name\":");
                json_str(f, e->name);
                fprintf(f, ",\"cat\":");
                json_str(f, e->cat);
                fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d",
                        (double)e->t0 / 1e3,
                        (double)(int64_t)(e->t1 - e->t0) / 1e3, trace_rank, b->tid);
                if (e->chunk >= 0 || e->mb >= 0) {
                    fprintf(f, ",\"args\":{");
                    if (e->chunk >= 0)
                        fprintf(f, "\"chunk\":%d%s", e->chunk, e->mb >= 0 ? "," : "");
                    if (e->mb >= 0)
                        fprintf(f, "\"mb\":%d", e->mb);
                    fprintf(f, "}");
                }
                fprintf(f, "}");
            }
        }
        fprintf(f, "\n]}\n");
        if (whale_output_close(f)) /* warns with the file and the reason */
            rc = WHALE_EIO;
        if (dropped)
            whale_warn("WHALE_TRACE: %llu spans dropped (buffer limit or out of memory)",
                       (unsigned long long)dropped);
    }
    while (bufs) {
        struct tbuf *n = bufs->next;
        free(bufs->ev);
        free(bufs);
        bufs = n;
    }
    return rc;
}
