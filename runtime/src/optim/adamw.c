/* AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected
 * moments, and global-norm clipping helpers. */
#include "whale/optim.h"

#include <math.h>

/* w, g, m, v: (n) fp32. */
void whale_adamw_update(const struct whale_adamw *o, int64_t t, float *w, const float *g,
                        float *m, float *v, size_t n, float grad_mul, bool decay)
{
    const float b1 = o->beta1, b2 = o->beta2, lr = o->lr, eps = o->eps;
    /* bias corrections in double: t may be large, pow in float loses digits */
    const float c1 = (float)(1.0 / (1.0 - pow(b1, (double)t)));
    const float c2 = (float)(1.0 / (1.0 - pow(b2, (double)t)));
    const float wd = decay ? o->weight_decay : 0.0f;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_mul;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * c1, vhat = vi * c2;
        w[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * w[i]);
    }
}

double whale_sumsq(const float *g, size_t n)
{
    /* Fixed chunks summed in chunk order: the result is bit-identical for
     * any thread count (part of "deterministic given a seed"). */
    enum { CH = 8192, MAXCH = 1024 };
    double parts[MAXCH];
    size_t ch = CH;
    while ((n + ch - 1) / ch > MAXCH)
        ch *= 2;
    size_t nch = (n + ch - 1) / ch;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t c = 0; c < nch; c++) {
        size_t lo = c * ch, hi = lo + ch < n ? lo + ch : n;
        double part = 0;
        for (size_t i = lo; i < hi; i++)
            part += (double)g[i] * g[i];
        parts[c] = part;
    }
    double s = 0;
    for (size_t c = 0; c < nch; c++)
        s += parts[c];
    return s;
}

float whale_clip_coef(double norm, float max_norm)
{
    if (max_norm <= 0 || !(norm > max_norm))
        return 1.0f;
    return (float)(max_norm / (norm + 1e-6));
}
