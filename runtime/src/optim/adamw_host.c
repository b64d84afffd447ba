/* Host AdamW for optimizer offload: the update of whale_adamw_update, split
 * into blocks over host threads and vectorised with AVX-512 or AVX2, chosen
 * at run time (machines of the same kind differ; never assume AVX-512).
 *
 * Results are bit-identical to whale_adamw_update: the same operations in
 * the same order, every one correctly rounded (mul, add, div, sqrt), and no
 * fused multiply-add (contraction is off for this file), so offloading the
 * optimizer never changes a loss. */
#pragma GCC optimize("fp-contract=off")
#include "whale/optim.h"
#include "whale/knobs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

struct coef {
    float b1, b2, omb1, omb2, lr, eps, wd, c1, c2, gm;
};

static struct coef coef_of(const struct whale_adamw *o, int64_t t, float grad_mul, bool decay)
{
    struct coef k;
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
static void upd_scalar(const struct coef *k, float *w, const float *g, float *m, float *v,
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

__attribute__((target("avx2"))) static void upd_avx2(const struct coef *k, float *w,
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

__attribute__((target("avx512f"))) static void upd_avx512(const struct coef *k, float *w,
                                                          const float *g, float *m, float *v,
                                                          size_t n)
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
        _mm512_storeu_ps(w + i, _mm512_sub_ps(wi, _mm512_mul_ps(lr, u)));
    }
    upd_scalar(k, w + i, g + i, m + i, v + i, n - i);
}

typedef void (*upd_fn)(const struct coef *, float *, const float *, float *, float *, size_t);

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

void whale_adamw_update_host(const struct whale_adamw *o, int64_t t, float *w, const float *g,
                             float *m, float *v, size_t n, float grad_mul, bool decay)
{
    whale_adamw_update_simd(whale_adamw_simd(), o, t, w, g, m, v, n, grad_mul, decay);
}

void whale_adamw_update_simd(enum whale_simd s, const struct whale_adamw *o, int64_t t, float *w,
                             const float *g, float *m, float *v, size_t n, float grad_mul,
                             bool decay)
{
    const struct coef k = coef_of(o, t, grad_mul, decay);
    if (s > whale_adamw_best_simd())
        s = whale_adamw_best_simd();
    upd_fn f = s == WHALE_SIMD_AVX512 ? upd_avx512 : s == WHALE_SIMD_AVX2 ? upd_avx2 : upd_scalar;
    /* 64 KiB blocks (4 streams of 16 K floats stay in L2) spread over the threads */
    enum { BLK = 16384 };
    size_t nblk = (n + BLK - 1) / BLK;
#pragma omp parallel for schedule(static) if (nblk > 4)
    for (size_t b = 0; b < nblk; b++) {
        size_t lo = b * BLK, len = lo + BLK < n ? BLK : n - lo;
        f(&k, w + lo, g + lo, m + lo, v + lo, len);
    }
}
