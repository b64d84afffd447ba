/* What the vectorized element-wise spans of the CPU kernels (kernels.c,
 * kernels_llama.c) share: the compile options that let GCC vectorize them,
 * a vectorizable exp, and the static split of a span over OpenMP threads.
 *
 * GCC keeps k_exp's clamps as branches (and so leaves the loop scalar) under
 * -ftrapping-math; spans are compiled without it, between K_VEC_BEGIN and
 * K_VEC_END. None of them reduces and none contracts a*b+c into an FMA
 * (fp-contract=off), so every element gets exactly the operations of the
 * scalar loop: the same bits at any vector width. The widest of AVX-512 /
 * AVX2 / SSE2 is picked when libwhale is loaded (K_VEC: target_clones, an
 * ifunc on the CPU's flags). */
#ifndef BACKEND_KERNELS_VEC_H
#define BACKEND_KERNELS_VEC_H

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define K_VEC_BEGIN                                                                      \
    _Pragma("GCC push_options")                                                          \
    _Pragma("GCC optimize(\"no-trapping-math\", \"fp-contract=off\")")
#define K_VEC_END _Pragma("GCC pop_options")
#define K_VEC __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define K_VEC_BEGIN
#define K_VEC_END
#define K_VEC
#endif

K_VEC_BEGIN
/* exp(x) for x in [-87, 88] with ~2 ulp error, written so loops that call it
 * vectorize (libm's expf/tanhf calls do not); compiled under the spans'
 * options so it inlines into them (GCC does not inline across different
 * -ftrapping-math): Cody-Waite reduction x = n ln2 + r, degree-6
 * polynomial for e^r, 2^n built in the exponent. */
static inline __attribute__((always_inline)) float k_exp(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shift = 12582912.0f; /* 1.5 * 2^23: rounds to an integer */
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720))))));
    union { float f; int32_t i; } u = { .f = p };
    u.i += (int32_t)n * (1 << 23);
    return u.f;
}
K_VEC_END

/* Static split of n elements over the threads of the enclosing parallel
 * region, in 16-float (64-byte) units so every thread's span starts on the
 * same alignment: declares lo and hi. */
#define K_SPLIT(n, lo, hi)                                                               \
    int64_t lo = 0, hi = (n);                                                            \
    do {                                                                                 \
        int nt_ = omp_get_num_threads(), id_ = omp_get_thread_num();                     \
        int64_t per_ = (((n) + nt_ - 1) / nt_ + 15) / 16 * 16;                           \
        lo = per_ * id_ < (n) ? per_ * id_ : (n);                                        \
        hi = lo + per_ < (n) ? lo + per_ : (n);                                          \
    } while (0)

#endif
