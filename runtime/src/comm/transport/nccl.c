/* Device-buffer collectives over NCCL (compiled when CUDA + NCCL are found).
 *
 * One non-blocking NCCL communicator per group, created on first use: group
 * rank 0 makes the unique id and broadcasts it over the host (UCX) path.
 * Failure detection while a stream waits: NCCL's asynchronous error, the
 * host failure detector (UCX keepalive marks the group failed: bounded by
 * WHALE_PEER_TIMEOUT), and an overall watchdog (WHALE_NCCL_TIMEOUT, default
 * 600 s, like PyTorch's NCCL timeout). On failure the communicator is
 * aborted (never destroyed), as NCCL requires once any rank aborts.
 *
 * The device transport of the table (transport.h): its collectives run
 * whale_dev_* (api_dev.c), group_fini/fini/abort are called by comm and by
 * membership through the table. Without CUDA nothing here is built and the
 * table has no device transport. */
#include <stdlib.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "comm/transport/transport.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/clock.h"

#ifdef WHALE_HAVE_CUDA
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* nccl.h declares f() */
#include <cuda_runtime.h>
#include <nccl.h>
#pragma GCC diagnostic pop

/* A group's state (its slot of the table, comm_transport_state). */
struct nccl_group {
    ncclComm_t comm;       /* created on first device call */
    bool broken;           /* aborted after a failure */
};

static struct nccl_group *state(whale_group *g, bool make)
{
    void **slot = comm_transport_state(g, &comm_transport_nccl);
    if (!*slot && make)
        *slot = calloc(1, sizeof(struct nccl_group));
    return *slot;
}

static double watchdog_s(void)
{
    const char *s = whale_knob_getenv("WHALE_NCCL_TIMEOUT");
    double v = s ? atof(s) : 0;
    return v > 0 ? v : 600.0;
}

static bool nccl_available(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static int nccl_dtype(enum whale_dtype t, ncclDataType_t *out)
{
    static const ncclDataType_t map[WHALE_DTYPE_COUNT_] = { ncclFloat32, ncclBfloat16, ncclFloat16,
                                                            ncclInt32, ncclInt64, ncclUint8 };
    if ((unsigned)t >= WHALE_DTYPE_COUNT_)
        return WHALE_EINVAL;
    *out = map[t];
    return 0;
}

static int nccl_op(enum whale_op op, ncclRedOp_t *out)
{
    static const ncclRedOp_t map[WHALE_OP_COUNT_] = { ncclSum, ncclAvg, ncclMax, ncclMin };
    if ((unsigned)op >= WHALE_OP_COUNT_)
        return WHALE_EINVAL;
    *out = map[op];
    return 0;
}

static void abort_comm(whale_group *g, const char *why)
{
    struct nccl_group *s = state(g, false);
    if (!s || !s->comm)
        return;
    whale_error("NCCL communicator of a group of %d aborted: %s", g->size, why);
    ncclCommAbort(s->comm);
    s->comm = NULL;
    s->broken = true;
}

/* Wait until a non-blocking NCCL call has been issued (ncclInProgress). */
static int settle(whale_group *g, ncclResult_t r, const char *what)
{
    ncclComm_t c = state(g, false)->comm;
    double deadline = whale_now_s() + watchdog_s();
    while (r == ncclInProgress) {
        if (g->failed) {
            abort_comm(g, "a peer failed");
            return WHALE_EPEER;
        }
        if (whale_now_s() > deadline) {
            abort_comm(g, "timeout");
            return WHALE_ETIMEDOUT;
        }
        ncclCommGetAsyncError(c, &r);
    }
    if (r != ncclSuccess) {
        whale_error("%s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(c));
        abort_comm(g, ncclGetErrorString(r));
        return r == ncclRemoteError || r == ncclSystemError ? WHALE_EPEER : WHALE_ENCCL;
    }
    return 0;
}

static int ensure_comm(whale_group *g)
{
    if (!g || g->rank < 0)
        return WHALE_EINVAL;
    struct nccl_group *s = state(g, true);
    if (!s)
        return WHALE_ENOMEM;
    if (s->broken) {
        whale_error("the NCCL communicator of this group was aborted after a failure");
        return WHALE_EPEER;
    }
    if (s->comm)
        return 0;
    ncclUniqueId id;
    if (g->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            whale_error("ncclGetUniqueId: %s", ncclGetErrorString(r));
            return WHALE_ENCCL;
        }
    }
    int rc = whale_broadcast(g, &id, sizeof id, WHALE_UINT8, 0);
    if (rc)
        return rc;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, g->size, id, g->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        whale_error("ncclCommInitRankConfig (group of %d): %s", g->size, ncclGetErrorString(r));
        return WHALE_ENCCL;
    }
    s->comm = comm;
    return settle(g, r, "ncclCommInitRankConfig");
}

#define PREP(g, t)                                          \
    ncclDataType_t dt;                                      \
    int rc_ = ensure_comm(g);                               \
    if (rc_)                                                \
        return rc_;                                         \
    if (nccl_dtype(t, &dt))                                 \
        return WHALE_EINVAL;                                \
    ncclComm_t comm = state(g, false)->comm

static int nccl_allreduce(whale_group *g, const void *send, void *recv, size_t count,
                          enum whale_dtype t, enum whale_op op, void *stream)
{
    PREP(g, t);
    ncclRedOp_t o;
    if (nccl_op(op, &o))
        return WHALE_EINVAL;
    return settle(g, ncclAllReduce(send, recv, count, dt, o, comm, (cudaStream_t)stream), "ncclAllReduce");
}

static int nccl_reduce_scatter(whale_group *g, const void *send, void *recv, size_t count,
                               enum whale_dtype t, enum whale_op op, void *stream)
{
    PREP(g, t);
    ncclRedOp_t o;
    if (nccl_op(op, &o))
        return WHALE_EINVAL;
    return settle(g, ncclReduceScatter(send, recv, count, dt, o, comm, (cudaStream_t)stream),
                  "ncclReduceScatter");
}

static int nccl_allgather(whale_group *g, const void *send, void *recv, size_t count,
                          enum whale_dtype t, void *stream)
{
    PREP(g, t);
    return settle(g, ncclAllGather(send, recv, count, dt, comm, (cudaStream_t)stream), "ncclAllGather");
}

static int nccl_broadcast(whale_group *g, void *buf, size_t count, enum whale_dtype t, int root,
                          void *stream)
{
    PREP(g, t);
    return settle(g, ncclBroadcast(buf, buf, count, dt, root, comm, (cudaStream_t)stream),
                  "ncclBroadcast");
}

static int nccl_reduce(whale_group *g, const void *send, void *recv, size_t count,
                       enum whale_dtype t, enum whale_op op, int root, void *stream)
{
    PREP(g, t);
    ncclRedOp_t o;
    if (nccl_op(op, &o))
        return WHALE_EINVAL;
    return settle(g, ncclReduce(send, recv, count, dt, o, root, comm, (cudaStream_t)stream), "ncclReduce");
}

static int nccl_send(whale_group *g, const void *buf, size_t count, enum whale_dtype t, int peer,
                     void *stream)
{
    PREP(g, t);
    return settle(g, ncclSend(buf, count, dt, peer, comm, (cudaStream_t)stream), "ncclSend");
}

static int nccl_recv(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer,
                     void *stream)
{
    PREP(g, t);
    return settle(g, ncclRecv(buf, count, dt, peer, comm, (cudaStream_t)stream), "ncclRecv");
}

/* One NCCL group of a send and a receive per peer (self included: NCCL
 * copies it); zero counts are no-ops on both sides. Byte counts so that any
 * dtype moves, displacements in elements of t. */
static int dev_a2a(whale_group *g, const char *send, const size_t *sc, const size_t *sd, char *recv,
                   const size_t *rc, const size_t *rd, enum whale_dtype t, void *stream, const char *what)
{
    PREP(g, t);
    (void)dt;
    size_t esz = whale_dtype_size(t);
    ncclResult_t r = ncclGroupStart();
    for (int q = 0; q < g->size && r == ncclSuccess; q++) {
        r = ncclSend(send + sd[q] * esz, sc[q] * esz, ncclUint8, q, comm, (cudaStream_t)stream);
        if (r == ncclSuccess)
            r = ncclRecv(recv + rd[q] * esz, rc[q] * esz, ncclUint8, q, comm, (cudaStream_t)stream);
    }
    ncclResult_t e = ncclGroupEnd();
    return settle(g, r != ncclSuccess ? r : e, what);
}

static int nccl_alltoall(whale_group *g, const void *send, void *recv, size_t count,
                         enum whale_dtype t, void *stream)
{
    if (!g || g->rank < 0)
        return WHALE_EINVAL;
    size_t *tab = malloc(sizeof(size_t) * 2 * (size_t)g->size);
    if (!tab)
        return WHALE_ENOMEM;
    for (int q = 0; q < g->size; q++) {
        tab[q] = count;
        tab[g->size + q] = (size_t)q * count;
    }
    int rc = dev_a2a(g, send, tab, tab + g->size, recv, tab, tab + g->size, t, stream, "ncclSend/ncclRecv (alltoall)");
    free(tab);
    return rc;
}

static int nccl_alltoallv(whale_group *g, const void *send, const size_t *sendcounts,
                          const size_t *sdispls, void *recv, const size_t *recvcounts,
                          const size_t *rdispls, enum whale_dtype t, void *stream)
{
    if (!sendcounts || !sdispls || !recvcounts || !rdispls) {
        whale_error("alltoallv (device): NULL count or displacement table");
        return WHALE_EINVAL;
    }
    return dev_a2a(g, send, sendcounts, sdispls, recv, recvcounts, rdispls, t, stream,
                   "ncclSend/ncclRecv (alltoallv)");
}

static int nccl_group_start(void)
{
    return ncclGroupStart() == ncclSuccess ? 0 : WHALE_ENCCL;
}

static int nccl_group_end(void)
{
    ncclResult_t r = ncclGroupEnd();
    return r == ncclSuccess || r == ncclInProgress ? 0 : WHALE_ENCCL;
}

static int nccl_sync(whale_group *g, void *stream)
{
    struct nccl_group *s = g ? state(g, false) : NULL;
    if (!s || !s->comm)
        return s && s->broken ? WHALE_EPEER : 0;
    whale_ctx *ctx = g->ctx;
    double deadline = whale_now_s() + watchdog_s();
    for (;;) {
        cudaError_t ce = cudaStreamQuery((cudaStream_t)stream);
        if (ce == cudaSuccess)
            return 0;
        if (ce != cudaErrorNotReady) {
            whale_error("cudaStreamQuery: %s", cudaGetErrorString(ce));
            abort_comm(g, "CUDA error");
            return WHALE_ENCCL;
        }
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(s->comm, &ar);
        if (ar != ncclSuccess && ar != ncclInProgress) {
            abort_comm(g, ncclGetErrorString(ar));
            return WHALE_EPEER;
        }
        /* Keep the host failure detector running while the GPU works. */
        pthread_mutex_lock(&ctx->lock);
        comm_progress(ctx);
        pthread_mutex_unlock(&ctx->lock);
        if (g->failed) {
            abort_comm(g, "a peer failed (host failure detector)");
            return WHALE_EPEER;
        }
        if (whale_now_s() > deadline) {
            abort_comm(g, "watchdog timeout (WHALE_NCCL_TIMEOUT)");
            return WHALE_ETIMEDOUT;
        }
    }
}

/* Finalize (not abort) a healthy communicator: the group is being freed and
 * every member frees it. */
static void group_fini(whale_group *g)
{
    void **slot = comm_transport_state(g, &comm_transport_nccl);
    struct nccl_group *s = *slot;
    if (!s)
        return;
    if (s->comm) {
        ncclComm_t c = s->comm;
        ncclResult_t r = ncclCommFinalize(c);
        double deadline = whale_now_s() + 10.0;
        while (r == ncclInProgress && whale_now_s() < deadline)
            ncclCommGetAsyncError(c, &r);
        if (r == ncclSuccess)
            ncclCommDestroy(c);
        else
            ncclCommAbort(c);
    }
    free(s);
    *slot = NULL;
}

/* whale_finalize: NCCL communicators go before the closing barrier. */
static void fini(whale_ctx *ctx)
{
    for (int i = 0; i < ctx->ngroups; i++)
        group_fini(ctx->groups[i]);
}

static const struct comm_dev_ops nccl_dev = {
    .available = nccl_available,
    .allreduce = nccl_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .reduce = nccl_reduce,
    .send = nccl_send,
    .recv = nccl_recv,
    .alltoall = nccl_alltoall,
    .alltoallv = nccl_alltoallv,
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .sync = nccl_sync,
};

const struct comm_transport comm_transport_nccl = {
    .name = "nccl",
    .group_fini = group_fini,
    .fini = fini,
    .abort = abort_comm,
    .dev = &nccl_dev,
};

#endif
