/* Data-parallel collectives as the engine uses them (module-internal).
 *
 * A thin table over whale/comm.h so the ZeRO bucketing and partition logic
 * can also run against an in-process backend in unit tests. Buffers are
 * fp32 (the *16 hooks: 16-bit), reductions are sums. */
#ifndef ENGINE_ECOMM_H
#define ENGINE_ECOMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/comm.h"

struct eng_comm {
    int rank, size;
    void *impl;
    /* buf (n) summed in place over the group */
    int (*iallreduce)(struct eng_comm *c, float *buf, size_t n, void **req);
    /* send (size*n) -> recv (n): block `rank` of the sum */
    int (*ireduce_scatter)(struct eng_comm *c, const float *send, float *recv, size_t n,
                           void **req);
    /* send (n) -> recv (size*n) */
    int (*iallgather)(struct eng_comm *c, const float *send, float *recv, size_t n, void **req);
    /* Optional (NULL: not offered, the engine reduces in fp32): the same sums
     * over 16-bit elements of type dt (WHALE_BFLOAT16 / WHALE_FLOAT16),
     * accumulated in fp32 by the collective. */
    int (*iallreduce16)(struct eng_comm *c, uint16_t *buf, size_t n, enum whale_dtype dt,
                        void **req);
    int (*ireduce_scatter16)(struct eng_comm *c, const uint16_t *send, uint16_t *recv, size_t n,
                             enum whale_dtype dt, void **req);
    int (*test)(struct eng_comm *c, void *req, bool *done);
    int (*wait)(struct eng_comm *c, void *req);
};


static inline int eng_allreduce(struct eng_comm *c, float *buf, size_t n)
{
    void *r;
    int rc = c->iallreduce(c, buf, n, &r);
    return rc ? rc : c->wait(c, r);
}

#endif
