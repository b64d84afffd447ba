/* Optimal activation-recompute selection over a chain of layers.
 *
 * The engine executes one policy per layer (keep everything / recompute
 * the attention core / keep only the input and recompute the layer), so the
 * problem is a multiple-choice knapsack: pick one option per layer, total
 * kept memory within the budget, least recompute time. Exact dynamic
 * programming over memory discretised into `slots` units (rounded up, so
 * the result never exceeds the budget), O(n * nopt * slots). Shared by the
 * planner and the engine's recompute=auto. */
#include "plan_internal.h"
#include "whale/error.h"
#include "whale/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int whale_plan_recompute_select(int n, int nopt, const double *mem, const double *time, double budget,
                      int slots, int *choice, double *total_time)
{
    if (n < 0 || nopt < 1 || nopt > 255 || slots < 1 || !mem || !time || (n && !choice)) {
        whale_error("ckpt_select: bad arguments (n=%d options=%d slots=%d)", n, nopt, slots);
        return WHALE_EINVAL;
    }
    if (total_time)
        *total_time = 0;
    if (n == 0)
        return budget >= 0 ? 0 : WHALE_ENOFIT;
    if (budget < 0)
        return WHALE_ENOFIT;
    double unit = budget > 0 ? budget / slots : 1;
    size_t S = (size_t)slots + 1;
    double *cur = malloc(sizeof(double) * 2 * S);
    unsigned char *pick = malloc((size_t)n * S);
    int *w = malloc(sizeof(int) * (size_t)n * nopt);
    if (!cur || !pick || !w) {
        free(cur);
        free(pick);
        free(w);
        return WHALE_ENOMEM;
    }
    double *nxt = cur + S;
    for (int i = 0; i < n * nopt; i++) {
        double q = mem[i] <= 0 ? 0 : ceil(mem[i] / unit - 1e-9);
        w[i] = budget == 0 ? (mem[i] <= 0 ? 0 : slots + 1) : (q > slots ? slots + 1 : (int)q);
    }
    /* cur[j]: least time for the layers so far using at most j slots */
    for (size_t j = 0; j < S; j++)
        cur[j] = 0;
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < S; j++) {
            double best = INFINITY;
            int bk = 0;
            for (int k = 0; k < nopt; k++) {
                int wk = w[i * nopt + k];
                if ((size_t)wk > j)
                    continue;
                double v = cur[j - (size_t)wk] + time[i * nopt + k];
                if (v < best) {
                    best = v;
                    bk = k;
                }
            }
            nxt[j] = best;
            pick[(size_t)i * S + j] = (unsigned char)bk;
        }
        double *t = cur;
        cur = nxt;
        nxt = t;
    }
    int rc = 0;
    if (!isfinite(cur[slots])) {
        rc = WHALE_ENOFIT;
    } else {
        if (total_time)
            *total_time = cur[slots];
        size_t j = (size_t)slots;
        for (int i = n - 1; i >= 0; i--) {
            int k = pick[(size_t)i * S + j];
            choice[i] = k;
            j -= (size_t)w[i * nopt + k];
        }
    }
    free(cur < nxt ? cur : nxt);
    free(pick);
    free(w);
    return rc;
}

/* Identical layers: for each count of fully recomputed layers keep as many
 * layers whole as fit, the rest selective. Exact (costs none <= selective
 * <= full, memory the other way round) and O(n), cheap enough for the
 * search's inner loop; the tests check it against whale_plan_recompute_select. */
int plan_rc_uniform(int n, const double act[3], const double cost[3], double budget, int *n_sel,
                    int *n_full, double *total_cost)
{
    double best = INFINITY;
    int bs = -1, bf = -1;
    for (int nf = 0; nf <= n; nf++) {
        double left = budget - nf * act[2];
        int r = n - nf;
        if (left < r * act[1] - 1e-6 * fabs(budget))
            continue;
        int n0 = r;
        double d = act[0] - act[1];
        if (d > 0) {
            double k = floor((left - r * act[1]) / d + 1e-9);
            if (k < n0)
                n0 = k < 0 ? 0 : (int)k;
        }
        double t = (r - n0) * cost[1] + nf * cost[2] + n0 * cost[0];
        if (t < best - 1e-15) {
            best = t;
            bs = r - n0;
            bf = nf;
        }
    }
    if (bf < 0)
        return -1;
    *n_sel = bs;
    *n_full = bf;
    *total_cost = best;
    return 0;
}

int whale_plan_recompute_auto(const struct whale_model_desc *model, int tp, bool sp, int b,
                              int nlayers, double inflight, double budget,
                              const struct whale_plan_device *device, int *policy)
{
    if (!model || tp < 1 || b < 1 || nlayers < 0 || !(inflight > 0) || (nlayers && !policy)) {
        whale_error("recompute auto: bad arguments (tp=%d micro-batch=%d layers=%d)", tp, b, nlayers);
        return WHALE_EINVAL;
    }
    struct whale_cluster c;
    int rc = whale_cluster_init(&c, 1, tp, "A100-80GB");
    if (rc)
        return rc;
    if (device)
        c.group[0].gpu = *device;
    struct plan_ctx x;
    plan_ctx_init(&x, model, b, &c);
    struct plan_layer_cost lc;
    plan_layer_cost(&x, &c.group[0].gpu, tp, sp && tp > 1, b, &lc);
    double act[3], cost[3];
    for (int k = 0; k < 3; k++) {
        act[k] = lc.act[k] * inflight;
        cost[k] = lc.rc_cost[k] + (k == WHALE_RECOMPUTE_FULL ? lc.tp_rc : 0);
    }
    int ns, nf;
    double tot;
    if (plan_rc_uniform(nlayers, act, cost, budget, &ns, &nf, &tot) < 0) {
        whale_error("recompute auto: %d layers need %.1f MiB even fully recomputed, budget %.1f MiB",
                    nlayers, nlayers * act[2] / 1048576.0, budget / 1048576.0);
        return WHALE_ENOFIT;
    }
    for (int i = 0; i < nlayers; i++)
        policy[i] = i < nf ? WHALE_RECOMPUTE_FULL
                  : i < nf + ns ? WHALE_RECOMPUTE_SELECTIVE : WHALE_RECOMPUTE_NONE;
    return 0;
}
