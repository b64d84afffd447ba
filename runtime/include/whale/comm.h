/* Process bootstrap, process groups and collectives (host memory over UCX;
 * device memory over NCCL when built with CUDA).
 *
 * This is the API the engine, checkpoints and tools program against. The
 * implementation lives in src/boot (PMIx + UCX wire-up) and src/comm.
 *
 * Semantics shared by all collectives:
 *  - every member of the group calls the same collective in the same order;
 *  - count may be 0; groups of any size (odd, non-power-of-two);
 *  - send == recv means in place;
 *  - bf16/fp16 are reduced with fp32 accumulation;
 *  - a dead or unreachable peer makes pending and later operations on the
 *    affected group return WHALE_EPEER (the failed rank is logged) within the
 *    configured bound (WHALE_PEER_TIMEOUT, default 5 s); nothing hangs.
 */
#ifndef WHALE_COMM_H
#define WHALE_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct whale_ctx whale_ctx;     /* one per process */
typedef struct whale_group whale_group; /* a set of logical ranks */
typedef struct whale_req whale_req;     /* a non-blocking operation */

enum whale_dtype {
    WHALE_FLOAT32 = 0,
    WHALE_BFLOAT16,
    WHALE_FLOAT16,
    WHALE_INT32,
    WHALE_INT64,
    WHALE_UINT8,
    WHALE_DTYPE_COUNT_
};

enum whale_op { WHALE_SUM = 0, WHALE_AVG, WHALE_MAX, WHALE_MIN, WHALE_OP_COUNT_ };

size_t whale_dtype_size(enum whale_dtype t);
const char *whale_dtype_name(enum whale_dtype t);

/* ---- bootstrap ------------------------------------------------------------
 * Reads the env contract (whale/env.h), initialises PMIx, checks that PMIx
 * rank/size agree with it, exchanges UCX worker addresses, builds the world,
 * TP, PP and DP groups. A process without any contract (plain `./prog`) runs
 * as a world of one. */
int  whale_init(whale_ctx **out);
int  whale_finalize(whale_ctx *ctx);

int  whale_rank(const whale_ctx *ctx);        /* logical rank, -1 for a spare */
int  whale_world_size(const whale_ctx *ctx);  /* working ranks */
bool whale_is_spare(const whale_ctx *ctx);
void whale_degrees(const whale_ctx *ctx, int *tp, int *pp, int *dp);
/* The step's parallel layout (all degrees; whale/grid.h). */
void whale_ctx_grid(const whale_ctx *ctx, struct whale_grid *g);
void whale_coords(const whale_ctx *ctx, int *tp_rank, int *pp_rank, int *dp_rank);

whale_group *whale_world(whale_ctx *ctx);
whale_group *whale_tp_group(whale_ctx *ctx);
whale_group *whale_pp_group(whale_ctx *ctx);
whale_group *whale_dp_group(whale_ctx *ctx);

/* Collective over the parent group: every member passes the same rank list
 * (logical world ranks, in the order that defines the new group ranks). */
int  whale_group_create(whale_group *parent, const int *world_ranks, int n, whale_group **out);
void whale_group_free(whale_group *g);
int  whale_group_rank(const whale_group *g);
int  whale_group_size(const whale_group *g);
int  whale_group_world_rank(const whale_group *g, int group_rank);
/* Nodes the group's members run on (1: a one-node group, whose all-to-all
 * goes through shared memory and can use receive windows, whale_shm_alloc);
 * 0 for a NULL group. */
int  whale_group_nnodes(const whale_group *g);

/* ---- blocking collectives -------------------------------------------------- */
int whale_allreduce(whale_group *g, const void *send, void *recv, size_t count,
                    enum whale_dtype t, enum whale_op op);
/* send holds size*count elements; rank r receives reduced block r (count).
 * In place (send == recv): the result lands in the first count elements. */
int whale_reduce_scatter(whale_group *g, const void *send, void *recv, size_t count,
                         enum whale_dtype t, enum whale_op op);
/* send holds count elements; recv gets size*count, block r from rank r.
 * In place: send == recv + rank*count. */
int whale_allgather(whale_group *g, const void *send, void *recv, size_t count,
                    enum whale_dtype t);
int whale_broadcast(whale_group *g, void *buf, size_t count, enum whale_dtype t, int root);
int whale_reduce(whale_group *g, const void *send, void *recv, size_t count,
                 enum whale_dtype t, enum whale_op op, int root);
int whale_barrier(whale_group *g);
/* All-to-all: block q of send (count elements at q * count) goes to rank q;
 * block q of recv comes from rank q. Every rank passes the same count.
 * Not in place: send == recv (with bytes to move) is WHALE_EINVAL. Inside
 * one node through the group's shared segment, else a pairwise exchange
 * over UCX (WHALE_COLL_ALGO alltoall=ring|shm forces one). A byte move: any
 * dtype; count 0 allowed; a group of one copies. */
int whale_alltoall(whale_group *g, const void *send, void *recv, size_t count, enum whale_dtype t);
/* Per-peer counts and displacements in elements ([group size] each): the
 * block for rank q is sendcounts[q] elements at send + sdispls[q], the
 * block from q lands at recv + rdispls[q] (recvcounts[q] elements).
 * sendcounts[q] on rank r must equal recvcounts[r] on rank q; where they
 * differ the receiver returns WHALE_EINVAL naming both ranks (or the
 * transfer fails) once every rank has finished. Counts of 0 allowed. */
int whale_alltoallv(whale_group *g, const void *send, const size_t *sendcounts,
                    const size_t *sdispls, void *recv, const size_t *recvcounts,
                    const size_t *rdispls, enum whale_dtype t);
/* Host memory the other ranks of this node can write into: an all-to-all(v)
 * on a one-node group whose receive blocks lie in one such allocation is
 * filled by the senders with one ordinary copy each (no system call, no
 * page pinning), where a receive buffer from malloc is read out of the
 * senders' buffers with process_vm_readv. Page-granular (an allocation of
 * n bytes takes n rounded up to pages); NULL when out of memory. Where the
 * memory cannot be shared it is ordinary memory and the exchange takes
 * the other path. */
void *whale_shm_alloc(size_t bytes);
void whale_shm_free(void *p);
/* Point to point between group ranks; tag separates concurrent streams. */
int whale_send(whale_group *g, const void *buf, size_t count, enum whale_dtype t, int peer, int tag);
int whale_recv(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer, int tag);

/* ---- non-blocking ---------------------------------------------------------
 * Return at once with *req; a progress engine completes them while the
 * caller computes. Buffers must stay valid until completion. Many requests
 * may be in flight; collectives on one group complete in issue order. */
int whale_iallreduce(whale_group *g, const void *send, void *recv, size_t count,
                     enum whale_dtype t, enum whale_op op, whale_req **req);
int whale_ireduce_scatter(whale_group *g, const void *send, void *recv, size_t count,
                          enum whale_dtype t, enum whale_op op, whale_req **req);
int whale_iallgather(whale_group *g, const void *send, void *recv, size_t count,
                     enum whale_dtype t, whale_req **req);
int whale_ibroadcast(whale_group *g, void *buf, size_t count, enum whale_dtype t, int root,
                     whale_req **req);
int whale_isend(whale_group *g, const void *buf, size_t count, enum whale_dtype t, int peer,
                int tag, whale_req **req);
int whale_irecv(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer,
                int tag, whale_req **req);
/* Wait frees the request and returns its status. Test sets *done and, when
 * done, frees it and returns its status. */
int whale_wait(whale_req *req);
int whale_test(whale_req *req, bool *done);
/* Whether req has completed, without progressing anything, taking a lock or
 * freeing it (a wait or test still must): a poll that costs nothing while
 * the progress thread moves the transfer. */
bool whale_req_done(const whale_req *req);
int whale_waitall(whale_req **reqs, int n);

/* ---- additions (introspection, device buffers) ------------------------- */

/* Every task of the step, spares included (ranks: task ids). Used for
 * step-wide agreement such as finalize; working code uses whale_world. */
whale_group *whale_all_tasks(whale_ctx *ctx);
int    whale_task_id(const whale_ctx *ctx);
int    whale_ntasks(const whale_ctx *ctx);
int    whale_nnodes(const whale_ctx *ctx);
double whale_peer_timeout(const whale_ctx *ctx);   /* seconds (WHALE_PEER_TIMEOUT) */

enum whale_coll {
    WHALE_COLL_ALLREDUCE = 0, WHALE_COLL_REDUCE_SCATTER, WHALE_COLL_ALLGATHER,
    WHALE_COLL_BROADCAST, WHALE_COLL_REDUCE, WHALE_COLL_BARRIER, WHALE_COLL_ALLTOALL
};
/* Name of the algorithm the cost model (or WHALE_COLL_ALGO) picks for this
 * call on this group: "ring", "rd", "raben", "hier", "tree". count as in the
 * call (per-rank block count for reduce-scatter/allgather). */
const char *whale_coll_algorithm(whale_group *g, enum whale_coll c, size_t count, enum whale_dtype t);

/* Force an algorithm for later calls of collective c in this process
 * ("auto" restores the cost model); like WHALE_COLL_ALGO, every rank must
 * make the same choice. An algorithm that does not apply to a group (e.g.
 * "raben" on 2 ranks, "hier" on one node) falls back to the cost model. */
int whale_coll_set_algorithm(whale_ctx *ctx, enum whale_coll c, const char *name);

/* Device buffers over NCCL (builds with CUDA; otherwise WHALE_ENOTSUP).
 * Same semantics as the host calls; `stream` is a cudaStream_t (NULL: the
 * legacy default stream). The first device call on a group creates its
 * non-blocking NCCL communicator collectively (unique id sent from group
 * rank 0 over the host path). Calls enqueue work and return; whale_dev_sync
 * waits for the stream while polling NCCL's asynchronous errors, and turns
 * a peer failure or a hang longer than WHALE_PEER_TIMEOUT into WHALE_EPEER /
 * WHALE_ETIMEDOUT (the communicator is then aborted). */
bool whale_dev_available(void);
int whale_dev_allreduce(whale_group *g, const void *send, void *recv, size_t count,
                        enum whale_dtype t, enum whale_op op, void *stream);
int whale_dev_reduce_scatter(whale_group *g, const void *send, void *recv, size_t count,
                             enum whale_dtype t, enum whale_op op, void *stream);
int whale_dev_allgather(whale_group *g, const void *send, void *recv, size_t count,
                        enum whale_dtype t, void *stream);
int whale_dev_broadcast(whale_group *g, void *buf, size_t count, enum whale_dtype t, int root,
                        void *stream);
int whale_dev_reduce(whale_group *g, const void *send, void *recv, size_t count,
                     enum whale_dtype t, enum whale_op op, int root, void *stream);
int whale_dev_send(whale_group *g, const void *buf, size_t count, enum whale_dtype t, int peer,
                   void *stream);
int whale_dev_recv(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer,
                   void *stream);
/* All-to-all(v) of device buffers: one NCCL group of send/recv pairs
 * (arguments as whale_alltoall / whale_alltoallv). */
int whale_dev_alltoall(whale_group *g, const void *send, void *recv, size_t count,
                       enum whale_dtype t, void *stream);
int whale_dev_alltoallv(whale_group *g, const void *send, const size_t *sendcounts,
                        const size_t *sdispls, void *recv, const size_t *recvcounts,
                        const size_t *rdispls, enum whale_dtype t, void *stream);
/* Group device send/recv calls so that a pipeline exchange does not deadlock. */
int whale_dev_group_start(void);
int whale_dev_group_end(void);
int whale_dev_sync(whale_group *g, void *stream);

/* ---- one-sided transfers (RMA) ----------------------------------------
 * A process registers a buffer it wants others to write into or read from
 * (a buddy copy of another rank's state, a spare's receive area, an offload
 * area); the members of a group exchange the keys once, collectively; from
 * then on a member moves bytes to or from a peer's registered buffer
 * without the peer taking part (UCX ucp_put_nbx / ucp_get_nbx).
 *
 *  - whale_region_register: registers [buf, buf+len) (len > 0) for remote
 *    access. The memory stays the caller's; free the region (after every
 *    peer is done with it) before freeing the memory, and regions and
 *    remote handles before whale_finalize.
 *  - whale_region_exchange: collective over g (every member calls it, in
 *    the same order as other collectives on g). Each member passes its
 *    region or NULL; *out becomes a malloc'd array [group size] with a
 *    handle on every member's region (NULL where the member passed NULL,
 *    and for oneself a handle on one's own region, usable for local
 *    copies). Free each handle with whale_remote_free, then the array with
 *    free(). Works on whale_all_tasks(), so spares can take part.
 *  - whale_iput / whale_iget: non-blocking; the request completes (whale_wait
 *    / whale_test) when the source buffer may be reused (put) or the data
 *    has arrived (get). A completed put is not yet guaranteed visible at the
 *    target: whale_remote_flush(dst) waits until every put issued so far to
 *    that target (through any handle) is complete there. Bounds are checked
 *    (WHALE_ERANGE names the offset, length and region size).
 *  - A dead or unreachable target makes pending and later transfers and
 *    flushes to it return WHALE_EPEER within WHALE_PEER_TIMEOUT. The source
 *    buffer of a failed put must still stay valid until whale_finalize.
 *  - Over TCP, UCX emulates RMA with messages that the target must
 *    progress: the target's progress engine does so whenever it runs a
 *    collective, waits on a request, or waits as a spare (whale_spare_wait,
 *    whale/elastic.h). Over shared memory it needs no target activity.
 * Thread safety: like the other calls (any thread; the library serialises
 * UCX internally). */
typedef struct whale_region whale_region;   /* my registered memory */
typedef struct whale_remote whale_remote;   /* a handle on a peer's region */

int  whale_region_register(whale_ctx *ctx, void *buf, size_t len, whale_region **out);
void whale_region_free(whale_region *r);
int  whale_region_exchange(whale_group *g, whale_region *mine_or_NULL, whale_remote ***out);
void whale_remote_free(whale_remote *rem);
size_t whale_remote_size(const whale_remote *rem);   /* bytes of the peer's region */
int  whale_remote_task(const whale_remote *rem);     /* task id of the region's owner */
int  whale_iput(whale_remote *dst, size_t dst_off, const void *src, size_t len, whale_req **req);
int  whale_iget(whale_remote *src, size_t src_off, void *dst, size_t len, whale_req **req);
int  whale_remote_flush(whale_remote *rem);

/* How a peer's failure was detected (the kinds are described in
 * whale/elastic.h). comm classifies the failures it sees itself (UCX
 * errors, the pid watchdog); membership adds silence and hangs. */
enum whale_detect { WHALE_DETECT_CRASH = 1, WHALE_DETECT_NODE, WHALE_DETECT_LINK, WHALE_DETECT_HANG };
/* "CRASH"/"NODE"/"LINK"/"HANG", for logs. */
const char *whale_detect_name(enum whale_detect d);

#ifdef __cplusplus
}
#endif
#endif
