/* Schedule storage: growable arrays of chains, rounds, transfers, actions. */
#include "comm/collectives/sched.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"

void sched_init(struct sched *s, int p, int r, enum whale_dtype t, enum whale_op op)
{
    memset(s, 0, sizeof *s);
    s->p = p;
    s->r = r;
    s->dtype = t;
    s->rop = op == WHALE_AVG ? WHALE_SUM : op;
    s->esz = whale_dtype_size(t);
}

/* Scratch buffers are reused across operations: a fresh multi-MiB buffer
 * per collective costs an mmap, a page fault per 4 KiB on first touch and a
 * TLB shootdown at munmap, comparable to moving the data itself. A small
 * process-wide cache (LIFO, bounded in count and bytes) keeps them. */
#define SCRATCH_SLOTS 16
#define SCRATCH_MAX_BYTES ((size_t)512 << 20)
static struct { void *p; size_t cap; } g_scratch[SCRATCH_SLOTS];
static int g_nscratch;
static size_t g_scratch_bytes;
static pthread_mutex_t g_scratch_lock = PTHREAD_MUTEX_INITIALIZER;

static void *scratch_get(size_t bytes, size_t *cap)
{
    pthread_mutex_lock(&g_scratch_lock);
    for (int i = g_nscratch - 1; i >= 0; i--) {
        if (g_scratch[i].cap >= bytes && g_scratch[i].cap <= 4 * bytes + (1 << 20)) {
            void *p = g_scratch[i].p;
            *cap = g_scratch[i].cap;
            g_scratch_bytes -= *cap;
            g_scratch[i] = g_scratch[--g_nscratch];
            pthread_mutex_unlock(&g_scratch_lock);
            return p;
        }
    }
    pthread_mutex_unlock(&g_scratch_lock);
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes))
        return NULL;
    *cap = bytes;
    return p;
}

static void scratch_put(void *p, size_t cap)
{
    if (!p)
        return;
    pthread_mutex_lock(&g_scratch_lock);
    if (g_nscratch == SCRATCH_SLOTS || g_scratch_bytes + cap > SCRATCH_MAX_BYTES) {
        /* evict the oldest to keep the most recent sizes */
        if (g_nscratch > 0) {
            free(g_scratch[0].p);
            g_scratch_bytes -= g_scratch[0].cap;
            memmove(g_scratch, g_scratch + 1, sizeof g_scratch[0] * (size_t)--g_nscratch);
        }
        if (g_scratch_bytes + cap > SCRATCH_MAX_BYTES) {
            pthread_mutex_unlock(&g_scratch_lock);
            free(p);
            return;
        }
    }
    g_scratch[g_nscratch].p = p;
    g_scratch[g_nscratch].cap = cap;
    g_nscratch++;
    g_scratch_bytes += cap;
    pthread_mutex_unlock(&g_scratch_lock);
}

void sched_scratch_release_all(void)
{
    pthread_mutex_lock(&g_scratch_lock);
    for (int i = 0; i < g_nscratch; i++)
        free(g_scratch[i].p);
    g_nscratch = 0;
    g_scratch_bytes = 0;
    pthread_mutex_unlock(&g_scratch_lock);
}

void sched_free(struct sched *s)
{
    free(s->chains);
    free(s->rounds);
    free(s->xfers);
    free(s->acts);
    scratch_put(s->tmp, s->tmp_cap);
    memset(s, 0, sizeof *s);
}

#define GROW(s, arr, n, cap)                                                        \
    do {                                                                            \
        if ((s)->n == (s)->cap) {                                                   \
            uint32_t nc = (s)->cap ? (s)->cap * 2 : 8;                              \
            void *np = realloc((s)->arr, nc * sizeof *(s)->arr);                    \
            if (!np) {                                                              \
                (s)->err = WHALE_ENOMEM;                                            \
                return;                                                             \
            }                                                                       \
            (s)->arr = np;                                                          \
            (s)->cap = nc;                                                          \
        }                                                                           \
    } while (0)

void *sched_tmp(struct sched *s, size_t bytes)
{
    if (s->tmp)
        return s->tmp;
    /* 64-byte aligned so reduction loops vectorise on aligned rows. */
    s->tmp = scratch_get(bytes ? bytes : 64, &s->tmp_cap);
    if (!s->tmp) {
        s->err = WHALE_ENOMEM;
        return NULL;
    }
    s->tmp_bytes = bytes;
    return s->tmp;
}

void sched_chain(struct sched *s)
{
    GROW(s, chains, nchains, capchains);
    s->chains[s->nchains++] = (struct sched_chain){ s->nrounds, 0 };
}

void sched_round(struct sched *s)
{
    if (!s->nchains)
        sched_chain(s);
    GROW(s, rounds, nrounds, caprounds);
    s->rounds[s->nrounds++] = (struct sched_round){ s->nxfers, 0, s->nacts, 0 };
    s->chains[s->nchains - 1].nr++;
}

static void add_xfer(struct sched *s, int peer, uint32_t tag, void *buf, size_t bytes, bool send)
{
    if (!bytes && !s->keep_empty)
        return;
    GROW(s, xfers, nxfers, capxfers);
    s->xfers[s->nxfers++] = (struct sched_xfer){ peer, tag & SCHED_TAG_MASK, buf, bytes, send };
    s->rounds[s->nrounds - 1].nx++;
}

void sched_send(struct sched *s, int peer, uint32_t tag, const void *buf, size_t bytes)
{
    add_xfer(s, peer, tag, (void *)buf, bytes, true);
}

void sched_recv(struct sched *s, int peer, uint32_t tag, void *buf, size_t bytes)
{
    add_xfer(s, peer, tag, buf, bytes, false);
}

static void add_act(struct sched *s, struct sched_act a)
{
    GROW(s, acts, nacts, capacts);
    s->acts[s->nacts++] = a;
    s->rounds[s->nrounds - 1].na++;
}

void sched_reduce(struct sched *s, void *dst, const void *a, const void *b, size_t n)
{
    if (n)
        add_act(s, (struct sched_act){ SCHED_REDUCE, dst, a, b, n, 0 });
}

void sched_copy(struct sched *s, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        add_act(s, (struct sched_act){ SCHED_COPY, dst, src, NULL, bytes, 0 });
}

void sched_avg(struct sched *s, void *dst, size_t n, int div)
{
    if (n && div > 1)
        add_act(s, (struct sched_act){ SCHED_AVG, dst, NULL, NULL, n, div });
}

void sched_run_actions(const struct sched *s, const struct sched_round *rd)
{
    for (uint32_t i = 0; i < rd->na; i++) {
        const struct sched_act *a = &s->acts[rd->a0 + i];
        switch (a->kind) {
        case SCHED_COPY:
            memmove(a->dst, a->a, a->n);
            break;
        case SCHED_REDUCE:
            comm_reduce(a->dst, a->a, a->b, a->n, s->dtype, s->rop);
            break;
        case SCHED_AVG:
            comm_avg(a->dst, a->n, s->dtype, a->div);
            break;
        }
    }
}
