/* From (collective, chosen algorithm, buffers) to the stages of an
 * operation. Hierarchical allreduce: reduce-scatter inside the node (shared
 * segment, else ring), allreduce of my 1/ppn slice across nodes (one rail
 * per local index, all running at once), allgather inside the node.
 * Hierarchical reduce-scatter and allgather (ZeRO): the same two levels,
 * with the blocks regrouped by local index (hier_rs, hier_ag). */
#include <stdlib.h>

#include "comm/comm_internal.h"
#include "whale/error.h"

static size_t chunk_elems(const whale_ctx *ctx, size_t esz)
{
    size_t c = ctx->chunk_bytes / esz;
    return c ? c : 1;
}

static struct sched *stage(comm_op_t *op, whale_group *g)
{
    struct comm_stage *st = &op->stages[op->nstages++];
    st->g = g;
    st->seq = g->seq++;
    sched_init(&st->sched, g->size, g->rank, op->dtype, op->rop);
    return &st->sched;
}

/* A stage through g's shared segment (g->shm_state READY). */
static int shm_stage(comm_op_t *op, whale_group *g, int coll, const void *send, void *recv,
                     size_t count, int avg_div, bool balanced)
{
    stage(op, g);
    return comm_shm_build(op, &op->stages[op->nstages - 1], coll, send, recv, count, avg_div,
                          balanced);
}

/* Where group rank k sits in the two levels: l[k] its index among its
 * node's members (= its rank in its node's local group), j[k] its rank in
 * the cross group of its local index (make_sub's order). */
static int two_level(const whale_group *g, int *l, int *j)
{
    int *seen = calloc((size_t)g->ctx->boot.nnodes + 1, sizeof(int));
    int *rail = calloc((size_t)g->size, sizeof(int));
    if (!seen || !rail) {
        free(seen);
        free(rail);
        return WHALE_ENOMEM;
    }
    for (int k = 0; k < g->size; k++) {
        l[k] = seen[g->node[k]]++;
        j[k] = rail[l[k]]++;
    }
    free(seen);
    free(rail);
    return 0;
}

/* A stage of copies only (no transfers) on my node's group: the
 * regrouping of hier_rs/hier_ag. Block k (count elements) moves between
 * `flat` (rank order) and `grouped` (local index major: block (l, j) at
 * (l * m + j) * count). to_grouped: flat -> grouped, else back. scratch:
 * bytes of scratch the stage owns (returned; NULL on failure). */
static char *regroup(comm_op_t *op, const char *flat_in, char *flat_out, const char *grouped_in,
                     size_t count, const int *l, const int *j, int m, size_t esz, size_t scratch)
{
    whale_group *g = op->g;
    struct sched *s = stage(op, g->local);
    char *tmp = scratch ? sched_tmp(s, scratch) : NULL;
    if (scratch && !tmp)
        return NULL;
    sched_chain(s);
    sched_round(s);
    for (int k = 0; k < g->size; k++) {
        size_t go = ((size_t)l[k] * (size_t)m + (size_t)j[k]) * count * esz;
        size_t fo = (size_t)k * count * esz;
        if (flat_in)
            sched_copy(s, tmp + go, flat_in + fo, count * esz);
        else
            sched_copy(s, flat_out + fo, grouped_in + go, count * esz);
    }
    return s->err ? NULL : tmp ? tmp : flat_out;
}

/* Reduce-scatter over nodes x local members: regroup send by local index,
 * reduce-scatter the q super-blocks (m blocks each) inside the node, then
 * reduce-scatter my super-block over my rail: block j of the rail is the
 * block of the rank (my l, j), i.e. mine ends in recv. */
static int hier_rs(comm_op_t *op, const void *send, void *recv, size_t count, int avg)
{
    whale_ctx *ctx = op->ctx;
    whale_group *g = op->g, *lg = g->local, *xg = g->cross;
    size_t esz = whale_dtype_size(op->dtype), ch = ctx->chunk_bytes / esz ? ctx->chunk_bytes / esz : 1;
    int m = xg->size;
    int *l = malloc(sizeof(int) * (size_t)g->size), *j = malloc(sizeof(int) * (size_t)g->size);
    int rc = l && j ? two_level(g, l, j) : WHALE_ENOMEM;
    if (!rc && count) {
        size_t total = count * (size_t)g->size, mine = count * (size_t)m;
        char *grouped = regroup(op, send, NULL, NULL, count, l, j, m, esz, (total + mine) * esz);
        if (!grouped) {
            rc = WHALE_ENOMEM;
        } else {
            char *part = grouped + total * esz;
            if (lg->shm_state == COMM_SHM_READY)
                rc = shm_stage(op, lg, COMM_REDUCE_SCATTER, grouped, part, mine, 0, false);
            else
                build_rs_ring(stage(op, lg), grouped, NULL, part, total, ch, ctx->window, 0);
            int xa = comm_select(xg, COMM_REDUCE_SCATTER, mine * esz, COMM_ALGO_AUTO);
            struct sched *sx = stage(op, xg);
            if (xa == COMM_ALGO_RD)
                build_rs_halving(sx, part, recv, mine, avg);
            else
                build_rs_ring(sx, part, NULL, recv, mine, ch, ctx->window, avg);
        }
    }
    free(l);
    free(j);
    return rc;
}

/* Allgather over nodes x local members: my rail gathers its m blocks, the
 * node gathers the q rails' super-blocks, then the blocks go back to rank
 * order. */
static int hier_ag(comm_op_t *op, const void *send, void *recv, size_t count)
{
    whale_ctx *ctx = op->ctx;
    whale_group *g = op->g, *lg = g->local, *xg = g->cross;
    size_t esz = whale_dtype_size(op->dtype), ch = ctx->chunk_bytes / esz ? ctx->chunk_bytes / esz : 1;
    int m = xg->size;
    int *l = malloc(sizeof(int) * (size_t)g->size), *j = malloc(sizeof(int) * (size_t)g->size);
    int rc = l && j ? two_level(g, l, j) : WHALE_ENOMEM;
    if (!rc && count) {
        size_t total = count * (size_t)g->size, mine = count * (size_t)m;
        int xa = comm_select(xg, COMM_ALLGATHER, mine * esz, COMM_ALGO_AUTO);
        struct sched *sx = stage(op, xg);
        char *tmp = sched_tmp(sx, (total + mine) * esz);
        if (!tmp) {
            rc = WHALE_ENOMEM;
        } else {
            char *rail = tmp + total * esz;
            if (xa == COMM_ALGO_RD)
                build_ag_rd(sx, send, rail, mine);
            else
                build_ag_ring(sx, send, rail, mine, ch, ctx->window);
            if (lg->shm_state == COMM_SHM_READY)
                rc = shm_stage(op, lg, COMM_ALLGATHER, rail, tmp, mine, 0, false);
            else
                build_ag_ring(stage(op, lg), rail, tmp, total, ch, ctx->window);
            if (!rc && !regroup(op, NULL, recv, tmp, count, l, j, m, esz, 0))
                rc = WHALE_ENOMEM;
        }
    }
    free(l);
    free(j);
    return rc;
}

static void allreduce_on(comm_op_t *op, whale_group *g, int algo, const void *send, void *recv,
                         size_t count, int avg_div)
{
    const whale_ctx *ctx = op->ctx;
    size_t esz = whale_dtype_size(op->dtype);
    struct sched *s = stage(op, g);
    switch (algo) {
    case COMM_ALGO_RD:
        build_allreduce_rd(s, send, recv, count, avg_div);
        break;
    case COMM_ALGO_RABEN:
        build_allreduce_raben(s, send, recv, count, avg_div);
        break;
    default:
        build_allreduce_ring(s, send, recv, count, chunk_elems(ctx, esz), ctx->window, avg_div);
        break;
    }
}

int comm_build(comm_op_t *op, const void *send, void *recv, size_t count, int root)
{
    whale_ctx *ctx = op->ctx;
    whale_group *g = op->g;
    size_t esz = whale_dtype_size(op->dtype);
    size_t ch = chunk_elems(ctx, esz);
    int avg = op->rop == WHALE_AVG ? g->size : 0;
    op->window = ctx->window;
    switch (op->coll) {
    case COMM_ALLREDUCE:
        if (op->algo == COMM_ALGO_HIER) {
            whale_group *lg = g->local, *xg = g->cross;
            int q = lg->size, lr = lg->rank;
            size_t off = part_off(count, q, lr), len = part_len(count, q, lr);
            char *mine = (char *)recv + off * esz;
            bool shm = lg->shm_state == COMM_SHM_READY;
            int rc = 0;
            if (shm)
                rc = shm_stage(op, lg, COMM_REDUCE_SCATTER, send, mine, count, 0, true);
            else
                build_rs_ring(stage(op, lg), send, recv, mine, count, ch, ctx->window, 0);
            int xa = comm_select(xg, COMM_ALLREDUCE, len * esz, COMM_ALGO_AUTO);
            allreduce_on(op, xg, xa == COMM_ALGO_HIER ? COMM_ALGO_RING : xa, mine, mine, len, avg);
            if (shm && !rc)
                rc = shm_stage(op, lg, COMM_ALLGATHER, mine, recv, count, 0, true);
            else if (!shm)
                build_ag_ring(stage(op, lg), mine, recv, count, ch, ctx->window);
            if (rc)
                return rc;
        } else if (op->algo == COMM_ALGO_SHM) {
            int rc = shm_stage(op, g, COMM_ALLREDUCE, send, recv, count, avg, false);
            if (rc)
                return rc;
        } else {
            allreduce_on(op, g, op->algo, send, recv, count, avg);
        }
        break;
    case COMM_REDUCE_SCATTER: {
        if (op->algo == COMM_ALGO_HIER) {
            int rc = hier_rs(op, send, recv, count, avg);
            if (rc)
                return rc;
            break;
        }
        if (op->algo == COMM_ALGO_SHM) {
            int rc = shm_stage(op, g, COMM_REDUCE_SCATTER, send, recv, count, avg, false);
            if (rc)
                return rc;
            break;
        }
        struct sched *s = stage(op, g);
        size_t total = count * (size_t)g->size;
        if (op->algo == COMM_ALGO_RD)
            build_rs_halving(s, send, recv, total, avg);
        else
            build_rs_ring(s, send, NULL, recv, total, ch, ctx->window, avg);
        break;
    }
    case COMM_ALLGATHER: {
        if (op->algo == COMM_ALGO_HIER) {
            int rc = hier_ag(op, send, recv, count);
            if (rc)
                return rc;
            break;
        }
        if (op->algo == COMM_ALGO_SHM) {
            int rc = shm_stage(op, g, COMM_ALLGATHER, send, recv, count, 0, false);
            if (rc)
                return rc;
            break;
        }
        struct sched *s = stage(op, g);
        size_t total = count * (size_t)g->size;
        if (op->algo == COMM_ALGO_RD)
            build_ag_rd(s, send, recv, total);
        else
            build_ag_ring(s, send, recv, total, ch, ctx->window);
        break;
    }
    case COMM_BROADCAST: {
        struct sched *s = stage(op, g);
        if (op->algo == COMM_ALGO_RING)
            build_bcast_chain(s, recv, count, root, ch, ctx->window);
        else
            build_bcast_tree(s, recv, count, root);
        break;
    }
    case COMM_REDUCE: {
        struct sched *s = stage(op, g);
        if (op->algo == COMM_ALGO_RING)
            build_reduce_ring(s, send, recv, count, root, ch, ctx->window, avg);
        else
            build_reduce_tree(s, send, recv, count, root, avg);
        break;
    }
    case COMM_BARRIER:
        build_barrier(stage(op, g));
        break;
    default:
        return WHALE_EINVAL;
    }
    for (int i = 0; i < op->nstages; i++)
        if (op->stages[i].sched.err)
            return op->stages[i].sched.err;
    return 0;
}
