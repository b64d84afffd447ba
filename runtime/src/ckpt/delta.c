/* Delta chunks: the difference of a chunk's bit patterns against the same
 * chunk of the last full checkpoint, stored instead of the bytes.
 *
 * In training every weight changes every step, so hard-linking unchanged
 * bundles saves nothing; but a weight moves by a small relative amount
 * between saves, so its bit pattern (sign, exponent, high mantissa)
 * mostly stays. Per element of width w: d = zigzag(new - base) as a w-byte
 * integer (small for close values of either sign), then the saver's byte
 * shuffle and zstd squeeze the zero high bytes. Exact: new = base +
 * unzigzag(d) modulo 2^(8w). Chains are one deep: a delta names a full
 * checkpoint as its base, never another delta.
 *
 * Lossy storage modes (bf16/fp16/int8 weights, int8 moments) take the
 * difference of the encoded bytes against the base's encoded bytes: the
 * restore then gives back exactly the codes a full save in the same mode
 * stores, so a chain restores bit for bit what a full save restores. An int8
 * chunk is two arrays, its fp32 scales and its one-byte codes, each
 * differenced at its own width (the codes of a weight that moved less than
 * half a quantization step are unchanged: zeros). */
#include "ckpt_internal.h"

#include <string.h>

#define DELTA_LOOP(T)                                                                   \
    do {                                                                                \
        const T *b = base, *c = cur;                                                    \
        T *o = out;                                                                     \
        for (size_t i = 0; i < n; i++) {                                                \
            T d = (T)(c[i] - b[i]);                                                     \
            /* zigzag: the sign bit to the bottom, small magnitudes stay small */      \
            o[i] = (T)((T)(d << 1) ^ (T)(0 - (d >> (sizeof(T) * 8 - 1))));              \
        }                                                                               \
    } while (0)

#define UNDELTA_LOOP(T)                                                                 \
    do {                                                                                \
        const T *b = base;                                                              \
        T *o = inout;                                                                   \
        for (size_t i = 0; i < n; i++) {                                                \
            T z = o[i];                                                                 \
            T d = (T)((z >> 1) ^ (T)(0 - (z & 1)));                                     \
            o[i] = (T)(b[i] + d);                                                       \
        }                                                                               \
    } while (0)

bool ckpt_delta_width_ok(size_t w)
{
    return w == 1 || w == 2 || w == 4 || w == 8;
}

void ckpt_delta_encode(size_t w, const void *base, const void *cur, size_t n, void *out)
{
    switch (w) {
    case 1: DELTA_LOOP(uint8_t); break;
    case 2: DELTA_LOOP(uint16_t); break;
    case 4: DELTA_LOOP(uint32_t); break;
    case 8: DELTA_LOOP(uint64_t); break;
    default: memcpy(out, cur, n * w); break; /* not reached: ckpt_delta_width_ok */
    }
}

void ckpt_delta_apply(size_t w, const void *base, void *inout, size_t n)
{
    switch (w) {
    case 1: UNDELTA_LOOP(uint8_t); break;
    case 2: UNDELTA_LOOP(uint16_t); break;
    case 4: UNDELTA_LOOP(uint32_t); break;
    case 8: UNDELTA_LOOP(uint64_t); break;
    default: break;
    }
}

/* The arrays of an encoded chunk of n elements: count, element width and
 * byte offset of each. Returns how many (0: encoding without deltas). */
static int enc_segments(enum ckpt_enc e, enum whale_dtype t, int64_t n, int block, size_t cnt[2],
                        size_t w[2], size_t off[2])
{
    switch (e) {
    case CKPT_ENC_RAW:
        w[0] = ckpt_dtype_size(t);
        cnt[0] = (size_t)n;
        off[0] = 0;
        return ckpt_delta_width_ok(w[0]) ? 1 : 0;
    case CKPT_ENC_BF16:
    case CKPT_ENC_FP16:
        w[0] = 2;
        cnt[0] = (size_t)n;
        off[0] = 0;
        return 1;
    case CKPT_ENC_Q8:
    case CKPT_ENC_Q8SQRT:
        if (block < 1)
            return 0;
        w[0] = 4; /* the scales */
        cnt[0] = (size_t)((n + block - 1) / block);
        off[0] = 0;
        w[1] = 1; /* the codes */
        cnt[1] = (size_t)n;
        off[1] = cnt[0] * 4;
        return 2;
    }
    return 0;
}

bool ckpt_delta_enc_ok(enum ckpt_enc e, enum whale_dtype t)
{
    size_t cnt[2], w[2], off[2];
    return enc_segments(e, t, 1, 1, cnt, w, off) > 0;
}

void ckpt_delta_encode_enc(enum ckpt_enc e, enum whale_dtype t, int64_t n, int block,
                           const void *base, const void *cur, void *out)
{
    size_t cnt[2], w[2], off[2];
    int ns = enc_segments(e, t, n, block, cnt, w, off);
    for (int i = 0; i < ns; i++)
        ckpt_delta_encode(w[i], (const unsigned char *)base + off[i],
                          (const unsigned char *)cur + off[i], cnt[i],
                          (unsigned char *)out + off[i]);
}

void ckpt_delta_apply_enc(enum ckpt_enc e, enum whale_dtype t, int64_t n, int block,
                          const void *base, void *inout)
{
    size_t cnt[2], w[2], off[2];
    int ns = enc_segments(e, t, n, block, cnt, w, off);
    for (int i = 0; i < ns; i++)
        ckpt_delta_apply(w[i], (const unsigned char *)base + off[i],
                         (unsigned char *)inout + off[i], cnt[i]);
}
