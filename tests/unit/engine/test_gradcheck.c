/* Gradient check: every layer's backward (parameters and input) against
 * central finite differences of a random linear functional of its output.
 * Norm-wise relative error over the checked elements must be < 1e-3. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "backend/kernels.h"
#include "whale/engine.h"

static uint64_t rs = 12345;
static float urand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0) * 2.0f - 1.0f;
}

struct gc {
    whale_engine *e;
    int li;
    int32_t *tok, *tgt;
    float *R;     /* (N,C) functional weights */
    float *x;     /* layer input (N,C) */
    size_t N, C;
};

static float *bnd(whale_engine *e, int i)
{
    return e->xb + (size_t)i * e->d.B * e->d.T * e->d.C;
}

/* Objective: block/embed: sum(out * R); head: mean token loss. */
static double objective(struct gc *g)
{
    whale_engine *e = g->e;
    struct eng_layer *l = &e->layers[g->li];
    struct eng_io io = { 0 };
    io.tokens = g->tok;
    io.targets = g->tgt;
    if (g->li > 0) {
        memcpy(bnd(e, g->li - 1), g->x, g->N * g->C * sizeof(float));
        io.in = bnd(e, g->li - 1);
    }
    io.out = g->li < e->nl - 1 ? bnd(e, g->li) : NULL;
    io.saved = e->saved + e->saved_off[g->li];
    io.scratch = e->scratch;
    assert_int_equal(l->ops->forward(l, &io), 0);
    if (!io.out)
        return io.loss_sum / (double)g->N;
    double f = 0;
    for (size_t i = 0; i < g->N * g->C; i++)
        f += (double)io.out[i] * g->R[i];
    return f;
}

static void analytic(struct gc *g)
{
    whale_engine *e = g->e;
    struct eng_layer *l = &e->layers[g->li];
    memset(e->G, 0, e->P * sizeof(float));
    objective(g);
    struct eng_io io = { 0 };
    io.tokens = g->tok;
    io.targets = g->tgt;
    io.in = g->li > 0 ? bnd(e, g->li - 1) : NULL;
    io.saved = e->saved + e->saved_off[g->li];
    io.scratch = e->scratch;
    io.dstream = e->dstream;
    io.dloss = 1.0f / (float)g->N;
    if (g->li < e->nl - 1)
        memcpy(e->dstream, g->R, g->N * g->C * sizeof(float));
    assert_int_equal(l->ops->backward(l, &io), 0);
}

/* Compare analytic vs numeric for up to `k` elements of array a (n). */
static void check_elems(struct gc *g, float *a, const float *ga, size_t n, int k,
                        const char *what)
{
    double num2 = 0, den = 0, an2 = 0, nn2 = 0;
    for (int s = 0; s < k; s++) {
        size_t i = n <= (size_t)k ? (size_t)s : (size_t)((urand() * 0.5f + 0.5f) * (n - 1));
        if (i >= n)
            break;
        float orig = a[i];
        const float h = 1e-2f;
        a[i] = orig + h;
        double fp = objective(g);
        a[i] = orig - h;
        double fm = objective(g);
        a[i] = orig;
        double num = (fp - fm) / (2.0 * h);
        double an = ga[i];
        num2 += (num - an) * (num - an);
        an2 += an * an;
        nn2 += num * num;
    }
    den = sqrt(an2) + sqrt(nn2);
    double rel = den > 0 ? sqrt(num2) / den : 0;
    printf("  %-28s rel err %.2e (|grad| %.2e)\n", what, rel, sqrt(an2));
    if (den > 1e-6)
        assert_true(rel < 1e-3);
    else
        assert_true(sqrt(num2) < 1e-6);
}

static whale_engine *tiny_engine_lr(float lr)
{
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    c.model = (struct whale_model_desc){ .name = "gc", .layers = 2, .hidden = 16, .heads = 2,
                                         .kv_heads = 2, .ffn = 64, .seq = 8, .vocab = 32,
                                         .tied_embeddings = true };
    c.seq = 8;
    c.micro_batch = 2;
    c.threads = 2;
    if (lr > 0)
        c.lr = lr;
    whale_engine *e = NULL;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    return e;
}

static whale_engine *tiny_engine(void)
{
    return tiny_engine_lr(0);
}

static void run_layer(int li)
{
    struct gc g = { 0 };
    g.e = tiny_engine();
    whale_engine *e = g.e;
    g.li = li;
    g.N = (size_t)e->d.B * e->d.T;
    g.C = e->d.C;
    g.tok = malloc(g.N * sizeof(int32_t));
    g.tgt = malloc(g.N * sizeof(int32_t));
    g.R = malloc(g.N * g.C * sizeof(float));
    g.x = malloc(g.N * g.C * sizeof(float));
    for (size_t i = 0; i < g.N; i++) {
        g.tok[i] = (int32_t)((urand() * 0.5f + 0.5f) * (e->d.V - 1));
        g.tgt[i] = (int32_t)((urand() * 0.5f + 0.5f) * (e->d.V - 1));
    }
    for (size_t i = 0; i < g.N * g.C; i++) {
        g.R[i] = urand();
        g.x[i] = urand();
    }
    /* LayerNorm weights and biases away from 1/0 so their gradients matter */
    for (size_t i = 0; i < e->P; i++)
        e->W[i] += 0.1f * urand();
    analytic(&g);
    struct eng_layer *l = &e->layers[li];
    printf("layer %s\n", l->name);
    float *gcopy = malloc(e->P * sizeof(float));
    memcpy(gcopy, e->G, e->P * sizeof(float));
    for (int p = 0; p < l->nparams; p++)
        check_elems(&g, e->W + l->params[p].flat, gcopy + l->params[p].flat,
                    l->params[p].numel, 24, l->params[p].name);
    if (l->tied) /* the head's gradient into wte */
        check_elems(&g, e->W + l->tied->params[0].flat, gcopy + l->tied->params[0].flat,
                    l->tied->params[0].numel, 48, "wte (tied, via head)");
    if (li > 0) {
        float *dx = malloc(g.N * g.C * sizeof(float));
        memcpy(dx, e->dstream, g.N * g.C * sizeof(float));
        check_elems(&g, g.x, dx, g.N * g.C, 48, "input");
        free(dx);
    }
    free(gcopy);
    free(g.tok);
    free(g.tgt);
    free(g.R);
    free(g.x);
    whale_engine_destroy(e);
}

static void test_embed(void **st) { (void)st; run_layer(0); }
static void test_block(void **st) { (void)st; run_layer(1); }
static void test_head(void **st) { (void)st; run_layer(3); }

/* A whole step: the loss falls on a repeated batch (forward/backward/AdamW wired). */
static void test_overfit(void **st)
{
    (void)st;
    whale_engine *e = tiny_engine_lr(1e-2f);
    size_t N = (size_t)e->d.B * e->d.T;
    int32_t *tok = malloc(N * 4), *tgt = malloc(N * 4);
    for (size_t i = 0; i < N; i++) {
        tok[i] = (int32_t)(i % 7);
        tgt[i] = (int32_t)((i + 1) % 7);
    }
    struct whale_step_stats s0, s;
    assert_int_equal(whale_engine_step(e, tok, tgt, &s0), 0);
    for (int i = 0; i < 40; i++)
        assert_int_equal(whale_engine_step(e, tok, tgt, &s), 0);
    printf("overfit: loss %.4f -> %.4f\n", s0.loss, s.loss);
    assert_true(s0.loss > 3.0);
    assert_true(s.loss < 0.5 * s0.loss);
    free(tok);
    free(tgt);
    whale_engine_destroy(e);
}

/* Recomputation changes memory, never the numbers: none / selective / full
 * / a per-layer set give bit-identical losses; activation bytes shrink
 * (selective drops the B*NH*T*T probabilities, full keeps block inputs). */
static void test_recompute(void **st)
{
    (void)st;
    double loss[4][6];
    int64_t act[4];
    static const int two_layers[] = { 0, 2 };
    for (int k = 0; k < 4; k++) {
        struct whale_engine_config c;
        whale_engine_config_defaults(&c);
        c.model = (struct whale_model_desc){ .name = "rc", .layers = 3, .hidden = 32, .heads = 4,
                                             .kv_heads = 4, .ffn = 128, .seq = 16, .vocab = 64,
                                             .tied_embeddings = true };
        c.seq = 16;
        c.micro_batch = 2;
        c.threads = 2;
        c.lr = 3e-3f;
        c.recompute = k == 0 ? WHALE_RECOMPUTE_NONE : k == 1 ? WHALE_RECOMPUTE_SELECTIVE
                    : k == 2 ? WHALE_RECOMPUTE_FULL : WHALE_RECOMPUTE_LAYERS;
        c.recompute_layers = two_layers;
        c.n_recompute_layers = k == 3 ? 2 : 0;
        whale_engine *e = NULL;
        assert_int_equal(whale_engine_create(&c, NULL, &e), 0);
        int32_t in[32], tg[32];
        for (int i = 0; i < 32; i++) {
            in[i] = (i * 5) % 11;
            tg[i] = (i * 3 + 1) % 13;
        }
        for (int s2 = 0; s2 < 6; s2++) {
            struct whale_step_stats ss;
            assert_int_equal(whale_engine_step(e, in, tg, &ss), 0);
            loss[k][s2] = ss.loss;
        }
        struct whale_engine_memory m;
        whale_engine_memory(e, &m);
        act[k] = m.act_bytes;
        whale_engine_destroy(e);
    }
    for (int k = 1; k < 4; k++)
        for (int s2 = 0; s2 < 6; s2++)
            assert_true(loss[k][s2] == loss[0][s2]);
    const int64_t B = 2, NH = 4, T = 16, L = 3;
    printf("activation bytes: none %lld, selective %lld, full %lld, blocks {0,2} %lld\n",
           (long long)act[0], (long long)act[1], (long long)act[2], (long long)act[3]);
    /* selective: the probability tensors of (at least) all blocks but one are gone */
    assert_true(act[0] - act[1] >= (L - 1) * B * NH * T * T * 4);
    assert_true(act[2] < act[1]);
    assert_true(act[3] < act[0] && act[3] > act[2]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_block),
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_overfit),
        cmocka_unit_test(test_recompute),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
