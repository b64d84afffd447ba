/* Host AdamW kernels for optimizer offload: the update of
 * whale_adamw_update vectorised with AVX-512 or AVX2, chosen at run time
 * (machines of the same kind differ; never assume AVX-512). The threads and
 * the blocking over tensors are adamw_multi.c's.
 *
 * Results are bit-identical to whale_adamw_update: the same operations in
 * the same order, every one correctly rounded (mul, add, div, sqrt), and no
 * fused multiply-add (contraction is off for this file), so offloading the
 * optimizer never changes a loss. sqrt + div stay (not rsqrt + Newton): the
 * kernel is bound by memory traffic (28 B per parameter), not by the divider
 * (see whale-bench offload adamw: "in L2" against the streaming figure), so
 * an approximation would change bits for no speed.
 *
 * Mixed precision: the 16-bit copy of the new weight is rounded in registers
 * and stored in the same pass (AVX-512), instead of a second pass over the
 * master; the rounding is util/dtype.c's (RNE, NaN kept quiet) bit for bit. */
#pragma GCC optimize("fp-contract=off")
#include "adamw_kern.h"
#include "whale/dtype.h"
#include "whale/knobs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#include "util/dtype_simd.h"

struct opt_coef opt_coef_of(const struct whale_adamw *o, int64_t t, float grad_mul, bool decay)
{
    struct opt_coef k;
    k.b1 = o->beta1;
    k.b2 = o->beta2;
    k.omb1 = 1.0f - o->beta1;
    k.omb2 = 1.0f - o->beta2;
    k.lr = o->lr;
    k.eps = o->eps;
    k.wd = decay ? o->weight_decay : 0.0f;
    k.c1 = (float)(1.0 / (1.0 - pow(o->beta1, (double)t)));
    k.c2 = (float)(1.0 / (1.0 - pow(o->beta2, (double)t)));
    k.gm = grad_mul;
    return k;
}

/* w, g, m, v: (n) fp32; the scalar reference order of adamw.c */
static void upd_scalar(const struct opt_coef *k, float *w, const float *g, float *m, float *v,
                       size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * k->gm;
        float mi = k->b1 * m[i] + k->omb1 * gi;
        float vi = k->b2 * v[i] + k->omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * k->c1, vhat = vi * k->c2;
        w[i] -= k->lr * (mhat / (sqrtf(vhat) + k->eps) + k->wd * w[i]);
    }
}

/* p16 (n) = round(w (n)): the cast of util/dtype.c (its own SIMD path) */
static void cast_tail(uint16_t *p16, const float *w, enum opt_cast cast, size_t n)
{
    if (cast == OPT_CAST_BF16)
        whale_f32_to_bf16(p16, w, n);
    else if (cast == OPT_CAST_FP16)
        whale_f32_to_fp16(p16, w, n);
}

__attribute__((target("avx2"))) static void upd_avx2(const struct opt_coef *k, float *w,
                                                     const float *g, float *m, float *v,
                                                     size_t n)
{
    const __m256 b1 = _mm256_set1_ps(k->b1), b2 = _mm256_set1_ps(k->b2);
    const __m256 o1 = _mm256_set1_ps(k->omb1), o2 = _mm256_set1_ps(k->omb2);
    const __m256 lr = _mm256_set1_ps(k->lr), eps = _mm256_set1_ps(k->eps);
    const __m256 wd = _mm256_set1_ps(k->wd), c1 = _mm256_set1_ps(k->c1);
    const __m256 c2 = _mm256_set1_ps(k->c2), gm = _mm256_set1_ps(k->gm);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gm);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(o1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(o2, gi), gi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 mh = _mm256_mul_ps(mi, c1), vh = _mm256_mul_ps(vi, c2);
        __m256 wi = _mm256_loadu_ps(w + i);
        __m256 u = _mm256_add_ps(_mm256_div_ps(mh, _mm256_add_ps(_mm256_sqrt_ps(vh), eps)),
                                 _mm256_mul_ps(wd, wi));
        _mm256_storeu_ps(w + i, _mm256_sub_ps(wi, _mm256_mul_ps(lr, u)));
    }
    upd_scalar(k, w + i, g + i, m + i, v + i, n - i);
}

/* CAST is a compile-time constant at each call: three loops, no branch
 * inside. p16: (n) or unused. */
__attribute__((target("avx512f"), always_inline)) static inline size_t
upd512(const struct opt_coef *k, float *w, const float *g, float *m, float *v, uint16_t *p16,
       const enum opt_cast cast, size_t n)
{
    const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2);
    const __m512 o1 = _mm512_set1_ps(k->omb1), o2 = _mm512_set1_ps(k->omb2);
    const __m512 lr = _mm512_set1_ps(k->lr), eps = _mm512_set1_ps(k->eps);
    const __m512 wd = _mm512_set1_ps(k->wd), c1 = _mm512_set1_ps(k->c1);
    const __m512 c2 = _mm512_set1_ps(k->c2), gm = _mm512_set1_ps(k->gm);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gm);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(o1, gi));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)),
                                  _mm512_mul_ps(_mm512_mul_ps(o2, gi), gi));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        __m512 mh = _mm512_mul_ps(mi, c1), vh = _mm512_mul_ps(vi, c2);
        __m512 wi = _mm512_loadu_ps(w + i);
        __m512 u = _mm512_add_ps(_mm512_div_ps(mh, _mm512_add_ps(_mm512_sqrt_ps(vh), eps)),
                                 _mm512_mul_ps(wd, wi));
        __m512 wn = _mm512_sub_ps(wi, _mm512_mul_ps(lr, u));
        _mm512_storeu_ps(w + i, wn);
        if (cast == OPT_CAST_BF16)
            _mm256_storeu_si256((__m256i *)(p16 + i), util_bf16_round16(_mm512_castps_si512(wn)));
        else if (cast == OPT_CAST_FP16)
            _mm256_storeu_si256((__m256i *)(p16 + i),
                                _mm512_cvtps_ph(wn, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return i;
}

__attribute__((target("avx512f"))) static size_t upd_avx512(const struct opt_coef *k, float *w,
                                                            const float *g, float *m, float *v,
                                                            uint16_t *p16, enum opt_cast cast,
                                                            size_t n)
{
    switch (cast) {
    case OPT_CAST_BF16: return upd512(k, w, g, m, v, p16, OPT_CAST_BF16, n);
    case OPT_CAST_FP16: return upd512(k, w, g, m, v, p16, OPT_CAST_FP16, n);
    default: return upd512(k, w, g, m, v, p16, OPT_CAST_NONE, n);
    }
}

void opt_adamw_kernel(enum whale_simd s, const struct opt_coef *k, float *w, const float *g,
                      float *m, float *v, uint16_t *p16, enum opt_cast cast, size_t n)
{
    if (!p16)
        cast = OPT_CAST_NONE;
    size_t i = 0;
    if (s == WHALE_SIMD_AVX512) { /* the cast in registers, in the same pass */
        i = upd_avx512(k, w, g, m, v, p16, cast, n);
        upd_scalar(k, w + i, g + i, m + i, v + i, n - i);
        if (cast != OPT_CAST_NONE)
            cast_tail(p16 + i, w + i, cast, n - i);
        return;
    }
    if (s == WHALE_SIMD_AVX2)
        upd_avx2(k, w, g, m, v, n);
    else
        upd_scalar(k, w, g, m, v, n);
    /* the block is still in L1/L2 (the driver hands out L2-sized blocks) */
    if (cast != OPT_CAST_NONE)
        cast_tail(p16, w, cast, n);
}

enum whale_simd whale_adamw_best_simd(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? WHALE_SIMD_AVX512
         : __builtin_cpu_supports("avx2") ? WHALE_SIMD_AVX2 : WHALE_SIMD_SCALAR;
}

static enum whale_simd pick(void)
{
    const char *f = whale_knob_getenv("WHALE_SIMD"); /* force a narrower path: scalar | avx2 | avx512 */
    enum whale_simd best = whale_adamw_best_simd();
    if (f && !strcmp(f, "scalar"))
        return WHALE_SIMD_SCALAR;
    if (f && !strcmp(f, "avx2") && best >= WHALE_SIMD_AVX2)
        return WHALE_SIMD_AVX2;
    return best;
}

enum whale_simd whale_adamw_simd(void)
{
    static int chosen = -1;
    if (chosen < 0)
        chosen = (int)pick();
    return (enum whale_simd)chosen;
}

const char *whale_simd_name(enum whale_simd s)
{
    return s == WHALE_SIMD_AVX512 ? "avx512" : s == WHALE_SIMD_AVX2 ? "avx2" : "scalar";
}

