/* cpu backend kernels: the engine's fp32 kernels (src/backend/kernels.c,
 * shapes in backend.h), called unchanged for fp32. For bf16/fp16 every
 * 16-bit operand is widened to an fp32 copy, the same fp32 kernel runs, and
 * 16-bit outputs are rounded once (nearest even): slow, but exactly the
 * arithmetic the header promises, so it is the reference for the cuda
 * backend's 16-bit kernels. The kernels stay in engine/ until the engine's
 * mixed-precision work has landed; then they move under backend/. */
#include "backend/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_stage.h"
#include "backend/kernels.h"
#include "whale/dtype.h"
#include "whale/error.h"
#include "whale/log.h"

/* ---- GEMM, linear ---------------------------------------------------------------- */

int bkc_gemm(whale_backend *b, bk_stream s, bool ta, bool tb, int M, int N, int K, float alpha,
             const void *A, int lda, const void *B, int ldb, enum whale_dtype abt, float beta,
             void *C, int ldc, enum whale_dtype ct)
{
    (void)s;
    struct bkc_stage st = { 0 };
    const float *a = bkc_in32(&st, abt, A, bkc_span(ta ? K : M, ta ? M : K, lda));
    const float *bb = bkc_in32(&st, abt, B, bkc_span(tb ? N : K, tb ? K : N, ldb));
    size_t nc = bkc_span(M, N, ldc);
    float *c = beta != 0.0f ? bkc_in32(&st, ct, C, nc) : bkc_out32(&st, ct, C, nc, false);
    if (!st.err) {
        /* fp32 operands multiply in the backend's fp32 GEMM arithmetic */
        k_gemm_mm(abt == WHALE_FLOAT32 ? b->gemm_math : WHALE_FLOAT32, ta, tb, M, N, K, alpha,
                  a, lda, bb, ldb, beta, c, ldc);
        bkc_store(ct, C, c, nc);
    }
    return bkc_done(&st);
}

int bkc_linear_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *inp,
                   const void *w, const void *bias, int N, int IC, int OC)
{
    (void)s;
    struct bkc_stage st = { 0 };
    const float *x = bkc_in32(&st, t, inp, (size_t)N * IC);
    const float *ww = bkc_in32(&st, t, w, (size_t)OC * IC);
    const float *bi = bkc_in32(&st, t, bias, (size_t)OC);
    float *o = bkc_out32(&st, t, out, (size_t)N * OC, false);
    if (!st.err) {
        k_linear_fwd(t == WHALE_FLOAT32 ? b->gemm_math : WHALE_FLOAT32, o, x, ww, bi, N, IC, OC);
        bkc_store(t, out, o, (size_t)N * OC);
    }
    return bkc_done(&st);
}

int bkc_linear_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                   float *db, const void *dout, const void *inp, const void *w, int N, int IC,
                   int OC, bool acc)
{
    (void)s;
    struct bkc_stage st = { 0 };
    const float *dy = bkc_in32(&st, t, dout, (size_t)N * OC);
    const float *x = dw ? bkc_in32(&st, t, inp, (size_t)N * IC) : inp;
    const float *ww = dinp ? bkc_in32(&st, t, w, (size_t)OC * IC) : w;
    size_t nd = (size_t)N * IC;
    float *dx = acc ? bkc_in32(&st, t, dinp, nd) : bkc_out32(&st, t, dinp, nd, false);
    if (!st.err) {
        k_linear_bwd(t == WHALE_FLOAT32 ? b->gemm_math : WHALE_FLOAT32, dx, dw, db, dy, x, ww, N, IC,
                     OC, acc);
        bkc_store(t, dinp, dx, nd);
    }
    return bkc_done(&st);
}

/* fp32: one fused call (kernels.c); 16-bit types stage every operand, so
 * they take the two calls (the rounding of out to t between them is part
 * of their arithmetic) */
int bkc_linear_gelu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, void *gl,
                        const void *inp, const void *w, const void *bias, int N, int IC, int OC)
{
    if (t != WHALE_FLOAT32) {
        int rc = bkc_linear_fwd(b, s, t, out, inp, w, bias, N, IC, OC);
        return rc ? rc : bkc_gelu_fwd(b, s, t, gl, out, (int64_t)N * OC);
    }
    k_linear_gelu_fwd(b->gemm_math, out, gl, inp, w, bias, N, IC, OC);
    return 0;
}

int bkc_linear_bwd_gelu(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                        const void *pre, float *dw, float *db, const void *dout, const void *inp,
                        const void *w, int N, int IC, int OC)
{
    if (t != WHALE_FLOAT32) {
        int rc = bkc_linear_bwd(b, s, t, dinp, dw, db, dout, inp, w, N, IC, OC, false);
        return rc ? rc : bkc_gelu_bwd(b, s, t, dinp, pre, dinp, (int64_t)N * IC);
    }
    k_linear_bwd_gelu(b->gemm_math, dinp, pre, dw, db, dout, inp, w, N, IC, OC, 0);
    return 0;
}

/* ---- LayerNorm ------------------------------------------------------------------- */

int bkc_layernorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *mean,
                      float *rstd, const void *inp, const void *w, const void *bias, int N, int C)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * C;
    const float *x = bkc_in32(&st, t, inp, n);
    const float *ww = bkc_in32(&st, t, w, (size_t)C);
    const float *bi = bkc_in32(&st, t, bias, (size_t)C);
    float *o = bkc_out32(&st, t, out, n, false);
    if (!st.err) {
        k_layernorm_fwd(o, mean, rstd, x, ww, bi, N, C);
        bkc_store(t, out, o, n);
    }
    return bkc_done(&st);
}

int bkc_layernorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                      float *db, const void *dout, const void *inp, const void *w,
                      const float *mean, const float *rstd, int N, int C)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * C;
    float *dx = bkc_in32(&st, t, dinp, n);
    const float *dy = bkc_in32(&st, t, dout, n);
    const float *x = bkc_in32(&st, t, inp, n);
    const float *ww = bkc_in32(&st, t, w, (size_t)C);
    if (!st.err) {
        k_layernorm_bwd(dx, dw, db, dy, x, ww, mean, rstd, N, C);
        bkc_store(t, dinp, dx, n);
    }
    return bkc_done(&st);
}

/* ---- attention ------------------------------------------------------------------- */

size_t bkc_attention_saved_floats(const whale_backend *b, int B, int T, int NH, int hd)
{
    (void)b;
    (void)hd;
    return (size_t)B * NH * T * T; /* the probabilities */
}

int bkc_attention_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *saved,
                      const void *qkv, int B, int T, int NH, int hd)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t nq = (size_t)B * T * 3 * NH * hd, no = (size_t)B * T * NH * hd;
    const float *q = bkc_in32(&st, t, qkv, nq);
    float *o = bkc_out32(&st, t, out, no, false);
    if (!st.err) {
        if (o) {
            k_attention_fwd(o, saved, q, B, T, NH, hd);
            bkc_store(t, out, o, no);
        } else {
            k_attention_probs(saved, q, B, T, NH, hd);
        }
    }
    return bkc_done(&st);
}

int bkc_attention_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dqkv,
                      const void *dout, const void *qkv, const void *out, const float *saved,
                      int B, int T, int NH, int hd)
{
    (void)b;
    (void)s;
    (void)out; /* the probabilities are kept: no rowsum(dout * out) needed */
    struct bkc_stage st = { 0 };
    size_t nq = (size_t)B * T * 3 * NH * hd, no = (size_t)B * T * NH * hd;
    const float *q = bkc_in32(&st, t, qkv, nq);
    const float *dy = bkc_in32(&st, t, dout, no);
    float *dq = bkc_out32(&st, t, dqkv, nq, false);
    if (!st.err) {
        k_attention_bwd(dq, dy, q, saved, B, T, NH, hd);
        bkc_store(t, dqkv, dq, nq);
    }
    return bkc_done(&st);
}

/* ---- element-wise ---------------------------------------------------------------- */

int bkc_gelu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *inp,
                 int64_t n)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *x = bkc_in32(&st, t, inp, (size_t)n);
    float *o = bkc_out32(&st, t, out, (size_t)n, false);
    if (!st.err) {
        k_gelu_fwd(o, x, n);
        bkc_store(t, out, o, (size_t)n);
    }
    return bkc_done(&st);
}

int bkc_gelu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, const void *inp,
                 const void *dout, int64_t n)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *x = bkc_in32(&st, t, inp, (size_t)n);
    const float *dy = bkc_in32(&st, t, dout, (size_t)n);
    float *dx = bkc_out32(&st, t, dinp, (size_t)n, false);
    if (!st.err) {
        k_gelu_bwd(dx, x, dy, n);
        bkc_store(t, dinp, dx, (size_t)n);
    }
    return bkc_done(&st);
}

int bkc_add(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *x,
            const void *y, int64_t n)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *a = bkc_in32(&st, t, x, (size_t)n);
    const float *c = bkc_in32(&st, t, y, (size_t)n);
    float *o = bkc_out32(&st, t, out, (size_t)n, false);
    if (!st.err) {
        k_add(o, a, c, n);
        bkc_store(t, out, o, (size_t)n);
    }
    return bkc_done(&st);
}

int bkc_acc(whale_backend *b, bk_stream s, enum whale_dtype t, void *y, const void *x, int64_t n)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    float *yy = bkc_in32(&st, t, y, (size_t)n);
    const float *xx = bkc_in32(&st, t, x, (size_t)n);
    if (!st.err) {
        k_acc(yy, xx, n);
        bkc_store(t, y, yy, (size_t)n);
    }
    return bkc_done(&st);
}

/* ---- embedding ------------------------------------------------------------------- */

static float elem(enum whale_dtype t, const void *p, size_t i)
{
    if (t == WHALE_BFLOAT16)
        return whale_bf16_to_float(((const uint16_t *)p)[i]);
    if (t == WHALE_FLOAT16)
        return whale_fp16_to_float(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

int bkc_embed_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                  const int32_t *tok, const void *wte, int v0, int V, const void *wpe, int B,
                  int T, int C, bool tp)
{
    (void)b;
    (void)s;
    if (t == WHALE_FLOAT32) {
        if (tp)
            k_embed_fwd_tp(out, tok, wte, v0, V, wpe, B, T, C);
        else
            k_embed_fwd(out, tok, wte, wpe, B, T, C);
        return 0;
    }
    /* 16-bit reference: the same sum as the fp32 kernels, of widened rows
     * (only the rows the tokens pick are read: V is not known without TP). */
    size_t n = (size_t)B * T * C;
    float *o = malloc((n ? n : 1) * sizeof(float));
    if (!o)
        return WHALE_ENOMEM;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int r = tok[bt] - v0;
        bool in = !tp || (r >= 0 && r < V);
        for (int c = 0; c < C; c++) {
            float e = in ? elem(t, wte, (size_t)r * C + c) : 0.0f;
            float p = wpe ? elem(t, wpe, (size_t)(bt % T) * C + c) : 0.0f;
            o[(size_t)bt * C + c] = e + p;
        }
    }
    bkc_narrow(out, o, t, n);
    free(o);
    return 0;
}

int bkc_embed_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte, float *dwpe,
                  const void *dout, const int32_t *tok, int v0, int V, int B, int T, int C,
                  bool tp)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *d = bkc_in32(&st, t, dout, (size_t)B * T * C);
    if (!st.err) {
        if (tp)
            k_embed_bwd_tp(dwte, dwpe, d, tok, v0, V, B, T, C);
        else
            k_embed_bwd(dwte, dwpe, d, tok, B, T, C);
    }
    return bkc_done(&st);
}

/* ---- softmax cross-entropy --------------------------------------------------------- */

int bkc_xent_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *losses,
                 const int32_t *targets, int N, int V)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * V;
    float *p = bkc_in32(&st, t, x, n);
    if (!st.err) {
        k_softmax_xent_fwd(p, losses, targets, N, V);
        bkc_store(t, x, p, n);
    }
    return bkc_done(&st);
}

int bkc_xent_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *probs,
                 const int32_t *targets, int v0, float dloss, int N, int V, bool tp)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * V;
    float *p = bkc_in32(&st, t, probs, n);
    if (!st.err) {
        if (tp)
            k_softmax_xent_bwd_tp(p, targets, v0, dloss, N, V);
        else
            k_softmax_xent_bwd(p, targets, dloss, N, V);
        bkc_store(t, probs, p, n);
    }
    return bkc_done(&st);
}

int bkc_rows_max(whale_backend *b, bk_stream s, enum whale_dtype t, float *mx, const void *x,
                 int N, int V)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *p = bkc_in32(&st, t, x, (size_t)N * V);
    if (!st.err)
        k_rows_max(mx, p, N, V);
    return bkc_done(&st);
}

int bkc_rows_exp_sum(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *sum,
                     float *tl, const float *mx, const int32_t *targets, int v0, int N, int V)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * V;
    float *p = bkc_in32(&st, t, x, n);
    if (!st.err) {
        k_rows_exp_sum(p, sum, tl, mx, targets, v0, N, V);
        bkc_store(t, x, p, n);
    }
    return bkc_done(&st);
}

int bkc_rows_normalize(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *losses,
                       const float *sum, const float *tl, int N, int V)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * V;
    float *p = bkc_in32(&st, t, x, n);
    if (!st.err) {
        k_rows_normalize(p, losses, sum, tl, N, V);
        bkc_store(t, x, p, n);
    }
    return bkc_done(&st);
}

/* ---- casts, reductions, optimizer ------------------------------------------------- */

int bkc_cast(whale_backend *b, bk_stream s, void *dst, enum whale_dtype dt, const void *src,
             enum whale_dtype st_, int64_t n)
{
    (void)b;
    (void)s;
    if (dt == st_) {
        if (dst != src)
            memmove(dst, src, (size_t)n * whale_dtype_size(dt));
        return 0;
    }
    if (st_ == WHALE_FLOAT32) {
        bkc_narrow(dst, src, dt, (size_t)n);
        return 0;
    }
    if (dt == WHALE_FLOAT32) {
        bkc_widen(dst, src, st_, (size_t)n);
        return 0;
    }
    /* bf16 <-> fp16 through fp32 (element by element: in place is allowed) */
    const uint16_t *in = src;
    uint16_t *o = dst;
    for (int64_t i = 0; i < n; i++) {
        float f = elem(st_, in, (size_t)i);
        o[i] = dt == WHALE_BFLOAT16 ? whale_float_to_bf16(f) : whale_float_to_fp16(f);
    }
    return 0;
}

int bkc_scale(whale_backend *b, bk_stream s, float *x, float a, int64_t n)
{
    (void)b;
    (void)s;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        x[i] *= a;
    return 0;
}

int bkc_sumsq(whale_backend *b, bk_stream s, const float *g, int64_t n, double *out)
{
    (void)b;
    (void)s;
    *out = whale_sumsq(g, (size_t)n);
    return 0;
}

int bkc_sumsq_multi(whale_backend *b, bk_stream s, const float *const *g, const int64_t *n,
                    int np, double *out)
{
    (void)b;
    (void)s;
    return whale_sumsq_multi(g, n, np, out);
}

int bkc_has_inf_nan(whale_backend *b, bk_stream s, const float *g, int64_t n, bool *found)
{
    (void)b;
    (void)s;
    *found = whale_has_inf_nan(g, (size_t)n);
    return 0;
}

/* All pieces of a call in one parallel region (optim/adamw_multi.c): blocks
 * of every tensor handed out dynamically, AVX-512/AVX2 chosen at run time,
 * the 16-bit copy rounded in the same pass. Bit-identical to the per-piece
 * whale_adamw_update + narrow it replaces (the optim_multi test pins that
 * on every SIMD path); about 3x faster, and one fork/join per step instead
 * of one per tensor. */
int bkc_adamw(whale_backend *b, bk_stream s, const struct whale_adamw *o, int64_t t,
              float grad_mul, const struct whale_adamw_piece *p, int np, enum whale_dtype w16t)
{
    (void)b;
    (void)s;
    enum { STACK_P = 64 };
    struct whale_adamw_tensor stack[STACK_P] = { { 0 } }, *ts = stack;
    if (np > STACK_P && !(ts = malloc((size_t)np * sizeof *ts)))
        return WHALE_ENOMEM;
    bool any16 = false;
    for (int i = 0; i < np; i++) {
        ts[i] = (struct whale_adamw_tensor){ .w = p[i].w, .g = p[i].g, .m = p[i].m, .v = p[i].v,
                                             .p16 = p[i].w16, .n = p[i].n, .decay = p[i].decay };
        any16 = any16 || p[i].w16;
    }
    int rc = whale_adamw_multi_host(o, t, ts, np, any16 ? w16t : WHALE_FLOAT32, grad_mul);
    if (ts != stack)
        free(ts);
    return rc;
}

/* ---- bias add and rounding to 16-bit values ----------------------------------------- */

int bkc_bias_add(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *bias,
                 int N, int OC)
{
    (void)b;
    (void)s;
    if (t == WHALE_FLOAT32) {
        /* the loop the engine's row-parallel linear had: same order, same bits */
        float *o = out;
        const float *bb = bias;
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < OC; c++)
                o[(size_t)n * OC + c] += bb[c];
        return 0;
    }
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * OC;
    float *o = bkc_in32(&st, t, out, n);
    const float *bb = bkc_in32(&st, t, bias, (size_t)OC);
    if (!st.err) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < N; r++)
            for (int c = 0; c < OC; c++)
                o[(size_t)r * OC + c] += bb[c];
        bkc_store(t, out, o, n);
    }
    return bkc_done(&st);
}

int bkc_round16(whale_backend *b, bk_stream s, float *x, enum whale_dtype t, int64_t n)
{
    (void)b;
    (void)s;
    if (t == WHALE_BFLOAT16)
        whale_round_f32_bf16(x, (size_t)n);
    else if (t == WHALE_FLOAT16)
        whale_round_f32_fp16(x, (size_t)n);
    return 0;
}
