/* whale_engine_next_probs against the training forward: after a few steps
 * on fixed tokens, the mean over positions n = 1..T of
 * -log next_probs(tokens[0..n))[tokens[n]] must equal whale_engine_eval's
 * loss on the same window (targets = tokens shifted by one). This checks
 * the probabilities are the model's, at the right position, and that the
 * padding after position n-1 is never seen (causality). Also: refusals of
 * layouts it cannot run. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "whale/engine.h"
#include "whale/error.h"
#include "whale/generate.h"

#define T 16

static whale_engine *make(int micro, enum whale_precision p)
{
    struct whale_model_desc md;
    assert_int_equal(whale_model_desc_load("gpt-tiny", &md), 0);
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    c.model = md;
    c.seq = T;
    c.micro_batch = micro;
    c.total_steps = 10;
    c.lr = 3e-3f;
    c.threads = 1;
    c.precision = p;
    whale_engine *e;
    assert_int_equal(whale_engine_create(&c, NULL, &e), 0);
    return e;
}

static void test_matches_eval(void **st)
{
    (void)st;
    whale_engine *e = make(1, WHALE_PREC_FP32);
    int32_t tok[T + 1];
    for (int i = 0; i <= T; i++)
        tok[i] = (i * 37 + 11) % 256;
    for (int s = 0; s < 5; s++) /* leave the random init: a peaked model */
        assert_int_equal(whale_engine_step(e, tok, tok + 1, NULL), 0);
    double loss;
    assert_int_equal(whale_engine_eval(e, tok, tok + 1, &loss), 0);
    int V = whale_engine_vocab(e);
    assert_int_equal(V, 256);
    assert_int_equal(whale_engine_seq(e), T);
    float *p = malloc(sizeof(float) * V);
    double sum = 0;
    for (int n = 1; n <= T; n++) {
        assert_int_equal(whale_engine_next_probs(e, tok, n, p), 0);
        double tot = 0;
        for (int v = 0; v < V; v++)
            tot += p[v];
        assert_true(fabs(tot - 1) < 1e-4);
        sum += -log(p[tok[n]]);
    }
    double mine = sum / T;
    assert_true(fabs(mine - loss) / loss < 1e-5);
    assert_true(loss < log(256.0)); /* it learned something */
    /* bad arguments */
    assert_int_equal(whale_engine_next_probs(e, tok, 0, p), WHALE_EINVAL);
    assert_int_equal(whale_engine_next_probs(e, tok, T + 1, p), WHALE_EINVAL);
    int32_t badt[2] = { 1, 999 };
    assert_int_equal(whale_engine_next_probs(e, badt, 2, p), WHALE_EINVAL);
    free(p);
    whale_engine_destroy(e);
}

static void test_refuses_layouts(void **st)
{
    (void)st;
    float p[256];
    int32_t tok[2] = { 1, 2 };
    whale_engine *e = make(2, WHALE_PREC_FP32);
    assert_int_equal(whale_engine_next_probs(e, tok, 2, p), WHALE_EINVAL);
    whale_engine_destroy(e);
    e = make(1, WHALE_PREC_BF16);
    assert_int_equal(whale_engine_next_probs(e, tok, 2, p), WHALE_EINVAL);
    whale_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest t[] = {
        cmocka_unit_test(test_matches_eval),
        cmocka_unit_test(test_refuses_layouts),
    };
    return cmocka_run_group_tests(t, NULL, NULL);
}
