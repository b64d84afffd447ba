/* Offload in the planner: the exposed time of optimizer and
 * parameter offload as the engine runs them, and how much larger a model
 * fits with offload than without.
 *
 * Engine behaviour modelled (runtime/src/engine/offload.c, offload_apply.c):
 *  - gradients leave bucket by bucket as their reduction completes, so
 *    their transfer hides behind the rest of backward (offload_overlap of
 *    it, the planner's overlap efficiency for host transfers);
 *  - host AdamW runs after the global gradient norm is known: exposed, at
 *    host_adam_rate parameters/s (whale-bench offload adamw measures it);
 *  - updated weights return bucket by bucket while the host updates the next
 *    bucket and the next forward starts: hidden behind the host update and
 *    the forward, the rest exposed;
 *  - parameter offload streams the ZeRO-3 shard in for forward and backward
 *    of every micro-batch, prefetched a layer ahead. */
#include "plan_internal.h"

#include <math.h>
#include <string.h>

#define OFF_WBYTES 2.0 /* bf16 weights back to the device */
#define OFF_GBYTES 2.0 /* bf16 gradients down */

double plan_offload_time(const struct plan_ctx *x, const struct whale_plan_config *cfg,
                         double P, double local, int m, double t_fwd, double t_bwd,
                         double *t_host)
{
    const struct whale_eff_model *e = &x->c->eff;
    const double bw = x->pcie_bw, ov = e->offload_overlap;
    const double wb = x->fp32 ? 4 : OFF_WBYTES, gb = x->fp32 ? 4 : OFF_GBYTES;
    *t_host = local / e->host_adam_rate;
    if (cfg->offload == WHALE_OFFLOAD_NONE)
        return 0;
    double down = local * gb / bw, up = local * wb / bw;
    double exposed = fmax(0, down - ov * t_bwd) + fmax(0, up - *t_host - ov * t_fwd);
    if (cfg->offload == WHALE_OFFLOAD_PARAMS) {
        double fetch = m * 2.0 * wb * P / cfg->dp / bw;
        exposed += fmax(0, fetch - ov * m * (t_fwd + t_bwd));
    }
    return exposed;
}

static bool fits_with(const struct whale_model_desc *model, int layers, long batch,
                      const struct whale_cluster *c, const struct whale_plan_config *cfg0)
{
    struct whale_model_desc m = *model;
    struct whale_plan_config cfg = *cfg0;
    struct whale_plan_prediction pr;
    cfg.layers_given = false;
    m.layers = layers;
    return !whale_plan_check(&m, batch, c, &cfg, NULL, 0) &&
           !whale_plan_eval(&m, batch, c, &cfg, &pr) && pr.fits;
}

/* Largest layer count of `model`'s width that fits cfg (offload as given),
 * in steps of pp x interleave so the stage split stays valid. */
static int max_layers(const struct whale_model_desc *model, long batch,
                      const struct whale_cluster *c, const struct whale_plan_config *cfg)
{
    int u = (cfg->pp > 0 ? cfg->pp : 1) * (cfg->interleave > 0 ? cfg->interleave : 1);
    int lo = 0, hi = 1;
    while (hi < (1 << 16) && fits_with(model, hi * u, batch, c, cfg)) {
        lo = hi;
        hi *= 2;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fits_with(model, mid * u, batch, c, cfg))
            lo = mid;
        else
            hi = mid;
    }
    return lo * u;
}

int whale_plan_offload_gain(const struct whale_model_desc *model, long batch,
                            const struct whale_cluster *c, const struct whale_plan_config *cfg,
                            double *params_without, double *params_with)
{
    struct whale_plan_config none = *cfg, off = *cfg;
    none.offload = WHALE_OFFLOAD_NONE;
    if (off.offload == WHALE_OFFLOAD_NONE)
        off.offload = cfg->zero == 3 ? WHALE_OFFLOAD_PARAMS : WHALE_OFFLOAD_OPTIMIZER;
    if (off.offload == WHALE_OFFLOAD_PARAMS && off.zero != 3)
        off.offload = WHALE_OFFLOAD_OPTIMIZER;
    int a = max_layers(model, batch, c, &none), b = max_layers(model, batch, c, &off);
    struct whale_model_desc m = *model;
    m.layers = a;
    *params_without = a ? (double)whale_model_desc_params(&m) : 0;
    m.layers = b;
    *params_with = b ? (double)whale_model_desc_params(&m) : 0;
    return (int)off.offload;
}
