/* fp32 CPU kernels of Llama-style blocks (shapes in kernels_llama.h).
 * Reductions over rows (RMSNorm's weight gradient) are split by column so
 * each element is summed by one thread in row order: the result does not
 * depend on the thread count, like kernels.c. */
#include "kernels_llama.h"
#include "kernels_vec.h"

#include <math.h>
#include <stdlib.h>

void k_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                   float eps)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float ss = 0;
        for (int i = 0; i < C; i++)
            ss += x[i] * x[i];
        float s = 1.0f / sqrtf(ss / C + eps);
        for (int i = 0; i < C; i++)
            y[i] = x[i] * s * w[i];
        rstd[n] = s;
    }
}

/* y = x s w, s = (mean(x^2) + eps)^-1/2: dx = s (dy w - xh mean(dy w xh)), xh = x s */
void k_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                   const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        const float s = rstd[n];
        float m = 0;
        for (int i = 0; i < C; i++)
            m += dy[i] * w[i] * x[i] * s;
        m /= C;
        for (int i = 0; i < C; i++)
            dx[i] += s * (dy[i] * w[i] - x[i] * s * m);
    }
    enum { CB = 64 };
    int nb = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CB, c1 = c0 + CB < C ? c0 + CB : C;
        float aw[CB] = { 0 };
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            const float s = rstd[n];
            for (int c = c0; c < c1; c++)
                aw[c - c0] += dy[c] * x[c] * s;
        }
        for (int c = c0; c < c1; c++)
            dw[c] += aw[c - c0];
    }
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* Gated activations as vectorized spans (kernels_vec.h: k_exp, same bits at
 * any vector width), one loop per activation so the branch is not per
 * element. SiLU: a = x s, a' = s (1 + x (1 - s)), s = sig(x); tanh-GELU:
 * a = x s, a' = s + 2 x s (1 - s) u', s = sig(2u), u = K (x + 0.044715 x^3).
 * Shapes: h, gate, up, dh, dgate, dup (n); dgate may alias dh (each element
 * is read before it is written, in the same lane). */
K_VEC_BEGIN

K_VEC static void span_glu_fwd(enum k_glu act, float *restrict h, const float *restrict gate,
                               const float *restrict up, int64_t n)
{
    if (act == K_GLU_SILU) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float x = gate[i];
            float s = 1.0f / (1.0f + k_exp(-x));
            h[i] = x * s * up[i];
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float x = gate[i];
            float u = GELU_K * (x + 0.044715f * x * x * x);
            float s = 1.0f / (1.0f + k_exp(-2.0f * u));
            h[i] = x * s * up[i];
        }
    }
}

K_VEC static void span_glu_bwd(enum k_glu act, float *dgate, float *restrict dup, const float *dh,
                               const float *restrict gate, const float *restrict up, int64_t n)
{
    if (act == K_GLU_SILU) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float x = gate[i], g = dh[i];
            float s = 1.0f / (1.0f + k_exp(-x));
            dup[i] = g * (x * s);
            dgate[i] = g * up[i] * (s * (1.0f + x * (1.0f - s)));
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float x = gate[i], g = dh[i];
            float u = GELU_K * (x + 0.044715f * x * x * x);
            float s = 1.0f / (1.0f + k_exp(-2.0f * u));
            float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
            dup[i] = g * (x * s);
            dgate[i] = g * up[i] * (s + 2.0f * x * s * (1.0f - s) * du);
        }
    }
}

K_VEC_END

void k_glu_fwd(enum k_glu act, float *h, const float *gate, const float *up, int64_t n)
{
#ifdef _OPENMP
#pragma omp parallel
    {
        K_SPLIT(n, lo, hi);
        span_glu_fwd(act, h + lo, gate + lo, up + lo, hi - lo);
    }
#else
    span_glu_fwd(act, h, gate, up, n);
#endif
}

void k_glu_bwd(enum k_glu act, float *dgate, float *dup, const float *dh, const float *gate,
               const float *up, int64_t n)
{
#ifdef _OPENMP
#pragma omp parallel
    {
        K_SPLIT(n, lo, hi);
        span_glu_bwd(act, dgate + lo, dup + lo, dh + lo, gate + lo, up + lo, hi - lo);
    }
#else
    span_glu_bwd(act, dgate, dup, dh, gate, up, n);
#endif
}

void k_rope(float *x, int ld, int B, int T, int nh, int hd, float theta,
            const struct whale_rope_scaling *sc, int sign)
{
    const int half = hd / 2;
    /* Angles in double: the same table for every layer and a sign change
     * that undoes the forward exactly. cos and sin (T, half) are computed
     * once per call, not once per sample: pow and sincos per element were a
     * tenth of a small Llama's step. */
    float *cs = malloc(sizeof(float) * 2 * (size_t)T * half);
    if (cs) {
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < half; i++) {
                double a = t * whale_rope_inv_freq(theta, sc, i, hd);
                cs[2 * ((size_t)t * half + i)] = (float)cos(a);
                cs[2 * ((size_t)t * half + i) + 1] = (float)sin(a) * (float)sign;
            }
    }
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const int t = bt % T;
        float *row = x + (size_t)bt * ld;
        for (int i = 0; i < half; i++) {
            float c, s;
            if (cs) {
                c = cs[2 * ((size_t)t * half + i)];
                s = cs[2 * ((size_t)t * half + i) + 1];
            } else {   /* no memory for the table: the same values, per row */
                double a = t * whale_rope_inv_freq(theta, sc, i, hd);
                c = (float)cos(a);
                s = (float)sin(a) * (float)sign;
            }
            for (int h = 0; h < nh; h++) {
                float *p = row + (size_t)h * hd;
                float x1 = p[i], x2 = p[i + half];
                p[i] = x1 * c - x2 * s;
                p[i + half] = x1 * s + x2 * c;
            }
        }
    }
    free(cs);
}

void k_embed_bwd_rows(float *dwte, const float *dout, const int32_t *tok, int v0, int V, int N,
                      int C)
{
    /* column blocks: repeated tokens never race, the order is fixed */
    enum { CB = 64 };
    int nb = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CB, c1 = c0 + CB < C ? c0 + CB : C;
        for (int n = 0; n < N; n++) {
            int r = tok[n] - v0;
            if (r < 0 || r >= V)
                continue;
            const float *d = dout + (size_t)n * C;
            float *e = dwte + (size_t)r * C;
            for (int c = c0; c < c1; c++)
                e[c] += d[c];
        }
    }
}
