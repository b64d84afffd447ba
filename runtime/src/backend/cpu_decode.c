/* The cpu backend's generation operations: one token's rotary at its
 * absolute position and its attention over a KV cache (whale/backend.h).
 * fp32 only: generation runs an fp32 engine. */
#include "backend/cpu_llama.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/rope.h"

int bkc_rope_at(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int nh, int hd,
                int pos, float theta, const struct whale_rope_scaling *sc)
{
    (void)b;
    (void)s;
    if (t != WHALE_FLOAT32)
        return WHALE_ENOTSUP;
    float *row = x;
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        /* k_rope's angle and rounding for t = pos: the cached path turns q
         * and k by exactly the bits the full forward does */
        double a = pos * whale_rope_inv_freq(theta, sc, i, hd);
        float c = (float)cos(a), sn = (float)sin(a);
        for (int h = 0; h < nh; h++) {
            float *p = row + (size_t)h * hd;
            float x1 = p[i], x2 = p[i + half];
            p[i] = x1 * c - x2 * sn;
            p[i + half] = x1 * sn + x2 * c;
        }
    }
    return 0;
}

int bkc_attention_decode(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                         const void *q, const void *k, const void *v, float *kc, float *vc,
                         int pos, int S, const struct whale_attn_heads *m)
{
    (void)b;
    (void)s;
    if (t != WHALE_FLOAT32)
        return WHALE_ENOTSUP;
    const int hd = m->hd, n = pos + 1;
    for (int kh = 0; kh < m->KVl; kh++) {
        memcpy(kc + ((size_t)kh * S + pos) * hd, (const float *)k + (size_t)kh * hd,
               sizeof(float) * hd);
        memcpy(vc + ((size_t)kh * S + pos) * hd, (const float *)v + (size_t)kh * hd,
               sizeof(float) * hd);
    }
    float *sc = malloc(sizeof(float) * (size_t)m->NH * n);
    if (!sc)
        return WHALE_ENOMEM;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(static) if (m->NH * n > 4096)
    for (int h = 0; h < m->NH; h++) {
        const int kh = (m->hq0 + h) / m->g - m->k0;
        const float *qh = (const float *)q + (size_t)h * hd;
        const float *K = kc + (size_t)kh * S * hd, *Vh = vc + (size_t)kh * S * hd;
        float *p = sc + (size_t)h * n, mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            float d = 0;
            for (int i = 0; i < hd; i++)
                d += qh[i] * K[(size_t)j * hd + i];
            p[j] = d * scale;
            if (p[j] > mx)
                mx = p[j];
        }
        for (int j = 0; j < n; j++) {
            p[j] = expf(p[j] - mx);
            sum += p[j];
        }
        float *o = (float *)out + (size_t)h * hd;
        memset(o, 0, sizeof(float) * hd);
        for (int j = 0; j < n; j++) {
            const float w = p[j] / sum;
            for (int i = 0; i < hd; i++)
                o[i] += w * Vh[(size_t)j * hd + i];
        }
    }
    free(sc);
    return 0;
}
