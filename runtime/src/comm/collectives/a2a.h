/* All-to-all (a2a.c, a2a_shm.c): every member sends block q of its send
 * buffer to member q and receives block q of its receive buffer from q.
 * Internally a pure byte move: offsets and lengths in bytes, per peer. */
#ifndef WHALE_COMM_A2A_H
#define WHALE_COMM_A2A_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm_internal.h"

struct comm_a2a {
    const char *send;
    char *recv;
    size_t *soff, *slen;   /* [p] bytes: my block for member q */
    size_t *roff, *rlen;   /* [p] bytes: the block from member q */
    size_t maxlen;         /* the largest block between two different members, over the
                            * whole group (agreed: every member computes the same) */
    bool any_size;         /* maxlen is this member's own, not agreed: the segment's
                            * single-copy exchange is taken at every size (the only
                            * choice every member makes alike without the maxlen) */
    const char *what;      /* "alltoall" / "alltoallv", for messages */
};

/* Pairwise exchange over tagged messages: step k sends to (r + k) % p and
 * receives from (r - k) % p; one chain per step, so at most the engine's
 * window of steps are in flight. Pure (tests simulate it). */
void build_alltoall_pairwise(struct sched *s, const struct comm_a2a *a);

/* Through the group's shared segment (g->shm_state READY), in the caller's
 * thread: 0 done, <0 error (a count mismatch between a sender and its
 * receiver is WHALE_EINVAL on the receiver, after the exchange completed
 * on every member). */
int comm_a2a_shm(whale_group *g, const struct comm_a2a *a);

/* Whether the group's members agreed (on an earlier all-to-all through the
 * segment) that every one can read the others' memory: then an exchange
 * may take the single-copy path at any size (any_size). */
bool comm_a2a_shm_single(const whale_group *g);

#endif
