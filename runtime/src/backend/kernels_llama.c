/* fp32 CPU kernels of Llama-style blocks (shapes in kernels_llama.h).
 * Reductions over rows (RMSNorm's weight gradient) are split by column so
 * each element is summed by one thread in row order: the result does not
 * depend on the thread count, like kernels.c. */
#include "kernels_llama.h"

#include <math.h>
#include <stdlib.h>

void k_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float ss = 0;
        for (int i = 0; i < C; i++)
            ss += x[i] * x[i];
        float s = 1.0f / sqrtf(ss / C + K_RMS_EPS);
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

/* act(x) and act'(x): SiLU x*sig(x); tanh-GELU x*sig(2u), u = K (x + 0.044715 x^3) */
static inline void glu_act(enum k_glu act, float x, float *a, float *da)
{
    if (act == K_GLU_SILU) {
        float s = 1.0f / (1.0f + expf(-x));
        *a = x * s;
        *da = s * (1.0f + x * (1.0f - s));
    } else {
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        *a = x * s;
        *da = s + 2.0f * x * s * (1.0f - s) * du;
    }
}

void k_glu_fwd(enum k_glu act, float *h, const float *gate, const float *up, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float a, da;
        glu_act(act, gate[i], &a, &da);
        h[i] = a * up[i];
    }
}

void k_glu_bwd(enum k_glu act, float *dgate, float *dup, const float *dh, const float *gate,
               const float *up, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float a, da, g = dh[i];
        glu_act(act, gate[i], &a, &da);
        dup[i] = g * a;
        dgate[i] = g * up[i] * da;
    }
}

void k_rope(float *x, int ld, int B, int T, int nh, int hd, float theta, int sign)
{
    const int half = hd / 2;
    /* angles in double: the same table for every layer and a sign change
     * that undoes the forward exactly */
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const int t = bt % T;
        float *row = x + (size_t)bt * ld;
        for (int i = 0; i < half; i++) {
            double f = pow((double)theta, -2.0 * i / hd);
            double a = t * f;
            float c = (float)cos(a), s = (float)sin(a) * (float)sign;
            for (int h = 0; h < nh; h++) {
                float *p = row + (size_t)h * hd;
                float x1 = p[i], x2 = p[i + half];
                p[i] = x1 * c - x2 * s;
                p[i + half] = x1 * s + x2 * c;
            }
        }
    }
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
