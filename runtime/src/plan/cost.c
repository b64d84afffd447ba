/* Time model of the pieces of a training step: GEMMs with a shape-dependent
 * efficiency, memory-bound kernels at a fraction of HBM bandwidth, and
 * collectives in the alpha-beta model on the link class the mapping uses.
 * Activation sizes follow Korthikanti et al. 2022 (16-bit activations),
 * generalised to GQA (kv width) and any FFN width. */
#include "plan_internal.h"

#include <math.h>
#include <string.h>

void plan_ctx_set_precision(struct plan_ctx *x, int prec)
{
    const struct whale_cluster *c = x->c;
    bool cpu = true;
    for (int i = 0; i < c->ngroups; i++)
        cpu = cpu && !strcmp(c->group[i].gpu.name, "cpu");
    if (prec < 0 && x->m->precision_set)
        prec = x->m->precision;
    if (prec < 0)
        prec = cpu ? WHALE_PREC_FP32 : WHALE_PREC_BF16;
    x->prec = prec;
    /* fp32: 4-byte activations, weights and gradients, Adam m and v (the
     * weights are the master copy): 16 bytes per parameter. 16-bit: 2 + 2
     * + fp32 master, m, v (12), as in the ZeRO paper. */
    x->fp32 = prec == WHALE_PREC_FP32;
    x->es = x->fp32 ? 2.0 : 1.0;
    x->wbytes = x->fp32 ? 4 : 2;
    x->gbytes = x->fp32 ? 4 : 2;
    x->obytes = x->fp32 ? 8 : 12;
}

void plan_ctx_init(struct plan_ctx *x, const struct whale_model_desc *m, long batch,
                   const struct whale_cluster *c)
{
    memset(x, 0, sizeof *x);
    x->m = m;
    x->batch = batch;
    x->c = c;
    x->ngpus = whale_cluster_gpus(c);
    /* same count as modeldesc: attention, MLP (2 or 3 matrices), norms, biases */
    x->p_layer = (double)whale_model_desc_block_params(m);
    x->p_emb = (double)m->vocab * m->hidden;
    x->p_pos = m->position == WHALE_POS_LEARNED ? (double)m->seq * m->hidden : 0;
    plan_ctx_set_precision(x, -1);
    plan_moe_init(x);
    x->nvlink_bw = x->nic_bw = x->pcie_bw = INFINITY;
    x->gpn_min = 1 << 30;
    x->gpu_model = c->ngroups > 0;
    for (int i = 0; i < c->ngroups; i++)
        x->gpu_model = x->gpu_model && c->group[i].gpu.sms > 0;
    for (int i = 0; i < c->ngroups; i++) {
        const struct whale_plan_device *g = &c->group[i].gpu;
        x->nvlink_bw = fmin(x->nvlink_bw, g->nvlink_bw);
        x->nic_bw = fmin(x->nic_bw, g->nic_bw);
        x->pcie_bw = fmin(x->pcie_bw, g->pcie_bw);
        if (c->group[i].gpus_per_node < x->gpn_min)
            x->gpn_min = c->group[i].gpus_per_node;
    }
}

/* Efficiency of one GEMM dimension: a dimension d fills the tiles and SMs
 * like d / (d + d_half) (small heads, thin shards run slower). */
static inline double dim_eff(double d, double half)
{
    return d / (d + half);
}

/* Peak of the plan's precision on device g: fp32 runs on the TF32 tensor
 * cores (half the 16-bit rate on A100/H100/B200). */
static double plan_peak(const struct plan_ctx *x, const struct whale_plan_device *g)
{
    return x->fp32 && g->fp32_ratio > 0 ? g->peak_flops * g->fp32_ratio : g->peak_flops;
}

/* Seconds for `count` GEMMs of shape (M x K) * (K x N). GPU types: the
 * generation's best-shape rate x the stack's share of it (gemm_scale) x how
 * the M x N output tiles fill the SMs, T / (T + sms / 2), x the depth term
 * K / (K + half) (struct whale_plan_device). The CPU: a fill factor per
 * dimension. Cluster values (a calibration profile) override the
 * catalogue's efficiency and half dimension. */
static double gemm_time(const struct plan_ctx *x, const struct whale_plan_device *g,
                        double count, double M, double N, double K)
{
    const struct whale_eff_model *e = &x->c->eff;
    double ge = e->gemm_eff > 0 ? e->gemm_eff : g->gemm_eff;
    double half = e->gemm_half_dim > 0 ? e->gemm_half_dim : g->gemm_half;
    double eff;
    if (g->sms > 0 && g->tile_m > 0 && g->tile_n > 0) {
        /* `count` GEMMs of one shape run as one batched kernel (attention
         * heads; gate and up of a gated MLP): their tiles share the waves */
        double T = count * (M / g->tile_m) * (N / g->tile_n);
        /* a calibrated efficiency (whale-bench, --fit-step) is already what
         * this stack achieves: the fitted share applies to the catalogue's */
        double share = e->gemm_eff > 0 ? 1.0 : plan_gemm_scale(e);
        eff = ge * share * T / (T + 0.5 * g->sms) * dim_eff(K, half);
    } else {
        eff = ge * dim_eff(M, half) * dim_eff(N, half) * dim_eff(K, half);
    }
    return count * 2 * M * N * K / (plan_peak(x, g) * eff);
}

/* Share of the s x s scores a causal blocked kernel computes: blocks on
 * or below the diagonal, nb (nb + 1) / 2 of nb^2 with nb = ceil(s / B).
 * Fused GPU kernels (flash_eff measured, tiles far below s) are counted
 * at the exact half their efficiency was measured against. */
static double causal_share(const struct whale_plan_device *g, double s)
{
    if (g->flash_eff > 0)
        return 0.5;
    double nb = ceil(s / PLAN_CPU_FLASH_BLOCK);
    return nb < 1 ? 1 : (nb + 1) / (2 * nb);
}

/* Fused (flash) attention of `heads` heads of one sequence of s tokens,
 * head dim hd, forward + backward: the kernel skips the masked score
 * blocks (causal_share) and its backward recomputes the scores (5 matmuls
 * against the forward's 2). Returns forward seconds in *fwd, backward in
 * *bwd. Devices without a measured flash efficiency run it as GEMMs. */
static void flash_time(const struct plan_ctx *x, const struct whale_plan_device *g, double heads,
                       double s, double hd, double *fwd, double *bwd)
{
    double f = causal_share(g, s) * 4 * heads * s * s * hd; /* executed forward FLOPs */
    double ge = x->c->eff.gemm_eff > 0 ? x->c->eff.gemm_eff : g->gemm_eff;
    double eff = g->flash_eff > 0 ? g->flash_eff : ge;
    if (g->flash_eff > 0 && g->sms > 0)
        /* the stack's share, and head dim: 64 runs ~10 % below 128 (fewer
         * FLOPs per byte of Q, K, V tile loaded) */
        eff *= plan_gemm_scale(&x->c->eff) * (hd / (hd + 16)) / (128.0 / 144.0);
    *fwd = f / (plan_peak(x, g) * eff);
    *bwd = 2.5 * *fwd;
}

/* 1 + spill x (1 - C / W): the memory-bound kernels of a layer keeping W
 * bytes of activations on a core whose cache holds C of them (struct
 * whale_plan_device). */
static double spill_slowdown(const struct whale_plan_device *g, double w)
{
    if (!(g->spill > 0 && g->cache_bytes > 0 && w > g->cache_bytes))
        return 1.0;
    return 1.0 + g->spill * (1.0 - g->cache_bytes / w);
}

static double mem_time(const struct whale_plan_device *g, const struct whale_eff_model *e,
                       double bytes)
{
    return bytes / (g->hbm_bw * e->mem_eff);
}

double plan_allreduce(int p, double bytes, double alpha, double bw)
{
    if (p <= 1 || bytes <= 0)
        return 0;
    double ring = 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * bytes / bw;
    /* double binary tree: log latency, bandwidth a bit below the ring's */
    double tree = 2.0 * ceil(log2(p)) * alpha + 2.0 * bytes / (0.85 * bw);
    return fmin(ring, tree);
}

double plan_allreduce_net(const struct plan_ctx *x, int p, double bytes, double alpha, double bw)
{
    double t = plan_allreduce(p, bytes, alpha, bw);
    if (p > 1 && bytes > 0 && x->gpu_model && x->c->eff.innet_reduce)
        t = fmin(t, 2.0 * ceil(log2(p)) * alpha + bytes / bw);
    return t;
}

double plan_allgather(int p, double bytes, double alpha, double bw)
{
    if (p <= 1 || bytes <= 0)
        return 0;
    /* NCCL runs all-gather and reduce-scatter as rings: (p-1) latency steps */
    return (p - 1) * alpha + (double)(p - 1) / p * bytes / bw;
}

int plan_group_link(const struct plan_ctx *x, int stride, int size, double *alpha, double *bw)
{
    const struct whale_cluster *c = x->c;
    const struct whale_eff_model *e = &c->eff;
    double span = (double)stride * size;          /* GPUs the group's block covers */
    int dom = c->nvlink_domain;
    double nv = c->link[WHALE_PLAN_LINK_NVLINK].bw > 0 ? c->link[WHALE_PLAN_LINK_NVLINK].bw
                                                  : x->nvlink_bw * e->coll_eff;
    double ls = x->gpu_model ? plan_lat_scale(e) : 1.0;
    if (size <= 1) {
        *alpha = 0;
        *bw = nv;
        return WHALE_PLAN_LINK_NVLINK;
    }
    if (span <= dom) {
        *alpha = ls * c->link[WHALE_PLAN_LINK_NVLINK].alpha;
        *bw = nv;
        return WHALE_PLAN_LINK_NVLINK;
    }
    /* members sharing a domain share its rails: k of them per domain */
    double k = stride >= dom ? 1.0 : fmin(size, (double)dom / stride);
    double leaf_gpus = c->nodes_per_leaf > 0 ? (double)c->nodes_per_leaf * x->gpn_min : INFINITY;
    int cls = span <= leaf_gpus ? WHALE_PLAN_LINK_LEAF : WHALE_PLAN_LINK_SPINE;
    double rail = c->link[cls].bw > 0 ? c->link[cls].bw
                : c->link[WHALE_PLAN_LINK_LEAF].bw > 0 ? c->link[WHALE_PLAN_LINK_LEAF].bw
                : x->nic_bw * e->coll_eff;
    if (cls == WHALE_PLAN_LINK_SPINE && c->link[WHALE_PLAN_LINK_SPINE].bw <= 0)
        rail /= c->spine_oversub;
    *alpha = ls * c->link[cls].alpha;
    *bw = fmin(nv, k * rail);
    return cls;
}

void plan_layer_cost(const struct plan_ctx *x, const struct whale_plan_device *g, int tp, bool sp,
                     int b, struct plan_layer_cost *lc)
{
    const struct whale_model_desc *m = x->m;
    const struct whale_eff_model *e = &x->c->eff;
    double s = m->seq, h = m->hidden, a = m->heads, f = m->ffn, V = m->vocab, t = tp;
    double hd = h / a, kv = m->kv_heads * hd;
    double M = (double)b * s;
    double shard = sp ? t : 1;     /* what sequence parallelism splits */
    bool gated = m->mlp != WHALE_MLP_GELU, flash = m->attention == WHALE_ATTN_FLASH;
    double nmat = gated ? 3 : 2;   /* MLP matrices: fc1 + fc2, or gate + up + down */
    memset(lc, 0, sizeof *lc);

    /* GEMMs of one layer, forward, per TP rank. Shapes (rows x cols):
     *   qkv  [b s, h] x [h, (h + 2 kv)/t]     proj [b s, h/t] x [h/t, h]
     *   fc1  [b s, h] x [h, f/t] (gated: x2)  fc2  [b s, f/t] x [f/t, h]
     *   attention per head (b a / t heads): [s, hd] x [hd, s] and [s, s] x [s, hd] */
    double t_mlp = gemm_time(x, g, nmat - 1, M, f / t, h) + gemm_time(x, g, 1, M, h, f / t);
    double t_lin = gemm_time(x, g, 1, M, (h + 2 * kv) / t, h) + gemm_time(x, g, 1, M, h, h / t) + t_mlp;
    /* MLP width of the activations and element-wise work: f, or in a MoE
     * model the mean over its blocks */
    double fw = f;
    double t_moe_ew = 0;
    if (x->moe) {
        /* A MoE block's MLP: the router (b s x h x E, replicated), the
         * routed experts as one grouped GEMM over the top-k copies of the
         * tokens, times the imbalance (the busiest expert sets the pace;
         * its tiles fill the SMs like one GEMM of all the tokens: the
         * per-expert row counts do not depend on EP), the shared experts
         * on every token, and the permutation copies of the routed tokens
         * (gather before, scatter-add after: ~4 passes of 2 bytes). */
        const struct whale_moe_desc *d = &m->moe;
        double fe = d->ffn, kr = d->topk * x->moe_imbalance;
        double t_moe = gemm_time(x, g, 1, M, d->experts, h)
                     + gemm_time(x, g, nmat - 1, M * kr, fe / t, h) + gemm_time(x, g, 1, M * kr, h, fe / t);
        if (d->shared)
            t_moe += gemm_time(x, g, nmat - 1, M, d->shared * fe / t, h)
                   + gemm_time(x, g, 1, M, h, d->shared * fe / t);
        t_lin += x->moe_frac * (t_moe - t_mlp);
        double fm = (kr + d->shared) * fe;
        fw = (1 - x->moe_frac) * f + x->moe_frac * fm;
        t_moe_ew = x->moe_frac * mem_time(g, e, x->es * 8.0 * M * d->topk * h);
    }
    double heads = b * a / t;
    double es = x->es;
    /* Activations kept per layer (bytes), Korthikanti et al. with kv width
     * and FFN width: replicated R = 10 s b h (norm inputs, QKV and FC1
     * inputs, dropout masks), TP-sharded S = 4 s b h + 4 s b kv + 4 s b f
     * (Q, K, V, projection input, FC2 input, GeLU input; a gated MLP keeps
     * gate and up outputs and their product: 6 s b f), attention core
     * A = 5 a s^2 b (plain) or the fp32 softmax statistics 4 a s b / 2
     * element units (flash). With h = kv, f = 4h, plain: s b h (10 + 24/t +
     * 5 a s/(h t)). */
    /* On the CPU, activations past the core's cache slow the layer's
     * memory-bound kernels: they stream them from L3 or DRAM instead of L2
     * (whale_plan_device.spill). The GEMMs keep their rate: fitted on
     * gpt-tiny, a spill term on them too asked for GEMMs above the sgemm
     * peak. */
    double R = es * 10 * M * h, S = es * (4 * M * h + 4 * M * kv + (gated ? 6 : 4) * M * fw);
    if (x->moe)   /* the routed copies of the tokens, before and after the experts */
        S += x->moe_frac * es * 4 * M * m->moe.topk * h;
    double A = flash ? 4.0 * a * M : es * 5 * a * s * s * b;
    double slow = spill_slowdown(g, R / shard + S / t + A / t);
    /* Attention core. Plain: two batched GEMMs over the full s x s scores
     * plus scale+mask+softmax+dropout over the b a s^2 / t scores in memory
     * (read/write 2-byte values + 1-byte mask, ~9 bytes each); backward
     * twice the forward. Flash: one fused kernel, nothing of size s^2 in
     * memory (flash_time). */
    double t_att_f, t_att_b, t_ew_att = 0;
    if (flash) {
        flash_time(x, g, heads, s, hd, &t_att_f, &t_att_b);
        if (!(g->flash_eff > 0)) {
            /* No fused kernel measured on this device (the CPU's blocked
             * kernel, attn_blocked.c): the GEMMs of its blocks, and the
             * softmax work on every score of the blocks it computes (max,
             * exp, rescale; backward: exp again and dS) at the element-wise
             * rate, as plain attention's, without keeping the scores. */
            t_ew_att = slow * mem_time(g, e, 9.0 * es * heads * s * s * causal_share(g, s));
            t_att_f += t_ew_att;
            t_att_b += 2 * t_ew_att;
        }
    } else {
        t_att_f = gemm_time(x, g, heads, s, s, hd) + gemm_time(x, g, heads, s, hd, s);
        t_ew_att = slow * mem_time(g, e, 9.0 * es * heads * s * s);
        t_att_f += t_ew_att;
        t_att_b = 2 * t_att_f;
    }
    /* Other memory-bound kernels, bytes moved forward: norms,
     * bias+dropout+residual adds (~22 bytes per b s h element, split by t
     * only with sequence parallelism); the activation over b s f / t (GeLU
     * reads and writes 2 bytes: 4; SwiGLU/GeGLU read two inputs: 6); rotary
     * on q and k (read + write: 4 bytes per b s (h + kv) / t element). */
    double ew_other = es * (22.0 * M * h / shard + (gated ? 6.0 : 4.0) * M * fw / t);
    if (m->position == WHALE_POS_ROTARY)
        ew_other += es * 4.0 * M * (h + kv) / t;
    double t_ew = slow * mem_time(g, e, ew_other) + t_moe_ew;
    double ovh = e->kernel_overhead;

    lc->fwd = t_lin + t_att_f + t_ew + ovh;
    lc->bwd = 2 * (t_lin + t_ew) + t_att_b + ovh;
    lc->rc_cost[WHALE_RECOMPUTE_NONE] = 0;
    /* selective recompute re-runs the attention core; with flash attention
     * there is nothing of it kept to drop (its backward already recomputes
     * the scores), so selective costs nothing and saves nothing */
    lc->rc_cost[WHALE_RECOMPUTE_SELECTIVE] = flash ? 0 : t_att_f;
    lc->rc_cost[WHALE_RECOMPUTE_FULL] = lc->fwd;
    double mlp_flops = 2 * nmat * h * f;   /* per token */
    if (x->moe)
        mlp_flops = (1 - x->moe_frac) * mlp_flops + x->moe_frac * plan_moe_mlp_flops(m);
    lc->flops_fwd = 2 * M * ((h + 2 * kv) * h + h * h) / t + M * mlp_flops / t + 4 * heads * s * s * hd;
    lc->flops_attn_core = flash ? 0 : 4 * heads * s * s * hd;

    /* TP: two all-reduces (or all-gather + reduce-scatter with sequence
     * parallelism: the same bytes) of the b s h activations per direction. */
    if (tp > 1) {
        double al, bw;
        plan_group_link(x, 1, tp, &al, &bw);
        double one = plan_allreduce_net(x, tp, 2.0 * es * M * h, al, bw);
        /* Megatron-Core's TP communication overlap splits the GEMMs next
         * to each collective into chunks and hides the collective behind
         * them (tp_overlap of it); the hidden part still costs overlap_cost */
        double ov = x->gpu_model ? fmin(fmax(e->tp_overlap, 0), 1) : 0;
        double layer_tp = 2 * one * ((1 - ov) + ov * e->overlap_cost);
        lc->tp_fwd = layer_tp;
        lc->tp_bwd = layer_tp;
        lc->tp_rc = layer_tp;
        lc->first_fwd += one;      /* vocab-parallel embedding */
        lc->last_bwd += one;       /* input gradient of the output layer */
    }

    lc->act_input = es * 2 * M * h / shard;
    lc->act[WHALE_RECOMPUTE_NONE] = R / shard + S / t + A / t;
    lc->act[WHALE_RECOMPUTE_SELECTIVE] = R / shard + S / t + (flash ? A / t : 0);
    lc->act[WHALE_RECOMPUTE_FULL] = lc->act_input;

    /* Embedding (first stage): gather + dropout, memory-bound. */
    lc->first_fwd += mem_time(g, e, es * 6 * M * h / shard) + ovh;
    lc->first_bwd += mem_time(g, e, es * 8 * M * h / shard) + ovh;
    lc->first_act = M * h / shard;          /* embedding dropout mask */
    /* Output layer (last stage): logits [b s, h] x [h, V/t], fp32 softmax
     * cross-entropy over b s V / t (read 2 + write 4 forward, ~10 backward). */
    double t_logit = gemm_time(x, g, 1, M, V / t, h);
    lc->last_fwd += t_logit + mem_time(g, e, es * 6 * M * V / t) + mem_time(g, e, es * 4 * M * h / shard) + ovh;
    lc->last_bwd += 2 * t_logit + mem_time(g, e, es * 10 * M * V / t) + ovh;
    lc->last_act = es * (6 * M * V / t + 2 * M * h / shard);
    /* Pipeline message: b s h 16-bit, split over the TP ranks (Megatron's
     * scatter/gather, or the sequence-parallel shard). */
    lc->p2p_msg = es * 2 * M * h / t;
}

int whale_plan_block_tensors(const struct whale_model_desc *m)
{
    int weights = 4 + (m->mlp == WHALE_MLP_GELU ? 0 : 1);    /* qkv, proj, fc1 (+gate), fc2 */
    int norms = 2 * (m->norm == WHALE_NORM_RMSNORM ? 1 : 2);  /* scale (+ shift) each */
    return weights * (m->no_bias ? 1 : 2) + norms;
}
