/* Llama-style blocks: finite-difference gradient checks of the
 * new kernels (RMSNorm, SwiGLU/GeGLU, rotary, blocked attention with GQA)
 * and of every layer of engines built from Llama-style descriptions, the
 * blocked attention against the plain one, and a GPT-2 model trained with
 * Attention=flash against Attention=plain. Gradient checks pass at a
 * norm-wise relative error < 1e-3 (central differences, fp32 kernels). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/attn_blocked.h"
#include "engine/engine_internal.h"
#include "engine/kernels.h"
#include "engine/kernels_llama.h"
#include "whale/engine.h"
#include "whale/error.h"
#include "whale/modeldesc.h"

static uint64_t rs = 424242;
static float urand(void) /* [-1, 1) */
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0) * 2.0f - 1.0f;
}
static void fill(float *a, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        a[i] = urand() * scale;
}

/* Norm-wise relative error of an analytic gradient ga of f at the k sampled
 * elements of a (n), against central differences. */
typedef double (*objective_fn)(void *ctx);
static double fd_check(objective_fn f, void *ctx, float *a, const float *ga, size_t n, int k,
                       float h, const char *what)
{
    double e2 = 0, an2 = 0, nn2 = 0;
    for (int s = 0; s < k; s++) {
        size_t i = n <= (size_t)k ? (size_t)s : (size_t)((urand() * 0.5f + 0.5f) * (n - 1));
        if (i >= n)
            break;
        float orig = a[i];
        a[i] = orig + h;
        double fp = f(ctx);
        a[i] = orig - h;
        double fm = f(ctx);
        a[i] = orig;
        double num = (fp - fm) / (2.0 * h), an = ga[i];
        e2 += (num - an) * (num - an);
        an2 += an * an;
        nn2 += num * num;
    }
    double den = sqrt(an2) + sqrt(nn2), rel = den > 0 ? sqrt(e2) / den : 0;
    printf("  %-34s rel err %.2e (|grad| %.2e)\n", what, rel, sqrt(an2));
    if (den > 1e-6)
        assert_true(rel < 1e-3);
    else
        assert_true(sqrt(e2) < 1e-6);
    return rel;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* ---- RMSNorm ---------------------------------------------------------------- */

struct rms_ctx { int N, C; float *x, *w, *y, *rstd, *R; };
static double rms_obj(void *p)
{
    struct rms_ctx *c = p;
    k_rmsnorm_fwd(c->y, c->rstd, c->x, c->w, c->N, c->C, K_RMS_EPS);
    return dot(c->y, c->R, (size_t)c->N * c->C);
}

static void test_rmsnorm_grad(void **st)
{
    (void)st;
    struct rms_ctx c = { .N = 6, .C = 24 };
    size_t n = (size_t)c.N * c.C;
    c.x = malloc(n * 4); c.y = malloc(n * 4); c.R = malloc(n * 4);
    c.w = malloc(c.C * 4); c.rstd = malloc(c.N * 4);
    float *dx = calloc(n, 4), *dw = calloc(c.C, 4);
    fill(c.x, n, 1.5f);
    fill(c.R, n, 1.0f);
    for (int i = 0; i < c.C; i++)
        c.w[i] = 1.0f + 0.3f * urand();
    rms_obj(&c);
    k_rmsnorm_bwd(dx, dw, c.R, c.x, c.w, c.rstd, c.N, c.C);
    fd_check(rms_obj, &c, c.x, dx, n, 48, 1e-2f, "rmsnorm input");
    fd_check(rms_obj, &c, c.w, dw, c.C, 24, 1e-2f, "rmsnorm weight");
    free(c.x); free(c.y); free(c.R); free(c.w); free(c.rstd); free(dx); free(dw);
}

/* ---- SwiGLU / GeGLU ----------------------------------------------------------- */

struct glu_ctx { enum k_glu act; size_t n; float *g, *u, *h, *R; };
static double glu_obj(void *p)
{
    struct glu_ctx *c = p;
    k_glu_fwd(c->act, c->h, c->g, c->u, (int64_t)c->n);
    return dot(c->h, c->R, c->n);
}

static void glu_case(enum k_glu act, const char *name)
{
    struct glu_ctx c = { .act = act, .n = 200 };
    c.g = malloc(c.n * 4); c.u = malloc(c.n * 4); c.h = malloc(c.n * 4); c.R = malloc(c.n * 4);
    float *dg = malloc(c.n * 4), *du = malloc(c.n * 4);
    fill(c.g, c.n, 3.0f);
    fill(c.u, c.n, 2.0f);
    fill(c.R, c.n, 1.0f);
    k_glu_bwd(act, dg, du, c.R, c.g, c.u, (int64_t)c.n);
    char w[64];
    snprintf(w, sizeof w, "%s gate", name);
    fd_check(glu_obj, &c, c.g, dg, c.n, 64, 1e-2f, w);
    snprintf(w, sizeof w, "%s up", name);
    fd_check(glu_obj, &c, c.u, du, c.n, 64, 1e-2f, w);
    /* dgate may alias dh (the block does that) */
    memcpy(dg, c.R, c.n * 4);
    k_glu_bwd(act, dg, du, dg, c.g, c.u, (int64_t)c.n);
    fd_check(glu_obj, &c, c.g, dg, c.n, 32, 1e-2f, "  (aliased dgate)");
    free(c.g); free(c.u); free(c.h); free(c.R); free(dg); free(du);
}

static void test_glu_grad(void **st)
{
    (void)st;
    glu_case(K_GLU_SILU, "swiglu");
    glu_case(K_GLU_GELU, "geglu");
}

/* ---- rotary -------------------------------------------------------------------- */

struct rope_ctx { int B, T, nh, hd, ld; float *x, *y, *R; };
static double rope_obj(void *p)
{
    struct rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->ld;
    memcpy(c->y, c->x, n * 4);
    k_rope(c->y, c->ld, c->B, c->T, c->nh, c->hd, 10000.0f, NULL, 1);
    return dot(c->y, c->R, n);
}

static void test_rope(void **st)
{
    (void)st;
    /* rows wider than the heads (the q|k|v layout): columns past nh*hd untouched */
    struct rope_ctx c = { .B = 2, .T = 12, .nh = 3, .hd = 8, .ld = 30 };
    size_t n = (size_t)c.B * c.T * c.ld;
    c.x = malloc(n * 4); c.y = malloc(n * 4); c.R = malloc(n * 4);
    float *g = malloc(n * 4), *back = malloc(n * 4);
    fill(c.x, n, 1.0f);
    fill(c.R, n, 1.0f);
    rope_obj(&c);
    for (size_t i = 0; i < n; i++)
        if (i % c.ld >= (size_t)c.nh * c.hd)
            assert_true(c.y[i] == c.x[i]);
    /* position 0 is not turned; position 1 is (by 1 rad in pair 0) */
    for (int i = 0; i < c.nh * c.hd; i++)
        assert_true(c.y[i] == c.x[i]);
    assert_true(fabsf(c.y[c.ld] - c.x[c.ld]) > 1e-4f || fabsf(c.x[c.ld]) < 1e-3f);
    /* backward = the inverse turn; forward then backward gives x back */
    memcpy(back, c.y, n * 4);
    k_rope(back, c.ld, c.B, c.T, c.nh, c.hd, 10000.0f, NULL, -1);
    for (size_t i = 0; i < n; i++)
        assert_true(fabsf(back[i] - c.x[i]) < 1e-5f);
    memcpy(g, c.R, n * 4);
    k_rope(g, c.ld, c.B, c.T, c.nh, c.hd, 10000.0f, NULL, -1);
    fd_check(rope_obj, &c, c.x, g, n, 64, 1e-2f, "rotary input");
    free(c.x); free(c.y); free(c.R); free(g); free(back);
}

/* ---- blocked attention ----------------------------------------------------------- */

/* q|k|v rows of width ld = (NH + 2 KVl) hd, as block_x.c lays them out */
struct att_ctx {
    int B, T, ld;
    struct k_attn_map m;
    float *qkv, *out, *lse, *R;
};
static double att_obj(void *p)
{
    struct att_ctx *c = p;
    const int Ct = c->m.NH * c->m.hd, KVc = c->m.KVl * c->m.hd;
    assert_int_equal(k_flash_fwd(c->out, Ct, c->lse, c->qkv, c->ld, c->qkv + Ct, c->ld,
                                 c->qkv + Ct + KVc, c->ld, c->B, c->T, &c->m), 0);
    return dot(c->out, c->R, (size_t)c->B * c->T * Ct);
}

static struct att_ctx att_new(int B, int T, int NH, int KV, int hd)
{
    struct att_ctx c = { .B = B, .T = T };
    c.m = (struct k_attn_map){ .NH = NH, .KVl = KV, .hd = hd, .hq0 = 0, .g = NH / KV, .k0 = 0 };
    c.ld = (NH + 2 * KV) * hd;
    size_t N = (size_t)B * T;
    c.qkv = malloc(N * c.ld * 4);
    c.out = malloc(N * NH * hd * 4);
    c.R = malloc(N * NH * hd * 4);
    c.lse = malloc((size_t)B * NH * T * 4);
    fill(c.qkv, N * c.ld, 1.5f);
    fill(c.R, N * NH * hd, 1.0f);
    return c;
}
static void att_free(struct att_ctx *c)
{
    free(c->qkv); free(c->out); free(c->R); free(c->lse);
}

static void test_flash_grad(void **st)
{
    (void)st;
    /* T = 70: a full 64-block and a partial one, the diagonal in both */
    struct att_ctx c = att_new(2, 70, 4, 2, 8);
    const int Ct = 4 * 8, KVc = 2 * 8;
    size_t N = (size_t)c.B * c.T;
    float *d = malloc(N * c.ld * 4);
    att_obj(&c);
    assert_int_equal(k_flash_bwd(d, d + Ct, d + Ct + KVc, c.R, Ct, c.out, c.lse, c.qkv, c.ld,
                                 c.qkv + Ct, c.ld, c.qkv + Ct + KVc, c.ld, c.B, c.T, &c.m), 0);
    /* check q, k and v columns separately */
    float *dq = malloc(N * c.ld * 4);
    const char *names[3] = { "blocked attention dq (GQA 4/2)", "blocked attention dk",
                             "blocked attention dv" };
    const int off[4] = { 0, Ct, Ct + KVc, c.ld };
    for (int part = 0; part < 3; part++) {
        /* a gradient view that is zero outside this part: sample only there */
        float *vals = malloc(N * (off[part + 1] - off[part]) * 4);
        float *grads = malloc(N * (off[part + 1] - off[part]) * 4);
        int w = off[part + 1] - off[part];
        for (size_t r = 0; r < N; r++)
            for (int k = 0; k < w; k++)
                grads[r * w + k] = d[r * c.ld + off[part] + k];
        /* perturb through the real buffer: index mapping via a small shim */
        double e2 = 0, an2 = 0, nn2 = 0;
        for (int s = 0; s < 40; s++) {
            size_t r = (size_t)((urand() * 0.5f + 0.5f) * (N - 1));
            int k = (int)((urand() * 0.5f + 0.5f) * (w - 1));
            float *a = &c.qkv[r * c.ld + off[part] + k], orig = *a;
            *a = orig + 1e-2f;
            double fp = att_obj(&c);
            *a = orig - 1e-2f;
            double fm = att_obj(&c);
            *a = orig;
            double num = (fp - fm) / 2e-2, an = grads[r * w + k];
            e2 += (num - an) * (num - an);
            an2 += an * an;
            nn2 += num * num;
        }
        double rel = sqrt(e2) / (sqrt(an2) + sqrt(nn2));
        printf("  %-34s rel err %.2e (|grad| %.2e)\n", names[part], rel, sqrt(an2));
        assert_true(rel < 1e-3);
        free(vals);
        free(grads);
    }
    free(dq);
    free(d);
    att_free(&c);
}

/* Blocked vs plain (kernels.c on the expanded GQA layout): outputs and
 * input gradients agree to fp32 rounding, T not a multiple of the block. */
static void test_flash_vs_plain(void **st)
{
    (void)st;
    const int B = 2, T = 150, NH = 4, KV = 2, hd = 16, Ct = NH * hd, KVc = KV * hd;
    struct att_ctx c = att_new(B, T, NH, KV, hd);
    size_t N = (size_t)B * T;
    float *ex = malloc(N * 3 * Ct * 4), *att = malloc((size_t)B * NH * T * T * 4);
    float *out2 = malloc(N * Ct * 4), *dex = malloc(N * 3 * Ct * 4);
    float *d1 = malloc(N * c.ld * 4), *d2 = malloc(N * c.ld * 4);
    att_obj(&c);
    k_gqa_expand(ex, c.qkv, c.ld, (int)N, &c.m);
    k_attention_fwd(out2, att, ex, B, T, NH, hd);
    double md = 0;
    for (size_t i = 0; i < N * Ct; i++)
        md = fmax(md, fabs(c.out[i] - out2[i]));
    k_flash_bwd(d1, d1 + Ct, d1 + Ct + KVc, c.R, Ct, c.out, c.lse, c.qkv, c.ld, c.qkv + Ct, c.ld,
                c.qkv + Ct + KVc, c.ld, B, T, &c.m);
    k_attention_bwd(dex, c.R, ex, att, B, T, NH, hd);
    k_gqa_fold(d2, c.ld, dex, (int)N, &c.m);
    double gd = 0, gm = 0;
    for (size_t i = 0; i < N * c.ld; i++) {
        gd = fmax(gd, fabs(d1[i] - d2[i]));
        gm = fmax(gm, fabs(d2[i]));
    }
    printf("  blocked vs plain: max |out diff| %.2e, max |grad diff| %.2e (max |grad| %.2e)\n",
           md, gd, gm);
    assert_true(md < 1e-5);
    assert_true(gd < 1e-5 * fmax(1.0, gm));
    free(ex); free(att); free(out2); free(dex); free(d1); free(d2);
    att_free(&c);
}

/* ---- every layer of Llama-style engines -------------------------------------------- */

struct gc {
    whale_engine *e;
    int li;
    int32_t *tok, *tgt;
    float *R, *x;
    size_t N, C;
};

static float *bnd(whale_engine *e, int i)
{
    return e->xb + (size_t)i * e->d.B * e->d.T * e->d.C;
}

static double layer_obj(void *p)
{
    struct gc *g = p;
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
    io.att_tmp = e->att_tmp;
    assert_int_equal(l->ops->forward(l, &io), 0);
    if (!io.out)
        return io.loss_sum / (double)g->N;
    return dot(io.out, g->R, g->N * g->C);
}

static whale_engine *engine_for(const char *desc)
{
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    assert_int_equal(whale_model_desc_parse_string(desc, "test", &c.model), 0);
    c.seq = c.model.seq;
    c.micro_batch = 2;
    c.threads = 1;
    whale_engine *e = NULL;
    assert_int_equal(eng_create(&c, NULL, NULL, &e), 0);
    return e;
}

static void check_layers(const char *desc)
{
    printf("%s\n", desc);
    for (int li = 0; li < 4; li++) {
        struct gc g = { 0 };
        g.e = engine_for(desc);
        whale_engine *e = g.e;
        assert_int_equal(e->nl, 4);
        g.li = li;
        g.N = (size_t)e->d.B * e->d.T;
        g.C = e->d.C;
        g.tok = malloc(g.N * 4);
        g.tgt = malloc(g.N * 4);
        g.R = malloc(g.N * g.C * 4);
        g.x = malloc(g.N * g.C * 4);
        for (size_t i = 0; i < g.N; i++) {
            g.tok[i] = (int32_t)((urand() * 0.5f + 0.5f) * (e->d.V - 1));
            g.tgt[i] = (int32_t)((urand() * 0.5f + 0.5f) * (e->d.V - 1));
        }
        fill(g.R, g.N * g.C, 1.0f);
        fill(g.x, g.N * g.C, 1.0f);
        /* norm weights away from 1 and biases away from 0 */
        for (size_t i = 0; i < e->P; i++)
            e->W[i] += 0.1f * urand();
        memset(e->G, 0, e->P * 4);
        layer_obj(&g);
        struct eng_io io = { 0 };
        io.tokens = g.tok;
        io.targets = g.tgt;
        io.in = li > 0 ? bnd(e, li - 1) : NULL;
        io.saved = e->saved + e->saved_off[li];
        io.scratch = e->scratch;
        io.att_tmp = e->att_tmp;
        io.dstream = e->dstream;
        io.dloss = 1.0f / (float)g.N;
        if (li < e->nl - 1)
            memcpy(e->dstream, g.R, g.N * g.C * 4);
        struct eng_layer *l = &e->layers[li];
        assert_int_equal(l->ops->backward(l, &io), 0);
        float *gc = malloc(e->P * 4);
        memcpy(gc, e->G, e->P * 4);
        for (int p = 0; p < l->nparams; p++) {
            char w[160];
            snprintf(w, sizeof w, "%s %s", l->name, l->params[p].name);
            fd_check(layer_obj, &g, e->W + l->params[p].flat, gc + l->params[p].flat,
                     l->params[p].numel, 24, 1e-2f, w);
        }
        if (l->tied)
            fd_check(layer_obj, &g, e->W + l->tied->params[0].flat,
                     gc + l->tied->params[0].flat, l->tied->params[0].numel, 48, 1e-2f,
                     "wte (tied, via head)");
        if (li > 0) {
            float *dx = malloc(g.N * g.C * 4);
            memcpy(dx, e->dstream, g.N * g.C * 4);
            char w[160];
            snprintf(w, sizeof w, "%s input", l->name);
            fd_check(layer_obj, &g, g.x, dx, g.N * g.C, 48, 1e-2f, w);
            free(dx);
        }
        free(gc);
        free(g.tok); free(g.tgt); free(g.R); free(g.x);
        whale_engine_destroy(e);
    }
}

#define BASE "Name=gc Layers=2 Hidden=16 Heads=4 FFN=40 Seq=8 Vocab=32 "

static void test_layers_llama(void **st)
{
    (void)st;
    check_layers(BASE "KVHeads=2 MLP=swiglu Norm=rmsnorm Position=rotary Bias=no "
                 "TiedEmbeddings=no Attention=flash");
}
static void test_layers_llama_plain_mqa(void **st)
{
    (void)st;
    check_layers(BASE "KVHeads=1 MLP=swiglu Norm=rmsnorm Position=rotary Bias=no "
                 "TiedEmbeddings=no Attention=plain");
}
static void test_layers_geglu_bias(void **st)
{
    (void)st;
    check_layers(BASE "KVHeads=2 MLP=geglu Norm=layernorm Position=rotary Bias=yes "
                 "TiedEmbeddings=yes Attention=flash");
}
static void test_layers_gpt2_flash(void **st)
{
    (void)st;
    check_layers(BASE "MLP=gelu Norm=layernorm Position=learned Bias=yes TiedEmbeddings=yes "
                 "Attention=flash");
}

/* ---- whole steps ------------------------------------------------------------------ */

static void train(const char *desc, enum whale_recompute rc, double *loss, int steps,
                  int64_t *act)
{
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    assert_int_equal(whale_model_desc_parse_string(desc, "test", &c.model), 0);
    c.seq = c.model.seq;
    c.micro_batch = 2;
    c.threads = 1;
    c.lr = 3e-3f;
    c.recompute = rc;
    whale_engine *e = NULL;
    assert_int_equal(whale_engine_create(&c, NULL, &e), 0);
    const int n = 2 * c.seq;
    int32_t *in = malloc(n * 4), *tg = malloc(n * 4);
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < n; i++) {
            in[i] = (i * 5 + s) % 11;
            tg[i] = (i * 3 + 1 + s) % 13;
        }
        struct whale_step_stats ss;
        assert_int_equal(whale_engine_step(e, in, tg, &ss), 0);
        loss[s] = ss.loss;
    }
    if (act) {
        struct whale_engine_memory m;
        whale_engine_memory(e, &m);
        *act = m.act_bytes;
    }
    free(in);
    free(tg);
    whale_engine_destroy(e);
}

#define GPT "Name=g Layers=3 Hidden=32 Heads=4 Seq=80 Vocab=64 "

/* GPT-2 with Attention=flash runs block_x.c on the same parameters (same
 * names, same init) as layers.c's block with plain attention: the same
 * losses to fp32 rounding, and less activation memory. */
static void test_gpt2_flash_equals_plain(void **st)
{
    (void)st;
    double a[8], b[8];
    int64_t ma, mb;
    train(GPT "Attention=plain", WHALE_RECOMPUTE_NONE, a, 8, &ma);
    train(GPT "Attention=flash", WHALE_RECOMPUTE_NONE, b, 8, &mb);
    double worst = 0;
    for (int s = 0; s < 8; s++)
        worst = fmax(worst, fabs(a[s] - b[s]) / a[s]);
    printf("  gpt2 plain %.6f -> %.6f, flash %.6f -> %.6f, worst rel diff %.1e; activations "
           "%lld vs %lld bytes\n", a[0], a[7], b[0], b[7], worst, (long long)ma, (long long)mb);
    assert_true(worst <= 1e-5);
    assert_true(a[7] < a[0]);
    assert_true(mb < ma);
}

/* Recomputation of Llama blocks changes memory, never the numbers. */
static void test_llama_recompute(void **st)
{
    (void)st;
    static const char *descs[2] = {
        GPT "KVHeads=2 MLP=swiglu Norm=rmsnorm Position=rotary Bias=no TiedEmbeddings=no "
            "Attention=plain",
        GPT "KVHeads=2 MLP=swiglu Norm=rmsnorm Position=rotary Bias=no TiedEmbeddings=no "
            "Attention=flash",
    };
    for (int d = 0; d < 2; d++) {
        double l[3][5];
        int64_t act[3];
        enum whale_recompute rc[3] = { WHALE_RECOMPUTE_NONE, WHALE_RECOMPUTE_SELECTIVE,
                                       WHALE_RECOMPUTE_FULL };
        for (int k = 0; k < 3; k++)
            train(descs[d], rc[k], l[k], 5, &act[k]);
        for (int k = 1; k < 3; k++)
            for (int s = 0; s < 5; s++)
                assert_true(l[k][s] == l[0][s]);
        printf("  llama %s: loss %.5f -> %.5f; activations none %lld selective %lld full %lld\n",
               d ? "flash" : "plain", l[0][0], l[0][4], (long long)act[0], (long long)act[1],
               (long long)act[2]);
        assert_true(l[0][4] < l[0][0]);
        assert_true(act[2] < act[1]);
        assert_true(d ? act[1] == act[0] : act[1] < act[0]);
    }
}

/* Descriptions the engine does not run are refused by key. */
static void test_refusals(void **st)
{
    (void)st;
    struct whale_model_desc m;
    assert_int_equal(whale_model_desc_parse_string(GPT "Position=alibi", "x.conf", &m), 0);
    assert_int_equal(whale_engine_model_check(&m), WHALE_ENOTSUP);
    assert_int_equal(whale_model_desc_parse_string(
                         "Name=o Layers=1 Hidden=12 Heads=4 Seq=8 Vocab=8 Position=rotary",
                         "odd.conf", &m), 0);
    assert_int_equal(whale_engine_model_check(&m), WHALE_EINVAL); /* head size 3 */
    assert_int_equal(whale_model_desc_parse_string(GPT "RopeTheta=500000 Position=rotary",
                                                   "t.conf", &m), 0);
    assert_true(m.rope_theta == 500000.0f);
    assert_int_equal(whale_engine_model_check(&m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_grad),
        cmocka_unit_test(test_glu_grad),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_flash_grad),
        cmocka_unit_test(test_flash_vs_plain),
        cmocka_unit_test(test_layers_llama),
        cmocka_unit_test(test_layers_llama_plain_mqa),
        cmocka_unit_test(test_layers_geglu_bias),
        cmocka_unit_test(test_layers_gpt2_flash),
        cmocka_unit_test(test_gpt2_flash_equals_plain),
        cmocka_unit_test(test_llama_recompute),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
