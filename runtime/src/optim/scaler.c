/* Dynamic loss scaling for 16-bit training: the scale rides just below the
 * overflow threshold; an inf/NaN gradient skips the step and halves it. */
#include "whale/optim.h"

#include <math.h>

void whale_loss_scaler_init(struct whale_loss_scaler *s, bool enabled, float init_scale,
                            int growth_interval)
{
    s->enabled = enabled;
    s->scale = enabled ? (init_scale > 0 ? init_scale : 65536.0f) : 1.0f;
    s->growth = 2.0f;
    s->backoff = 2.0f;
    s->growth_interval = growth_interval > 0 ? growth_interval : 2000;
    s->min_scale = 1.0f;
    s->max_scale = 16777216.0f; /* 2^24 */
    s->good_steps = 0;
    s->skipped = 0;
}

bool whale_has_inf_nan(const float *g, size_t n)
{
    int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        bad |= !isfinite(g[i]);
    return bad != 0;
}

bool whale_loss_scaler_update(struct whale_loss_scaler *s, bool found_inf)
{
    if (found_inf) {
        /* fp32 without scaling still must not apply a NaN update */
        s->skipped++;
        s->good_steps = 0;
        if (s->enabled) {
            s->scale /= s->backoff;
            if (s->scale < s->min_scale)
                s->scale = s->min_scale;
        }
        return true;
    }
    if (s->enabled && ++s->good_steps >= s->growth_interval) {
        s->scale *= s->growth;
        if (s->scale > s->max_scale)
            s->scale = s->max_scale;
        s->good_steps = 0;
    }
    return false;
}
