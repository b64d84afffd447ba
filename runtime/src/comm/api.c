/* Public collectives: argument checks, algorithm choice, submission. */
#include <stdint.h>
#include <stdlib.h>

#include "comm/comm_internal.h"
#include "whale/error.h"
#include "whale/log.h"

static const size_t dtype_sizes[WHALE_DTYPE_COUNT_] = { 4, 2, 2, 4, 8, 1 };
static const char *const dtype_names[WHALE_DTYPE_COUNT_] = { "float32", "bfloat16", "float16",
                                                             "int32", "int64", "uint8" };

size_t whale_dtype_size(enum whale_dtype t)
{
    return (unsigned)t < WHALE_DTYPE_COUNT_ ? dtype_sizes[t] : 0;
}

const char *whale_dtype_name(enum whale_dtype t)
{
    return (unsigned)t < WHALE_DTYPE_COUNT_ ? dtype_names[t] : "?";
}

static int check(const char *what, whale_group *g, size_t count, enum whale_dtype t, int op,
                 int root, bool need_bufs, const void *a, const void *b, size_t mult)
{
    if (!g) {
        whale_error("%s: NULL group (a spare belongs to no working group)", what);
        return WHALE_EINVAL;
    }
    if (g->rank < 0) {
        whale_error("%s: this process is not a member of the group", what);
        return WHALE_EINVAL;
    }
    if ((unsigned)t >= WHALE_DTYPE_COUNT_) {
        whale_error("%s: unknown dtype %d", what, (int)t);
        return WHALE_EINVAL;
    }
    if (op >= 0 && (unsigned)op >= WHALE_OP_COUNT_) {
        whale_error("%s: unknown reduction %d", what, op);
        return WHALE_EINVAL;
    }
    if (root != -1 && (root < 0 || root >= g->size)) {
        whale_error("%s: root %d is not a rank of this group of %d", what, root, g->size);
        return WHALE_EINVAL;
    }
    if (count > SIZE_MAX / whale_dtype_size(t) / (mult ? mult : 1)) {
        whale_error("%s: count %zu overflows", what, count);
        return WHALE_ERANGE;
    }
    if (need_bufs && count && (!a || !b)) {
        whale_error("%s: NULL buffer with count %zu", what, count);
        return WHALE_EINVAL;
    }
    return 0;
}

static int issue(whale_group *g, int coll, enum whale_dtype t, enum whale_op rop, const void *send,
                 void *recv, size_t count, int root, size_t sel_bytes, whale_req **req)
{
    whale_ctx *ctx = g->ctx;
    if (coll == COMM_ALLREDUCE || coll == COMM_REDUCE_SCATTER || coll == COMM_ALLGATHER) {
        /* first such call on the group: every member agrees on its shared
         * segment (the same call on every member, so the same outcome) */
        int rc = comm_shm_prepare(g);
        if (!rc && g->local)
            rc = comm_shm_prepare(g->local);
        if (rc)
            return rc;
    }
    comm_op_t *op = comm_op_new(ctx, g, coll);
    if (!op)
        return WHALE_ENOMEM;
    op->kind = COMM_OP_COLL;
    op->dtype = t;
    op->rop = rop;
    op->algo = comm_select(g, coll, sel_bytes, ctx->forced_algo[coll]);
    int rc = comm_build(op, send, recv, count, root);
    if (rc) {
        op->refs = 1;
        comm_op_unref(op);
        return rc;
    }
    whale_trace("%s %zu x %s on group of %d: %s", comm_coll_name(coll), count, whale_dtype_name(t),
                g->size, comm_algo_name(op->algo));
    if (req) {
        comm_submit(ctx, op);
        *req = op;
        return 0;
    }
    return comm_run_blocking(ctx, op);
}

const char *whale_coll_algorithm(whale_group *g, enum whale_coll c, size_t count, enum whale_dtype t)
{
    if (!g || (unsigned)c >= COMM_COLL_COUNT_ || (unsigned)t >= WHALE_DTYPE_COUNT_)
        return "?";
    size_t bytes = count * whale_dtype_size(t);
    if (c == WHALE_COLL_REDUCE_SCATTER || c == WHALE_COLL_ALLGATHER || c == WHALE_COLL_ALLTOALL)
        bytes *= (size_t)g->size;
    if (c == WHALE_COLL_BARRIER)
        return "dissemination";
    return comm_algo_name(comm_select(g, (int)c, bytes, g->ctx->forced_algo[c]));
}

#define REQ_OUT(req) do { if (req) *(req) = NULL; } while (0)

int whale_iallreduce(whale_group *g, const void *send, void *recv, size_t count,
                     enum whale_dtype t, enum whale_op op, whale_req **req)
{
    REQ_OUT(req);
    int rc = check("allreduce", g, count, t, op, -1, true, send, recv, 1);
    if (rc)
        return rc;
    return issue(g, COMM_ALLREDUCE, t, op, send, recv, count, 0, count * whale_dtype_size(t), req);
}

int whale_allreduce(whale_group *g, const void *send, void *recv, size_t count,
                    enum whale_dtype t, enum whale_op op)
{
    int rc = check("allreduce", g, count, t, op, -1, true, send, recv, 1);
    if (rc)
        return rc;
    if (g->shm_state == COMM_SHM_READY && (rc = comm_shm_allreduce_now(g, send, recv, count, t, op)) <= 0)
        return rc;
    return issue(g, COMM_ALLREDUCE, t, op, send, recv, count, 0, count * whale_dtype_size(t), NULL);
}

int whale_ireduce_scatter(whale_group *g, const void *send, void *recv, size_t count,
                          enum whale_dtype t, enum whale_op op, whale_req **req)
{
    REQ_OUT(req);
    int rc = check("reduce_scatter", g, count, t, op, -1, true, send, recv, g ? (size_t)g->size : 1);
    if (rc)
        return rc;
    return issue(g, COMM_REDUCE_SCATTER, t, op, send, recv, count, 0,
                 count * (size_t)g->size * whale_dtype_size(t), req);
}

int whale_reduce_scatter(whale_group *g, const void *send, void *recv, size_t count,
                         enum whale_dtype t, enum whale_op op)
{
    int rc = check("reduce_scatter", g, count, t, op, -1, true, send, recv, g ? (size_t)g->size : 1);
    if (rc)
        return rc;
    return issue(g, COMM_REDUCE_SCATTER, t, op, send, recv, count, 0,
                 count * (size_t)g->size * whale_dtype_size(t), NULL);
}

int whale_iallgather(whale_group *g, const void *send, void *recv, size_t count,
                     enum whale_dtype t, whale_req **req)
{
    REQ_OUT(req);
    int rc = check("allgather", g, count, t, -1, -1, true, send, recv, g ? (size_t)g->size : 1);
    if (rc)
        return rc;
    return issue(g, COMM_ALLGATHER, t, WHALE_SUM, send, recv, count, 0,
                 count * (size_t)g->size * whale_dtype_size(t), req);
}

int whale_allgather(whale_group *g, const void *send, void *recv, size_t count,
                    enum whale_dtype t)
{
    int rc = check("allgather", g, count, t, -1, -1, true, send, recv, g ? (size_t)g->size : 1);
    if (rc)
        return rc;
    return issue(g, COMM_ALLGATHER, t, WHALE_SUM, send, recv, count, 0,
                 count * (size_t)g->size * whale_dtype_size(t), NULL);
}

int whale_ibroadcast(whale_group *g, void *buf, size_t count, enum whale_dtype t, int root,
                     whale_req **req)
{
    REQ_OUT(req);
    int rc = check("broadcast", g, count, t, -1, root, true, buf, buf, 1);
    if (rc)
        return rc;
    return issue(g, COMM_BROADCAST, t, WHALE_SUM, buf, buf, count, root, count * whale_dtype_size(t), req);
}

int whale_broadcast(whale_group *g, void *buf, size_t count, enum whale_dtype t, int root)
{
    int rc = check("broadcast", g, count, t, -1, root, true, buf, buf, 1);
    if (rc)
        return rc;
    return issue(g, COMM_BROADCAST, t, WHALE_SUM, buf, buf, count, root, count * whale_dtype_size(t), NULL);
}

int whale_reduce(whale_group *g, const void *send, void *recv, size_t count,
                 enum whale_dtype t, enum whale_op op, int root)
{
    int rc = check("reduce", g, count, t, op, root, true, send, send, 1);
    if (rc)
        return rc;
    if (count && g->rank == root && !recv) {
        whale_error("reduce: the root needs a receive buffer");
        return WHALE_EINVAL;
    }
    return issue(g, COMM_REDUCE, t, op, send, recv, count, root, count * whale_dtype_size(t), NULL);
}

int whale_barrier(whale_group *g)
{
    int rc = check("barrier", g, 0, WHALE_UINT8, -1, -1, false, NULL, NULL, 1);
    if (rc)
        return rc;
    return issue(g, COMM_BARRIER, WHALE_UINT8, WHALE_SUM, NULL, NULL, 0, 0, 0, NULL);
}

/* ---- point to point --------------------------------------------------------- */

static int p2p(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer, int tag,
               bool send, whale_req **req)
{
    const char *what = send ? "send" : "recv";
    int rc = check(what, g, count, t, -1, -1, true, buf, buf, 1);
    if (rc)
        return rc;
    if (peer < 0 || peer >= g->size || peer == g->rank) {
        whale_error("%s: peer %d is not another rank of this group of %d", what, peer, g->size);
        return WHALE_EINVAL;
    }
    whale_ctx *ctx = g->ctx;
    comm_op_t *op = comm_op_new(ctx, g, -1);
    if (!op)
        return WHALE_ENOMEM;
    op->kind = send ? COMM_OP_SEND : COMM_OP_RECV;
    op->dtype = t;
    op->p2p_peer = peer;
    op->window = 1;
    struct comm_stage *st = &op->stages[op->nstages++];
    st->g = g;
    st->seq = (uint32_t)tag;
    sched_init(&st->sched, g->size, g->rank, t, WHALE_SUM);
    st->sched.keep_empty = true;
    sched_round(&st->sched);
    if (send)
        sched_send(&st->sched, peer, 0, buf, count * whale_dtype_size(t));
    else
        sched_recv(&st->sched, peer, 0, buf, count * whale_dtype_size(t));
    if (st->sched.err) {
        op->refs = 1;
        comm_op_unref(op);
        return WHALE_ENOMEM;
    }
    if (req) {
        comm_submit(ctx, op);
        *req = op;
        return 0;
    }
    return comm_run_blocking(ctx, op);
}

int whale_send(whale_group *g, const void *buf, size_t count, enum whale_dtype t, int peer, int tag)
{
    return p2p(g, (void *)buf, count, t, peer, tag, true, NULL);
}

int whale_recv(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer, int tag)
{
    return p2p(g, buf, count, t, peer, tag, false, NULL);
}

int whale_isend(whale_group *g, const void *buf, size_t count, enum whale_dtype t, int peer,
                int tag, whale_req **req)
{
    REQ_OUT(req);
    if (!req)
        return WHALE_EINVAL;
    return p2p(g, (void *)buf, count, t, peer, tag, true, req);
}

int whale_irecv(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer,
                int tag, whale_req **req)
{
    REQ_OUT(req);
    if (!req)
        return WHALE_EINVAL;
    return p2p(g, buf, count, t, peer, tag, false, req);
}

int whale_coll_set_algorithm(whale_ctx *ctx, enum whale_coll c, const char *name)
{
    if (!ctx || (unsigned)c >= COMM_COLL_COUNT_ || !name)
        return WHALE_EINVAL;
    int a = comm_algo_parse(name);
    if (a < 0) {
        whale_error("unknown collective algorithm '%s' (auto, ring, rd, raben, hier, tree, shm)", name);
        return WHALE_EINVAL;
    }
    ctx->forced_algo[c] = a;
    return 0;
}
