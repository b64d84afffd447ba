/* The import's streaming bf16 -> fp32 widening (runtime/src/ckpt/hf_cvt.c)
 * gives the bits of whale_bf16_to_float on every vector path (AVX-512,
 * AVX2, portable C, as the machine has them), every destination alignment
 * and lengths around the streaming threshold and the vector widths. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "hf_cvt.c" /* internal to libwhale: compiled in here */
#include "util/dtype_internal.h"

static void test_widen_paths(void **st)
{
    (void)st;
    enum { N = 5000 };
    uint16_t *src = malloc(N * 2);
    float *dst = malloc((N + 16) * sizeof(float));
    uint32_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        src[i] = (uint16_t)(x >> 8); /* every bit pattern: NaN, Inf, subnormal */
    }
    static const size_t lens[] = {0, 1, 7, 8, 15, 16, 17, 255, 256, 257, 263, 1000, 4099, N};
    int levels = 0;
    for (int lvl = 0; lvl <= 2; lvl++) {
        if (util_dtype_force(lvl) != lvl)
            continue;
        levels++;
        for (size_t a = 0; a < 16; a++) /* destination offset in floats: every alignment */
            for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
                size_t n = lens[k];
                memset(dst, 0xa5, (N + 16) * sizeof(float));
                hf_bf16_to_f32_stream(dst + a, src, n);
                for (size_t i = 0; i < n; i++) {
                    uint32_t want = (uint32_t)src[i] << 16, got;
                    memcpy(&got, &dst[a + i], 4);
                    assert_int_equal(got, want);
                }
                uint32_t guard;
                memcpy(&guard, &dst[a + n], 4);
                assert_int_equal(guard, 0xa5a5a5a5u); /* nothing written past the end */
            }
    }
    util_dtype_force(-1);
    print_message("widening checked on %d path(s); this machine's: %s\n", levels,
                  whale_dtype_simd());
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_widen_paths)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
