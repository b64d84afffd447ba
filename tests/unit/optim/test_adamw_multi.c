/* Multi-tensor host AdamW (whale_adamw_multi_*): one parallel region over
 * all tensors, the 16-bit copy written in the same pass. Every SIMD path
 * this CPU runs must be bit-identical to the engine's per-tensor update
 * (whale_adamw_update_mixed), including the cast's special cases: ties,
 * fp16 overflow to Inf, fp16 subnormals, NaN. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "whale/error.h"
#include "whale/optim.h"

/* block edges (16384), vector tails (15, 16, 17) and a multi-block tensor */
static const size_t NS[] = { 1, 15, 16, 17, 16383, 16384, 16385, 3, 70001, 768 };
enum { NT = sizeof NS / sizeof NS[0] };

struct set {
    float *w, *g, *m, *v;
    uint16_t *p;
    size_t n;
};

static void fill(struct set *s, size_t n, uint64_t seed)
{
    s->n = n;
    s->w = malloc(n * 4 * sizeof(float));
    s->p = calloc(n, sizeof(uint16_t));
    assert_non_null(s->w);
    assert_non_null(s->p);
    s->g = s->w + n, s->m = s->w + 2 * n, s->v = s->w + 3 * n;
    uint64_t r = seed;
    for (size_t i = 0; i < 4 * n; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        s->w[i] = (float)((int64_t)(r >> 11) % 2000001 - 1000000) * 1e-6f;
    }
    for (size_t i = 0; i < n; i++)
        s->v[i] = fabsf(s->v[i]) * 1e-3f;
    /* the cast's edge cases, at positions the vector loops reach */
    /* fp16: overflow to Inf, the largest finite, subnormals; bf16: ties to even
     * (1 + 2^-8 rounds down, 1 + 3 x 2^-8 up); fp16 ties (1 + 2^-11, 1 + 3 x 2^-11) */
    const float special[] = { 70000.0f,    -65520.0f,       65504.0f,    3e-6f,
                              -1e-7f,      1.00390625f,     1.01171875f, 1e30f,
                              1.00048828125f, 1.00146484375f };
    /* g = m = v = 0 there: on tensors without decay w stays exactly the special value
     * through the steps (ties stay ties), with decay it moves by lr * wd * w */
    for (size_t k = 0; k < sizeof special / sizeof special[0] && k * 5 < n; k++) {
        s->w[k * 5] = special[k];
        s->g[k * 5] = s->m[k * 5] = s->v[k * 5] = 0.0f;
    }
    if (n > 40)
        s->g[40] = NAN; /* a NaN gradient makes a NaN weight */
}

static void copy(struct set *d, const struct set *s)
{
    fill(d, s->n, 1);
    memcpy(d->w, s->w, s->n * 4 * sizeof(float));
}

static void drop(struct set *s)
{
    free(s->w);
    free(s->p);
}

static void test_multi_bitexact(void **st)
{
    (void)st;
    const struct whale_adamw o = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                   .weight_decay = 0.1f };
    const enum whale_dtype dts[] = { WHALE_FLOAT32, WHALE_BFLOAT16, WHALE_FLOAT16 };
    for (int s = WHALE_SIMD_SCALAR; s <= (int)whale_adamw_best_simd(); s++) {
        for (int d = 0; d < 3; d++) {
            struct set ref[NT], got[NT];
            struct whale_adamw_tensor ts[NT];
            for (int k = 0; k < NT; k++) {
                fill(&ref[k], NS[k], 7 + (uint64_t)k);
                copy(&got[k], &ref[k]);
                /* every other tensor without a 16-bit copy; decay alternates */
                ts[k] = (struct whale_adamw_tensor){ got[k].w, got[k].g, got[k].m, got[k].v,
                                                     k % 3 == 1 ? NULL : got[k].p, NS[k],
                                                     k % 2 == 0 };
            }
            for (int t = 1; t <= 3; t++) {
                const float gm = t == 2 ? 0.25f : 0.5f; /* a clip coefficient folded in */
                for (int k = 0; k < NT; k++)
                    whale_adamw_update_mixed(&o, t, ref[k].w, ref[k].g, ref[k].m, ref[k].v,
                                             k % 3 == 1 ? NULL : ref[k].p, dts[d], NS[k], gm,
                                             k % 2 == 0);
                assert_int_equal(
                    whale_adamw_multi_simd((enum whale_simd)s, &o, t, ts, NT, dts[d], gm), 0);
            }
            for (int k = 0; k < NT; k++) {
                assert_memory_equal(ref[k].w, got[k].w, NS[k] * 3 * sizeof(float));
                assert_memory_equal(ref[k].p, got[k].p, NS[k] * sizeof(uint16_t));
                drop(&ref[k]);
                drop(&got[k]);
            }
        }
        print_message("multi-tensor host AdamW %s: bit-identical (fp32, bf16, fp16 copies)\n",
                      whale_simd_name((enum whale_simd)s));
    }
}

static void test_multi_bad_input(void **st)
{
    (void)st;
    const struct whale_adamw o = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f };
    float x[4] = { 0 };
    const struct whale_adamw_tensor ts = { x, x + 1, x + 2, x + 3, NULL, 1, true };
    assert_int_equal(whale_adamw_multi_host(&o, 1, &ts, 1, WHALE_INT32, 1.0f), WHALE_EINVAL);
    assert_int_equal(whale_adamw_multi_host(&o, 0, &ts, 1, WHALE_FLOAT32, 1.0f), WHALE_EINVAL);
    assert_int_equal(whale_adamw_multi_host(&o, 1, NULL, 1, WHALE_FLOAT32, 1.0f), WHALE_EINVAL);
    assert_int_equal(whale_adamw_multi_host(&o, 1, &ts, -1, WHALE_FLOAT32, 1.0f), WHALE_EINVAL);
    assert_int_equal(whale_adamw_multi_host(&o, 1, NULL, 0, WHALE_FLOAT32, 1.0f), 0);
    /* many tensors: the block table leaves the stack */
    enum { MANY = 200 };
    struct whale_adamw_tensor *many = calloc(MANY, sizeof *many);
    float *b = calloc(MANY * 4, sizeof(float));
    assert_non_null(many);
    assert_non_null(b);
    for (int k = 0; k < MANY; k++)
        many[k] = (struct whale_adamw_tensor){ b + 4 * k, b + 4 * k + 1, b + 4 * k + 2,
                                               b + 4 * k + 3, NULL, 1, true };
    b[1] = 1.0f; /* tensor 0's gradient: its weight moves, the others stay 0 */
    assert_int_equal(whale_adamw_multi_host(&o, 1, many, MANY, WHALE_FLOAT32, 1.0f), 0);
    assert_true(b[0] < 0.0f);
    for (int k = 1; k < MANY; k++)
        assert_true(b[4 * k] == 0.0f);
    free(many);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_bitexact),
        cmocka_unit_test(test_multi_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
