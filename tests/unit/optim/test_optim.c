/* AdamW against a hand-computed step, clipping, the cosine schedule, and
 * the dynamic loss scaler; plus an injected overflow in a real engine step:
 * the step is skipped (weights unchanged), the scale halves, training goes
 * on. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/engine.h"
#include "whale/optim.h"

static void test_adamw_step(void **st)
{
    (void)st;
    struct whale_adamw o = { .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.5f };
    float w[2] = { 1.0f, -2.0f }, g[2] = { 0.5f, -0.25f }, m[2] = { 0 }, v[2] = { 0 };
    whale_adamw_update(&o, 1, w, g, m, v, 2, 1.0f, true);
    /* t=1: mhat = g, vhat = g^2 -> update = sign(g) (+eps), plus decay lr*wd*w */
    assert_float_equal(w[0], 1.0f - 0.1f * (1.0f + 0.5f * 1.0f), 1e-6);
    assert_float_equal(w[1], -2.0f - 0.1f * (-1.0f + 0.5f * -2.0f), 1e-6);
    assert_float_equal(m[0], 0.05f, 1e-7);
    assert_float_equal(v[1], 0.05f * 0.0625f, 1e-8);
    /* no decay for biases / LayerNorm */
    float w2 = 1.0f, g2 = 0.5f, m2 = 0, v2 = 0;
    whale_adamw_update(&o, 1, &w2, &g2, &m2, &v2, 1, 1.0f, false);
    assert_float_equal(w2, 0.9f, 1e-6);
    /* grad_mul scales the gradient before the moments */
    float w3 = 1.0f, g3 = 4.0f, m3 = 0, v3 = 0;
    whale_adamw_update(&o, 1, &w3, &g3, &m3, &v3, 1, 0.25f, false);
    assert_float_equal(m3, 0.1f, 1e-7);
}

static void test_clip(void **st)
{
    (void)st;
    float g[4] = { 3, 4, 0, 0 };
    double n = sqrt(whale_sumsq(g, 4));
    assert_float_equal(n, 5.0, 1e-12);
    assert_float_equal(whale_clip_coef(n, 1.0f), 0.2f, 1e-6);
    assert_float_equal(whale_clip_coef(n, 10.0f), 1.0f, 0);
    assert_float_equal(whale_clip_coef(n, 0.0f), 1.0f, 0);
    /* sum is independent of the thread count: fixed chunks */
    size_t N = 1 << 20;
    float *big = malloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++)
        big[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    double a = whale_sumsq(big, N), b = whale_sumsq(big, N);
    assert_true(a == b);
    free(big);
}

/* whale_sumsq_multi (the gradient norm's pass over all tensors in one
 * parallel region) gives each tensor the bits of whale_sumsq: empty, tiny,
 * serial (<= 64 Ki), split and longer-chunk (over 1024 chunks of 8 Ki)
 * tensors together. */
static void test_sumsq_multi(void **st)
{
    (void)st;
    const int64_t n[] = { 0, 3, 65536, 300001, 8192 * 1024 + 77, 1 };
    enum { NP = sizeof n / sizeof n[0] };
    const float *g[NP];
    double ss[NP];
    for (int i = 0; i < NP; i++) {
        float *x = malloc(((size_t)n[i] + 1) * sizeof(float));
        assert_non_null(x);
        for (int64_t j = 0; j < n[i]; j++)
            x[j] = (float)(((uint64_t)j * 2654435761u + (uint64_t)i) % 1999) / 997.0f - 1.0f;
        g[i] = x;
    }
    assert_int_equal(whale_sumsq_multi(g, n, NP, ss), 0);
    for (int i = 0; i < NP; i++) {
        assert_true(ss[i] == whale_sumsq(g[i], (size_t)n[i]));
        free((void *)g[i]);
    }
    assert_int_equal(whale_sumsq_multi(g, n, 0, ss), 0);
}

static void test_schedule(void **st)
{
    (void)st;
    struct whale_lr_schedule s = { .lr_max = 1.0f, .lr_min = 0.1f, .warmup = 10, .total = 110 };
    assert_float_equal(whale_lr_at(&s, 0), 0.1f, 1e-6);
    assert_float_equal(whale_lr_at(&s, 9), 1.0f, 1e-6);
    assert_float_equal(whale_lr_at(&s, 10), 1.0f, 1e-6);
    assert_float_equal(whale_lr_at(&s, 60), 0.55f, 1e-6);   /* half way: mean of max and min */
    assert_float_equal(whale_lr_at(&s, 110), 0.1f, 1e-6);
    assert_float_equal(whale_lr_at(&s, 500), 0.1f, 1e-6);
    for (int t = 11; t < 110; t++)
        assert_true(whale_lr_at(&s, t) <= whale_lr_at(&s, t - 1));
}

static void test_scaler(void **st)
{
    (void)st;
    struct whale_loss_scaler s;
    whale_loss_scaler_init(&s, true, 1024.0f, 3);
    assert_false(whale_loss_scaler_update(&s, false));
    assert_false(whale_loss_scaler_update(&s, false));
    assert_float_equal(s.scale, 1024.0f, 0);
    assert_false(whale_loss_scaler_update(&s, false)); /* 3 clean steps: grow */
    assert_float_equal(s.scale, 2048.0f, 0);
    assert_true(whale_loss_scaler_update(&s, true));   /* overflow: skip, back off */
    assert_float_equal(s.scale, 1024.0f, 0);
    assert_int_equal(s.skipped, 1);
    assert_int_equal(s.good_steps, 0);
    float g[3] = { 1, NAN, 2 };
    assert_true(whale_has_inf_nan(g, 3));
    g[1] = INFINITY;
    assert_true(whale_has_inf_nan(g, 3));
    g[1] = 0;
    assert_false(whale_has_inf_nan(g, 3));
}

struct snap {
    double sum;
};
static int sum_params(const struct whale_tensor_piece *p, void *user)
{
    struct snap *s = user;
    if (p->kind == WHALE_TENSOR_PARAM) {
        const float *f = p->data;
        for (int64_t i = 0; i < p->flat_end - p->flat_begin; i++)
            s->sum += f[i] * (double)(i % 13 + 1);
    }
    return 0;
}

static void test_overflow_injection(void **st)
{
    (void)st;
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    c.model = (struct whale_model_desc){ .name = "t", .layers = 1, .hidden = 16, .heads = 2,
                                         .kv_heads = 2, .ffn = 64, .seq = 8, .vocab = 32,
                                         .tied_embeddings = true };
    c.seq = 8;
    c.micro_batch = 2;
    c.threads = 1;
    c.loss_scaling = true;
    c.init_scale = 1024.0f;
    c.scale_growth_interval = 1000;
    whale_engine *e = NULL;
    assert_int_equal(whale_engine_create(&c, NULL, &e), 0);
    int32_t in[16], tg[16];
    for (int i = 0; i < 16; i++) {
        in[i] = i % 5;
        tg[i] = (i + 1) % 5;
    }
    struct whale_step_stats s;
    assert_int_equal(whale_engine_step(e, in, tg, &s), 0);
    assert_false(s.skipped);
    struct snap before = { 0 }, after = { 0 };
    whale_engine_tensors(e, sum_params, &before);
    whale_engine_inject_overflow(e);
    assert_int_equal(whale_engine_step(e, in, tg, &s), 0);
    assert_true(s.skipped);
    assert_float_equal(s.loss_scale, 512.0f, 0);
    whale_engine_tensors(e, sum_params, &after);
    assert_true(before.sum == after.sum); /* weights untouched */
    struct whale_train_state ts;
    whale_engine_get_state(e, &ts);
    assert_int_equal(ts.step, 2);
    assert_int_equal(ts.adam_t, 1);
    assert_int_equal(ts.scaler_skipped, 1);
    assert_int_equal(whale_engine_step(e, in, tg, &s), 0); /* recovers */
    assert_false(s.skipped);
    assert_true(isfinite(s.loss) && isfinite(s.grad_norm));
    whale_engine_tensors(e, sum_params, &after);
    assert_true(before.sum != after.sum);
    whale_engine_destroy(e);
}

/* The loss scale must not change the training math (power-of-two scale). */
static void test_scaled_equals_unscaled(void **st)
{
    (void)st;
    double loss[2][5];
    for (int k = 0; k < 2; k++) {
        struct whale_engine_config c;
        whale_engine_config_defaults(&c);
        c.model = (struct whale_model_desc){ .name = "t", .layers = 1, .hidden = 16, .heads = 2,
                                             .kv_heads = 2, .ffn = 64, .seq = 8, .vocab = 32,
                                             .tied_embeddings = true };
        c.seq = 8;
        c.micro_batch = 2;
        c.threads = 1;
        c.loss_scaling = k == 1;
        c.init_scale = 4096.0f;
        whale_engine *e = NULL;
        assert_int_equal(whale_engine_create(&c, NULL, &e), 0);
        int32_t in[16], tg[16];
        for (int i = 0; i < 16; i++) {
            in[i] = (i * 3) % 7;
            tg[i] = (i + 2) % 7;
        }
        for (int s = 0; s < 5; s++) {
            struct whale_step_stats ss;
            assert_int_equal(whale_engine_step(e, in, tg, &ss), 0);
            loss[k][s] = ss.loss;
        }
        whale_engine_destroy(e);
    }
    for (int s = 0; s < 5; s++)
        assert_true(fabs(loss[0][s] - loss[1][s]) <= 1e-6 * fabs(loss[0][s]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_step),      cmocka_unit_test(test_clip),
        cmocka_unit_test(test_schedule),        cmocka_unit_test(test_scaler),
        cmocka_unit_test(test_sumsq_multi),
        cmocka_unit_test(test_overflow_injection), cmocka_unit_test(test_scaled_equals_unscaled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
