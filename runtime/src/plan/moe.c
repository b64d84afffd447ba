/* Mixture-of-experts terms of the planner: what a MoE model's blocks hold
 * (expert parameters, sharded over the expert-parallel group and reduced
 * over the expert-data-parallel one), the all-to-all that dispatches the
 * tokens to their experts and combines the results, and the FLOPs a token
 * uses (rates are reported on active parameters: the top-k routed experts,
 * the shared ones and the router, as DeepSpeed-MoE, Megatron-Core and the
 * DeepSeek reports count them). */
#include "plan_internal.h"

#include <math.h>

void plan_moe_init(struct plan_ctx *x)
{
    const struct whale_model_desc *m = x->m;
    const struct whale_moe_desc *d = &m->moe;
    x->moe = d->experts > 0 && whale_model_desc_moe_blocks(m) > 0;
    x->moe_frac = 0;
    x->p_expert = 0;
    x->moe_imbalance = 1;
    if (!x->moe)
        return;
    int nmoe = whale_model_desc_moe_blocks(m);
    x->moe_frac = (double)nmoe / m->layers;
    /* one routed expert: the MLP of width ExpertFFN (its kind and biases) */
    double h = m->hidden, fe = d->ffn, bias = m->no_bias ? 0 : 1;
    double one = m->mlp == WHALE_MLP_GELU ? 2 * h * fe + bias * (fe + h) : 3 * h * fe + bias * (2 * fe + h);
    double moe_block = (double)whale_model_desc_moe_block_params(m, false);
    double dense_block = (double)whale_model_desc_block_params(m);
    x->p_expert = x->moe_frac * d->experts * one;
    x->p_layer = (1 - x->moe_frac) * dense_block + x->moe_frac * moe_block;
    /* capacity factor: every expert computes its capacity (padded, or the
     * busiest one sets the pace); dropless: balanced by the auxiliary loss
     * (what the published benchmarks force) */
    x->moe_imbalance = d->capacity > 0 ? fmax(1.0, d->capacity) : 1.0;
}

double plan_moe_mlp_flops(const struct whale_model_desc *m)
{
    const struct whale_moe_desc *d = &m->moe;
    double h = m->hidden, nmat = m->mlp == WHALE_MLP_GELU ? 2 : 3;
    return 2 * h * d->experts + 2 * nmat * h * (double)d->ffn * (d->topk + d->shared);
}

double plan_moe_alltoall(const struct plan_ctx *x, int tp, bool sp, int b, int ep)
{
    if (!x->moe || ep <= 1)
        return 0;
    double al, bw;
    plan_group_link(x, tp, ep, &al, &bw);
    /* tokens this rank routes: its micro-batch, or its sequence shard with
     * sequence parallelism; each goes to top-k experts, (ep-1)/ep of them
     * on other ranks. Pairwise exchange: ep - 1 steps of latency. */
    double tokens = (double)b * x->m->seq / (sp ? tp : 1);
    double bytes = tokens * x->m->moe.topk * x->m->hidden * 2.0 * x->es;
    double one = (ep - 1) * al + (double)(ep - 1) / ep * bytes / bw;
    return 2 * one;   /* dispatch + combine */
}

double plan_moe_ep_window(const struct plan_ctx *x, const struct whale_plan_config *cfg)
{
    const int ep = whale_grid_ep(&cfg->grid);
    if (!x->moe || ep <= 1 || (double)cfg->tp * ep > x->gpn_min)
        return 0;
    /* engine/moe_ep.c (eng_moe_ep_rows): fp32 rows, the most the experts of
     * one rank receive in one exchange: every EP rank's micro-batch tokens,
     * each sent at most min(top-k, experts per rank) times to this rank */
    const struct whale_moe_desc *d = &x->m->moe;
    double local = (double)d->experts / ep;
    double rows = (double)ep * cfg->microbatch * x->m->seq * fmin(d->topk, local);
    return 4.0 * rows * x->m->hidden;
}
