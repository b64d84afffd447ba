/* Megatron tensor-parallel operators over a TP group. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/parallel.h"

static void cblas_gemm(int tA, int tB, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static whale_gemm_fn gemm = cblas_gemm;

void whale_tp_set_gemm(whale_gemm_fn fn)
{
    gemm = fn ? fn : cblas_gemm;
}

static int reduce(struct whale_par_comm *tp, float *buf, size_t n, enum whale_op op)
{
    if (!tp || tp->size <= 1 || n == 0)
        return 0;
    uint64_t t0 = whale_trace_now();
    int rc = tp->allreduce(tp, buf, n, op);
    if (whale_trace_on())
        whale_trace_span("allreduce", "tp allreduce", t0, -1, -1);
    return rc;
}

int whale_tp_f(struct whale_par_comm *tp, enum whale_pp_kind dir, float *buf, size_t n)
{
    return dir == WHALE_PP_FORWARD ? 0 : reduce(tp, buf, n, WHALE_SUM);
}

int whale_tp_g(struct whale_par_comm *tp, enum whale_pp_kind dir, float *buf, size_t n)
{
    return dir == WHALE_PP_FORWARD ? reduce(tp, buf, n, WHALE_SUM) : 0;
}

int whale_tp_range(int64_t n, int size, int rank, int64_t *off, int64_t *len)
{
    if (size < 1 || rank < 0 || rank >= size || n % size) {
        whale_error("tensor parallelism: %lld items do not split evenly over %d ranks",
                    (long long)n, size);
        return WHALE_EINVAL;
    }
    *len = n / size;
    *off = *len * rank;
    return 0;
}

/* db (OC) += column sums of dout (N,OC) */
static void colsum_acc(float *db, const float *dout, int N, int OC)
{
    for (int i = 0; i < N; i++) {
        const float *r = dout + (size_t)i * OC;
        for (int j = 0; j < OC; j++)
            db[j] += r[j];
    }
}

/* out (N,OC) = in (N,IC) @ w (OC,IC)^T + b (OC) */
static void linear(float *out, const float *in, const float *w, const float *b, int N, int IC,
                   int OC)
{
    if (b) {
        for (int i = 0; i < N; i++)
            memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof *out);
    }
    gemm(0, 1, N, OC, IC, 1.0f, in, IC, w, IC, b ? 1.0f : 0.0f, out, OC);
}

int whale_tp_column_linear_fwd(float *out, const float *in, const float *w, const float *b,
                               int N, int IC, int OCl)
{
    /* f forward is the identity: every TP rank already holds `in`. */
    linear(out, in, w, b, N, IC, OCl);
    return 0;
}

int whale_tp_column_linear_bwd(struct whale_par_comm *tp, float *din, float *dw, float *db,
                               const float *dout, const float *in, const float *w, int N,
                               int IC, int OCl)
{
    /* dw (OCl,IC) += dout^T (OCl,N) @ in (N,IC) */
    if (dw)
        gemm(1, 0, OCl, IC, N, 1.0f, dout, OCl, in, IC, 1.0f, dw, IC);
    if (db)
        colsum_acc(db, dout, N, OCl);
    if (!din)
        return 0;
    /* din (N,IC) = dout (N,OCl) @ w (OCl,IC): a partial sum per rank, then f backward */
    gemm(0, 0, N, IC, OCl, 1.0f, dout, OCl, w, IC, 0.0f, din, IC);
    return whale_tp_f(tp, WHALE_PP_BACKWARD, din, (size_t)N * IC);
}

int whale_tp_row_linear_fwd(struct whale_par_comm *tp, float *out, const float *in,
                            const float *w, const float *b, int N, int ICl, int OC)
{
    /* partial (N,OC) = in (N,ICl) @ w (OC,ICl)^T ; g forward sums; bias once after */
    linear(out, in, w, NULL, N, ICl, OC);
    int rc = whale_tp_g(tp, WHALE_PP_FORWARD, out, (size_t)N * OC);
    if (rc)
        return rc;
    if (b)
        for (int i = 0; i < N; i++) {
            float *r = out + (size_t)i * OC;
            for (int j = 0; j < OC; j++)
                r[j] += b[j];
        }
    return 0;
}

int whale_tp_row_linear_bwd(float *din, float *dw, float *db, const float *dout,
                            const float *in, const float *w, int N, int ICl, int OC)
{
    /* g backward is the identity: dout (N,OC) is replicated. */
    if (dw)
        gemm(1, 0, OC, ICl, N, 1.0f, dout, OC, in, ICl, 1.0f, dw, ICl);
    if (db)
        colsum_acc(db, dout, N, OC);
    if (din)
        gemm(0, 0, N, ICl, OC, 1.0f, dout, OC, w, ICl, 0.0f, din, ICl);
    return 0;
}

int whale_tp_vocab_embed_fwd(struct whale_par_comm *tp, float *out, const int32_t *tok,
                             const float *wte_l, int N, int C, int64_t v0, int Vl)
{
    /* out (N,C): own rows, zeros for tokens another rank holds; then summed */
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * C;
        int64_t t = (int64_t)tok[i] - v0;
        if (t >= 0 && t < Vl)
            memcpy(o, wte_l + (size_t)t * C, (size_t)C * sizeof *o);
        else
            memset(o, 0, (size_t)C * sizeof *o);
    }
    return reduce(tp, out, (size_t)N * C, WHALE_SUM);
}

void whale_tp_vocab_embed_bwd(float *dwte_l, const float *dout, const int32_t *tok, int N, int C,
                              int64_t v0, int Vl)
{
    for (int i = 0; i < N; i++) {
        int64_t t = (int64_t)tok[i] - v0;
        if (t < 0 || t >= Vl)
            continue;
        float *d = dwte_l + (size_t)t * C;
        const float *g = dout + (size_t)i * C;
        for (int j = 0; j < C; j++)
            d[j] += g[j];
    }
}

int whale_tp_vocab_xent_fwd(struct whale_par_comm *tp, float *logits, float *losses,
                            const int32_t *targets, int N, int Vl, int64_t v0, float *scratch)
{
    float *mx = scratch;          /* (N) row max over the whole vocabulary */
    float *sums = scratch + N;    /* (2N): sum exp, target logit (0 off-rank) */
    for (int i = 0; i < N; i++) {
        const float *r = logits + (size_t)i * Vl;
        float m = -FLT_MAX;
        for (int j = 0; j < Vl; j++)
            if (r[j] > m)
                m = r[j];
        mx[i] = m;
    }
    int rc = reduce(tp, mx, (size_t)N, WHALE_MAX);
    if (rc)
        return rc;
    for (int i = 0; i < N; i++) {
        float *r = logits + (size_t)i * Vl;
        int64_t t = (int64_t)targets[i] - v0;
        /* logit_t - max from the rank holding the target, 0 elsewhere */
        sums[2 * i + 1] = (t >= 0 && t < Vl) ? r[t] - mx[i] : 0.0f;
        double s = 0;
        for (int j = 0; j < Vl; j++) {
            r[j] = expf(r[j] - mx[i]);
            s += r[j];
        }
        sums[2 * i] = (float)s;
    }
    rc = reduce(tp, sums, (size_t)2 * N, WHALE_SUM);
    if (rc)
        return rc;
    for (int i = 0; i < N; i++) {
        float *r = logits + (size_t)i * Vl;
        float inv = 1.0f / sums[2 * i];
        for (int j = 0; j < Vl; j++)
            r[j] *= inv;
        /* -log p[target] = log(sum exp(logit - max)) - (logit_t - max) */
        losses[i] = (float)log((double)sums[2 * i]) - sums[2 * i + 1];
    }
    return 0;
}

void whale_tp_vocab_xent_bwd(float *probs, const int32_t *targets, float dloss, int N, int Vl,
                             int64_t v0)
{
    for (int i = 0; i < N; i++) {
        float *r = probs + (size_t)i * Vl;
        int64_t t = (int64_t)targets[i] - v0;
        for (int j = 0; j < Vl; j++)
            r[j] *= dloss;
        if (t >= 0 && t < Vl)
            r[t] -= dloss;
    }
}
