/* Vector fp32 -> bf16 rounding shared by util/dtype.c's bulk conversions and
 * the host AdamW's fused cast (optim/adamw_host.c), so both round exactly as
 * whale_float_to_bf16: round to nearest even, NaN kept quiet. x86 only;
 * include after <immintrin.h>. */
#ifndef UTIL_DTYPE_SIMD_H
#define UTIL_DTYPE_SIMD_H
#if defined(__x86_64__)
#include <immintrin.h>

/* x: 16 fp32 as bits -> 16 bf16 */
__attribute__((target("avx512f"))) static inline __m256i util_bf16_round16(__m512i x)
{
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, absmask), inf);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, q));
}
#endif
#endif
