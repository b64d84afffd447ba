/* In-process DP backend for unit tests: ranks are threads of one process,
 * collectives are synchronous (barrier, read peers' buffers, barrier) and
 * sum in rank order, so results are deterministic. */
#ifndef TEST_FAKECOMM_H
#define TEST_FAKECOMM_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ecomm.h"

struct fake_world {
    int size;
    pthread_barrier_t bar;
    const float *post[64];
    float *postw[64];
};

struct fake_rank {
    struct fake_world *w;
    int rank;
};

static int fk_iallreduce(struct eng_comm *c, float *buf, size_t n, void **req)
{
    struct fake_rank *fr = c->impl;
    struct fake_world *w = fr->w;
    w->postw[fr->rank] = buf;
    pthread_barrier_wait(&w->bar);
    size_t per = (n + w->size - 1) / w->size;
    size_t lo = per * fr->rank, hi = lo + per < n ? lo + per : n;
    float *tmp = malloc((per ? per : 1) * sizeof(float));
    for (size_t i = lo; i < hi; i++) {
        float s = 0;
        for (int r = 0; r < w->size; r++)
            s += w->postw[r][i];
        tmp[i - lo] = s;
    }
    pthread_barrier_wait(&w->bar);
    for (int r = 0; r < w->size; r++)
        if (hi > lo)
            memcpy(w->postw[r] + lo, tmp, (hi - lo) * sizeof(float));
    pthread_barrier_wait(&w->bar);
    free(tmp);
    *req = (void *)1;
    return 0;
}

static int fk_ireduce_scatter(struct eng_comm *c, const float *send, float *recv, size_t n,
                              void **req)
{
    struct fake_rank *fr = c->impl;
    struct fake_world *w = fr->w;
    w->post[fr->rank] = send;
    pthread_barrier_wait(&w->bar);
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = 0; r < w->size; r++)
            s += w->post[r][(size_t)fr->rank * n + i];
        recv[i] = s;
    }
    pthread_barrier_wait(&w->bar);
    *req = (void *)1;
    return 0;
}

static int fk_iallgather(struct eng_comm *c, const float *send, float *recv, size_t n, void **req)
{
    struct fake_rank *fr = c->impl;
    struct fake_world *w = fr->w;
    w->post[fr->rank] = send;
    pthread_barrier_wait(&w->bar);
    for (int r = 0; r < w->size; r++)
        memcpy(recv + (size_t)r * n, w->post[r], n * sizeof(float));
    pthread_barrier_wait(&w->bar);
    *req = (void *)1;
    return 0;
}

static int fk_test(struct eng_comm *c, void *req, bool *done)
{
    (void)c;
    (void)req;
    *done = true;
    return 0;
}

static int fk_wait(struct eng_comm *c, void *req)
{
    (void)c;
    (void)req;
    return 0;
}

static void fake_comm(struct eng_comm *c, struct fake_rank *fr)
{
    memset(c, 0, sizeof *c);
    c->rank = fr->rank;
    c->size = fr->w->size;
    c->impl = fr;
    c->iallreduce = fk_iallreduce;
    c->ireduce_scatter = fk_ireduce_scatter;
    c->iallgather = fk_iallgather;
    c->test = fk_test;
    c->wait = fk_wait;
}

#endif
