/* Megatron tensor-parallel operators on in-process TP groups of 1, 2, 4:
 * every output and gradient equals the single-rank computation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inproc.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/parallel.h"

enum { N = 6, C = 8, F = 16, V = 12 };

static float val(int salt, size_t i)
{
    return sinf(0.37f * (float)i + 0.11f * (float)salt) * 0.5f;
}

static void fill(float *a, size_t n, int salt)
{
    for (size_t i = 0; i < n; i++)
        a[i] = val(salt, i);
}

static int close_arr(const float *a, const float *b, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > tol * (1 + fabs((double)b[i]))) {
            fprintf(stderr, "  [%zu] %g vs %g\n", i, (double)a[i], (double)b[i]);
            return 0;
        }
    return 1;
}

/* The single-rank MLP: h = x W1^T + b1 ; y = h W2^T + b2 ; L = sum(y * gy). */
struct ref {
    float x[N * C], w1[F * C], b1[F], w2[C * F], b2[C], gy[N * C];
    float h[N * F], y[N * C], dx[N * C], dw1[F * C], db1[F], dw2[C * F], db2[C];
};

static void ref_mlp(struct ref *r)
{
    fill(r->x, N * C, 1);
    fill(r->w1, F * C, 2);
    fill(r->b1, F, 3);
    fill(r->w2, C * F, 4);
    fill(r->b2, C, 5);
    fill(r->gy, N * C, 6);
    struct whale_par_comm one;
    whale_par_comm_from_group(&one, NULL);
    whale_tp_column_linear_fwd(r->h, r->x, r->w1, r->b1, N, C, F);
    whale_tp_row_linear_fwd(&one, r->y, r->h, r->w2, r->b2, N, F, C);
    float dh[N * F];
    memset(r->dw1, 0, sizeof r->dw1);
    memset(r->db1, 0, sizeof r->db1);
    memset(r->dw2, 0, sizeof r->dw2);
    memset(r->db2, 0, sizeof r->db2);
    whale_tp_row_linear_bwd(dh, r->dw2, r->db2, r->gy, r->h, r->w2, N, F, C);
    whale_tp_column_linear_bwd(&one, r->dx, r->dw1, r->db1, dh, r->x, r->w1, N, C, F);
}

struct tpcase {
    int t;
    struct inproc_world *w;
    struct ref *ref;
};

static int mlp_rank(int rank, void *arg)
{
    struct tpcase *k = arg;
    struct ref *R = k->ref;
    struct whale_par_comm c;
    inproc_comm(k->w, rank, &c);
    int64_t off, fl;
    if (whale_tp_range(F, k->t, rank, &off, &fl))
        return -1;
    int Fl = (int)fl;
    /* shards: W1 rows [off, off+Fl), b1 same, W2 columns [off, off+Fl) */
    float *w1 = malloc(sizeof(float) * Fl * C), *b1 = malloc(sizeof(float) * Fl);
    float *w2 = malloc(sizeof(float) * C * Fl);
    memcpy(w1, R->w1 + off * C, sizeof(float) * Fl * C);
    memcpy(b1, R->b1 + off, sizeof(float) * Fl);
    for (int i = 0; i < C; i++)
        memcpy(w2 + (size_t)i * Fl, R->w2 + (size_t)i * F + off, sizeof(float) * Fl);
    float *h = malloc(sizeof(float) * N * Fl), y[N * C], dx[N * C];
    float *dh = malloc(sizeof(float) * N * Fl);
    float *dw1 = calloc((size_t)Fl * C, sizeof(float)), *db1 = calloc((size_t)Fl, sizeof(float));
    float *dw2 = calloc((size_t)C * Fl, sizeof(float)), db2[C] = { 0 };
    int ok = 1;
    ok &= !whale_tp_column_linear_fwd(h, R->x, w1, b1, N, C, Fl);
    ok &= !whale_tp_row_linear_fwd(&c, y, h, w2, R->b2, N, Fl, C);
    ok &= close_arr(y, R->y, N * C, 1e-5);
    ok &= !whale_tp_row_linear_bwd(dh, dw2, db2, R->gy, h, w2, N, Fl, C);
    ok &= !whale_tp_column_linear_bwd(&c, dx, dw1, db1, dh, R->x, w1, N, C, Fl);
    ok &= close_arr(dx, R->dx, N * C, 1e-5);
    ok &= close_arr(dw1, R->dw1 + off * C, (size_t)Fl * C, 1e-5);
    ok &= close_arr(db1, R->db1 + off, (size_t)Fl, 1e-5);
    ok &= close_arr(db2, R->db2, C, 1e-5);
    for (int i = 0; i < C; i++)
        ok &= close_arr(dw2 + (size_t)i * Fl, R->dw2 + (size_t)i * F + off, (size_t)Fl, 1e-5);
    free(w1); free(b1); free(w2); free(h); free(dh); free(dw1); free(db1); free(dw2);
    return ok ? 0 : WHALE_EDATA;
}

static void test_mlp(void **state)
{
    (void)state;
    struct ref *R = calloc(1, sizeof *R);
    ref_mlp(R);
    for (int t = 1; t <= 4; t *= 2) {
        struct tpcase k = { t, inproc_create(t), R };
        if (inproc_run(t, mlp_rank, &k))
            fail_msg("TP=%d MLP differs from the single-rank one", t);
        inproc_destroy(k.w);
    }
    free(R);
}

/* Embedding + cross-entropy with the tied (V,C) table. */
struct vref {
    int32_t tok[N], tgt[N];
    float wte[V * C], emb[N * C], probs[N * V], loss[N], dwte[V * C];
};

static void ref_vocab(struct vref *r)
{
    for (int i = 0; i < N; i++) {
        r->tok[i] = (i * 5 + 1) % V;
        r->tgt[i] = (i * 7 + 3) % V;
    }
    fill(r->wte, V * C, 7);
    /* a logit far below the max: the target probability underflows in fp32
     * exp but the loss must stay finite */
    r->wte[(size_t)r->tgt[0] * C] = -40.0f;
    struct whale_par_comm one;
    whale_par_comm_from_group(&one, NULL);
    whale_tp_vocab_embed_fwd(&one, r->emb, r->tok, r->wte, N, C, 0, V);
    /* logits (N,V) = emb (N,C) @ wte^T, scaled so the row spread is large */
    for (int i = 0; i < N; i++)
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int j = 0; j < C; j++)
                s += (double)r->emb[i * C + j] * r->wte[v * C + j];
            r->probs[i * V + v] = (float)(s * 8.0);
        }
    float scratch[3 * N];
    whale_tp_vocab_xent_fwd(&one, r->probs, r->loss, r->tgt, N, V, 0, scratch);
    whale_tp_vocab_xent_bwd(r->probs, r->tgt, 0.5f, N, V, 0);
    memset(r->dwte, 0, sizeof r->dwte);
    whale_tp_vocab_embed_bwd(r->dwte, r->emb, r->tok, N, C, 0, V);
}

struct vcase {
    int t;
    struct inproc_world *w;
    struct vref *ref;
};

static int vocab_rank(int rank, void *arg)
{
    struct vcase *k = arg;
    struct vref *R = k->ref;
    struct whale_par_comm c;
    inproc_comm(k->w, rank, &c);
    int64_t v0, vl;
    if (whale_tp_range(V, k->t, rank, &v0, &vl))
        return -1;
    int Vl = (int)vl, ok = 1;
    const float *wte = R->wte + v0 * C;
    float emb[N * C], loss[N], scratch[3 * N];
    float *lg = malloc(sizeof(float) * N * Vl), *dwte = calloc((size_t)Vl * C, sizeof(float));
    ok &= !whale_tp_vocab_embed_fwd(&c, emb, R->tok, wte, N, C, v0, Vl);
    ok &= close_arr(emb, R->emb, N * C, 1e-6);
    for (int i = 0; i < N; i++)
        for (int v = 0; v < Vl; v++) {
            double s = 0;
            for (int j = 0; j < C; j++)
                s += (double)emb[i * C + j] * wte[v * C + j];
            lg[i * Vl + v] = (float)(s * 8.0);
        }
    ok &= !whale_tp_vocab_xent_fwd(&c, lg, loss, R->tgt, N, Vl, v0, scratch);
    ok &= close_arr(loss, R->loss, N, 1e-5);
    for (int i = 0; i < N; i++)
        ok &= isfinite(loss[i]) && loss[i] >= 0;
    whale_tp_vocab_xent_bwd(lg, R->tgt, 0.5f, N, Vl, v0);
    for (int i = 0; i < N; i++)
        ok &= close_arr(lg + i * Vl, R->probs + i * V + v0, (size_t)Vl, 1e-5);
    whale_tp_vocab_embed_bwd(dwte, emb, R->tok, N, C, v0, Vl);
    ok &= close_arr(dwte, R->dwte + v0 * C, (size_t)Vl * C, 1e-6);
    free(lg);
    free(dwte);
    return ok ? 0 : WHALE_EDATA;
}

static void test_vocab(void **state)
{
    (void)state;
    struct vref *R = calloc(1, sizeof *R);
    ref_vocab(R);
    /* the reference loss against a float64 log-softmax */
    for (int t = 1; t <= 4; t *= 2) {
        struct vcase k = { t, inproc_create(t), R };
        if (inproc_run(t, vocab_rank, &k))
            fail_msg("TP=%d vocabulary-parallel embedding/cross-entropy differs", t);
        inproc_destroy(k.w);
    }
    free(R);
}

static void test_xent_reference(void **state)
{
    (void)state;
    /* one row against a direct float64 computation */
    float lg[V], loss, scratch[3];
    int32_t tgt = 5;
    double ref_max = -1e30, s = 0;
    for (int v = 0; v < V; v++) {
        lg[v] = (float)v * 0.7f - 3.0f;
        if (lg[v] > ref_max)
            ref_max = lg[v];
    }
    for (int v = 0; v < V; v++)
        s += exp(lg[v] - ref_max);
    double want = log(s) + ref_max - lg[tgt];
    struct whale_par_comm one;
    whale_par_comm_from_group(&one, NULL);
    assert_int_equal(whale_tp_vocab_xent_fwd(&one, lg, &loss, &tgt, 1, V, 0, scratch), 0);
    assert_true(fabs(loss - want) < 1e-5 * want);
    double psum = 0;
    for (int v = 0; v < V; v++)
        psum += lg[v];
    assert_true(fabs(psum - 1.0) < 1e-6);
}

static void test_range(void **state)
{
    (void)state;
    int64_t o, l;
    assert_int_equal(whale_tp_range(12, 4, 3, &o, &l), 0);
    assert_int_equal(o, 9);
    assert_int_equal(l, 3);
    test_log_capture(true);
    assert_int_equal(whale_tp_range(10, 4, 0, &o, &l), WHALE_EINVAL);
    test_log_capture(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_vocab),
        cmocka_unit_test(test_xent_reference),
        cmocka_unit_test(test_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
