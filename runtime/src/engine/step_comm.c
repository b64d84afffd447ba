/* The step's bookkeeping of DP collectives (time in flight, exposed wait)
 * and its transient buffers from the arena (gathered weights, gradient
 * buckets), with their peak. */
#include "step.h"

#include "whale/trace.h"

void eng_comm_started(whale_engine *e)
{
    if (e->inflight++ == 0)
        e->busy_since = eng_now();
}

static void comm_finished(whale_engine *e)
{
    if (--e->inflight == 0)
        e->t_comm += eng_now() - e->busy_since;
}

int eng_req_wait(whale_engine *e, void **req)
{
    if (!*req)
        return 0;
    double t0 = eng_now();
    uint64_t tr = whale_trace_now();
    int rc = e->dp.wait(&e->dp, *req);
    e->t_wait += eng_now() - t0;
    if (whale_trace_on()) /* the exposed part of a DP / ZeRO collective */
        whale_trace_span("allreduce", "dp wait", tr, -1, -1);
    *req = NULL;
    comm_finished(e);
    return rc;
}

int eng_req_poll(whale_engine *e, void **req, bool *done)
{
    *done = true;
    if (!*req)
        return 0;
    int rc = e->dp.test(&e->dp, *req, done);
    if (rc) {
        *req = NULL;
        comm_finished(e);
        return rc;
    }
    if (*done) {
        *req = NULL;
        comm_finished(e);
    }
    return 0;
}

/* Transient buffers (gathered weights, gradient buckets) from the arena. */
float *eng_scratch_alloc(whale_engine *e, enum whale_mem_cat cat, size_t n, bool zero)
{
    float *p = whale_arena_alloc(e->arena, cat, n * sizeof(float), zero);
    if (!p)
        return NULL;
    e->scratch_now += (int64_t)n * 4;
    if (e->scratch_now > e->scratch_peak)
        e->scratch_peak = e->scratch_now;
    return p;
}

void eng_scratch_free(whale_engine *e, enum whale_mem_cat cat, float **p, size_t n)
{
    if (*p) {
        whale_arena_free(e->arena, cat, *p, n * sizeof(float));
        e->scratch_now -= (int64_t)n * 4;
        *p = NULL;
    }
}
