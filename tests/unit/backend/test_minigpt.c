/* The backend-only GPT of tests/gpu (minigpt), checked here on the cpu
 * backend so the harness that compares CUDA with CPU on a GPU machine is
 * itself right: gradients against central differences, the loss falls when
 * training on one batch, and bf16 follows fp32 closely. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../gpu/minigpt.h"
#include "whale/error.h"

static const struct mg_config tiny = { .L = 2, .C = 32, .NH = 4, .V = 64, .T = 16, .B = 2,
                                       .t = WHALE_FLOAT32, .seed = 7 };

static whale_backend *cpu(void)
{
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = WHALE_DEVICE_CPU;
    o.threads = 1;
    whale_backend *b = NULL;
    assert_int_equal(whale_backend_open(&o, &b), 0);
    return b;
}

static void batch(int32_t *tok, int32_t *tgt, int n, int V, unsigned salt)
{
    /* a learnable sequence: next token = (3 * token + 1) mod V */
    unsigned s = 12345u + salt;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        tok[i] = (int32_t)((s >> 16) % (unsigned)V);
        tgt[i] = (3 * tok[i] + 1) % V;
    }
}

static void test_gradcheck(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    struct mg_model *m = NULL;
    assert_int_equal(mg_create(b, &tiny, &m), 0);
    int n = tiny.B * tiny.T;
    int32_t tok[64], tgt[64];
    batch(tok, tgt, n, tiny.V, 0);
    size_t P = mg_flat_size(m);
    float *w = malloc(P * 4), *g = malloc(P * 4), loss;
    assert_int_equal(mg_grads(m, tok, tgt, &loss), 0);
    assert_true(loss > 3.5f && loss < 4.8f); /* ~ln(64) at init */
    assert_int_equal(mg_get_grads(m, g), 0);
    assert_int_equal(mg_get_params(m, w), 0);
    /* the 12 largest-gradient coordinates, spread over the model */
    int checked = 0;
    for (size_t lo = 0; lo < P && checked < 12; lo += P / 12) {
        size_t hi = lo + P / 12 < P ? lo + P / 12 : P, best = lo;
        for (size_t i = lo; i < hi; i++)
            if (fabsf(g[i]) > fabsf(g[best]))
                best = i;
        if (fabsf(g[best]) < 1e-3f)
            continue;
        float keep = w[best], lp, lm, h = 1e-2f;
        w[best] = keep + h;
        assert_int_equal(mg_set_params(m, w), 0);
        assert_int_equal(mg_loss(m, tok, tgt, &lp), 0);
        w[best] = keep - h;
        assert_int_equal(mg_set_params(m, w), 0);
        assert_int_equal(mg_loss(m, tok, tgt, &lm), 0);
        w[best] = keep;
        float fd = (lp - lm) / (2 * h);
        if (fabsf(fd - g[best]) > 0.05f * fabsf(g[best]) + 2e-4f)
            fail_msg("param %zu: backward %g, central difference %g", best, g[best], fd);
        checked++;
    }
    assert_true(checked >= 6);
    free(w);
    free(g);
    mg_free(m);
    whale_backend_close(b);
}

static void run(enum whale_dtype t, int steps, float *losses)
{
    whale_backend *b = cpu();
    struct mg_config c = tiny;
    c.t = t;
    struct mg_model *m = NULL;
    assert_int_equal(mg_create(b, &c, &m), 0);
    int32_t tok[64], tgt[64];
    batch(tok, tgt, c.B * c.T, c.V, 1);
    for (int s = 0; s < steps; s++)
        assert_int_equal(mg_step(m, tok, tgt, 1e-2f, &losses[s]), 0);
    mg_free(m);
    whale_backend_close(b);
}

static void test_train_fp32_bf16(void **st)
{
    (void)st;
    enum { S = 40 };
    float l32[S], l16[S];
    run(WHALE_FLOAT32, S, l32);
    run(WHALE_BFLOAT16, S, l16);
    printf("loss fp32 %.4f -> %.4f, bf16 %.4f -> %.4f\n", l32[0], l32[S - 1], l16[0], l16[S - 1]);
    assert_true(l32[S - 1] < 0.5f * l32[0]);
    assert_true(l16[S - 1] < 0.5f * l16[0]);
    /* bf16 activations and weights follow fp32 within 2 % for the first steps */
    for (int s = 0; s < 5; s++)
        assert_true(fabsf(l16[s] - l32[s]) <= 0.02f * l32[s]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_train_fp32_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
