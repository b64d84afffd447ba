/* The communication adapter of the parallel building blocks and the engine:
 * one table of function pointers per process group (TP, PP, DP, the tied
 * embedding's pair), so pipeline, tensor, sequence and data parallelism run
 * on the runtime's groups (whale/comm.h) in production and on in-process
 * threads as ranks in unit tests (tests/unit/inproc/).
 *
 * Buffers are fp32 unless the name ends in 16 (bf16/fp16 bit patterns of
 * type dt, reduced in fp32 by the collective). Reductions are sums unless
 * an op is given. Blocks of reduce-scatter and all-gather are in rank
 * order: rank r's block of n elements is at r*n in the (size*n) buffer. */
#ifndef WHALE_PAR_COMM_H
#define WHALE_PAR_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct whale_par_comm {
    int rank, size;
    void *impl;
    /* Non-blocking point to point in bytes; tag < 2^20. */
    int (*isend)(struct whale_par_comm *c, const void *buf, size_t bytes, int peer, int tag,
                 void **req);
    int (*irecv)(struct whale_par_comm *c, void *buf, size_t bytes, int peer, int tag,
                 void **req);
    /* Completion of any request of this table (p2p or collective). */
    int (*wait)(struct whale_par_comm *c, void *req);
    int (*test)(struct whale_par_comm *c, void *req, bool *done);
    /* Optional (NULL: not offered): whether req has completed, without
     * progressing, blocking or freeing it (test or wait still must). Lets a
     * caller reap finished sends between compute passes for free. */
    bool (*done)(struct whale_par_comm *c, void *req);
    /* Blocking fp32 allreduce in place (op: WHALE_SUM or WHALE_MAX). */
    int (*allreduce)(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op);
    /* Non-blocking sums. buf (n) in place over the group. */
    int (*iallreduce)(struct whale_par_comm *c, float *buf, size_t n, void **req);
    /* send (size*n) -> recv (n): block `rank` of the sum */
    int (*ireduce_scatter)(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                           void **req);
    /* send (n) -> recv (size*n); send may be recv's own block (in place) */
    int (*iallgather)(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                      void **req);
    /* Optional (NULL: not offered; the engine then works in fp32): the same
     * over 16-bit elements of type dt (WHALE_BFLOAT16 / WHALE_FLOAT16). */
    int (*iallreduce16)(struct whale_par_comm *c, uint16_t *buf, size_t n, enum whale_dtype dt,
                        void **req);
    int (*ireduce_scatter16)(struct whale_par_comm *c, const uint16_t *send, uint16_t *recv,
                             size_t n, enum whale_dtype dt, void **req);
    int (*iallgather16)(struct whale_par_comm *c, const uint16_t *send, uint16_t *recv,
                        size_t n, void **req);
};

/* Fills c from a whale_group: p2p on group ranks, collectives on the group.
 * g == NULL (or a group of one) gives a table of one: reductions are the
 * identity, reduce-scatter and all-gather copy, p2p is refused. */
void whale_par_comm_from_group(struct whale_par_comm *c, whale_group *g);

/* Blocking forms of the non-blocking collectives (0 or WHALE_E*). */
static inline int whale_par_allreduce_sum(struct whale_par_comm *c, float *buf, size_t n)
{
    void *r;
    int rc = c->iallreduce(c, buf, n, &r);
    return rc ? rc : c->wait(c, r);
}

static inline int whale_par_reduce_scatter(struct whale_par_comm *c, const float *send,
                                           float *recv, size_t n)
{
    void *r;
    int rc = c->ireduce_scatter(c, send, recv, n, &r);
    return rc ? rc : c->wait(c, r);
}

static inline int whale_par_allgather(struct whale_par_comm *c, const float *send, float *recv,
                                      size_t n)
{
    void *r;
    int rc = c->iallgather(c, send, recv, n, &r);
    return rc ? rc : c->wait(c, r);
}

#ifdef __cplusplus
}
#endif
#endif
