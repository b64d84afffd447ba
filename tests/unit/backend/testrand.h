/* Deterministic test data for the backend tests: xorshift64 values in
 * [-1, 1), arrays of them, copies. A test defines TESTRAND_SEED before
 * including this header to keep its own sequence. */
#ifndef TESTS_BACKEND_TESTRAND_H
#define TESTS_BACKEND_TESTRAND_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = TESTRAND_SEED;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static inline float *rnd(size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static inline float *dup(const float *x, size_t n)
{
    float *p = malloc(n * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

#endif
