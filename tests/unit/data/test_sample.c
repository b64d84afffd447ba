/* whale-generate's sampler (runtime/tools/data/sample.c): greedy is the
 * argmax, top-k and top-p (nucleus) never pick outside their set, and the
 * same seed repeats the same picks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../../runtime/tools/data/sample.h"

/* a distribution with a clear order: p[v] = w[v] / sum */
static const float P[6] = {0.05f, 0.40f, 0.02f, 0.30f, 0.20f, 0.03f};

static void greedy_is_argmax(void **st)
{
    (void)st;
    struct wg_sampler s;
    assert_int_equal(wg_sampler_init(&s, 0, 0, 1, 7, 6), 0);
    assert_int_equal(wg_sample(&s, P, 6), 1);
    wg_sampler_free(&s);
}

/* top-p 0.6 at temperature 1: 0.40 + 0.30 >= 0.6, so only tokens 1 and 3;
 * top-p 0.75: 1, 3 and 4 (0.40 + 0.30 < 0.75 <= 0.90) */
static void top_p_keeps_the_nucleus(void **st)
{
    (void)st;
    struct wg_sampler s;
    int seen[6] = {0};
    assert_int_equal(wg_sampler_init(&s, 1.0, 0, 0.6, 3, 6), 0);
    for (int i = 0; i < 2000; i++)
        seen[wg_sample(&s, P, 6)]++;
    wg_sampler_free(&s);
    assert_true(seen[1] > 0 && seen[3] > 0);
    assert_int_equal(seen[0] + seen[2] + seen[4] + seen[5], 0);
    /* renormalized over the nucleus: 1 is picked 0.4/0.7 of the time */
    assert_true(seen[1] > 1000 && seen[1] < 1300);
    int seen2[6] = {0};
    assert_int_equal(wg_sampler_init(&s, 1.0, 0, 0.75, 3, 6), 0);
    for (int i = 0; i < 2000; i++)
        seen2[wg_sample(&s, P, 6)]++;
    wg_sampler_free(&s);
    assert_true(seen2[4] > 0);
    assert_int_equal(seen2[0] + seen2[2] + seen2[5], 0);
}

/* top-k 2 then top-p 0.99: the nucleus is taken of the top-k set */
static void top_k_then_top_p(void **st)
{
    (void)st;
    struct wg_sampler s;
    int seen[6] = {0};
    assert_int_equal(wg_sampler_init(&s, 1.0, 2, 0.99, 5, 6), 0);
    for (int i = 0; i < 500; i++)
        seen[wg_sample(&s, P, 6)]++;
    wg_sampler_free(&s);
    assert_int_equal(seen[1] + seen[3], 500);
    assert_true(seen[3] > 0);
}

static void same_seed_same_picks(void **st)
{
    (void)st;
    struct wg_sampler a, b;
    assert_int_equal(wg_sampler_init(&a, 0.8, 0, 0.9, 42, 6), 0);
    assert_int_equal(wg_sampler_init(&b, 0.8, 0, 0.9, 42, 6), 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(wg_sample(&a, P, 6), wg_sample(&b, P, 6));
    wg_sampler_free(&a);
    wg_sampler_free(&b);
}

int main(void)
{
    const struct CMUnitTest t[] = {
        cmocka_unit_test(greedy_is_argmax),
        cmocka_unit_test(top_p_keeps_the_nucleus),
        cmocka_unit_test(top_k_then_top_p),
        cmocka_unit_test(same_seed_same_picks),
    };
    return cmocka_run_group_tests(t, NULL, NULL);
}
