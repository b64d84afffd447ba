/* Prediction of one configuration: per-stage memory (weights, gradients,
 * optimizer states by ZeRO stage and offload; activations by recompute
 * policy times the micro-batches in flight; buffers; runtime overhead) and
 * step time (1F1B / interleaved pipeline with per-stage times, TP and PP
 * communication, exposed DP/ZeRO collectives, optimizer, offload).
 * Mixed clusters: each (stage, replica) runs on its own device type, with
 * optional uneven layer split across stages and batch split across
 * replicas (Whale's hardware-aware balancing). */
#include "plan_internal.h"
#include "whale/error.h"
#include "whale/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bytes per parameter (plan_ctx_init): bf16 weights and gradients + fp32
 * master weights and Adam m, v (16 in total, as in the ZeRO paper) */
#define WBYTES (x->wbytes)
#define GBYTES (x->gbytes)
#define OBYTES (x->obytes)

static int why_set(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int why_set(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return WHALE_EINVAL;
}

int plan_config_check(const struct plan_ctx *x, const struct whale_plan_config *cfg, char *why,
                      size_t why_len)
{
    const struct whale_model_desc *m = x->m;
    const struct whale_cluster *c = x->c;
    if (cfg->tp < 1 || cfg->pp < 1 || cfg->dp < 1 || cfg->microbatch < 1 || cfg->interleave < 1)
        return why_set(why, why_len, "tp, pp, dp, micro-batch and interleave must all be >= 1");
    int64_t used = (int64_t)cfg->tp * cfg->pp * cfg->dp;
    if (x->max_idle <= 0 ? used != x->ngpus
                         : used > x->ngpus || used < (1 - x->max_idle) * x->ngpus - 1e-9)
        return why_set(why, why_len, "tp*pp*dp = %lld but the cluster has %lld GPUs%s",
                       (long long)used, (long long)x->ngpus,
                       x->max_idle > 0 ? " (more than the allowed idle share left over)" : "");
    if (m->heads % cfg->tp || m->ffn % cfg->tp || (m->kv_heads % cfg->tp && cfg->tp % m->kv_heads))
        return why_set(why, why_len, "tp=%d must divide the %d heads, FFN %d and kv heads %d",
                       cfg->tp, m->heads, m->ffn, m->kv_heads);
    if (cfg->tp > c->nvlink_domain || c->nvlink_domain % cfg->tp)
        return why_set(why, why_len, "tp=%d must divide the NVLink domain of %d GPUs", cfg->tp,
                       c->nvlink_domain);
    for (int i = 0; i < c->ngroups; i++)
        if (((int64_t)c->group[i].nodes * c->group[i].gpus_per_node) % cfg->tp)
            return why_set(why, why_len, "tp=%d does not divide node group %d's GPUs", cfg->tp, i);
    if (cfg->pp > m->layers)
        return why_set(why, why_len, "pp=%d exceeds the %d layers", cfg->pp, m->layers);
    if (x->batch % ((long)cfg->dp * cfg->microbatch))
        return why_set(why, why_len, "global batch %ld is not a multiple of dp*micro-batch = %d*%d",
                       x->batch, cfg->dp, cfg->microbatch);
    int nm = (int)(x->batch / ((long)cfg->dp * cfg->microbatch));
    if (cfg->interleave > 1) {
        if (cfg->pp < 2)
            return why_set(why, why_len, "interleave=%d needs pp >= 2", cfg->interleave);
        /* uneven is fine (Llama 3 405B: 126 layers on 16 stages): every
         * virtual stage needs one layer */
        if (m->layers < cfg->pp * cfg->interleave)
            return why_set(why, why_len, "interleave: %d layers are fewer than pp*v = %d virtual stages",
                           m->layers, cfg->pp * cfg->interleave);
        if (nm % cfg->pp)
            return why_set(why, why_len, "interleave: %d micro-batches not a multiple of pp=%d", nm,
                           cfg->pp);
    }
    int ep = whale_grid_ep(&cfg->grid);
    if (ep > 1 && !x->moe)
        return why_set(why, why_len, "ep=%d: the model has no experts (expert parallelism needs Experts=)", ep);
    if (ep > 1 && (cfg->dp % ep || m->moe.experts % ep))
        return why_set(why, why_len, "ep=%d must divide dp=%d and the %d experts", ep, cfg->dp,
                       m->moe.experts);
    if (cfg->zero < 0 || cfg->zero > 3)
        return why_set(why, why_len, "zero=%d: allowed 0..3", cfg->zero);
    if (cfg->recompute < 0 || cfg->recompute > 3)
        return why_set(why, why_len, "unknown recompute policy %d", cfg->recompute);
    if (cfg->offload < 0 || cfg->offload > 2)
        return why_set(why, why_len, "unknown offload %d", cfg->offload);
    if (cfg->offload == WHALE_OFFLOAD_PARAMS && cfg->zero != 3)
        return why_set(why, why_len, "offload=params needs zero=3");
    if (cfg->seqpar && cfg->tp < 2)
        return why_set(why, why_len, "sequence parallelism needs tp >= 2");
    if (cfg->pp > WHALE_PLAN_MAX_STAGES)
        return why_set(why, why_len, "pp=%d exceeds %d stages", cfg->pp, WHALE_PLAN_MAX_STAGES);
    if (cfg->layers_given) {
        int sum = 0;
        for (int s = 0; s < cfg->pp; s++) {
            if (cfg->stage_layers[s] < 0)
                return why_set(why, why_len, "stage %d has a negative layer count", s);
            sum += cfg->stage_layers[s];
        }
        if (sum != m->layers)
            return why_set(why, why_len, "stage layers sum to %d, the model has %d", sum, m->layers);
    }
    return 0;
}

/* Even layer split; the remainder goes to the middle stages first (the
 * first and last stage also carry the embedding and the output layer). */
void plan_split_even(int L, int pp, int *out)
{
    int base = L / pp, r = L % pp;
    for (int s = 0; s < pp; s++)
        out[s] = base;
    for (int s = 1; s < pp - 1 && r > 0; s++, r--)
        out[s]++;
    if (r > 0) { out[0]++; r--; }
    if (r > 0) { out[pp - 1]++; r--; }
}

/* Layers per pipeline rank with v virtual stages each: the L layers are
 * split evenly over the pp*v chunks (the remainder to the middle chunks,
 * as plan_split_even does), and rank s runs chunks s, s + pp, ... Uneven when L
 * is not a multiple of pp*v. */
static void split_interleaved(int L, int pp, int v, int *out)
{
    if (v <= 1) {
        plan_split_even(L, pp, out);
        return;
    }
    int n = pp * v;
    int *chunk = malloc(sizeof *chunk * (size_t)n);
    if (!chunk) {            /* keep a valid split without the per-chunk detail */
        plan_split_even(L, pp, out);
        return;
    }
    plan_split_even(L, n, chunk);
    for (int s = 0; s < pp; s++)
        out[s] = 0;
    for (int k = 0; k < n; k++)
        out[k % pp] += chunk[k];
    free(chunk);
}

/* Parameters held by one rank of stage s: the ones replicated over DP
 * (returned) and, in a MoE model, the routed experts' share of this rank
 * (*pexp: sharded over TP and EP, replicated over EDP = DP / EP). */
static double stage_params_split(const struct plan_ctx *x, const struct whale_plan_config *cfg, int s,
                                 int Ls, double *pexp)
{
    double t = cfg->tp, P = Ls * (x->p_layer - x->p_expert) / t;
    *pexp = Ls * x->p_expert / (t * whale_grid_ep(&cfg->grid));
    if (s == 0)
        P += x->p_emb / t + x->p_pos;
    if (s == cfg->pp - 1) {
        P += 2.0 * x->m->hidden;                  /* final layernorm */
        if (!x->m->tied_embeddings || cfg->pp > 1)
            P += x->p_emb / t;                    /* output layer, or the tied copy */
    }
    return P;
}


/* Micro-batches whose activations stage s holds at its peak. */
static double stage_inflight(const struct whale_plan_config *cfg, int s, int m)
{
    double p = cfg->pp, v = cfg->interleave;
    double n = (p - s) + (v > 1 ? (p - 1) / v : 0);
    return fmin(n, m);
}

struct stage_out {
    double weights, grads, optim, act, buffers, total, capacity, host;
    double t_mb;              /* per micro-batch time on the critical path */
    double t_comp, t_rc, t_tp, t_ep, t_pp, t_bwd;
    int n_sel, n_full;
    bool fits;
};

/* Memory and per-micro-batch time of stage s with Ls layers on device g. */
static void stage_eval(const struct plan_ctx *x, const struct whale_plan_config *cfg,
                       const struct plan_layer_cost *lc, const struct whale_plan_device *g, int s,
                       int Ls, int m, struct stage_out *o)
{
    const struct whale_cluster *c = x->c;
    double dp = cfg->dp, pe, P = stage_params_split(x, cfg, s, Ls, &pe);
    /* ZeRO shards the replicated parameters' states over DP and the
     * experts' over the expert-data-parallel group (DP / EP) */
    double edp = dp / whale_grid_ep(&cfg->grid);
    memset(o, 0, sizeof *o);
    o->weights = WBYTES * (P / (cfg->zero >= 3 ? dp : 1) + pe / (cfg->zero >= 3 ? edp : 1));
    o->grads = GBYTES * (P / (cfg->zero >= 2 ? dp : 1) + pe / (cfg->zero >= 2 ? edp : 1));
    o->optim = OBYTES * (P / (cfg->zero >= 1 ? dp : 1) + pe / (cfg->zero >= 1 ? edp : 1));
    P += pe;
    if (cfg->offload >= WHALE_OFFLOAD_OPTIMIZER) {
        o->host += o->optim;
        o->optim = 0;
    }
    if (cfg->offload == WHALE_OFFLOAD_PARAMS) {
        o->host += o->weights;
        o->weights = 0;
    }
    double M = (double)cfg->microbatch * x->m->seq, h = x->m->hidden;
    /* buffers: pipeline send/recv (2 each way), TP all-reduce staging,
     * ZeRO-3 gathered weights of two layers (current + prefetch), ZeRO-2
     * reduce-scatter bucket. */
    if (cfg->pp > 1) o->buffers += 4 * lc->p2p_msg;
    if (cfg->tp > 1) o->buffers += 2 * x->es * M * h;
    if (cfg->zero == 3)
        o->buffers += 2 * WBYTES * (x->p_layer - x->p_expert + x->p_expert / whale_grid_ep(&cfg->grid)) / cfg->tp;
    if (cfg->zero == 2) o->buffers += GBYTES * fmin(P, 5e7);
    /* the MoE exchanges' receive window (shared host memory): the
     * device's memory on a CPU, the host's beside a GPU */
    double win = plan_moe_ep_window(x, cfg);
    if (x->gpu_model)
        o->host += win;
    else
        o->buffers += win;

    double inflight = stage_inflight(cfg, s, m);
    double extra_act = 0;
    if (s == 0) extra_act += lc->first_act * inflight;
    if (s == cfg->pp - 1) extra_act += lc->last_act;   /* logits live for one micro-batch */
    /* backward working set: one layer's full activations re-materialised
     * (or kept) plus its input and output gradients */
    double work = lc->act[WHALE_RECOMPUTE_NONE] + 2 * lc->act_input;
    o->capacity = g->mem_bytes * (1 - c->frag);
    double fixed = o->weights + o->grads + o->optim + o->buffers + c->overhead_bytes + extra_act + work;

    int rc = cfg->recompute;
    double t_rc = 0, t_tp_rc = 0;
    if (rc == WHALE_RECOMPUTE_AUTO) {
        double act[3], cost[3];
        for (int k = 0; k < 3; k++) {
            act[k] = lc->act[k] * inflight;
            cost[k] = lc->rc_cost[k] + (k == WHALE_RECOMPUTE_FULL ? lc->tp_rc : 0);
        }
        double tot;
        if (plan_rc_uniform(Ls, act, cost, o->capacity - fixed, &o->n_sel, &o->n_full, &tot) < 0) {
            o->n_full = Ls;            /* nothing fits: report the all-full footprint */
            o->n_sel = 0;
        }
        o->act = (Ls - o->n_sel - o->n_full) * act[0] + o->n_sel * act[1] + o->n_full * act[2];
        t_rc = o->n_sel * lc->rc_cost[WHALE_RECOMPUTE_SELECTIVE] + o->n_full * lc->rc_cost[WHALE_RECOMPUTE_FULL];
        t_tp_rc = o->n_full * lc->tp_rc;
    } else {
        o->act = Ls * lc->act[rc] * inflight;
        t_rc = Ls * lc->rc_cost[rc];
        if (rc == WHALE_RECOMPUTE_FULL) {
            t_tp_rc = Ls * lc->tp_rc;
            o->n_full = Ls;
        } else if (rc == WHALE_RECOMPUTE_SELECTIVE) {
            o->n_sel = Ls;
        }
    }
    o->act += extra_act + work;
    o->total = o->weights + o->grads + o->optim + o->act + o->buffers + c->overhead_bytes;
    o->fits = o->total <= o->capacity && o->host <= c->host_mem_per_gpu;

    o->t_comp = Ls * (lc->fwd + lc->bwd);
    o->t_bwd = Ls * lc->bwd;
    if (s == 0) { o->t_comp += lc->first_fwd + lc->first_bwd; o->t_bwd += lc->first_bwd; }
    if (s == cfg->pp - 1) { o->t_comp += lc->last_fwd + lc->last_bwd; o->t_bwd += lc->last_bwd; }
    o->t_rc = t_rc;
    o->t_tp = Ls * (lc->tp_fwd + lc->tp_bwd) + t_tp_rc;
    if (x->moe && whale_grid_ep(&cfg->grid) > 1) {
        /* the MoE blocks' all-to-alls: forward, backward, and again in
         * the re-run forward of fully recomputed blocks; on the critical
         * path (the experts wait for their tokens) */
        double a2a = x->moe_frac * plan_moe_alltoall(x, cfg->tp, cfg->seqpar && cfg->tp > 1, cfg->microbatch,
                                                     whale_grid_ep(&cfg->grid));
        o->t_ep = (2 * Ls + o->n_full) * a2a;
    }
    if (cfg->pp > 1) {
        double al, bw;
        plan_group_link(x, cfg->tp * cfg->dp, 2, &al, &bw);
        /* one receive + one send per chunk forward and backward; Megatron's
         * p2p is synchronous, so it sits on the critical path */
        double msg = al + lc->p2p_msg / bw;
        if (cfg->tp > 1 && !cfg->seqpar) {
            /* scatter/gather: the receiver re-assembles b s h over NVLink */
            double nal, nbw;
            plan_group_link(x, 1, cfg->tp, &nal, &nbw);
            msg += plan_allgather(cfg->tp, lc->p2p_msg * cfg->tp, nal, nbw);
        }
        o->t_pp = 2.0 * cfg->interleave * msg;
    }
    o->t_mb = o->t_comp + o->t_rc + o->t_tp + o->t_ep + o->t_pp;
}

/* Group index of the GPU holding logical rank `rank` (block mapping). */
static int rank_group(const struct whale_cluster *c, int64_t rank)
{
    int64_t acc = 0;
    for (int i = 0; i < c->ngroups; i++) {
        acc += (int64_t)c->group[i].nodes * c->group[i].gpus_per_node;
        if (rank < acc)
            return i;
    }
    return c->ngroups - 1;
}

/* Per-step DP / ZeRO communication of P parameters of a stage reduced over
 * a group of n ranks spaced `stride` apart (the DP group, or for a MoE
 * model's experts the expert-data-parallel group), exposed part. */
static double dp_group_time(const struct plan_ctx *x, const struct whale_plan_config *cfg, double P,
                            int stride, int n, int Ls, int m, const struct stage_out *so, double slack,
                            double *total)
{
    /* Hidden communication is not free: NCCL kernels take SMs and memory
     * bandwidth from the overlapped compute. A fraction (overlap_cost) of
     * every hidden second is added back. */
    *total = 0;
    if (n <= 1 || P <= 0)
        return 0;
    double al, bw;
    plan_group_link(x, stride, n, &al, &bw);
    double ov = x->c->eff.dp_overlap;
    /* ZeRO 0-2 reduce the gradient buffer in its wire precision (Megatron-LM:
     * fp32 for bf16 training); ZeRO-3 reduce-scatters the layer's gradients
     * as computed */
    double gb = cfg->zero < 3 && x->c->eff.grad_reduce_bytes > 0 ? x->c->eff.grad_reduce_bytes : GBYTES;
    double grad = gb * P, w = WBYTES * P;
    /* GPU runtimes (Megatron DDP / distributed optimizer, PyTorch DDP)
     * reduce gradients in buckets as backward produces them: every bucket
     * pays the collective's latency (ring: 2 (dp-1) steps, tree: 2 log2 dp),
     * which is what grows with DP at a fixed model. */
    double nb = 1;
    if (x->gpu_model && cfg->zero < 3) {
        double bucket = x->c->eff.dp_bucket > 0 ? x->c->eff.dp_bucket : PLAN_DP_BUCKET;
        nb = fmax(1, ceil(P / bucket));
    }
    double rs = nb * plan_allgather(n, grad / nb, al, bw);   /* reduce-scatter: same cost */
    double ag = nb * plan_allgather(n, w / nb, al, bw);
    double exposed;
    switch (cfg->zero) {
    case 0:   /* all-reduce once per step, overlapped with the last backward */
        *total = nb * plan_allreduce_net(x, n, grad / nb, al, bw);
        exposed = fmax(0, *total - ov * so->t_bwd - slack);
        break;
    case 1:   /* reduce-scatter once + all-gather of updated weights after the step */
        *total = rs + ag;
        exposed = fmax(0, rs - ov * so->t_bwd - slack) + ag * (1 - ov);
        break;
    case 2:   /* gradients stay sharded: reduce-scatter every micro-batch */
        *total = m * rs + ag;
        exposed = fmax(0, m * rs - ov * m * so->t_bwd - slack) + ag * (1 - ov);
        break;
    default: {
        /* ZeRO-3 (Rajbhandari et al., SC'20; PyTorch FSDP): every
         * micro-batch all-gathers each layer's weights for forward and again
         * for backward (a fully recomputed layer re-runs its forward inside
         * its backward, on the same gathered copy) and reduce-scatters its
         * gradients: 2 all-gathers + 1 reduce-scatter of the stage's weights.
         * Prefetching may hide the bandwidth part behind at most
         * zero3_overlap of the compute (default 0: the published runs do not
         * show it, cluster.c). The ring latency of each collective, (dp-1)
         * alpha, is on the critical path: the next layer cannot start before
         * its weights are complete. It grows with DP and with the number of
         * collectives per layer (zero3_msgs, default one per parameter
         * tensor), which is why ZeRO-3 without model parallelism falls 3x
         * from 384 to 1536 GPUs at one global batch (Narayanan et al.,
         * SC'21, table 2). */
        double nl = Ls > 0 ? Ls : 1;
        double msgs = x->c->eff.zero3_msgs >= 1 ? x->c->eff.zero3_msgs
                                                 : whale_plan_block_tensors(x->m);
        double lat = 3.0 * nl * msgs * (n - 1) * al;
        double bwt = 3.0 * (n - 1) / n * w / bw;
        *total = m * (bwt + lat);
        exposed = m * lat + fmax(0, m * bwt - x->c->eff.zero3_overlap * m * (so->t_comp + so->t_rc) - slack);
        break;
    }
    }
    return exposed + x->c->eff.overlap_cost * fmax(0, *total - exposed);
}

/* Per-step DP / ZeRO communication of stage s, exposed part: the
 * replicated parameters over DP, a MoE model's experts over DP / EP. */
static double stage_dp_time(const struct plan_ctx *x, const struct whale_plan_config *cfg, int s,
                            int Ls, int m, const struct stage_out *so, double slack, double *total)
{
    int ep = whale_grid_ep(&cfg->grid);
    double pe, P = stage_params_split(x, cfg, s, Ls, &pe), te = 0;
    if (ep <= 1) {
        P += pe;
        pe = 0;
    }
    double e = dp_group_time(x, cfg, P, cfg->tp, cfg->dp, Ls, m, so, slack, total);
    if (pe > 0)
        e += dp_group_time(x, cfg, pe, cfg->tp * ep, cfg->dp / ep, Ls, m, so, slack, &te);
    *total += te;
    return e;
}

/* Optimizer step + offload traffic of stage s (exposed seconds). */
static double stage_optim_time(const struct plan_ctx *x, const struct whale_plan_config *cfg,
                               const struct whale_plan_device *g, int s, int Ls, int m,
                               const struct stage_out *so, double *offload)
{
    const struct whale_eff_model *e = &x->c->eff;
    double pe, P = stage_params_split(x, cfg, s, Ls, &pe);
    double local = cfg->zero >= 1 ? P / cfg->dp + pe * whale_grid_ep(&cfg->grid) / cfg->dp : P + pe;
    P += pe;
    *offload = 0;
    if (cfg->offload == WHALE_OFFLOAD_NONE)
        /* Adam: read/write fp32 master, m, v (24 B), read grad, write bf16 weight */
        return local * (x->obytes * 2 + x->gbytes + x->wbytes * 2) / (g->hbm_bw * e->mem_eff);
    /* host Adam on the shard, transfers overlapped as the engine does (offload.c) */
    double t;
    *offload = plan_offload_time(x, cfg, P, local, m, m * so->t_comp / 3,
                                 m * (so->t_comp * 2 / 3 + so->t_rc), &t);
    return t;
}

/* Greedy uneven layer split (optimal for min-max of increasing per-stage
 * costs with unit items): give each layer to the stage whose time grows
 * least, within its memory cap. */
static int split_uneven(int L, int pp, int min_layers, const double *per_layer, const double *fixed,
                        const int *cap, int *out)
{
    /* every stage keeps at least one layer per virtual stage */
    for (int s = 0; s < pp; s++)
        out[s] = min_layers;
    for (int l = pp * min_layers; l < L; l++) {
        int best = -1;
        double bt = INFINITY;
        for (int s = 0; s < pp; s++) {
            if (out[s] >= cap[s])
                continue;
            double t = fixed[s] + (out[s] + 1) * per_layer[s];
            if (t < bt - 1e-15) {
                bt = t;
                best = s;
            }
        }
        if (best < 0)
            return -1;
        out[best]++;
    }
    return 0;
}

/* What the stage evaluation hands to the step totals: every stage's
 * per-micro-batch figures, the bottleneck, the stage with the least memory
 * headroom and one replica's pipeline time. */
struct eval_stages {
    struct stage_out so[WHALE_PLAN_MAX_STAGES];
    struct stage_out wmem;   /* the stage (device) with the least headroom */
    double tmax, tsum;       /* slowest stage's and all stages' t_mb */
    double worst_head;
    double repl_T;           /* one replica's pipeline time (fill + steady) */
    int bott, worst;
    bool fits;
};

/* Folds one (stage, device) evaluation into the memory verdict. */
static void eval_note_memory(struct eval_stages *ev, const struct stage_out *o, int s)
{
    ev->fits = ev->fits && o->fits;
    if (o->capacity - o->total < ev->worst_head) {
        ev->worst_head = o->capacity - o->total;
        ev->wmem = *o;
        ev->worst = s;
    }
}

/* Bottleneck stage and the sum of per-micro-batch times. */
static void eval_bottleneck(struct eval_stages *ev, int pp)
{
    for (int s = 0; s < pp; s++) {
        ev->tsum += ev->so[s].t_mb;
        if (ev->so[s].t_mb > ev->tmax) {
            ev->tmax = ev->so[s].t_mb;
            ev->bott = s;
        }
    }
}

/* Homogeneous cluster: one evaluation per stage. */
static void eval_stages_uniform(const struct plan_ctx *x, const struct whale_plan_config *cfg,
                                const struct plan_layer_cost *lc, int m, struct eval_stages *ev)
{
    const struct whale_plan_device *g = &x->c->group[0].gpu;
    const int *layers = cfg->stage_layers;
    for (int s = 0; s < cfg->pp; s++) {
        /* Middle stages with the same layer count run the same time; their
         * memory only shrinks along the pipeline (fewer micro-batches in
         * flight), so reusing the previous one is exact for time and
         * conservative for memory. */
        if (s > 1 && s < cfg->pp - 1 && layers[s] == layers[s - 1])
            ev->so[s] = ev->so[s - 1];
        else
            stage_eval(x, cfg, lc, g, s, layers[s], m, &ev->so[s]);
        eval_note_memory(ev, &ev->so[s], s);
    }
    eval_bottleneck(ev, cfg->pp);
    ev->repl_T = m * ev->tmax + (ev->tsum - ev->tmax) / cfg->interleave;
}

/* Mixed cluster, uneven split: layers per stage for the slowest device of
 * each stage, under every device's memory cap. */
static void eval_split_layers(const struct plan_ctx *x, struct whale_plan_config *cfg,
                              const struct plan_layer_cost *lc, const unsigned char *grp, int m)
{
    const struct whale_cluster *c = x->c;
    int pp = cfg->pp, dp = cfg->dp, L = x->m->layers;
    double per_layer[WHALE_PLAN_MAX_STAGES], fixed[WHALE_PLAN_MAX_STAGES];
    int cap[WHALE_PLAN_MAX_STAGES];
    for (int s = 0; s < pp; s++) {
        per_layer[s] = 0;
        fixed[s] = 0;
        cap[s] = L;
        for (int r = 0; r < dp; r++) {
            int gi = grp[(size_t)s * dp + r];
            struct stage_out a0, a1;
            stage_eval(x, cfg, &lc[gi], &c->group[gi].gpu, s, 0, m, &a0);
            stage_eval(x, cfg, &lc[gi], &c->group[gi].gpu, s, 1, m, &a1);
            per_layer[s] = fmax(per_layer[s], a1.t_mb - a0.t_mb);
            fixed[s] = fmax(fixed[s], a0.t_mb);
            double dmem = a1.total - a0.total;
            int k = dmem > 0 ? (int)floor((a0.capacity - a0.total) / dmem) : L;
            if (k < cap[s])
                cap[s] = k < 0 ? 0 : k;
        }
    }
    if (split_uneven(L, pp, cfg->interleave, per_layer, fixed, cap, cfg->stage_layers) < 0)
        plan_split_even(L, pp, cfg->stage_layers);
}

/* Mixed cluster: the step time of the replicas, replica r taking Mr[r] per
 * micro-batch in steady state plus Fr[r] of fill; an even batch split, or
 * water-filling micro-batches by replica speed (cfg->replica_micro). */
static double eval_replica_time(struct whale_plan_config *cfg, int m, const double *Mr,
                                const double *Fr)
{
    int dp = cfg->dp;
    double T = 0;
    /* per-replica counts are stored for up to WHALE_PLAN_MAX_STAGES replicas;
     * beyond that the batch stays even (layers may still be uneven) */
    if (!cfg->uneven || dp == 1 || dp > WHALE_PLAN_MAX_STAGES) {
        for (int r = 0; r < dp; r++)
            T = fmax(T, m * Mr[r] + Fr[r]);
        return T;
    }
    long total = (long)m * dp;
    double lo = 0, hi = 0;
    for (int r = 0; r < dp; r++)
        hi = fmax(hi, total * Mr[r] + Fr[r]);
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (lo + hi);
        long cnt = 0;
        for (int r = 0; r < dp && cnt < total; r++)
            cnt += mid > Fr[r] + Mr[r] ? (long)floor((mid - Fr[r]) / Mr[r]) : 1;
        if (cnt >= total)
            hi = mid;
        else
            lo = mid;
    }
    long left = total;
    for (int r = 0; r < dp; r++) {
        long k = hi > Fr[r] + Mr[r] ? (long)floor((hi - Fr[r]) / Mr[r]) : 1;
        if (k > left) k = left;
        if (k < 1) k = 1;
        left -= k;
        cfg->replica_micro[r] = (int)k;
    }
    /* the hi bound guarantees enough capacity; hand out any rest */
    for (int r = 0; left > 0 && r < dp; r++, left--)
        cfg->replica_micro[r]++;
    T = 0;
    for (int r = 0; r < dp; r++)
        T = fmax(T, cfg->replica_micro[r] * Mr[r] + Fr[r]);
    return T;
}

/* Mixed cluster: per (stage, device group) evaluations (groups <= 8); the
 * slowest device of a stage stands for it in the breakdown. */
static int eval_stages_mixed(const struct plan_ctx *x, struct whale_plan_config *cfg,
                             const struct plan_layer_cost *lc, const unsigned char *grp, int m,
                             struct eval_stages *ev)
{
    const struct whale_cluster *c = x->c;
    int pp = cfg->pp, dp = cfg->dp;
    struct stage_out sg[WHALE_CLUSTER_MAX_GROUPS];
    bool present[WHALE_CLUSTER_MAX_GROUPS];
    if (cfg->uneven && !cfg->layers_given)
        eval_split_layers(x, cfg, lc, grp, m);
    double *Mr = malloc(sizeof(double) * 2 * (size_t)dp);
    if (!Mr)
        return WHALE_ENOMEM;
    double *Fr = Mr + dp;
    for (int r = 0; r < dp; r++)
        Mr[r] = 0, Fr[r] = 0;
    for (int s = 0; s < pp; s++) {
        memset(present, 0, sizeof present);
        for (int r = 0; r < dp; r++)
            present[grp[(size_t)s * dp + r]] = true;
        double st = -1;
        for (int gi = 0; gi < c->ngroups; gi++) {
            if (!present[gi])
                continue;
            stage_eval(x, cfg, &lc[gi], &c->group[gi].gpu, s, cfg->stage_layers[s], m, &sg[gi]);
            eval_note_memory(ev, &sg[gi], s);
            if (sg[gi].t_mb > st) {      /* the slowest device for the breakdown */
                st = sg[gi].t_mb;
                ev->so[s] = sg[gi];
            }
        }
        for (int r = 0; r < dp; r++) {
            double t = sg[grp[(size_t)s * dp + r]].t_mb;
            Fr[r] += t;
            Mr[r] = fmax(Mr[r], t);
        }
    }
    for (int r = 0; r < dp; r++)
        Fr[r] = (Fr[r] - Mr[r]) / cfg->interleave;
    ev->repl_T = eval_replica_time(cfg, m, Mr, Fr);
    free(Mr);
    eval_bottleneck(ev, pp);
    return 0;
}

/* Per-step DP/ZeRO collectives, optimizer and offload (the slowest stage
 * counts), plus the tied-embedding all-reduce across the pipeline. Stage s
 * finishes its last backward about s backward passes before stage 0, which
 * is slack for its reduction. */
static void eval_step_extras(const struct plan_ctx *x, const struct whale_plan_config *cfg,
                             const struct eval_stages *ev, int m, bool mixed,
                             struct whale_plan_prediction *pr)
{
    const struct whale_cluster *c = x->c;
    const int *layers = cfg->stage_layers;
    int pp = cfg->pp;
    double t_dp = 0, t_opt = 0, t_off = 0;
    const struct whale_plan_device *gref = &c->group[0].gpu;
    for (int gi = 1; gi < c->ngroups; gi++)
        if (c->group[gi].gpu.hbm_bw < gref->hbm_bw)
            gref = &c->group[gi].gpu;
    for (int s = 0; s < pp; s++) {
        if (s > 1 && s < pp - 1 && layers[s] == layers[s - 1] && !mixed)
            continue;   /* same as the previous middle stage, with more slack */
        double tot, slack = s * ev->so[0].t_bwd;
        double e = stage_dp_time(x, cfg, s, layers[s], m, &ev->so[s], slack, &tot);
        double off;
        double o = stage_optim_time(x, cfg, gref, s, layers[s], m, &ev->so[s], &off);
        t_dp = fmax(t_dp, e);
        t_opt = fmax(t_opt, o);
        t_off = fmax(t_off, off);
    }
    /* tied embeddings across the pipeline: first and last stage all-reduce
     * the embedding gradient each step */
    if (x->m->tied_embeddings && pp > 1) {
        double al, bw;
        plan_group_link(x, cfg->tp * cfg->dp * (pp - 1), 2, &al, &bw);
        t_dp += plan_allreduce(2, GBYTES * x->p_emb / cfg->tp, al, bw);
    }
    pr->t_dp = t_dp;
    pr->t_optim = t_opt;
    pr->t_offload = t_off;
}

/* Step time breakdown (the bottleneck stage's parts, scaled to the
 * replica's steady-state time; the rest is bubble) and the memory of the
 * stage with the least headroom. */
static void eval_breakdown(const struct plan_ctx *x, struct whale_plan_config *cfg,
                           const struct eval_stages *ev, int m, struct whale_plan_prediction *pr)
{
    const struct stage_out *b = &ev->so[ev->bott];
    double fill = ev->repl_T - m * ev->tmax;
    if (fill < 0) fill = 0;
    double scale = b->t_mb > 0 ? (ev->repl_T - fill) / b->t_mb : 0;
    pr->t_compute = scale * b->t_comp;
    pr->t_recompute = scale * b->t_rc;
    pr->t_tp = scale * b->t_tp;
    pr->t_ep = scale * b->t_ep;
    pr->t_pp = scale * b->t_pp;
    pr->t_bubble = fill;
    pr->t_step = ev->repl_T + pr->t_dp + pr->t_optim + pr->t_offload;

    const struct stage_out *wso = &ev->wmem;
    pr->fits = ev->fits;
    pr->worst_stage = ev->worst;
    pr->mem_weights = wso->weights;
    pr->mem_grads = wso->grads;
    pr->mem_optim = wso->optim;
    pr->mem_act = wso->act;
    pr->mem_buffers = wso->buffers;
    pr->mem_overhead = x->c->overhead_bytes;
    pr->mem_total = wso->total;
    pr->mem_capacity = wso->capacity;
    cfg->rc_full = ev->so[0].n_full;
    cfg->rc_selective = ev->so[0].n_sel;
}

/* FLOPs, MFU/HFU, tokens/s and the link classes of the layout. */
static void eval_flops(const struct plan_ctx *x, const struct whale_plan_config *cfg,
                       const struct eval_stages *ev, struct whale_plan_prediction *pr)
{
    const struct whale_cluster *c = x->c;
    const struct whale_model_desc *md = x->m;
    /* FLOPs. Model FLOPs (MFU; Korthikanti et al. 2022, the MosaicML and
     * NeMo tables): forward + 2x backward of the GEMMs (6 N per token for
     * the block and output weights) plus the attention scores counted over
     * the full s x s (4 s^2 h per layer forward), whatever the kernel
     * skips. Hardware FLOPs (HFU; Megatron-LM's "TFLOP/s per GPU"): model
     * FLOPs + the recomputed forward of fully recomputed layers + the
     * attention core of selectively recomputed ones (nothing with flash
     * attention, whose own score recomputation is not counted, as in the
     * published HFU figures). */
    double s_ = md->seq, h = md->hidden, f = md->ffn, V = md->vocab;
    double kv = (double)md->kv_heads * (md->hidden / md->heads);
    double nmat = md->mlp == WHALE_MLP_GELU ? 2 : 3;
    double mlp = 2 * nmat * h * f;   /* MLP FLOPs per token forward */
    if (x->moe)   /* on active parameters: the mean over dense and MoE blocks */
        mlp = (1 - x->moe_frac) * mlp + x->moe_frac * plan_moe_mlp_flops(md);
    double F1 = 2 * s_ * ((h + 2 * kv) * h + h * h) + s_ * mlp + 4 * s_ * s_ * h;
    double Flog = 2 * s_ * h * V;
    double Fsel = md->attention == WHALE_ATTN_FLASH ? 0 : 4 * s_ * s_ * h;
    double nfull = 0, nsel = 0;
    for (int s = 0; s < cfg->pp; s++) {
        nfull += ev->so[s].n_full;
        nsel += ev->so[s].n_sel;
    }
    pr->model_flops_step = (double)x->batch * (3 * md->layers * F1 + 3 * Flog);
    pr->flops_step = pr->model_flops_step + (double)x->batch * (nfull * F1 + nsel * Fsel);
    /* peak of the GPUs in use (block order); idle ones do not count */
    double used = (double)cfg->tp * cfg->pp * cfg->dp;
    double peak = 0, left = used;
    for (int i = 0; i < c->ngroups && left > 0; i++) {
        double n = fmin(left, (double)c->group[i].nodes * c->group[i].gpus_per_node);
        const struct whale_plan_device *gd = &c->group[i].gpu;
        peak += n * (x->fp32 && gd->fp32_ratio > 0 ? gd->peak_flops * gd->fp32_ratio : gd->peak_flops);
        left -= n;
    }
    pr->tflops_per_gpu = pr->flops_step / (pr->t_step * used) / 1e12;
    pr->model_tflops_per_gpu = pr->model_flops_step / (pr->t_step * used) / 1e12;
    pr->mfu = pr->model_flops_step / (pr->t_step * peak);
    pr->hfu = pr->flops_step / (pr->t_step * peak);
    pr->tokens_per_s = (double)x->batch * s_ / pr->t_step;
    double al, bw;
    pr->link_tp = plan_group_link(x, 1, cfg->tp, &al, &bw);
    pr->link_dp = plan_group_link(x, cfg->tp, cfg->dp, &al, &bw);
    pr->link_pp = cfg->pp > 1 ? plan_group_link(x, cfg->tp * cfg->dp, 2, &al, &bw)
                              : WHALE_PLAN_LINK_NVLINK;
}

/* One configuration's prediction, in phases: check and derive, stages
 * (memory and per-micro-batch time), step extras (DP/ZeRO, optimizer,
 * offload), breakdown, FLOPs. */
int plan_eval_lc(const struct plan_ctx *x, struct whale_plan_config *cfg,
                 const struct plan_layer_cost *lc, struct whale_plan_prediction *pr, char *why,
                 size_t why_len)
{
    int rc = plan_config_check(x, cfg, why, why_len);
    if (rc)
        return rc;
    const struct whale_cluster *c = x->c;
    memset(pr, 0, sizeof *pr);
    int pp = cfg->pp, dp = cfg->dp, m = (int)(x->batch / ((long)dp * cfg->microbatch));
    cfg->nmicro = m;
    cfg->precision = x->prec;
    if (!cfg->seqpar || cfg->tp < 2)
        cfg->seqpar = false;
    bool mixed = whale_cluster_is_mixed(c);
    if (cfg->uneven)   /* filled below for mixed clusters with dp <= WHALE_PLAN_MAX_STAGES */
        memset(cfg->replica_micro, 0, sizeof cfg->replica_micro);
    if (!cfg->layers_given)
        split_interleaved(x->m->layers, pp, cfg->interleave, cfg->stage_layers);

    /* on the stack, like the per-stage array before the split: the search
     * evaluates tens of thousands of configurations, and only the stages
     * in use are written */
    struct eval_stages evs, *ev = &evs;
    memset(&ev->wmem, 0, sizeof ev->wmem);
    ev->tmax = ev->tsum = ev->repl_T = 0;
    ev->bott = ev->worst = 0;
    ev->fits = true;
    ev->worst_head = INFINITY;
    if (!mixed) {
        eval_stages_uniform(x, cfg, lc, m, ev);
    } else {
        /* device group of every (stage, replica) */
        unsigned char *grp = malloc((size_t)pp * dp);
        if (!grp)
            return WHALE_ENOMEM;
        for (int s = 0; s < pp; s++)
            for (int r = 0; r < dp; r++)
                grp[(size_t)s * dp + r] = (unsigned char)rank_group(c, ((int64_t)s * dp + r) * cfg->tp);
        rc = eval_stages_mixed(x, cfg, lc, grp, m, ev);
        free(grp);
        if (rc)
            return rc;
    }
    eval_step_extras(x, cfg, ev, m, mixed, pr);
    eval_breakdown(x, cfg, ev, m, pr);
    eval_flops(x, cfg, ev, pr);
    return 0;
}

int whale_plan_check(const struct whale_model_desc *model, long global_batch,
                     const struct whale_cluster *c, const struct whale_plan_config *cfg, char *why,
                     size_t why_len)
{
    struct plan_ctx x;
    plan_ctx_init(&x, model, global_batch, c);
    return plan_config_check(&x, cfg, why, why_len);
}

int whale_plan_eval(const struct whale_model_desc *model, long global_batch,
                    const struct whale_cluster *c, struct whale_plan_config *cfg,
                    struct whale_plan_prediction *pred)
{
    if (whale_cluster_validate(c))
        return WHALE_EINVAL;
    if (global_batch < 1) {
        whale_error("global batch must be >= 1 sequence (got %ld)", global_batch);
        return WHALE_EINVAL;
    }
    struct plan_ctx x;
    plan_ctx_init(&x, model, global_batch, c);
    struct plan_layer_cost lc[WHALE_CLUSTER_MAX_GROUPS];
    if (cfg->tp < 1 || cfg->microbatch < 1) {
        whale_error("configuration needs tp >= 1 and micro-batch >= 1");
        return WHALE_EINVAL;
    }
    for (int i = 0; i < c->ngroups; i++)
        plan_layer_cost(&x, &c->group[i].gpu, cfg->tp, cfg->seqpar && cfg->tp > 1, cfg->microbatch, &lc[i]);
    char why[256];
    int rc = plan_eval_lc(&x, cfg, lc, pred, why, sizeof why);
    if (rc == WHALE_EINVAL)
        whale_error("%s", why);
    return rc;
}
