/* Widening a Hugging Face bf16 tensor into the engine's fp32 weights, the
 * bulk of an import's work: a pass that writes each weight once and never
 * reads it back, so the vector paths store with non-temporal (streaming)
 * stores, which skip reading the destination's cache lines first (about
 * 1.5-2x the rate of ordinary stores on large tensors). bf16 -> fp32 is
 * exact (the 16 bits become the high half), so every path gives the same
 * bits as whale_bf16_to_f32. The path follows util/dtype.c's choice
 * (whale_dtype_simd: AVX-512, AVX2, or portable C). */
#include "hf_internal.h"

#include "whale/dtype.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && !(defined(__clang__) && __clang_major__ < 15)
#include <immintrin.h>

__attribute__((target("avx512f"))) static size_t widen_avx512(float *d, const uint16_t *s,
                                                               size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
        _mm512_stream_si512((void *)(d + i), _mm512_slli_epi32(x, 16));
    }
    _mm_sfence(); /* the streamed lines are visible before anyone reads them */
    return i;
}

__attribute__((target("avx2"))) static size_t widen_avx2(float *d, const uint16_t *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_stream_si256((__m256i *)(d + i), _mm256_slli_epi32(x, 16));
    }
    _mm_sfence();
    return i;
}
#define HF_X86 1
#endif

/* below this, the ordinary path (its stores may stay in cache for the
 * next small run) */
#define STREAM_MIN 256

void hf_bf16_to_f32_stream(float *dst, const uint16_t *src, size_t n)
{
#ifdef HF_X86
    const char *lvl = n >= STREAM_MIN ? whale_dtype_simd() : "c";
    const bool z = !strcmp(lvl, "avx512"), y = !strcmp(lvl, "avx2");
    if (z || y) {
        /* streaming stores need aligned destinations: the head up to the
         * alignment the ordinary way */
        const uintptr_t al = z ? 64 : 32;
        size_t h = (size_t)((al - ((uintptr_t)dst & (al - 1))) & (al - 1));
        if (h % sizeof(float) == 0) {
            h /= sizeof(float);
            h = h < n ? h : n;
            whale_bf16_to_f32(dst, src, h);
            size_t k = z ? widen_avx512(dst + h, src + h, n - h)
                         : widen_avx2(dst + h, src + h, n - h);
            whale_bf16_to_f32(dst + h + k, src + h + k, n - h - k);
            return;
        }
    }
#endif
    whale_bf16_to_f32(dst, src, n);
}
