/* Storage encodings of checkpoint chunks and dtype conversions.
 *
 *   raw     the tensor's own bytes (exact)
 *   bf16    fp32 -> bf16, round to nearest even: relative error <= 2^-9
 *   fp16    fp32 -> fp16, round to nearest even: relative error <= 2^-12 for
 *           |x| in [6.1e-5, 65504]; smaller values lose precision, larger
 *           ones become inf (weights are far from both)
 *   q8      Adam m: per block of B elements s = max|x| / 127,
 *           code = round(x / s) in int8: |error| <= s / 2 per element
 *   q8sqrt  Adam v (>= 0): per block s = max sqrt(v) / 255, code =
 *           round(sqrt(v) / s) in uint8, v' = (code * s)^2: the square root
 *           halves v's dynamic range so small second moments do not all
 *           collapse to zero (which would blow up the Adam step)
 * Quantized layout: float scales[ceil(n / B)] then the n one-byte codes.
 */
#include "ckpt_internal.h"

#include "whale/dtype.h"
#include "whale/error.h"
#include "whale/log.h"

#include <math.h>
#include <string.h>

size_t ckpt_dtype_size(enum whale_dtype t)
{
    switch ((int)t) {
    case WHALE_FLOAT32: return 4;
    case WHALE_BFLOAT16: return 2;
    case WHALE_FLOAT16: return 2;
    case WHALE_INT32: return 4;
    case WHALE_INT64: return 8;
    case WHALE_UINT8: return 1;
    case (int)CKPT_INT8: return 1;
    default: return 0;
    }
}

const char *ckpt_dtype_st(enum whale_dtype t)
{
    switch ((int)t) {
    case WHALE_FLOAT32: return "F32";
    case WHALE_BFLOAT16: return "BF16";
    case WHALE_FLOAT16: return "F16";
    case WHALE_INT32: return "I32";
    case WHALE_INT64: return "I64";
    case WHALE_UINT8: return "U8";
    case (int)CKPT_INT8: return "I8";
    default: return NULL;
    }
}

int ckpt_dtype_from_st(const char *s, enum whale_dtype *t)
{
    static const enum whale_dtype all[] = {WHALE_FLOAT32, WHALE_BFLOAT16, WHALE_FLOAT16,
                                           WHALE_INT32, WHALE_INT64, WHALE_UINT8, CKPT_INT8};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s && !strcmp(s, ckpt_dtype_st(all[i]))) {
            *t = all[i];
            return 0;
        }
    return WHALE_EDATA;
}

bool ckpt_dtype_is_float(enum whale_dtype t)
{
    return t == WHALE_FLOAT32 || t == WHALE_BFLOAT16 || t == WHALE_FLOAT16;
}

static const char *enc_names[] = {"raw", "bf16", "fp16", "q8", "q8sqrt"};

const char *ckpt_enc_name(enum ckpt_enc e)
{
    return (unsigned)e < 5 ? enc_names[e] : "?";
}

int ckpt_enc_from_name(const char *s, enum ckpt_enc *e)
{
    for (int i = 0; i < 5; i++)
        if (s && !strcmp(s, enc_names[i])) {
            *e = (enum ckpt_enc)i;
            return 0;
        }
    return WHALE_EDATA;
}

/* ---- scalar conversions -------------------------------------------------- */


/* util's conversions (whale/dtype.h): one rounding rule for the runtime */
uint16_t ckpt_f32_to_bf16(float f) { return whale_float_to_bf16(f); }
float ckpt_bf16_to_f32(uint16_t h) { return whale_bf16_to_float(h); }
uint16_t ckpt_f32_to_f16(float f) { return whale_float_to_fp16(f); }
float ckpt_f16_to_f32(uint16_t h) { return whale_fp16_to_float(h); }

static float load_f(enum whale_dtype t, const void *p, int64_t i)
{
    switch (t) {
    case WHALE_BFLOAT16: return ckpt_bf16_to_f32(((const uint16_t *)p)[i]);
    case WHALE_FLOAT16: return ckpt_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

int ckpt_convert(enum whale_dtype from, const void *src, enum whale_dtype to, void *dst,
                 int64_t n)
{
    if (from == to) {
        memcpy(dst, src, (size_t)n * ckpt_dtype_size(from));
        return 0;
    }
    if (!ckpt_dtype_is_float(from) || !ckpt_dtype_is_float(to))
        return WHALE_ENOTSUP;
    /* the common cases through the vectorised array forms */
    if (from == WHALE_FLOAT32 && to == WHALE_BFLOAT16) {
        whale_f32_to_bf16(dst, src, (size_t)n);
        return 0;
    }
    if (from == WHALE_FLOAT32 && to == WHALE_FLOAT16) {
        whale_f32_to_fp16(dst, src, (size_t)n);
        return 0;
    }
    if (to == WHALE_FLOAT32 && from == WHALE_BFLOAT16) {
        whale_bf16_to_f32(dst, src, (size_t)n);
        return 0;
    }
    if (to == WHALE_FLOAT32 && from == WHALE_FLOAT16) {
        whale_fp16_to_f32(dst, src, (size_t)n);
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = load_f(from, src, i);
        if (to == WHALE_FLOAT32)
            ((float *)dst)[i] = v;
        else if (to == WHALE_BFLOAT16)
            ((uint16_t *)dst)[i] = ckpt_f32_to_bf16(v);
        else
            ((uint16_t *)dst)[i] = ckpt_f32_to_f16(v);
    }
    return 0;
}

/* ---- chunk encodings --------------------------------------------------- */

static int64_t nblocks(int64_t n, int block) { return (n + block - 1) / block; }

size_t ckpt_enc_size(enum ckpt_enc e, enum whale_dtype t, int64_t n, int block)
{
    switch (e) {
    case CKPT_ENC_BF16:
    case CKPT_ENC_FP16: return (size_t)n * 2;
    case CKPT_ENC_Q8:
    case CKPT_ENC_Q8SQRT: return (size_t)nblocks(n, block) * 4 + (size_t)n;
    default: return (size_t)n * ckpt_dtype_size(t);
    }
}

/* src: float[n] (fp32) for every non-raw encoding. */
void ckpt_encode(enum ckpt_enc e, enum whale_dtype t, const void *src, int64_t n, int block,
                 void *dst)
{
    const float *x = src;
    switch (e) {
    case CKPT_ENC_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = ckpt_f32_to_bf16(x[i]);
        return;
    case CKPT_ENC_FP16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = ckpt_f32_to_f16(x[i]);
        return;
    case CKPT_ENC_Q8:
    case CKPT_ENC_Q8SQRT: {
        int64_t nb = nblocks(n, block);
        float *scale = dst;
        unsigned char *code = (unsigned char *)dst + nb * 4;
        bool sq = e == CKPT_ENC_Q8SQRT;
        for (int64_t b = 0; b < nb; b++) {
            int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
            float amax = 0;
            for (int64_t i = lo; i < hi; i++) {
                float v = sq ? sqrtf(x[i] > 0 ? x[i] : 0) : fabsf(x[i]);
                if (v > amax && isfinite(v))
                    amax = v;
            }
            float s = amax / (sq ? 255.0f : 127.0f);
            float inv = s > 0 ? 1.0f / s : 0;
            memcpy(&scale[b], &s, 4); /* dst need not be 4-byte aligned */
            for (int64_t i = lo; i < hi; i++) {
                if (sq) {
                    float v = sqrtf(x[i] > 0 ? x[i] : 0) * inv;
                    long q = lrintf(isfinite(v) ? v : 255);
                    code[i] = (unsigned char)(q > 255 ? 255 : q);
                } else {
                    float v = x[i] * inv;
                    long q = lrintf(isfinite(v) ? v : (v > 0 ? 127 : -127));
                    q = q > 127 ? 127 : q < -127 ? -127 : q;
                    code[i] = (unsigned char)(int8_t)q;
                }
            }
        }
        return;
    }
    default:
        memcpy(dst, src, (size_t)n * ckpt_dtype_size(t));
    }
}

void ckpt_decode(enum ckpt_enc e, enum whale_dtype t, const void *src, int64_t n, int block,
                 void *dst)
{
    float *y = dst;
    switch (e) {
    case CKPT_ENC_BF16:
        for (int64_t i = 0; i < n; i++)
            y[i] = ckpt_bf16_to_f32(((const uint16_t *)src)[i]);
        return;
    case CKPT_ENC_FP16:
        for (int64_t i = 0; i < n; i++)
            y[i] = ckpt_f16_to_f32(((const uint16_t *)src)[i]);
        return;
    case CKPT_ENC_Q8:
    case CKPT_ENC_Q8SQRT: {
        int64_t nb = nblocks(n, block);
        const unsigned char *code = (const unsigned char *)src + nb * 4;
        for (int64_t b = 0; b < nb; b++) {
            float s;
            memcpy(&s, (const char *)src + b * 4, 4);
            int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
            for (int64_t i = lo; i < hi; i++) {
                if (e == CKPT_ENC_Q8SQRT) {
                    float r = (float)code[i] * s;
                    y[i] = r * r;
                } else {
                    y[i] = (float)(int8_t)code[i] * s;
                }
            }
        }
        return;
    }
    default:
        memcpy(dst, src, (size_t)n * ckpt_dtype_size(t));
    }
}

/* ---- byte shuffle (before zstd) --------------------------------------------
 * n elements of w bytes -> w planes of n bytes: the sign/exponent bytes of
 * floats are nearly constant across a tensor and compress well once they
 * are contiguous; mantissa bytes stay noise. */
int ckpt_shuffle_width(enum ckpt_enc e, enum whale_dtype t)
{
    switch (e) {
    case CKPT_ENC_BF16:
    case CKPT_ENC_FP16: return 2;
    case CKPT_ENC_RAW: return (int)ckpt_dtype_size(t);
    default: return 0; /* one-byte codes (and their scales): no shuffle */
    }
}

void ckpt_shuffle(const void *src, void *dst, size_t n, int w)
{
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < w; b++)
            d[(size_t)b * n + i] = s[i * (size_t)w + (size_t)b];
}

void ckpt_unshuffle(const void *src, void *dst, size_t n, int w)
{
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (int b = 0; b < w; b++)
        for (size_t i = 0; i < n; i++)
            d[i * (size_t)w + (size_t)b] = s[(size_t)b * n + i];
}
