/* 16-bit floating-point conversions (bf16 and IEEE fp16 <-> fp32).
 *
 * The one place in Whale that rounds to or widens from 16-bit floats: the
 * collectives (16-bit reductions), the engine (mixed precision), offload
 * and checkpoints use these. Storage is uint16_t so no compiler support
 * for a 16-bit float type is needed by callers.
 *
 * Rounding: fp32 -> bf16 and fp32 -> fp16 round to nearest, ties to even.
 * NaN stays NaN (a quiet NaN keeping the sign), +-Inf stays Inf, fp32
 * values beyond the 16-bit range become Inf (fp16: |x| >= 65520), fp16
 * keeps subnormals (down to 2^-24) and bf16 keeps fp32's subnormals
 * (bf16 has fp32's exponent range). Widening is exact.
 *
 * The array forms pick the widest vector unit of the CPU at run time
 * (AVX-512, AVX2 + F16C, or plain C) and give bit-identical results on
 * every path. dst and src must not overlap. */
#ifndef WHALE_DTYPE_H
#define WHALE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline float whale_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t whale_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    /* NaN keeps a set quiet bit; finite values and Inf round to nearest even
     * (the carry out of the mantissa rounds up into the exponent, to Inf
     * at the top of the range, which is the correct result). */
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(nan ? ((u >> 16) | 0x40u) : r);
}

/* IEEE binary16; scalar forms (the array forms are faster). */
float whale_fp16_to_float(uint16_t h);
uint16_t whale_float_to_fp16(float f);

/* dst (n) = round(src (n)) */
void whale_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void whale_f32_to_fp16(uint16_t *dst, const float *src, size_t n);
/* dst (n) = widen(src (n)) */
void whale_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void whale_fp16_to_f32(float *dst, const uint16_t *src, size_t n);

/* In place buf (n) = widen(round(buf (n))): the value a 16-bit store and
 * load would give back (mixed precision rounds activations with it). */
void whale_round_f32_bf16(float *buf, size_t n);
void whale_round_f32_fp16(float *buf, size_t n);

/* Which vector path the array forms use here: "avx512", "avx2", "c". */
const char *whale_dtype_simd(void);

#ifdef __cplusplus
}
#endif
#endif
