/* whale-plan: what offload buys. The library's
 * whale_plan_offload_gain compares one layout with and without offload; a
 * user asks something wider: does anything fit without offload at all, and
 * how much larger a model fits when offload is allowed, any layout. That is
 * the search itself, repeated on models of the same width with more or
 * fewer layers (doubling, then bisection). */
#include "plan_offload.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "whale/log.h"
#include "whale/modeldesc.h"

static void discard(int level, const char *line, void *user)
{
    (void)level;
    (void)line;
    (void)user;
}

/* Does any layout fit `layers` layers under rq (offload as rq says)? */
static bool fits(const struct whale_plan_request *rq, int layers, struct whale_plan_result *tmp)
{
    struct whale_model_desc m = *rq->model;
    struct whale_plan_request r = *rq;
    m.layers = layers;
    r.model = &m;
    r.topk = 1;
    whale_log_set_sink(discard, NULL); /* "nothing fits" is the expected answer here */
    int rc = whale_plan_search(&r, tmp);
    whale_log_set_sink(NULL, NULL);
    return rc == 0 && tmp->found;
}

/* Largest layer count in [0, 1 << 14] that fits (fitting is monotone in the
 * layer count: more layers never need less memory per device). */
static int max_layers(const struct whale_plan_request *rq, struct whale_plan_result *tmp)
{
    int lo = 0, hi = rq->model->layers > 0 ? rq->model->layers : 1;
    while (hi <= (1 << 14) && fits(rq, hi, tmp)) {
        lo = hi;
        hi *= 2;
    }
    if (hi > (1 << 14))
        return lo;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fits(rq, mid, tmp))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static double params_of(const struct whale_model_desc *model, int layers)
{
    struct whale_model_desc m = *model;
    m.layers = layers;
    return layers > 0 ? (double)whale_model_desc_params(&m) : 0;
}

void plan_offload_report(const struct whale_plan_request *rq,
                         const struct whale_plan_result *res, FILE *out)
{
    if (!res->found || (res->best.cfg.offload == WHALE_OFFLOAD_NONE && rq->offload <= 0))
        return;
    struct whale_plan_result *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return;
    struct whale_plan_request none = *rq, with = *rq;
    none.offload = WHALE_OFFLOAD_NONE;
    if (with.offload == WHALE_OFFLOAD_NONE)
        with.offload = -1;
    bool fits_without = fits(&none, rq->model->layers, tmp);
    if (!fits_without) {
        const char *why = tmp->why_none, *p = strstr(why, "nothing fits: ");
        why = p == why ? why + 14 : why; /* said once */
        fprintf(out, "offload: nothing fits without offload (%s); offload=%s makes this model "
                "fit\n", why[0] ? why : "every layout is over the budget",
                whale_offload_name(res->best.cfg.offload));
    }
    int l0 = max_layers(&none, tmp), l1 = max_layers(&with, tmp);
    double p0 = params_of(rq->model, l0), p1 = params_of(rq->model, l1);
    if (l0 > 0)
        fprintf(out, "offload: the largest model of this width that fits: %.4g parameters (%d "
                "layers) without offload, %.4g (%d layers) with it (%.2fx)\n", p0, l0, p1, l1,
                p1 / p0);
    else
        fprintf(out, "offload: the largest model of this width that fits: none without offload "
                "(not even 1 layer), %.4g parameters (%d layers) with it\n", p1, l1);
    free(tmp);
}
