/* Data-parallel collectives on the cuda device: the engine's whale_par_comm table
 * over NCCL (whale_dev_*, whale/comm.h) on a stream of the backend's own, a
 * high-priority one so communication kernels overtake compute. A request is
 * an event recorded on that stream after the collective: test queries it,
 * wait goes through whale_dev_sync (which polls NCCL's asynchronous errors
 * and turns a dead or hung peer into WHALE_EPEER / WHALE_ETIMEDOUT).
 *
 * The 16-bit hooks are not offered: NCCL sums bf16/fp16 in the 16-bit type,
 * and the table's contract is an fp32 accumulation, so --grad-reduce 16
 * reduces in fp32 on this path. TP and PP still go over the host groups. */
#include "ecomm_dev.h"

#include <stdlib.h>

#include "whale/error.h"
#include "whale/log.h"

struct dv_comm {
    whale_group *g;
    whale_backend *bk;   /* bound by eng_dev_comm_bind once the backend is open */
    whale_stream *s;     /* the communication stream, created at the first call */
};

struct dv_req {
    whale_event *ev;
};

static int dv_stream(struct dv_comm *d, void **native)
{
    if (!d->bk) {
        whale_error("engine: NCCL data-parallel collective before the cuda backend was bound");
        return WHALE_EINVAL;
    }
    if (!d->s) {
        int rc = whale_stream_create(d->bk, true, &d->s);
        if (rc)
            return rc;
    }
    *native = whale_stream_native(d->s);
    return 0;
}

/* The event that marks the end of the collective just enqueued. */
static int dv_post(struct dv_comm *d, int rc, void **req)
{
    *req = NULL;
    if (rc)
        return rc;
    struct dv_req *r = calloc(1, sizeof *r);
    if (!r)
        return WHALE_ENOMEM;
    if ((rc = whale_event_create(d->bk, &r->ev)) || (rc = whale_event_record(r->ev, d->s))) {
        whale_event_destroy(r->ev);
        free(r);
        return rc;
    }
    *req = r;
    return 0;
}

static int dv_iallreduce(struct whale_par_comm *c, float *buf, size_t n, void **req)
{
    struct dv_comm *d = c->impl;
    void *st;
    int rc = dv_stream(d, &st);
    if (!rc)
        rc = whale_dev_allreduce(d->g, buf, buf, n, WHALE_FLOAT32, WHALE_SUM, st);
    return dv_post(d, rc, req);
}

static int dv_ireduce_scatter(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                              void **req)
{
    struct dv_comm *d = c->impl;
    void *st;
    int rc = dv_stream(d, &st);
    if (!rc)
        rc = whale_dev_reduce_scatter(d->g, send, recv, n, WHALE_FLOAT32, WHALE_SUM, st);
    return dv_post(d, rc, req);
}

static int dv_iallgather(struct whale_par_comm *c, const float *send, float *recv, size_t n, void **req)
{
    struct dv_comm *d = c->impl;
    void *st;
    int rc = dv_stream(d, &st);
    if (!rc)
        rc = whale_dev_allgather(d->g, send, recv, n, WHALE_FLOAT32, st);
    return dv_post(d, rc, req);
}

static int dv_test(struct whale_par_comm *c, void *req, bool *done)
{
    (void)c;
    struct dv_req *r = req;
    return whale_event_query(r->ev, done);
}

static int dv_wait(struct whale_par_comm *c, void *req)
{
    struct dv_comm *d = c->impl;
    struct dv_req *r = req;
    int rc = whale_dev_sync(d->g, whale_stream_native(d->s));
    whale_event_destroy(r->ev);
    free(r);
    return rc;
}

int eng_dev_comm_dp(struct whale_par_comm *c)
{
    if (c->size <= 1)
        return 0;
    if (!whale_dev_available()) {
        whale_error("--device cuda: this build has no NCCL for the data-parallel collectives");
        return WHALE_ENOTSUP;
    }
    struct dv_comm *d = calloc(1, sizeof *d);
    if (!d)
        return WHALE_ENOMEM;
    d->g = c->impl; /* eng_groups_from_ctx: the DP whale_group */
    c->impl = d;
    c->iallreduce = dv_iallreduce;
    c->ireduce_scatter = dv_ireduce_scatter;
    c->iallgather = dv_iallgather;
    c->iallreduce16 = NULL;
    c->ireduce_scatter16 = NULL;
    /* the DP table offers no p2p, blocking or 16-bit gathers on the device */
    c->isend = NULL;
    c->irecv = NULL;
    c->allreduce = NULL;
    c->iallgather16 = NULL;
    c->test = dv_test;
    c->wait = dv_wait;
    return 0;
}

bool eng_dev_comm_is(const struct whale_par_comm *c)
{
    return c->size > 1 && c->iallreduce == dv_iallreduce;
}

void eng_dev_comm_bind(struct whale_par_comm *c, whale_backend *bk)
{
    if (eng_dev_comm_is(c))
        ((struct dv_comm *)c->impl)->bk = bk;
}

void eng_dev_comm_free(struct whale_par_comm *c)
{
    if (!eng_dev_comm_is(c))
        return;
    struct dv_comm *d = c->impl;
    if (d->s) {
        whale_stream_sync(d->s);
        whale_stream_destroy(d->s);
    }
    c->impl = d->g;
    free(d);
}
