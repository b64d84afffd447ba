/* From (collective, chosen algorithm, buffers) to the stages of an
 * operation. Hierarchical allreduce: ring reduce-scatter inside the node,
 * allreduce of my 1/ppn slice across nodes (one rail per local index, all
 * running at once), ring allgather inside the node. */
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
            build_rs_ring(stage(op, lg), send, recv, mine, count, ch, ctx->window, 0);
            int xa = comm_select(xg, COMM_ALLREDUCE, len * esz, COMM_ALGO_AUTO);
            allreduce_on(op, xg, xa == COMM_ALGO_HIER ? COMM_ALGO_RING : xa, mine, mine, len, avg);
            build_ag_ring(stage(op, lg), mine, recv, count, ch, ctx->window);
        } else {
            allreduce_on(op, g, op->algo, send, recv, count, avg);
        }
        break;
    case COMM_REDUCE_SCATTER: {
        struct sched *s = stage(op, g);
        size_t total = count * (size_t)g->size;
        if (op->algo == COMM_ALGO_RD)
            build_rs_halving(s, send, recv, total, avg);
        else
            build_rs_ring(s, send, NULL, recv, total, ch, ctx->window, avg);
        break;
    }
    case COMM_ALLGATHER: {
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
