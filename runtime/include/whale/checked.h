/* Checked integer arithmetic for sizes that come from outside (config and
 * model files, plans, checkpoint manifests, safetensors headers). Each
 * helper returns true when the result fits and stores it; on overflow it
 * returns false and leaves *out unspecified, so a caller can name the field
 * that overflowed instead of running into undefined behaviour. */
#ifndef WHALE_CHECKED_H
#define WHALE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline bool whale_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool whale_add_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline bool whale_mul_long(long a, long b, long *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool whale_mul_int(int a, int b, int *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool whale_mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool whale_add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline bool whale_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Product of n non-negative extents (a tensor shape); false when an
 * extent is negative or the product overflows int64_t. */
static inline bool whale_numel_i64(int n, const int64_t *dims, int64_t *out)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i] < 0 || __builtin_mul_overflow(p, dims[i], &p))
            return false;
    }
    *out = p;
    return true;
}

#ifdef __cplusplus
}
#endif
#endif
