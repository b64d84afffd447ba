/* Megatron tensor parallelism as the engine runs it (engine/tp_ops.c and the
 * backend's kernels, the one implementation the layers use) on in-process
 * TP groups of 1, 2, 4: every output and gradient equals the single-rank
 * computation. Also the f/g conjugates and the even split of whale/tp.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../inproc/inproc.h"
#include "engine/layer.h"
#include "whale/backend.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/tp.h"

#define F32 WHALE_FLOAT32

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
        if (!(fabs((double)a[i] - b[i]) <= tol * (1 + fabs((double)b[i])))) {
            fprintf(stderr, "  [%zu] %g vs %g\n", i, (double)a[i], (double)b[i]);
            return 0;
        }
    return 1;
}

/* A CPU backend of one thread per rank (ranks are threads already). */
static whale_backend *cpu(void)
{
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = WHALE_DEVICE_CPU;
    o.threads = 1;
    whale_backend *b = NULL;
    return whale_backend_open(&o, &b) ? NULL : b;
}

/* ---- column- then row-parallel MLP ---------------------------------------------------
 * h (N,F) = x (N,C) W1^T + b1 ; y (N,C) = h W2^T + b2 ; L = sum(y * gy).
 * TP: W1 rows and b1 split (column-parallel), W2 columns split (row-parallel),
 * b2 replicated. Forward: y = sum over TP of the row-parallel partials;
 * backward: dx = sum over TP of the column-parallel partials (f backward). */
struct ref {
    float x[N * C], w1[F * C], b1[F], w2[C * F], b2[C], gy[N * C];
    float y[N * C], dx[N * C], dw1[F * C], db1[F], dw2[C * F], db2[C];
};

/* One rank's MLP forward and backward on its shards (Fl columns of h). */
static int mlp_shard(whale_backend *bk, struct whale_par_comm *tp, const struct ref *R,
                     const float *w1, const float *b1, const float *w2, int Fl, float *y,
                     float *dx, float *dw1, float *db1, float *dw2, float *db2)
{
    float *h = malloc(sizeof(float) * N * Fl), *dh = malloc(sizeof(float) * N * Fl);
    int rc = !h || !dh ? WHALE_ENOMEM : 0;
    if (!rc) /* column-parallel: every rank holds x, no communication */
        rc = whale_k_linear_fwd(bk, NULL, F32, h, R->x, w1, b1, N, C, Fl);
    if (!rc)
        rc = eng_tp_row_linear_fwd(bk, y, h, w2, R->b2, N, Fl, C, tp);
    if (!rc) /* row-parallel backward: gy replicated (g backward is the identity) */
        rc = whale_k_linear_bwd(bk, NULL, F32, dh, dw2, db2, R->gy, h, w2, N, Fl, C, false);
    if (!rc)
        rc = whale_k_linear_bwd(bk, NULL, F32, dx, dw1, db1, dh, R->x, w1, N, C, Fl, false);
    if (!rc) /* f backward: the column-parallel input gradient summed over TP */
        rc = eng_tp_allreduce(tp, dx, (size_t)N * C);
    free(h);
    free(dh);
    return rc;
}

static void ref_mlp(struct ref *r)
{
    fill(r->x, N * C, 1);
    fill(r->w1, F * C, 2);
    fill(r->b1, F, 3);
    fill(r->w2, C * F, 4);
    fill(r->b2, C, 5);
    fill(r->gy, N * C, 6);
    whale_backend *bk = cpu();
    assert_non_null(bk);
    assert_int_equal(mlp_shard(bk, NULL, r, r->w1, r->b1, r->w2, F, r->y, r->dx, r->dw1, r->db1,
                               r->dw2, r->db2), 0);
    whale_backend_close(bk);
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
    whale_backend *bk = cpu();
    if (!bk)
        return -1;
    /* shards: W1 rows [off, off+Fl), b1 same, W2 columns [off, off+Fl) */
    float *w1 = malloc(sizeof(float) * Fl * C), *b1 = malloc(sizeof(float) * Fl);
    float *w2 = malloc(sizeof(float) * C * Fl);
    memcpy(w1, R->w1 + off * C, sizeof(float) * Fl * C);
    memcpy(b1, R->b1 + off, sizeof(float) * Fl);
    for (int i = 0; i < C; i++)
        memcpy(w2 + (size_t)i * Fl, R->w2 + (size_t)i * F + off, sizeof(float) * Fl);
    float y[N * C], dx[N * C], db2[C] = { 0 };
    float *dw1 = calloc((size_t)Fl * C, sizeof(float)), *db1 = calloc((size_t)Fl, sizeof(float));
    float *dw2 = calloc((size_t)C * Fl, sizeof(float));
    int ok = !mlp_shard(bk, k->t > 1 ? &c : NULL, R, w1, b1, w2, Fl, y, dx, dw1, db1, dw2, db2);
    ok = ok && close_arr(y, R->y, N * C, 1e-5);
    ok = ok && close_arr(dx, R->dx, N * C, 1e-5);
    ok = ok && close_arr(dw1, R->dw1 + off * C, (size_t)Fl * C, 1e-5);
    ok = ok && close_arr(db1, R->db1 + off, (size_t)Fl, 1e-5);
    ok = ok && close_arr(db2, R->db2, C, 1e-5); /* every TP rank: the whole bias gradient */
    for (int i = 0; i < C && ok; i++)
        ok = close_arr(dw2 + (size_t)i * Fl, R->dw2 + (size_t)i * F + off, (size_t)Fl, 1e-5);
    free(w1); free(b1); free(w2); free(dw1); free(db1); free(dw2);
    whale_backend_close(bk);
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

/* ---- vocabulary-parallel embedding and cross-entropy (tied (V,C) table) ---------- */
struct vref {
    int32_t tok[N], tgt[N];
    float wte[V * C], wpe[N * C];
    float emb[N * C], probs[N * V], loss[N], dwte[V * C], dwpe[N * C];
};

/* emb (N,C) of the tokens (one sequence of N, wpe on TP rank 0); logits
 * (N,Vl) = 8 emb wte_l^T, then the vocabulary-parallel softmax cross-entropy
 * and its backward (dloss 0.5), then the embedding's backward with dout = emb. */
static int vocab_shard(whale_backend *bk, struct whale_par_comm *tp, int rank, const struct vref *R,
                       const float *wte, int v0, int Vl, float *emb, float *lg, float *loss,
                       float *dwte, float *dwpe)
{
    float red[3 * N];
    int rc = eng_tp_embed_fwd(bk, tp, emb, R->tok, wte, v0, Vl, rank == 0 ? R->wpe : NULL, 1, N, C);
    if (!rc)
        rc = whale_k_linear_fwd(bk, NULL, F32, lg, emb, wte, NULL, N, C, Vl);
    for (int i = 0; !rc && i < N * Vl; i++)
        lg[i] *= 8.0f; /* a large row spread */
    if (!rc)
        rc = eng_tp_xent_fwd(bk, tp, lg, loss, R->tgt, v0, N, Vl, red);
    if (!rc)
        rc = whale_k_softmax_xent_bwd_tp(bk, NULL, F32, lg, R->tgt, v0, 0.5f, N, Vl);
    if (!rc)
        rc = whale_k_embed_bwd_tp(bk, NULL, F32, dwte, dwpe, emb, R->tok, v0, Vl, 1, N, C);
    return rc;
}

static void ref_vocab(struct vref *r)
{
    for (int i = 0; i < N; i++) {
        r->tok[i] = (i * 5 + 1) % V;
        r->tgt[i] = (i * 7 + 3) % V;
    }
    fill(r->wte, V * C, 7);
    fill(r->wpe, N * C, 8);
    /* a logit far below the max: the target probability underflows in fp32
     * exp but the loss must stay finite */
    r->wte[(size_t)r->tgt[0] * C] = -40.0f;
    /* a group of one: the vocabulary-parallel algorithm (log-sum-exp minus
     * the target's logit) on the whole vocabulary. The fused single-rank
     * kernel (tp NULL) clamps p[target] at 1e-30, i.e. the loss at 69.08: it
     * is checked on a moderate row by test_xent_reference. */
    struct whale_par_comm one;
    whale_par_comm_from_group(&one, NULL);
    whale_backend *bk = cpu();
    assert_non_null(bk);
    assert_int_equal(vocab_shard(bk, &one, 0, r, r->wte, 0, V, r->emb, r->probs, r->loss, r->dwte,
                                 r->dwpe), 0);
    whale_backend_close(bk);
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
    whale_backend *bk = cpu();
    if (!bk)
        return -1;
    int Vl = (int)vl;
    float emb[N * C], loss[N], dwpe[N * C] = { 0 };
    float *lg = malloc(sizeof(float) * N * Vl), *dwte = calloc((size_t)Vl * C, sizeof(float));
    int ok = !vocab_shard(bk, &c, rank, R, R->wte + v0 * C, (int)v0, Vl, emb,
                          lg, loss, dwte, dwpe);
    ok = ok && close_arr(emb, R->emb, N * C, 1e-6);
    ok = ok && close_arr(loss, R->loss, N, 1e-5);
    for (int i = 0; i < N && ok; i++)
        ok = isfinite(loss[i]) && loss[i] >= 0;
    for (int i = 0; i < N && ok; i++)
        ok = close_arr(lg + i * Vl, R->probs + i * V + v0, (size_t)Vl, 1e-5);
    ok = ok && close_arr(dwte, R->dwte + v0 * C, (size_t)Vl * C, 1e-6);
    free(lg);
    free(dwte);
    whale_backend_close(bk);
    return ok ? 0 : WHALE_EDATA;
}

static void test_vocab(void **state)
{
    (void)state;
    struct vref *R = calloc(1, sizeof *R);
    ref_vocab(R);
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
    float lg[V], loss, red[3];
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
    whale_backend *bk = cpu();
    assert_non_null(bk);
    assert_int_equal(eng_tp_xent_fwd(bk, NULL, lg, &loss, &tgt, 0, 1, V, red), 0);
    whale_backend_close(bk);
    assert_true(fabs(loss - want) < 1e-5 * want);
    double psum = 0;
    for (int v = 0; v < V; v++)
        psum += lg[v];
    assert_true(fabs(psum - 1.0) < 1e-6);
}

/* ---- f/g conjugates ------------------------------------------------------------------ */
static int fg_rank(int rank, void *arg)
{
    struct inproc_world *w = arg;
    struct whale_par_comm c;
    inproc_comm(w, rank, &c);
    float a[3] = { 1.0f + rank, 2.0f, -1.0f * rank }, b[3];
    memcpy(b, a, sizeof a);
    int ok = 1;
    /* f forward and g backward: the identity */
    ok &= !whale_tp_f(&c, WHALE_PP_FORWARD, b, 3) && !memcmp(a, b, sizeof a);
    ok &= !whale_tp_g(&c, WHALE_PP_BACKWARD, b, 3) && !memcmp(a, b, sizeof a);
    /* f backward and g forward: the sum over the 4 ranks */
    const float sum[3] = { 10.0f, 8.0f, -6.0f };
    ok &= !whale_tp_f(&c, WHALE_PP_BACKWARD, b, 3) && close_arr(b, sum, 3, 0);
    memcpy(b, a, sizeof a);
    ok &= !whale_tp_g(&c, WHALE_PP_FORWARD, b, 3) && close_arr(b, sum, 3, 0);
    return ok ? 0 : WHALE_EDATA;
}

static void test_fg(void **state)
{
    (void)state;
    struct inproc_world *w = inproc_create(4);
    assert_int_equal(inproc_run(4, fg_rank, w), 0);
    inproc_destroy(w);
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
    assert_non_null(strstr(test_log_last(), "do not split evenly"));
    test_log_capture(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_vocab),
        cmocka_unit_test(test_xent_reference),
        cmocka_unit_test(test_fg),
        cmocka_unit_test(test_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
