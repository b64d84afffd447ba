/* whale_alltoall / whale_alltoallv: argument checks, the transport choice
 * and the pairwise exchange over UCX.
 *
 * Transports: a group of one copies its block; a group on one node with a
 * shared segment takes it (a2a_shm.c) when the cost model says so (select.c:
 * one flag hand-off and two copies per byte through the segment, against
 * p - 1 messages and one transfer per byte over UCX's shared-memory
 * transport, with the link parameters measured at init or given in
 * WHALE_COLL_MODEL); every other group runs the pairwise exchange below
 * (WHALE_COLL_ALGO alltoall=ring forces it, alltoall=shm the segment where
 * there is one). All members choose alike: from the group's structure and
 * the largest block in the group (alltoallv agrees on it first, with a
 * one-element allreduce, where the segment is a candidate).
 *
 * Both are byte moves: the dtype only sizes the blocks. In place (send ==
 * recv) is refused, as overlapping blocks would be overwritten before they
 * were sent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/collectives/a2a.h"
#include "whale/error.h"
#include "whale/log.h"

void build_alltoall_pairwise(struct sched *s, const struct comm_a2a *a)
{
    const int p = s->p, r = s->r;
    /* empty messages are kept: a receiver that expects bytes from a sender
     * that has none then fails on the size, instead of waiting forever */
    s->keep_empty = true;
    sched_chain(s);
    sched_round(s);
    sched_copy(s, a->recv + a->roff[r], a->send + a->soff[r], a->rlen[r]);
    for (int k = 1; k < p; k++) {
        int to = (r + k) % p, from = (r - k + p) % p;
        sched_chain(s);
        sched_round(s);
        sched_recv(s, from, (uint32_t)k, a->recv + a->roff[from], a->rlen[from]);
        sched_send(s, to, (uint32_t)k, a->send + a->soff[to], a->slen[to]);
    }
}

static int check_group(const char *what, whale_group *g, enum whale_dtype t)
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
        whale_error("%s (rank %d of %d): unknown dtype %d", what, g->rank, g->size, (int)t);
        return WHALE_EINVAL;
    }
    return 0;
}

/* Block q of one side: count and displacement in elements to bytes. */
static int side(const char *what, const whale_group *g, const char *arg, int q, size_t count,
                size_t displ, size_t esz, size_t *off, size_t *len)
{
    if (count > SIZE_MAX / esz || displ > SIZE_MAX / esz || displ * esz > SIZE_MAX - count * esz) {
        whale_error("%s (rank %d of %d): %s of block %d (%zu elements at %zu) overflows", what,
                    g->rank, g->size, arg, q, count, displ);
        return WHALE_ERANGE;
    }
    *off = displ * esz;
    *len = count * esz;
    return 0;
}

static int run(whale_group *g, struct comm_a2a *a, bool equal)
{
    const int p = g->size, r = g->rank;
    whale_ctx *ctx = g->ctx;
    if (a->slen[r] != a->rlen[r]) {
        whale_error("%s (rank %d of %d): sends %zu bytes to itself but expects %zu", a->what, r, p,
                    a->slen[r], a->rlen[r]);
        return WHALE_EINVAL;
    }
    if (p == 1) {
        if (a->rlen[0])
            memmove(a->recv + a->roff[0], a->send + a->soff[0], a->rlen[0]);
        return 0;
    }
    int rc = comm_shm_prepare(g);
    if (rc)
        return rc;
    size_t mine = 0;
    for (int q = 0; q < p; q++)
        if (q != r) {
            mine = a->slen[q] > mine ? a->slen[q] : mine;
            mine = a->rlen[q] > mine ? a->rlen[q] : mine;
        }
    a->maxlen = mine;
    if (!equal && ctx->forced_algo[COMM_ALLTOALL] != COMM_ALGO_RING && comm_a2a_shm_single(g)) {
        /* the members agreed on the single-copy exchange: it takes one
         * generation at every size, so no agreement on the largest block
         * (one allreduce, a rendezvous more per call) is needed to choose
         * alike; it is at least as fast as the pairwise exchange over
         * UCX's shared memory, which reads with the same system call */
        a->any_size = true;
        whale_trace("%s of up to %zu bytes per peer (this member) on group of %d: shm, single copy",
                    a->what, a->maxlen, p);
        return comm_a2a_shm(g, a);
    }
    if (g->shm_state == COMM_SHM_READY && !equal && ctx->forced_algo[COMM_ALLTOALL] != COMM_ALGO_RING) {
        /* the segment path cuts blocks into steps: every member needs the
         * same number of them, hence the largest block of the group */
        int64_t v = (int64_t)mine, m = 0;
        /* through the progress engine on every member: the blocking call
         * takes a shortcut past the engine when this member's queue is
         * empty, and a member whose queue still holds an operation (a
         * non-blocking collective in flight) takes the engine, so the two
         * could wait on different steps of the segment */
        whale_req *req = NULL;
        rc = whale_iallreduce(g, &v, &m, 1, WHALE_INT64, WHALE_MAX, &req);
        if (!rc)
            rc = whale_wait(req);
        if (rc)
            return rc;
        a->maxlen = (size_t)m;
    }
    int algo = comm_select(g, COMM_ALLTOALL, a->maxlen * (size_t)p, ctx->forced_algo[COMM_ALLTOALL]);
    whale_trace("%s of up to %zu bytes per peer on group of %d: %s", a->what, a->maxlen, p,
                algo == COMM_ALGO_SHM ? "shm" : "pairwise");
    if (algo == COMM_ALGO_SHM)
        return comm_a2a_shm(g, a);
    comm_op_t *op = comm_op_new(ctx, g, COMM_ALLTOALL);
    if (!op)
        return WHALE_ENOMEM;
    op->kind = COMM_OP_COLL;
    op->dtype = WHALE_UINT8;
    op->rop = WHALE_SUM;
    op->algo = COMM_ALGO_RING;
    op->window = ctx->window;
    struct comm_stage *st = &op->stages[op->nstages++];
    st->g = g;
    st->seq = g->seq++;
    sched_init(&st->sched, p, r, WHALE_UINT8, WHALE_SUM);
    build_alltoall_pairwise(&st->sched, a);
    if (st->sched.err) {
        rc = st->sched.err;
        op->refs = 1;
        comm_op_unref(op);
        return rc;
    }
    return comm_run_blocking(ctx, op);
}

static int alloc_tables(struct comm_a2a *a, int p)
{
    size_t *t = calloc((size_t)p * 4, sizeof(size_t));
    if (!t)
        return WHALE_ENOMEM;
    a->soff = t;
    a->slen = t + p;
    a->roff = t + 2 * (size_t)p;
    a->rlen = t + 3 * (size_t)p;
    return 0;
}

int whale_alltoall(whale_group *g, const void *send, void *recv, size_t count, enum whale_dtype t)
{
    const char *what = "alltoall";
    int rc = check_group(what, g, t);
    if (rc)
        return rc;
    const int p = g->size;
    size_t esz = whale_dtype_size(t);
    if (count > SIZE_MAX / esz / (size_t)p) {
        whale_error("%s (rank %d of %d): count %zu per peer overflows", what, g->rank, p, count);
        return WHALE_ERANGE;
    }
    if (count && (!send || !recv)) {
        whale_error("%s (rank %d of %d): NULL %s buffer with count %zu", what, g->rank, p,
                    send ? "recv" : "send", count);
        return WHALE_EINVAL;
    }
    if (count && send == recv) {
        whale_error("%s (rank %d of %d): send == recv: in place is not supported", what, g->rank, p);
        return WHALE_EINVAL;
    }
    struct comm_a2a a = { .send = send, .recv = recv, .what = what };
    if ((rc = alloc_tables(&a, p)))
        return rc;
    for (int q = 0; q < p; q++) {
        a.soff[q] = a.roff[q] = (size_t)q * count * esz;
        a.slen[q] = a.rlen[q] = count * esz;
    }
    rc = run(g, &a, true);
    free(a.soff);
    return rc;
}

int whale_alltoallv(whale_group *g, const void *send, const size_t *sendcounts,
                    const size_t *sdispls, void *recv, const size_t *recvcounts,
                    const size_t *rdispls, enum whale_dtype t)
{
    const char *what = "alltoallv";
    int rc = check_group(what, g, t);
    if (rc)
        return rc;
    const int p = g->size;
    const char *miss = !sendcounts ? "sendcounts" : !sdispls ? "sdispls"
                     : !recvcounts ? "recvcounts" : !rdispls ? "rdispls" : NULL;
    if (miss) {
        whale_error("%s (rank %d of %d): %s is NULL (one entry per group rank needed)", what,
                    g->rank, p, miss);
        return WHALE_EINVAL;
    }
    size_t esz = whale_dtype_size(t);
    struct comm_a2a a = { .send = send, .recv = recv, .what = what };
    if ((rc = alloc_tables(&a, p)))
        return rc;
    size_t sbytes = 0, rbytes = 0;
    for (int q = 0; q < p && !rc; q++) {
        rc = side(what, g, "sendcounts/sdispls", q, sendcounts[q], sdispls[q], esz, &a.soff[q], &a.slen[q]);
        if (!rc)
            rc = side(what, g, "recvcounts/rdispls", q, recvcounts[q], rdispls[q], esz, &a.roff[q],
                      &a.rlen[q]);
        sbytes |= a.slen[q];
        rbytes |= a.rlen[q];
    }
    if (!rc && ((sbytes && !send) || (rbytes && !recv))) {
        whale_error("%s (rank %d of %d): NULL %s buffer with non-zero %s", what, g->rank, p,
                    sbytes && !send ? "send" : "recv", sbytes && !send ? "sendcounts" : "recvcounts");
        rc = WHALE_EINVAL;
    }
    if (!rc && (sbytes || rbytes) && send == recv) {
        whale_error("%s (rank %d of %d): send == recv: in place is not supported", what, g->rank, p);
        rc = WHALE_EINVAL;
    }
    if (!rc)
        rc = run(g, &a, false);
    free(a.soff);
    return rc;
}
