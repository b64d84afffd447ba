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
 * checkpoint as its base, never another delta. */
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
