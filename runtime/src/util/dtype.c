/* fp32 <-> bf16 / fp16 conversions (see whale/dtype.h for the rounding
 * contract). Memory-bound loops: the AVX-512 and AVX2 paths convert 16 or
 * 8 values per instruction group and give the same bits as the scalar
 * code, which handles the tails and CPUs without those units. */
#include "whale/dtype.h"
#include "util/dtype_internal.h"
#include "util/dtype_simd.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && !(defined(__clang__) && __clang_major__ < 15) /* clang 14: no "f16c" probe */
#include <immintrin.h>
#define DT_X86 1
#endif

#if defined(__FLT16_MAX__)
float whale_fp16_to_float(uint16_t h)
{
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

uint16_t whale_float_to_fp16(float f)
{
    _Float16 x = (_Float16)f; /* IEEE round to nearest even, subnormals kept */
    uint16_t h;
    memcpy(&h, &x, 2);
    return h;
}
#else
/* Compilers without _Float16 on this target (clang 14 on x86_64, used
 * for the fuzz build): the same IEEE conversions in integer code. */
float whale_fp16_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, b;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* zero or subnormal: exact */
        return s ? -v : v;
    }
    b = e == 31 ? (s | 0x7f800000u | (m << 13)) : (s | ((e + 112) << 23) | (m << 13));
    float f;
    memcpy(&f, &b, 4);
    return f;
}

uint16_t whale_float_to_fp16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf, NaN (kept quiet) */
        return (uint16_t)(s | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(s | 0x7c00);
    if (ax < 0x38800000u) { /* below 2^-14: subnormal (or zero) */
        float v;
        memcpy(&v, &ax, 4);
        return (uint16_t)(s | (uint32_t)nearbyintf(v * 0x1p24f)); /* RNE */
    }
    uint32_t h = (((ax >> 23) - 112) << 10) | ((ax & 0x7fffff) >> 13), rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is the right result */
    return (uint16_t)(s | h);
}
#endif

enum { DT_C = 0, DT_AVX2 = 1, DT_AVX512 = 2 };

static int lvl_detected = -1, forced = -1;

static int simd_level(void)
{
    int lvl = lvl_detected;
    if (forced >= 0)
        return forced;
    if (lvl < 0) {
        int l = DT_C;
#ifdef DT_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f"))
            l = DT_AVX512;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
            l = DT_AVX2;
#endif
        lvl = lvl_detected = l;
    }
    return lvl;
}

int util_dtype_force(int level)
{
    int best = (simd_level(), lvl_detected);
    if (level >= 0 && level <= best)
        forced = level;
    else
        forced = -1;
    return forced;
}

const char *whale_dtype_simd(void)
{
    static const char *n[] = { "c", "avx2", "avx512" };
    return n[simd_level()];
}

#ifdef DT_X86
/* ---- AVX-512 (16 lanes) ---- */
__attribute__((target("avx512f"))) static void f32_to_bf16_avx512(uint16_t *d, const float *s,
                                                                   size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            util_bf16_round16(_mm512_loadu_si512((const void *)(s + i))));
    *done = i;
}

__attribute__((target("avx512f"))) static void bf16_to_f32_avx512(float *d, const uint16_t *s,
                                                                   size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
        _mm512_storeu_si512((void *)(d + i), _mm512_slli_epi32(x, 16));
    }
    *done = i;
}

__attribute__((target("avx512f"))) static void round_bf16_avx512(float *b, size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = util_bf16_round16(_mm512_loadu_si512((const void *)(b + i)));
        _mm512_storeu_si512((void *)(b + i), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    *done = i;
}

__attribute__((target("avx512f"))) static void f32_to_fp16_avx512(uint16_t *d, const float *s,
                                                                   size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(s + i),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    *done = i;
}

__attribute__((target("avx512f"))) static void fp16_to_f32_avx512(float *d, const uint16_t *s,
                                                                   size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    *done = i;
}

__attribute__((target("avx512f"))) static void round_fp16_avx512(float *b, size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(b + i, _mm512_cvtph_ps(_mm512_cvtps_ph(
                                    _mm512_loadu_ps(b + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    *done = i;
}

/* ---- AVX2 + F16C (8 lanes) ---- */
__attribute__((target("avx2"))) static inline __m256i bf16_round8(__m256i x)
{
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    /* |x| is non-negative as int32, so the signed compare is the unsigned one */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, absmask), inf);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan); /* 8 x uint32 holding 16-bit values */
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(uint16_t *d, const float *s, size_t n,
                                                             size_t *done)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = bf16_round8(_mm256_loadu_si256((const __m256i *)(s + i)));
        __m256i b = bf16_round8(_mm256_loadu_si256((const __m256i *)(s + i + 8)));
        /* packus works per 128-bit lane: a0-3 b0-3 a4-7 b4-7 -> reorder */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(d + i), p);
    }
    *done = i;
}

__attribute__((target("avx2"))) static void bf16_to_f32_avx2(float *d, const uint16_t *s, size_t n,
                                                             size_t *done)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_slli_epi32(x, 16));
    }
    *done = i;
}

__attribute__((target("avx2"))) static void round_bf16_avx2(float *b, size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i r = bf16_round8(_mm256_loadu_si256((const __m256i *)(b + i)));
        _mm256_storeu_si256((__m256i *)(b + i), _mm256_slli_epi32(r, 16));
    }
    *done = i;
}

__attribute__((target("avx2,f16c"))) static void f32_to_fp16_avx2(uint16_t *d, const float *s,
                                                                  size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    *done = i;
}

__attribute__((target("avx2,f16c"))) static void fp16_to_f32_avx2(float *d, const uint16_t *s,
                                                                  size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    *done = i;
}

__attribute__((target("avx2,f16c"))) static void round_fp16_avx2(float *b, size_t n, size_t *done)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(b + i, _mm256_cvtph_ps(_mm256_cvtps_ph(
                                    _mm256_loadu_ps(b + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    *done = i;
}
#define PICK(NAME, ...)                                  \
    do {                                                 \
        switch (simd_level()) {                          \
        case DT_AVX512: NAME##_avx512(__VA_ARGS__); break; \
        case DT_AVX2: NAME##_avx2(__VA_ARGS__); break;   \
        default: break;                                  \
        }                                                \
    } while (0)
#else
#define PICK(NAME, ...) do { } while (0)
#endif

void whale_f32_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    PICK(f32_to_bf16, dst, src, n, &i);
    for (; i < n; i++)
        dst[i] = whale_float_to_bf16(src[i]);
}

void whale_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    PICK(bf16_to_f32, dst, src, n, &i);
    for (; i < n; i++)
        dst[i] = whale_bf16_to_float(src[i]);
}

void whale_f32_to_fp16(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    PICK(f32_to_fp16, dst, src, n, &i);
    for (; i < n; i++)
        dst[i] = whale_float_to_fp16(src[i]);
}

void whale_fp16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    PICK(fp16_to_f32, dst, src, n, &i);
    for (; i < n; i++)
        dst[i] = whale_fp16_to_float(src[i]);
}

void whale_round_f32_bf16(float *buf, size_t n)
{
    size_t i = 0;
    PICK(round_bf16, buf, n, &i);
    for (; i < n; i++)
        buf[i] = whale_bf16_to_float(whale_float_to_bf16(buf[i]));
}

void whale_round_f32_fp16(float *buf, size_t n)
{
    size_t i = 0;
    PICK(round_fp16, buf, n, &i);
    for (; i < n; i++)
        buf[i] = whale_fp16_to_float(whale_float_to_fp16(buf[i]));
}
