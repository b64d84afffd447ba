/* Expert parallelism of the MoE blocks: the EP group (EP consecutive DP
 * ranks, whale/grid.h) splits the experts of every MoE block, rank i of the
 * group computing experts [i E/EP, (i+1) E/EP).
 *
 * Every rank routes its own tokens as without EP (router, top-k, capacity
 * per micro-batch of this rank, auxiliary losses over this rank's tokens),
 * so the routing, the drops and the losses are those of the same DP layout
 * without EP: the load-balancing loss's token fractions f_e are over the
 * tokens one rank routes (the group that sees the same tokens is the TP
 * group, whose ranks route identically), and a top-k tie between equal
 * logits goes to the lower expert index (moe.c's strict comparison), so a
 * token picks the same experts whatever the layout. Only where an expert's
 * FFN runs changes:
 *
 *   counts   all-to-all of the kept rows per expert (E/EP int32 per peer)
 *   dispatch all-to-all(v) of the rows to the rank holding their expert,
 *            reordered expert-major; inside an expert the rows come by
 *            source rank, then in the source's order (token order, the
 *            order moe.c's assignment gives), so the row order, and with
 *            it the order of every sum over rows, is defined by the layout
 *   experts  the per-expert GEMM chains of moe.c on the received rows
 *   combine  the inverse exchange: each row's expert output back to its
 *            token's rank, where the gate weighting and the scatter-add run
 *
 * Where the EP group is on one node, the exchanges receive into a window
 * (whale_shm_alloc) that the peers write with one ordinary copy, instead
 * of this rank reading their buffers with process_vm_readv, which pins each
 * page and copies at about half of memcpy's rate (a2a_shm.c): the dispatch
 * receives there and permutes out of it, the backward's combine reads its
 * rows there. WHALE_MOE_EP_WINDOW=0 keeps the reading path.
 *
 * Backward makes the same two exchanges with the gradients: the gate
 * weighted output gradients go to the experts like the inputs, the input
 * gradients come back like the outputs.
 *
 * Each rank holds only its E/EP experts (weights, gradients, optimizer
 * state); their gradients are reduced over the expert-data-parallel group
 * (the DP/EP ranks holding the same experts), which ZeRO 1-3 partitions
 * them over. The experts' output biases stay on every rank: the combine
 * adds them on the token's rank. */
#include "moe_ep.h"

#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "whale/comm.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/grid.h"
#include "whale/log.h"

/* The expert-data-parallel group of this rank (DP / EP ranks holding the
 * same experts): collective over the DP group like the EP group's creation.
 * With EP = DP every rank holds its experts alone: no group. */
static int edp_group_from_grid(whale_ctx *ctx, const struct whale_grid *grid, int rank,
                               struct eng_groups *g)
{
    whale_par_comm_from_group(&g->edp, NULL);
    g->edp_group = NULL;
    const int n = whale_grid_group(grid, WHALE_AXIS_EDP, rank, NULL);
    if (n <= 1)
        return 0;
    int *members = malloc(sizeof(int) * (size_t)n);
    if (!members)
        return WHALE_ENOMEM;
    whale_grid_group(grid, WHALE_AXIS_EDP, rank, members);
    whale_group *xg = NULL;
    int rc = whale_group_create(whale_dp_group(ctx), members, n, &xg);
    if (rc)
        whale_error("rank %d: cannot create its expert-data-parallel group of %d ranks "
                    "(%d..%d): %s", rank, n, members[0], members[n - 1], whale_strerror(rc));
    free(members);
    if (rc)
        return rc;
    whale_par_comm_from_group(&g->edp, xg);
    g->edp_group = xg;
    return 0;
}

int eng_ep_group_from_ctx(whale_ctx *ctx, struct eng_groups *g)
{
    struct whale_grid grid;
    g->ep = 1;
    g->ep_rank = 0;
    g->ep_group = NULL;
    whale_ctx_grid(ctx, &grid);
    const int ep = whale_grid_ep(&grid), rank = whale_rank(ctx);
    if (ep <= 1 || rank < 0)
        return 0;
    if (grid.dp % ep) { /* the launchers check it; a hand-made environment may not */
        whale_error("rank %d: the expert-parallel degree EP=%d must divide DP=%d", rank, ep,
                    grid.dp);
        return WHALE_EINVAL;
    }
    int *members = malloc(sizeof(int) * (size_t)ep);
    if (!members)
        return WHALE_ENOMEM;
    whale_grid_group(&grid, WHALE_AXIS_EP, rank, members);
    whale_group *eg = NULL;
    int rc = whale_group_create(whale_dp_group(ctx), members, ep, &eg);
    if (rc)
        whale_error("rank %d: cannot create its expert-parallel group of %d ranks (%d..%d): %s",
                    rank, ep, members[0], members[ep - 1], whale_strerror(rc));
    free(members);
    if (rc)
        return rc;
    g->ep = ep;
    g->ep_rank = whale_grid_group_index(&grid, WHALE_AXIS_EP, rank);
    g->ep_group = eg;
    return edp_group_from_grid(ctx, &grid, rank, g);
}

size_t eng_moe_ep_rows(const struct eng_dims *d)
{
    const size_t N = (size_t)d->B * d->T, K = d->moe.topk;
    if (d->ep <= 1)
        return N * K;
    const size_t El = (size_t)eng_moe_ep_local(d);
    return (size_t)d->ep * N * (K < El ? K : El);
}

size_t eng_moe_ep_layout_words(const struct eng_dims *d)
{
    return d->ep > 1 ? (size_t)d->ep * eng_moe_ep_local(d) + eng_moe_ep_local(d) + 1 : 0;
}

int eng_moe_ep_counts(const struct eng_dims *d, const int32_t *cnt, struct moe_ep_x *x)
{
    const int El = eng_moe_ep_local(d), P = d->ep;
    int rc = whale_alltoall(d->ep_group, cnt, x->rc, (size_t)El, WHALE_INT32);
    if (rc) {
        whale_error("EP rank %d: the exchange of the routed token counts failed: %s",
                    d->ep_rank, whale_strerror(rc));
        return rc;
    }
    x->eoff[0] = 0;
    for (int el = 0; el < El; el++) {
        int n = 0;
        for (int s = 0; s < P; s++)
            n += x->rc[s * El + el];
        x->eoff[el + 1] = x->eoff[el] + n;
    }
    x->n = x->eoff[El];
    if ((size_t)x->n > eng_moe_ep_rows(d)) { /* replicas with different micro-batches */
        whale_error("EP rank %d: its experts receive %d rows, more than the %zu its buffers "
                    "hold: every rank of an expert-parallel group needs the same micro-batch "
                    "size", d->ep_rank, x->n, eng_moe_ep_rows(d));
        return WHALE_EINVAL;
    }
    return 0;
}

/* Per-peer counts and displacements (floats) of this rank's rows (mine)
 * and of the rows the experts here receive (theirs, source-major). */
struct ep_cd {
    size_t *mc, *md, *tc, *td;
};

static int ep_cd(const struct eng_dims *d, const struct moe_ep_x *x, const int32_t *off,
                 struct ep_cd *c)
{
    const int El = eng_moe_ep_local(d), P = d->ep;
    const size_t C = (size_t)d->C;
    size_t *a = malloc(sizeof(size_t) * 4 * (size_t)P);
    if (!a)
        return WHALE_ENOMEM;
    c->mc = a;
    c->md = a + P;
    c->tc = a + 2 * P;
    c->td = a + 3 * P;
    size_t t = 0;
    for (int q = 0; q < P; q++) {
        c->mc[q] = (size_t)(off[(q + 1) * El] - off[q * El]) * C;
        c->md[q] = (size_t)off[q * El] * C;
        size_t n = 0;
        for (int el = 0; el < El; el++)
            n += (size_t)x->rc[q * El + el];
        c->tc[q] = n * C;
        c->td[q] = t;
        t += n * C;
    }
    return 0;
}

/* Moves rows between the source-major layout of an exchange (rows from /
 * to rank s, expert by expert) and the experts' expert-major one. */
static void ep_permute(const struct eng_dims *d, const struct moe_ep_x *x, const float *from,
                       float *to, bool to_expert_major)
{
    const int El = eng_moe_ep_local(d), P = d->ep;
    const size_t C = (size_t)d->C;
    size_t sm = 0; /* row in the source-major layout */
    for (int s = 0; s < P; s++)
        for (int el = 0; el < El; el++) {
            size_t n = (size_t)x->rc[s * El + el], em = (size_t)x->eoff[el];
            for (int s2 = 0; s2 < s; s2++)
                em += (size_t)x->rc[s2 * El + el];
            const float *f = from + (to_expert_major ? sm : em) * C;
            float *t = to + (to_expert_major ? em : sm) * C;
            memcpy(t, f, sizeof(float) * n * C);
            sm += n;
        }
}

static int ep_fail(const struct eng_dims *d, const char *what, int rc)
{
    whale_error("EP rank %d: the %s exchange of a MoE block failed: %s", d->ep_rank, what,
                whale_strerror(rc));
    return rc;
}

/* The receive window, when the exchange's n floats fit it. */
static float *ep_win(const struct eng_dims *d, size_t n)
{
    return d->ep_win && n <= d->ep_win_floats ? d->ep_win : NULL;
}

int eng_moe_ep_dispatch(const struct eng_dims *d, const struct moe_ep_x *x,
                        const int32_t *off, const float *src, float *dst, float *tmp)
{
    struct ep_cd c;
    int rc = ep_cd(d, x, off, &c);
    if (rc)
        return rc;
    /* the rows land where the permutation reads them: in the window the
     * peers write, else in tmp */
    float *rbuf = ep_win(d, (size_t)x->n * (size_t)d->C);
    if (!rbuf)
        rbuf = tmp;
    rc = whale_alltoallv(d->ep_group, src, c.mc, c.md, rbuf, c.tc, c.td, WHALE_FLOAT32);
    free(c.mc);
    if (rc)
        return ep_fail(d, "dispatch", rc);
    ep_permute(d, x, rbuf, dst, true);
    return 0;
}

int eng_moe_ep_combine(const struct eng_dims *d, const struct moe_ep_x *x,
                       const int32_t *off, const float *src, float *dst, float *tmp,
                       const float **rows)
{
    struct ep_cd c;
    int rc = ep_cd(d, x, off, &c);
    if (rc)
        return rc;
    ep_permute(d, x, src, tmp, false);
    /* a caller that only reads the rows takes them from the window; one that
     * keeps them (the forward's saved outputs) has them land in dst, as a
     * copy out of the window would cost what the window saves */
    float *rbuf = rows ? ep_win(d, (size_t)off[d->moe.experts] * (size_t)d->C) : NULL;
    if (!rbuf)
        rbuf = dst;
    rc = whale_alltoallv(d->ep_group, tmp, c.tc, c.td, rbuf, c.mc, c.md, WHALE_FLOAT32);
    free(c.mc);
    if (rows)
        *rows = rbuf;
    return rc ? ep_fail(d, "combine", rc) : 0;
}

int eng_moe_ep_sum(const struct eng_dims *d, int64_t *v, int n)
{
    int rc = whale_allreduce(d->ep_group, v, v, (size_t)n, WHALE_INT64, WHALE_SUM);
    if (rc)
        whale_error("EP rank %d: the sum of the routing statistics over the EP group failed: %s",
                    d->ep_rank, whale_strerror(rc));
    return rc;
}

int eng_moe_ep_win_open(struct eng_dims *d, whale_arena *a)
{
    d->ep_win = NULL;
    d->ep_win_floats = 0;
    bool on = true;
    int rc = whale_env_bool("WHALE_MOE_EP_WINDOW", true, &on);
    if (rc)
        return rc;
    if (d->ep <= 1 || !on || whale_group_nnodes(d->ep_group) != 1)
        return 0;
    /* the larger of the two exchanges: the rows the experts here can
     * receive (eng_moe_ep_rows is at least this rank's N * TopK) */
    const size_t n = eng_moe_ep_rows(d) * (size_t)d->C;
    /* counted like the engine's other buffers: the memory report and the
     * budget see it (the planner's model counts it too, plan/eval.c) */
    if (a && whale_arena_charge(a, WHALE_MEM_COMM, (int64_t)(sizeof(float) * n), 1)) {
        whale_debug("EP rank %d: a receive window of %zu bytes does not fit the memory budget: "
                    "the MoE exchanges read the peers' buffers instead", d->ep_rank,
                    sizeof(float) * n);
        return 0;
    }
    if (!(d->ep_win = whale_shm_alloc(sizeof(float) * n))) {
        whale_debug("EP rank %d: no receive window of %zu bytes: the MoE exchanges read the "
                    "peers' buffers instead", d->ep_rank, sizeof(float) * n);
        if (a)
            whale_arena_charge(a, WHALE_MEM_COMM, -(int64_t)(sizeof(float) * n), 1);
        return 0;
    }
    d->ep_win_floats = n;
    whale_debug("EP rank %d: the MoE exchanges receive into a shared-memory window of %zu bytes",
                d->ep_rank, sizeof(float) * n);
    return 0;
}

void eng_moe_ep_win_close(struct eng_dims *d, whale_arena *a)
{
    if (d->ep_win && a)
        whale_arena_charge(a, WHALE_MEM_COMM, -(int64_t)(sizeof(float) * d->ep_win_floats), 1);
    whale_shm_free(d->ep_win);
    d->ep_win = NULL;
    d->ep_win_floats = 0;
}

int eng_moe_ep_check(const struct whale_engine_config *c, int ep)
{
    const struct whale_model_desc *m = &c->model;
    if (ep <= 1)
        return 0;
    if (m->moe.experts == 0) {
        whale_error("expert parallelism EP=%d needs a model with MoE blocks; %s has none", ep,
                    m->name);
        return WHALE_EINVAL;
    }
    if (m->moe.experts % ep) {
        whale_error("model %s: Experts=%d must be divisible by the expert-parallel degree "
                    "EP=%d (each EP rank computes Experts/EP experts)", m->name, m->moe.experts,
                    ep);
        return WHALE_EINVAL;
    }
    return 0;
}
