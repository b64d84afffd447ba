/* AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected
 * moments, and global-norm clipping helpers. */
#include "whale/optim.h"

#include <math.h>
#include <stdlib.h>

#include "whale/error.h"

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

/* whale_sumsq's chunk length for n values: at most SUMSQ_MAXCH chunks */
enum { SUMSQ_CH = 8192, SUMSQ_MAXCH = 1024 };
static size_t sumsq_chunk(size_t n)
{
    size_t ch = SUMSQ_CH;
    while ((n + ch - 1) / ch > SUMSQ_MAXCH)
        ch *= 2;
    return ch;
}

static double chunk_sumsq(const float *g, size_t lo, size_t hi)
{
    double part = 0;
    for (size_t i = lo; i < hi; i++)
        part += (double)g[i] * g[i];
    return part;
}

double whale_sumsq(const float *g, size_t n)
{
    /* Fixed chunks summed in chunk order: the result is bit-identical for
     * any thread count (part of "deterministic given a seed"). */
    double parts[SUMSQ_MAXCH];
    size_t ch = sumsq_chunk(n);
    size_t nch = (n + ch - 1) / ch;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t c = 0; c < nch; c++) {
        size_t lo = c * ch, hi = lo + ch < n ? lo + ch : n;
        parts[c] = chunk_sumsq(g, lo, hi);
    }
    double s = 0;
    for (size_t c = 0; c < nch; c++)
        s += parts[c];
    return s;
}

/* The chunks of every tensor (whale_sumsq's, same lengths) handed out in
 * one parallel region: one wake of the thread pool per gradient-norm pass
 * instead of one per tensor of over 64 Ki values. Each tensor's chunks are
 * then summed in chunk order, as whale_sumsq does: the same bits. */
int whale_sumsq_multi(const float *const *g, const int64_t *n, int np, double *out)
{
    size_t total = 0;
    for (int i = 0; i < np; i++) {
        size_t m = n[i] > 0 ? (size_t)n[i] : 0, ch = sumsq_chunk(m);
        total += (m + ch - 1) / ch;
    }
    double *parts = malloc((total ? total : 1) * sizeof *parts);
    size_t *first = malloc(((size_t)np + 1) * sizeof *first);
    int *owner = malloc((total ? total : 1) * sizeof *owner);
    if (!parts || !first || !owner) {
        free(parts), free(first), free(owner);
        return WHALE_ENOMEM;
    }
    first[0] = 0;
    for (int i = 0; i < np; i++) {
        size_t m = n[i] > 0 ? (size_t)n[i] : 0, ch = sumsq_chunk(m);
        first[i + 1] = first[i] + (m + ch - 1) / ch;
        for (size_t c = first[i]; c < first[i + 1]; c++)
            owner[c] = i;
    }
#pragma omp parallel for schedule(static) if (total > 8)
    for (size_t c = 0; c < total; c++) {
        int i = owner[c];
        size_t m = (size_t)n[i], ch = sumsq_chunk(m), lo = (c - first[i]) * ch;
        parts[c] = chunk_sumsq(g[i], lo, lo + ch < m ? lo + ch : m);
    }
    for (int i = 0; i < np; i++) {
        double s = 0;
        for (size_t c = first[i]; c < first[i + 1]; c++)
            s += parts[c];
        out[i] = s;
    }
    free(parts), free(first), free(owner);
    return 0;
}

float whale_clip_coef(double norm, float max_norm)
{
    if (max_norm <= 0 || !(norm > max_norm))
        return 1.0f;
    return (float)(max_norm / (norm + 1e-6));
}
