/* fp32 <-> bf16 / fp16 conversions: rounding (ties to even), NaN / Inf,
 * overflow, subnormals, and every vector path bit-identical to the scalar
 * code on random bit patterns and all tail lengths. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "whale/dtype.h"
#include "util/dtype_internal.h"

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16_rounding(void **st)
{
    (void)st;
    assert_int_equal(whale_float_to_bf16(1.0f), 0x3f80);
    assert_int_equal(whale_float_to_bf16(1.00390625f), 0x3f80); /* tie -> even (down) */
    assert_int_equal(whale_float_to_bf16(1.01171875f), 0x3f82); /* tie -> even (up) */
    assert_int_equal(whale_float_to_bf16(bits_f(0x3f808001u)), 0x3f81); /* above tie */
    assert_int_equal(whale_float_to_bf16(-2.0f), 0xc000);
    assert_int_equal(whale_float_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(whale_float_to_bf16(-INFINITY), 0xff80);
    /* largest finite fp32 rounds up to Inf (it is above bf16's max + half ulp) */
    assert_int_equal(whale_float_to_bf16(bits_f(0x7f7fffffu)), 0x7f80);
    assert_int_equal(whale_float_to_bf16(bits_f(0x7f7f0000u)), 0x7f7f);
    /* NaN stays NaN, with the sign, even a NaN whose payload sits in the low bits */
    uint16_t n = whale_float_to_bf16(bits_f(0x7f800001u));
    assert_true((n & 0x7f80) == 0x7f80 && (n & 0x7f));
    n = whale_float_to_bf16(bits_f(0xffc00000u));
    assert_true(n == 0xffc0);
    assert_true(isnan(whale_bf16_to_float(whale_float_to_bf16(NAN))));
    /* subnormals: bf16 has fp32's exponent, so fp32 subnormals survive */
    assert_int_equal(whale_float_to_bf16(bits_f(0x00010000u)), 0x0001);
    assert_int_equal(whale_float_to_bf16(bits_f(0x00008000u)), 0x0000); /* tie -> even 0 */
    assert_int_equal(whale_float_to_bf16(bits_f(0x00018000u)), 0x0002); /* tie -> even up */
    assert_true(whale_bf16_to_float(0x0001) == bits_f(0x00010000u));
    /* every bf16 value widens and rounds back to itself */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = whale_bf16_to_float((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(whale_bf16_to_float(whale_float_to_bf16(f))));
        else
            assert_int_equal(whale_float_to_bf16(f), h);
    }
}

static void test_fp16_rounding(void **st)
{
    (void)st;
    assert_int_equal(whale_float_to_fp16(1.0f), 0x3c00);
    assert_int_equal(whale_float_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(whale_float_to_fp16(65519.0f), 0x7bff); /* below the tie */
    assert_int_equal(whale_float_to_fp16(65520.0f), 0x7c00); /* overflow -> Inf */
    assert_int_equal(whale_float_to_fp16(-1e9f), 0xfc00);
    assert_int_equal(whale_float_to_fp16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
    assert_int_equal(whale_float_to_fp16(1.0f + 3.0f / 2048), 0x3c02); /* tie -> even up */
    /* subnormals: 2^-24 is the smallest; 2^-25 ties to 0; 1.5*2^-25 -> 2^-24 */
    assert_int_equal(whale_float_to_fp16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(whale_float_to_fp16(ldexpf(1, -25)), 0x0000);
    assert_int_equal(whale_float_to_fp16(ldexpf(1.5f, -25)), 0x0001);
    assert_int_equal(whale_float_to_fp16(ldexpf(1, -14)), 0x0400); /* smallest normal */
    assert_true(whale_fp16_to_float(0x0001) == ldexpf(1, -24));
    assert_true(isnan(whale_fp16_to_float(whale_float_to_fp16(NAN))));
    assert_true(isinf(whale_fp16_to_float(whale_float_to_fp16(INFINITY))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = whale_fp16_to_float((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(whale_fp16_to_float(whale_float_to_fp16(f))));
        else
            assert_int_equal(whale_float_to_fp16(f), h);
    }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Arrays through whichever paths this CPU has: same bits as the scalars. */
static void test_vector_paths(void **st)
{
    (void)st;
    enum { N = 4099 };
    float *src = malloc(N * sizeof(float)), *wide = malloc(N * sizeof(float));
    float *rnd = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * 2), *h16 = malloc(N * 2);
    for (size_t i = 0; i < N; i++) {
        uint32_t u = next32();
        /* a mix: random bits (NaN, Inf, subnormal included), ties, small values */
        if (i % 5 == 1)
            u = (u & 0xffff0000u) | 0x8000u;
        if (i % 7 == 2)
            u = (u & 0x80ffffffu) | (0x33u << 24);
        if (i == 3) u = 0x7f800000u;
        if (i == 4) u = 0xff800001u;
        memcpy(&src[i], &u, 4);
        h16[i] = (uint16_t)next32();
    }
    for (int lvl = 0; lvl <= 2; lvl++) {
        if (util_dtype_force(lvl) != lvl)
            continue;
        for (size_t n = 0; n <= 40; n++) { /* every tail length */
            whale_f32_to_bf16(h, src, n);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(h[i], whale_float_to_bf16(src[i]));
        }
        whale_f32_to_bf16(h, src, N);
        for (size_t i = 0; i < N; i++)
            assert_int_equal(h[i], whale_float_to_bf16(src[i]));
        whale_bf16_to_f32(wide, h16, N);
        for (size_t i = 0; i < N; i++)
            assert_memory_equal(&wide[i], &(float){ whale_bf16_to_float(h16[i]) }, 4);
        memcpy(rnd, src, N * sizeof(float));
        whale_round_f32_bf16(rnd, N);
        for (size_t i = 0; i < N; i++) {
            float want = whale_bf16_to_float(whale_float_to_bf16(src[i]));
            assert_memory_equal(&rnd[i], &want, 4);
        }
        whale_f32_to_fp16(h, src, N);
        for (size_t i = 0; i < N; i++) {
            uint16_t want = whale_float_to_fp16(src[i]);
            if (isnan(src[i])) /* NaN payloads may differ between units; NaN-ness may not */
                assert_true((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff));
            else
                assert_int_equal(h[i], want);
        }
        whale_fp16_to_f32(wide, h16, N);
        for (size_t i = 0; i < N; i++) {
            float want = whale_fp16_to_float(h16[i]);
            if (isnan(want))
                assert_true(isnan(wide[i]));
            else
                assert_memory_equal(&wide[i], &want, 4);
        }
        memcpy(rnd, src, N * sizeof(float));
        whale_round_f32_fp16(rnd, N);
        for (size_t i = 0; i < N; i++) {
            float want = whale_fp16_to_float(whale_float_to_fp16(src[i]));
            if (isnan(want))
                assert_true(isnan(rnd[i]));
            else
                assert_memory_equal(&rnd[i], &want, 4);
        }
    }
    util_dtype_force(-1);
    print_message("conversion path here: %s\n", whale_dtype_simd());
    free(src);
    free(wide);
    free(rnd);
    free(h);
    free(h16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_vector_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
