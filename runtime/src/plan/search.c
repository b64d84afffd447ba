/* The search: every (TP, PP, DP, micro-batch, interleave, sequence
 * parallelism, ZeRO, offload, recompute) the model and cluster allow,
 * evaluated with the memory + time model. Pruning (off with exhaustive):
 * a (TP, PP) whose most memory-frugal setting (micro-batch 1, full
 * recompute, the highest ZeRO stage and offload allowed) does not fit is
 * skipped whole; micro-batch sizes stop growing at the first one whose
 * frugal setting does not fit (activations grow with the micro-batch).
 * Layer costs are computed once per (TP, SP, micro-batch, device type). */
#include "plan_internal.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void whale_plan_request_init(struct whale_plan_request *r)
{
    memset(r, 0, sizeof *r);
    r->zero = -1;
    r->recompute = -1;
    r->offload = -1;
    r->seqpar = -1;
    r->max_zero = -1;
    r->precision = -1;
    r->topk = 8;
}

static bool same_layout(const struct whale_plan_config *a, const struct whale_plan_config *b)
{
    return a->tp == b->tp && a->pp == b->pp && a->dp == b->dp && whale_grid_ep(&a->grid) == whale_grid_ep(&b->grid);
}

/* Keeps the best candidate of each (tp, pp, dp, ep) layout, fastest first. */
static void keep(struct whale_plan_candidate *list, int *n, int cap, const struct whale_plan_candidate *c)
{
    int i;
    for (i = 0; i < *n; i++)
        if (same_layout(&list[i].cfg, &c->cfg))
            break;
    if (i < *n) {
        /* Within a layout the search meets simpler settings first (ZeRO 0,
         * no offload, no recompute); a more involved one must win by more
         * than the model's resolution to replace them. */
        if (c->pred.t_step >= (1 - 2e-3) * list[i].pred.t_step)
            return;
        memmove(&list[i], &list[i + 1], sizeof *list * (size_t)(*n - i - 1));
        (*n)--;
    }
    if (*n == cap && c->pred.t_step >= list[*n - 1].pred.t_step)
        return;
    int pos = *n < cap ? *n : cap - 1;
    while (pos > 0 && list[pos - 1].pred.t_step > c->pred.t_step) {
        list[pos] = list[pos - 1];
        pos--;
    }
    list[pos] = *c;
    if (*n < cap)
        (*n)++;
}

/* Infeasible candidates ordered by how far over memory they are (one per
 * layout): the "why not" list shows the near misses, not absurd ones. */
static double overage(const struct whale_plan_candidate *c)
{
    return c->pred.mem_total / c->pred.mem_capacity;
}

static void keep_near_miss(struct whale_plan_candidate *list, int *n, int cap,
                           const struct whale_plan_candidate *c)
{
    int i;
    for (i = 0; i < *n; i++)
        if (same_layout(&list[i].cfg, &c->cfg))
            break;
    if (i < *n) {
        if (overage(c) >= overage(&list[i]))
            return;
        memmove(&list[i], &list[i + 1], sizeof *list * (size_t)(*n - i - 1));
        (*n)--;
    }
    if (*n == cap && overage(c) >= overage(&list[*n - 1]))
        return;
    int pos = *n < cap ? *n : cap - 1;
    while (pos > 0 && overage(&list[pos - 1]) > overage(c)) {
        list[pos] = list[pos - 1];
        pos--;
    }
    list[pos] = *c;
    if (*n < cap)
        (*n)++;
}

struct search_state {
    struct plan_ctx x;
    const struct whale_plan_request *req;
    struct whale_plan_result *res;
    bool mixed;
    int topk;
    struct whale_plan_candidate rej[16];  /* near misses: faster than the best so far, least over */
    int nrej;
    struct whale_plan_candidate cand;   /* scratch (large: per-stage arrays) */
};

static void consider(struct search_state *st, struct whale_plan_config *cfg,
                     const struct plan_layer_cost *lc)
{
    struct whale_plan_candidate *cd = &st->cand;
    struct whale_plan_result *res = st->res;
    cd->cfg = *cfg;
    if (plan_eval_lc(&st->x, &cd->cfg, lc, &cd->pred, NULL, 0))
        return;
    res->evaluated++;
    if (!cd->pred.fits) {
        if (res->ntop == 0 || cd->pred.t_step < res->top[0].pred.t_step) {
            /* drop near misses the best plan so far already beats */
            int k = 0;
            for (int i = 0; i < st->nrej; i++)
                if (res->ntop == 0 || st->rej[i].pred.t_step < res->top[0].pred.t_step)
                    st->rej[k++] = st->rej[i];
            st->nrej = k;
            keep_near_miss(st->rej, &st->nrej, 16, cd);
        }
        return;
    }
    keep(res->top, &res->ntop, st->topk, cd);
    if (st->mixed && !cfg->uneven && (!res->mixed || cd->pred.t_step < res->even.pred.t_step)) {
        res->mixed = true;
        res->even = *cd;
    }
}

/* Most memory-frugal setting allowed by the request. */
static void frugal(const struct whale_plan_request *rq, struct whale_plan_config *cfg, int dp)
{
    (void)dp;
    cfg->zero = rq->zero >= 0 ? rq->zero : rq->max_zero >= 0 ? rq->max_zero : 3;
    int o = rq->offload >= 0 ? rq->offload : WHALE_OFFLOAD_PARAMS;
    while (o > 0 && ((o == WHALE_OFFLOAD_PARAMS && cfg->zero != 3) ||
                     (rq->offload < 0 && rq->allowed_offload && !(rq->allowed_offload & (1u << o)))))
        o--;
    cfg->offload = o;
    int r = rq->recompute >= 0 ? rq->recompute : WHALE_RECOMPUTE_FULL;
    if (rq->recompute < 0 && rq->allowed_recompute && !(rq->allowed_recompute & (1u << r)))
        for (r = WHALE_RECOMPUTE_AUTO; r > 0 && !(rq->allowed_recompute & (1u << r)); r--)
            ;
    cfg->recompute = r;
    cfg->seqpar = rq->seqpar >= 0 ? rq->seqpar : cfg->tp > 1;
    if (cfg->tp < 2)
        cfg->seqpar = false;
}

/* Whether EP degree ep is allowed for dp replicas: it divides DP and the
 * experts (dense models: 1 only), and meets the request's constraint. */
static bool ep_ok(const struct plan_ctx *x, const struct whale_plan_request *rq, int dp, int ep)
{
    if (rq->ep > 0 && ep != rq->ep)
        return false;
    if (ep == 1)
        return true;
    return x->moe && dp % ep == 0 && x->m->moe.experts % ep == 0;
}

/* The largest allowed EP (the least expert memory per rank). */
static int ep_frugal(const struct plan_ctx *x, const struct whale_plan_request *rq, int dp)
{
    int best = 1;
    for (int ep = 1; ep <= dp && x->moe; ep++)
        if (ep_ok(x, rq, dp, ep))
            best = ep;
    return best;
}

int whale_plan_search(const struct whale_plan_request *rq, struct whale_plan_result *res)
{
    memset(res, 0, sizeof *res);
    if (!rq || !rq->model || !rq->cluster) {
        whale_error("plan search: model and cluster are required");
        return WHALE_EINVAL;
    }
    if (rq->global_batch < 1) {
        whale_error("plan search: global batch must be >= 1 sequence (got %ld)", rq->global_batch);
        return WHALE_EINVAL;
    }
    if (whale_cluster_validate(rq->cluster) || whale_model_desc_validate(rq->model, "plan"))
        return WHALE_EINVAL;
    double t0 = whale_now_s();
    struct search_state *st = calloc(1, sizeof *st);
    if (!st)
        return WHALE_ENOMEM;
    plan_ctx_init(&st->x, rq->model, rq->global_batch, rq->cluster);
    if (rq->precision >= 0)
        plan_ctx_set_precision(&st->x, rq->precision);
    if (rq->seqpar == 1 && rq->tp == 1) {
        whale_error("plan search: sequence parallelism (seqpar yes) needs tp >= 2: it splits the "
                    "activations tensor parallelism replicates, and tp=1 replicates nothing");
        free(st);
        return WHALE_EINVAL;
    }
    if (rq->max_idle < 0 || rq->max_idle >= 1) {
        whale_error("plan search: max idle share %g must be in [0, 1)", rq->max_idle);
        free(st);
        return WHALE_EINVAL;
    }
    if (rq->ep > 1 && !st->x.moe) {
        whale_error("plan search: ep=%d but %s has no experts: expert parallelism shards the experts "
                    "of a MoE model (Experts= in its description)", rq->ep, rq->model->name);
        free(st);
        return WHALE_EINVAL;
    }
    st->x.max_idle = rq->max_idle;
    st->req = rq;
    st->res = res;
    st->mixed = whale_cluster_is_mixed(rq->cluster);
    st->topk = rq->topk > 0 && rq->topk <= WHALE_PLAN_TOPK ? rq->topk : WHALE_PLAN_TOPK;
    const struct whale_cluster *c = rq->cluster;
    const struct whale_model_desc *m = rq->model;
    int64_t N = st->x.ngpus;
    long B = rq->global_batch;
    int L = m->layers;
    int max_mb = rq->max_microbatch > 0 ? rq->max_microbatch : 16;
    if (rq->microbatch > 0 && rq->microbatch > max_mb)
        max_mb = rq->microbatch;
    struct plan_layer_cost lc[WHALE_CLUSTER_MAX_GROUPS];
    struct whale_plan_config cfg;
    char first_reason[256] = "";
    double closest = INFINITY;   /* memory over capacity of the leanest layout seen */

    for (int tp = 1; tp <= c->nvlink_domain && tp <= m->heads; tp++) {
        if ((rq->tp > 0 && tp != rq->tp) || (rq->max_tp > 0 && tp > rq->max_tp))
            continue;
        if (rq->seqpar == 1 && tp < 2)
            continue;   /* sequence parallelism exists only with tp >= 2 */
        if (c->nvlink_domain % tp || N % tp || m->heads % tp || m->ffn % tp ||
            (m->kv_heads % tp && tp % m->kv_heads)) {
            if (rq->tp > 0)
                snprintf(first_reason, sizeof first_reason,
                         "no valid layout: tp=%d must divide the NVLink domain (%d GPUs), the GPU count (%lld), the "
                         "%d heads, %d kv heads and FFN width %d", tp, c->nvlink_domain,
                         (long long)N, m->heads, m->kv_heads, m->ffn);
            continue;
        }
        for (int pp = 1; pp <= L && pp <= N / tp && pp <= WHALE_PLAN_MAX_STAGES; pp++) {
            if ((rq->pp > 0 && pp != rq->pp) || (rq->max_pp > 0 && pp > rq->max_pp))
                continue;
            if (rq->max_idle <= 0 && (N / tp) % pp) {
                if (rq->pp > 0 && !first_reason[0])
                    snprintf(first_reason, sizeof first_reason,
                             "no valid layout: pp=%d does not divide %lld GPUs / tp=%d", pp,
                             (long long)N, tp);
                continue;
            }
            int64_t dp64 = N / tp / pp;
            if (rq->max_idle > 0) {
                /* the largest DP that divides the batch and leaves at most
                 * max_idle of the GPUs unused */
                if (rq->dp > 0)
                    dp64 = rq->dp <= dp64 ? rq->dp : 0;
                while (dp64 > 0 && (dp64 > B || B % dp64))
                    dp64--;
                if (dp64 < 1 || (double)tp * pp * dp64 < (1 - rq->max_idle) * N - 1e-9)
                    continue;
            }
            if ((rq->dp > 0 && dp64 != rq->dp) || dp64 > B || B % dp64 ||
                (rq->max_dp > 0 && dp64 > rq->max_dp)) {
                if (rq->dp > 0 && dp64 != rq->dp && !first_reason[0] && N % rq->dp)
                    snprintf(first_reason, sizeof first_reason,
                             "no valid layout: dp=%d does not divide the %lld GPUs (tp*pp*dp must "
                             "use them all)", rq->dp, (long long)N);
                else if ((rq->pp > 0 || rq->dp > 0) && dp64 > 0 && B % dp64 && !first_reason[0])
                    snprintf(first_reason, sizeof first_reason,
                             "no valid layout: dp=%lld (tp=%d pp=%d) must divide the global batch "
                             "of %ld", (long long)dp64, tp, pp, B);
                continue;
            }
            int dp = (int)dp64;
            memset(&cfg, 0, sizeof cfg);
            cfg.tp = tp;
            cfg.pp = pp;
            cfg.dp = dp;
            cfg.interleave = 1;
            char why[200];
            cfg.microbatch = 1;
            if (plan_config_check(&st->x, &cfg, why, sizeof why)) {
                if (!first_reason[0])
                    snprintf(first_reason, sizeof first_reason, "no valid layout: %s", why);
                continue;
            }
            long per_replica = B / dp;
            for (int b = 1; b <= max_mb && b <= per_replica; b++) {
                if (per_replica % b || (rq->microbatch > 0 && b != rq->microbatch))
                    continue;
                int nm = (int)(per_replica / b);
                cfg.microbatch = b;
                /* frugal probe: if the leanest setting for this b does not fit,
                 * no larger b will */
                if (!rq->exhaustive && !st->mixed) {   /* mixed: an uneven split may fit */
                    struct whale_plan_config f = cfg;
                    frugal(rq, &f, dp);
                    f.ep = ep_frugal(&st->x, rq, dp);
                    f.interleave = 1;
                    for (int g = 0; g < c->ngroups; g++)
                        plan_layer_cost(&st->x, &c->group[g].gpu, tp, f.seqpar, b, &lc[g]);
                    struct whale_plan_prediction pr;
                    if (plan_eval_lc(&st->x, &f, lc, &pr, NULL, 0) == 0 && pr.mem_total > pr.mem_capacity) {
                        res->pruned++;
                        double over = pr.mem_total / pr.mem_capacity;
                        /* the first micro-batch this layout tries (1, or
                         * the one the request fixes) gives the reason */
                        if (b == (rq->microbatch > 0 ? rq->microbatch : 1) && over < closest) {
                            closest = over;
                            snprintf(first_reason, sizeof first_reason,
                                     "nothing fits: tp=%d pp=%d dp=%d needs %.1f GiB per device even with "
                                     "micro-batch %d, zero=%d, offload=%s, recompute=%s "
                                     "(%.1f GiB usable)",
                                     tp, pp, dp, pr.mem_total / 1073741824.0, b, f.zero,
                                     whale_offload_name(f.offload), whale_recompute_name(f.recompute),
                                     pr.mem_capacity / 1073741824.0);
                        }
                        break;
                    }
                }
                for (int sp = 0; sp <= 1; sp++) {
                    if (sp && tp < 2)
                        continue;
                    /* whale-train splits micro-batch x sequence rows over TP */
                    if (sp && ((long)b * rq->model->seq) % tp)
                        continue;
                    if (rq->seqpar >= 0 && sp != rq->seqpar && tp > 1)
                        continue;
                    cfg.seqpar = sp;
                    double lb = INFINITY;
                    for (int g = 0; g < c->ngroups; g++) {
                        plan_layer_cost(&st->x, &c->group[g].gpu, tp, sp, b, &lc[g]);
                        lb = fmin(lb, lc[g].fwd + lc[g].bwd);
                    }
                    /* bound: m micro-batches through the fullest stage's
                     * layers, with no recompute, communication or bubble */
                    lb *= (double)nm * ((L + pp - 1) / pp);
                    if (!rq->exhaustive && res->ntop > 0 && !st->mixed &&
                        lb >= res->top[0].pred.t_step && res->ntop >= st->topk) {
                        res->pruned++;
                        continue;
                    }
                    int vmax = rq->interleave > 0 ? rq->interleave : L / pp;
                    for (int v = 1; v <= vmax; v++) {
                        if (rq->interleave > 0 && v != rq->interleave)
                            continue;
                        /* uneven stages are allowed: L >= pp*v is enough */
                        if (v > 1 && (pp < 2 || L < pp * v || nm % pp)) {
                            if (rq->interleave > 0 && !first_reason[0])
                                snprintf(first_reason, sizeof first_reason,
                                         "no valid layout: interleave=%d needs pp >= 2, at least pp*v = %d "
                                         "layers (the model has %d) and the micro-batches (%d) a multiple "
                                         "of pp=%d", v, pp * v, L, nm, pp);
                            continue;
                        }
                        cfg.interleave = v;
                        /* EP: a MoE model's experts over consecutive DP ranks
                         * (EP divides DP; the link model prices a group that
                         * outgrows the NVLink domain) */
                        for (int ep = 1; ep <= (st->x.moe ? dp : 1); ep++) {
                            if (!ep_ok(&st->x, rq, dp, ep))
                                continue;
                            cfg.ep = ep;
                            for (int z = 0; z <= 3; z++) {
                                /* without DP, ZeRO only matters as the vehicle of param offload */
                                if ((rq->zero >= 0 && z != rq->zero) ||
                                    (rq->max_zero >= 0 && z > rq->max_zero) ||
                                    (dp == 1 && rq->zero < 0 && z > 0 && z < 3))
                                    continue;
                                cfg.zero = z;
                                for (int o = 0; o <= (st->x.fp32 ? 0 : 2); o++) {   /* CPU: host memory is device memory */
                                    if ((rq->offload >= 0 && o != rq->offload) || (o == 2 && z != 3) ||
                                        (rq->allowed_offload && !(rq->allowed_offload & (1u << o))) ||
                                        (dp == 1 && z == 3 && o != 2 && rq->zero < 0))
                                        continue;
                                    cfg.offload = o;
                                    for (int r = 0; r <= 3; r++) {
                                        if ((rq->recompute >= 0 && r != rq->recompute) ||
                                            (rq->allowed_recompute &&
                                             !(rq->allowed_recompute & (1u << r))))
                                            continue;
                                        cfg.recompute = r;
                                        cfg.uneven = false;
                                        consider(st, &cfg, lc);
                                        if (st->mixed) {
                                            cfg.uneven = true;
                                            consider(st, &cfg, lc);
                                            cfg.uneven = false;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    int rc = 0;
    if (res->ntop > 0) {
        res->found = true;
        res->best = res->top[0];
        for (int i = 0; i < st->nrej && res->nrejected < 4; i++)
            if (st->rej[i].pred.t_step < 0.995 * res->best.pred.t_step)
                res->rejected[res->nrejected++] = st->rej[i];
    } else {
        rc = WHALE_ENOFIT;
        if (st->nrej > 0) {
            const struct whale_plan_candidate *r0 = &st->rej[0];
            res->rejected[0] = *r0;      /* closest to fitting: --evaluate prints it */
            res->nrejected = 1;
            char cfgs[160];
            whale_plan_format_config(&r0->cfg, cfgs, sizeof cfgs);
            snprintf(res->why_none, sizeof res->why_none,
                     "nothing fits: the closest candidate (%s) needs %.1f GiB per device, %.1f GiB usable",
                     cfgs, r0->pred.mem_total / 1073741824.0, r0->pred.mem_capacity / 1073741824.0);
        } else if (first_reason[0]) {
            snprintf(res->why_none, sizeof res->why_none, "%s", first_reason);
        } else {
            snprintf(res->why_none, sizeof res->why_none,
                     "no valid layout: %lld GPUs, %d heads, %d layers and a global batch of %ld "
                     "admit no tp*pp*dp split (tp must divide the NVLink domain of %d and the heads; "
                     "dp must divide the batch)",
                     (long long)N, m->heads, m->layers, B, c->nvlink_domain);
        }
        whale_error("%s", res->why_none);
    }
    res->search_seconds = whale_now_s() - t0;
    free(st);
    return rc;
}
