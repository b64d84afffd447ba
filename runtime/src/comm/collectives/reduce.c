/* Element-wise reduction kernels: dst[n] = a[n] op b[n].
 *
 * Memory-bound loops: written so GCC vectorises them (restrict pointers,
 * no branches in the loop body, -O3 for this file) and cloned for AVX-512
 * (x86-64-v4) and AVX2/F16C hosts, the clone picked at load time from the
 * CPU's features. 16-bit floats are widened to fp32, combined, and rounded
 * back (round to nearest even), so one reduction step loses at most half
 * an ulp of the 16-bit type. */
#pragma GCC optimize("O3")
#include "comm/collectives/sched.h"
#include "whale/dtype.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KERNEL
#endif

/* The conversions are util's (whale/dtype.h): one rounding rule for the
 * whole runtime. These names stay for the comm tests. */
float comm_bf16_to_f32(uint16_t h) { return whale_bf16_to_float(h); }
uint16_t comm_f32_to_bf16(float f) { return whale_float_to_bf16(f); }
float comm_f16_to_f32(uint16_t h) { return whale_fp16_to_float(h); }
uint16_t comm_f32_to_f16(float f) { return whale_float_to_fp16(f); }

#define bf2f whale_bf16_to_float
#define f2bf whale_float_to_bf16

#define OP_SUM(x, y) ((x) + (y))
#define OP_MAX(x, y) ((x) > (y) ? (x) : (y))
#define OP_MIN(x, y) ((x) < (y) ? (x) : (y))

/* dst[n] = a[n] op b[n], and the in-place form dst[n] op= b[n]
 * (separate so that the compiler needs no runtime alias check). */
#define DEF_KERNELS(NAME, T, OP)                                                        \
    KERNEL static void NAME##_3(T *restrict d, const T *restrict a, const T *restrict b, \
                                size_t n)                                               \
    {                                                                                   \
        for (size_t i = 0; i < n; i++)                                                  \
            d[i] = OP(a[i], b[i]);                                                      \
    }                                                                                   \
    KERNEL static void NAME##_2(T *restrict d, const T *restrict b, size_t n)           \
    {                                                                                   \
        for (size_t i = 0; i < n; i++)                                                  \
            d[i] = OP(d[i], b[i]);                                                      \
    }

#define DEF_TYPE(TN, T)                     \
    DEF_KERNELS(sum_##TN, T, OP_SUM)        \
    DEF_KERNELS(max_##TN, T, OP_MAX)        \
    DEF_KERNELS(min_##TN, T, OP_MIN)

DEF_TYPE(f32, float)
DEF_TYPE(i32, int32_t)
DEF_TYPE(i64, int64_t)
DEF_TYPE(u8, uint8_t)

#define DEF_16(NAME, OP, TOF, FROMF)                                                    \
    KERNEL static void NAME##_3(uint16_t *restrict d, const uint16_t *restrict a,        \
                                const uint16_t *restrict b, size_t n)                   \
    {                                                                                   \
        for (size_t i = 0; i < n; i++)                                                  \
            d[i] = FROMF(OP(TOF(a[i]), TOF(b[i])));                                     \
    }                                                                                   \
    KERNEL static void NAME##_2(uint16_t *restrict d, const uint16_t *restrict b, size_t n) \
    {                                                                                   \
        for (size_t i = 0; i < n; i++)                                                  \
            d[i] = FROMF(OP(TOF(d[i]), TOF(b[i])));                                     \
    }

/* inline _Float16 casts here (not util's out-of-line scalars): this is the
 * loop for CPUs without F16C; same IEEE rounding as whale_float_to_fp16 */
static inline float h2f(uint16_t h)
{
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

static inline uint16_t f2h(float f)
{
    _Float16 x = (_Float16)f;
    uint16_t h;
    memcpy(&h, &x, 2);
    return h;
}

DEF_16(sum_bf16, OP_SUM, bf2f, f2bf)
DEF_16(max_bf16, OP_MAX, bf2f, f2bf)
DEF_16(min_bf16, OP_MIN, bf2f, f2bf)
DEF_16(sum_f16_generic, OP_SUM, h2f, f2h)
DEF_16(max_f16_generic, OP_MAX, h2f, f2h)
DEF_16(min_f16_generic, OP_MIN, h2f, f2h)

/* fp16 with F16C: 8 halves per conversion instruction (GCC does not
 * vectorise the _Float16 casts of the loop above). */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#include <immintrin.h>
#define DEF_F16C(NAME, VOP, SOP)                                                           \
    __attribute__((target("avx2,f16c"))) static void NAME##_f16c(                          \
        uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n)                       \
    {                                                                                      \
        size_t i = 0;                                                                      \
        for (; i + 8 <= n; i += 8) {                                                       \
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));         \
            __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));         \
            _mm_storeu_si128((__m128i *)(d + i),                                           \
                             _mm256_cvtps_ph(VOP(x, y), _MM_FROUND_TO_NEAREST_INT));       \
        }                                                                                  \
        for (; i < n; i++)                                                                 \
            d[i] = f2h(SOP(h2f(a[i]), h2f(b[i])));                                         \
    }
DEF_F16C(sum_f16, _mm256_add_ps, OP_SUM)
DEF_F16C(max_f16, _mm256_max_ps, OP_MAX)
DEF_F16C(min_f16, _mm256_min_ps, OP_MIN)
static int have_f16c(void)
{
    static int v = -1;
    if (v < 0)
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    return v;
}
#define F16C_OR(NAME, GEN2, GEN3)                                                           \
    static void NAME##_2(uint16_t *d, const uint16_t *b, size_t n)                          \
    {                                                                                       \
        if (have_f16c())                                                                    \
            NAME##_f16c(d, d, b, n);                                                        \
        else                                                                                \
            GEN2(d, b, n);                                                                  \
    }                                                                                       \
    static void NAME##_3(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n)       \
    {                                                                                       \
        if (have_f16c())                                                                    \
            NAME##_f16c(d, a, b, n);                                                        \
        else                                                                                \
            GEN3(d, a, b, n);                                                               \
    }
#else
#define F16C_OR(NAME, GEN2, GEN3)                                                           \
    static void NAME##_2(uint16_t *d, const uint16_t *b, size_t n) { GEN2(d, b, n); }       \
    static void NAME##_3(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n)       \
    { GEN3(d, a, b, n); }
#endif
F16C_OR(sum_f16, sum_f16_generic_2, sum_f16_generic_3)
F16C_OR(max_f16, max_f16_generic_2, max_f16_generic_3)
F16C_OR(min_f16, min_f16_generic_2, min_f16_generic_3)

#define DISPATCH(NAME, T)                                                   \
    do {                                                                    \
        if (dst == a)                                                       \
            NAME##_2((T *)dst, (const T *)b, n);                            \
        else if (dst == b)                                                  \
            NAME##_2((T *)dst, (const T *)a, n);                            \
        else                                                                \
            NAME##_3((T *)dst, (const T *)a, (const T *)b, n);              \
    } while (0)

#define BY_OP(TN, T)                                                        \
    switch (op) {                                                           \
    case WHALE_MAX: DISPATCH(max_##TN, T); break;                           \
    case WHALE_MIN: DISPATCH(min_##TN, T); break;                           \
    default: DISPATCH(sum_##TN, T); break;                                  \
    }

/* dst, a, b: [n] elements of type t; dst may alias a or b exactly. */
void comm_reduce(void *dst, const void *a, const void *b, size_t n, enum whale_dtype t,
                 enum whale_op op)
{
    switch (t) {
    case WHALE_FLOAT32: BY_OP(f32, float); break;
    case WHALE_BFLOAT16: BY_OP(bf16, uint16_t); break;
    case WHALE_FLOAT16: BY_OP(f16, uint16_t); break;
    case WHALE_INT32: BY_OP(i32, int32_t); break;
    case WHALE_INT64: BY_OP(i64, int64_t); break;
    case WHALE_UINT8: BY_OP(u8, uint8_t); break;
    default: break;
    }
}

/* dst[n] /= div (integers: truncating division, like the sum they come from). */
void comm_avg(void *dst, size_t n, enum whale_dtype t, int div)
{
    switch (t) {
    case WHALE_FLOAT32: {
        float *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] /= (float)div;
        break;
    }
    case WHALE_BFLOAT16: {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = f2bf(bf2f(d[i]) / (float)div);
        break;
    }
    case WHALE_FLOAT16: {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = f2h(h2f(d[i]) / (float)div);
        break;
    }
    case WHALE_INT32: {
        int32_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] /= div;
        break;
    }
    case WHALE_INT64: {
        int64_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] /= div;
        break;
    }
    case WHALE_UINT8: {
        uint8_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = (uint8_t)(d[i] / div);
        break;
    }
    default:
        break;
    }
}
