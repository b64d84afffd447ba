/* Collectives on the cuda device. Data parallel: the engine's whale_par_comm
 * table over NCCL (whale_dev_*, whale/comm.h) on a stream of the backend's
 * own, a high-priority one so communication kernels overtake compute. A request is
 * an event recorded on that stream after the collective: test queries it,
 * wait goes through whale_dev_sync (which polls NCCL's asynchronous errors
 * and turns a dead or hung peer into WHALE_EPEER / WHALE_ETIMEDOUT).
 *
 * Ordering with compute: before each collective an event is recorded on
 * the compute stream and the communication stream waits for it, so NCCL
 * reads a bucket only after the backward kernels that wrote it, without a
 * host wait; backward keeps running on the compute stream meanwhile (the
 * overlap the CPU engine gets from its progress thread). With the
 * host-coherent backend every kernel call has completed already and the
 * event is passed at once.
 *
 * The 16-bit hooks are not offered: NCCL sums bf16/fp16 in the 16-bit type,
 * and the table's contract is an fp32 accumulation, so --grad-reduce 16
 * reduces in fp32 on this path. The tensor-parallel allreduce goes over
 * NCCL too (below); pipeline sends and receives still use the host group:
 * NCCL matches point-to-point calls in issue order per peer, while the
 * pipeline executor matches them by tag, so moving them needs an issue
 * order both sides agree on (not written yet). */
#include "ecomm_dev.h"

#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"

struct dv_comm {
    whale_group *g;
    whale_backend *bk;   /* bound by eng_dev_comm_bind once the backend is open */
    whale_stream *s;     /* the communication stream, created at the first call */
    whale_event *ready;  /* recorded on the compute stream before each collective */
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
    int rc;
    if (!d->s && (rc = whale_stream_create(d->bk, true, &d->s)))
        return rc;
    if (!d->ready && (rc = whale_event_create(d->bk, &d->ready)))
        return rc;
    /* the bucket is complete when the compute stream gets here */
    if ((rc = whale_event_record(d->ready, NULL)) ||
        (rc = whale_stream_wait_event(d->s, d->ready)))
        return rc;
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
    whale_event_destroy(d->ready);
    c->impl = d->g;
    free(d);
}

/* ---- tensor parallelism over NCCL ------------------------------------------------
 * The TP table (struct whale_par_comm over the TP whale_group) keeps its
 * host point-to-point calls and its impl (the group); only its allreduce is
 * replaced by one over NCCL: the TP stream waits for the compute stream
 * (event), NCCL sums in place on it, and the call returns when it is done
 * (whale_dev_sync: the table's allreduce is blocking, and the kernels after
 * it read the sum). The state lives in a slot keyed by the table, since the
 * table has no field for it; an engine has one TP table. */

struct dv_tp {
    struct whale_par_comm *c;
    int (*host_allreduce)(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op);
    whale_backend *bk;
    whale_stream *s;
    whale_event *ready;
};

enum { DV_TP_SLOTS = 8 };
static struct dv_tp dv_tp_slot[DV_TP_SLOTS];

static struct dv_tp *tp_of(const struct whale_par_comm *c)
{
    for (int i = 0; i < DV_TP_SLOTS; i++)
        if (dv_tp_slot[i].c == c)
            return &dv_tp_slot[i];
    return NULL;
}

static int dv_tp_allreduce(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op)
{
    struct dv_tp *t = tp_of(c);
    if (!t) {
        whale_error("engine: NCCL tensor-parallel allreduce on a table that was not bound");
        return WHALE_EINVAL;
    }
    if (!n)
        return 0;
    int rc;
    if ((rc = whale_event_record(t->ready, NULL)) || (rc = whale_stream_wait_event(t->s, t->ready)))
        return rc;
    void *st = whale_stream_native(t->s);
    if ((rc = whale_dev_allreduce(c->impl, buf, buf, n, WHALE_FLOAT32, op, st)))
        return rc;
    return whale_dev_sync(c->impl, st);
}

int eng_dev_comm_tp(struct whale_par_comm *c, whale_group *g, whale_backend *bk)
{
    if (c->size <= 1 || !g)
        return 0; /* no TP */
    if (c->impl != g) {
        /* a table that is not the plain one over the TP group (a test's in-process
         * fake): said, and left as it is */
        whale_warn("--device cuda: the tensor-parallel table is not over the TP group; its "
                   "sums stay on the host path");
        return 0;
    }
    if (!whale_dev_available()) {
        whale_error("--device cuda: this build has no NCCL for the tensor-parallel collectives");
        return WHALE_ENOTSUP;
    }
    struct dv_tp *t = tp_of(NULL);
    if (!t) {
        whale_error("engine: more than %d NCCL tensor-parallel tables in one process",
                    DV_TP_SLOTS);
        return WHALE_ENOMEM;
    }
    int rc;
    *t = (struct dv_tp){ .c = c, .host_allreduce = c->allreduce, .bk = bk };
    if ((rc = whale_stream_create(bk, true, &t->s)) || (rc = whale_event_create(bk, &t->ready))) {
        whale_stream_destroy(t->s);
        memset(t, 0, sizeof *t);
        return rc;
    }
    c->allreduce = dv_tp_allreduce;
    return 0;
}

void eng_dev_comm_tp_free(struct whale_par_comm *c)
{
    struct dv_tp *t = c ? tp_of(c) : NULL;
    if (!t)
        return;
    whale_stream_sync(t->s);
    whale_stream_destroy(t->s);
    whale_event_destroy(t->ready);
    c->allreduce = t->host_allreduce;
    memset(t, 0, sizeof *t);
}
