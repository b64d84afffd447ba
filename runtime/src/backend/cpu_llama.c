/* cpu backend: the Llama-block operations (whale/backend.h). fp32
 * calls go straight to backend/kernels_llama.c and backend/attn_blocked.c
 * with the same arguments the engine passes them, so results are
 * bit-identical to calling those kernels. 16-bit operands are widened to
 * fp32 copies, the same kernel runs, and 16-bit outputs are rounded once
 * (nearest even): the reference for the cuda backend's 16-bit kernels. */
#include "backend/cpu_llama.h"

#include <stdlib.h>
#include <string.h>

#include "backend/attn_blocked.h"
#include "backend/cpu_stage.h"
#include "backend/kernels_llama.h"
#include "whale/dtype.h"
#include "whale/error.h"
#include "whale/log.h"

/* ---- RMSNorm --------------------------------------------------------------------- */

int bkc_rmsnorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *rstd,
                    const void *inp, const void *w, int N, int C, float eps)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * C;
    const float *x = bkc_in32(&st, t, inp, n), *ww = bkc_in32(&st, t, w, (size_t)C);
    float *o = bkc_out32(&st, t, out, n, false);
    if (!st.err) {
        k_rmsnorm_fwd(o, rstd, x, ww, N, C, eps);
        bkc_store_rows(t, out, o, 1, n, n);
    }
    return bkc_done(&st);
}

int bkc_rmsnorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                    const void *dout, const void *inp, const void *w, const float *rstd, int N,
                    int C)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t n = (size_t)N * C;
    const float *dy = bkc_in32(&st, t, dout, n), *x = bkc_in32(&st, t, inp, n);
    const float *ww = bkc_in32(&st, t, w, (size_t)C);
    float *dx = bkc_out32(&st, t, dinp, n, true);
    if (!st.err) {
        k_rmsnorm_bwd(dx, dw, dy, x, ww, rstd, N, C);
        bkc_store_rows(t, dinp, dx, 1, n, n);
    }
    return bkc_done(&st);
}

/* ---- gated MLP ------------------------------------------------------------------- */

static enum k_glu glu_of(enum whale_glu_act a)
{
    return a == WHALE_GLU_SILU ? K_GLU_SILU : K_GLU_GELU;
}

int bkc_glu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                void *h, const void *gate, const void *up, int64_t n)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *g = bkc_in32(&st, t, gate, (size_t)n), *u = bkc_in32(&st, t, up, (size_t)n);
    float *o = bkc_out32(&st, t, h, (size_t)n, false);
    if (!st.err) {
        k_glu_fwd(glu_of(act), o, g, u, n);
        bkc_store_rows(t, h, o, 1, (size_t)n, (size_t)n);
    }
    return bkc_done(&st);
}

int bkc_glu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                int64_t n)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *d = bkc_in32(&st, t, dh, (size_t)n);
    const float *g = bkc_in32(&st, t, gate, (size_t)n), *u = bkc_in32(&st, t, up, (size_t)n);
    /* dgate may alias dh: in 16 bits its fp32 copy is then dh's copy */
    float *dg = t != WHALE_FLOAT32 && dgate == dh ? (float *)d : bkc_out32(&st, t, dgate, (size_t)n, false);
    float *du = bkc_out32(&st, t, dup, (size_t)n, false);
    if (!st.err) {
        k_glu_bwd(glu_of(act), dg, du, d, g, u, n);
        bkc_store_rows(t, dgate, dg, 1, (size_t)n, (size_t)n);
        bkc_store_rows(t, dup, du, 1, (size_t)n, (size_t)n);
    }
    return bkc_done(&st);
}

/* ---- rotary ------------------------------------------------------------------------ */

int bkc_rope(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int ld, int B, int T,
             int nh, int hd, float theta, const struct whale_rope_scaling *sc, int sign)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    size_t rows = (size_t)B * T, cols = (size_t)nh * hd, n = bkc_span(rows, cols, (size_t)ld);
    float *f = bkc_out32(&st, t, x, n, true);
    if (!st.err) {
        k_rope(f, ld, B, T, nh, hd, theta, sc, sign);
        bkc_store_rows(t, x, f, rows, cols, (size_t)ld);
    }
    return bkc_done(&st);
}

/* ---- grouped-query attention --------------------------------------------------------- */

static struct k_attn_map map_of(const struct whale_attn_heads *m)
{
    return (struct k_attn_map){ .NH = m->NH, .KVl = m->KVl, .hd = m->hd,
                                .hq0 = m->hq0, .g = m->g, .k0 = m->k0 };
}

int bkc_attention_gqa_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, int ldo,
                          float *lse, const void *q, int ldq, const void *k, int ldk,
                          const void *v, int ldv, int B, int T, const struct whale_attn_heads *m)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const struct k_attn_map km = map_of(m);
    size_t rows = (size_t)B * T, qc = (size_t)m->NH * m->hd, kc = (size_t)m->KVl * m->hd;
    const float *qq = bkc_in32(&st, t, q, bkc_span(rows, qc, (size_t)ldq));
    const float *kk = bkc_in32(&st, t, k, bkc_span(rows, kc, (size_t)ldk));
    const float *vv = bkc_in32(&st, t, v, bkc_span(rows, kc, (size_t)ldv));
    float *o = bkc_out32(&st, t, out, bkc_span(rows, qc, (size_t)ldo), false);
    if (st.err)
        return bkc_done(&st);
    if (k_flash_fwd(o, ldo, lse, qq, ldq, kk, ldk, vv, ldv, B, T, &km)) {
        whale_error("cpu backend: attention block buffers could not be allocated");
        st.err = WHALE_ENOMEM;
    } else {
        bkc_store_rows(t, out, o, rows, qc, (size_t)ldo);
    }
    return bkc_done(&st);
}

int bkc_attention_gqa_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dq, void *dk,
                          void *dv, const void *dout, int ldo, const void *out, const float *lse,
                          const void *q, int ldq, const void *k, int ldk, const void *v, int ldv,
                          int B, int T, const struct whale_attn_heads *m)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const struct k_attn_map km = map_of(m);
    size_t rows = (size_t)B * T, qc = (size_t)m->NH * m->hd, kc = (size_t)m->KVl * m->hd;
    size_t nq = bkc_span(rows, qc, (size_t)ldq), nk = bkc_span(rows, kc, (size_t)ldk);
    size_t nv = bkc_span(rows, kc, (size_t)ldv), no = bkc_span(rows, qc, (size_t)ldo);
    const float *go = bkc_in32(&st, t, dout, no), *oo = bkc_in32(&st, t, out, no);
    const float *qq = bkc_in32(&st, t, q, nq), *kk = bkc_in32(&st, t, k, nk), *vv = bkc_in32(&st, t, v, nv);
    float *gq = bkc_out32(&st, t, dq, nq, false), *gk = bkc_out32(&st, t, dk, nk, false);
    float *gv = bkc_out32(&st, t, dv, nv, false);
    if (st.err)
        return bkc_done(&st);
    if (k_flash_bwd(gq, gk, gv, go, ldo, oo, lse, qq, ldq, kk, ldk, vv, ldv, B, T, &km)) {
        whale_error("cpu backend: attention block buffers could not be allocated");
        st.err = WHALE_ENOMEM;
    } else {
        bkc_store_rows(t, dq, gq, rows, qc, (size_t)ldq);
        bkc_store_rows(t, dk, gk, rows, kc, (size_t)ldk);
        bkc_store_rows(t, dv, gv, rows, kc, (size_t)ldv);
    }
    return bkc_done(&st);
}

/* ---- bias gradients, embedding rows -------------------------------------------------- */

int bkc_colsum_acc(whale_backend *b, bk_stream s, enum whale_dtype t, float *db, const void *x,
                   int ld, int N, int OC)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *d = bkc_in32(&st, t, x, bkc_span((size_t)N, (size_t)OC, (size_t)ld));
    if (st.err)
        return bkc_done(&st);
    /* the loop of the engine's strided linear backward: one column per
     * iteration, rows in order (same bits for any thread count) */
#pragma omp parallel for schedule(static)
    for (int c = 0; c < OC; c++) {
        float a = 0;
        for (int n = 0; n < N; n++)
            a += d[(size_t)n * ld + c];
        db[c] += a;
    }
    return bkc_done(&st);
}

int bkc_embed_bwd_rows(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte,
                       const void *dout, const int32_t *tok, int v0, int V, int N, int C)
{
    (void)b;
    (void)s;
    struct bkc_stage st = { 0 };
    const float *d = bkc_in32(&st, t, dout, (size_t)N * C);
    if (!st.err)
        k_embed_bwd_rows(dwte, d, tok, v0, V, N, C);
    return bkc_done(&st);
}

/* ---- strided bias rows ------------------------------------------------------------ */

int bkc_bias_fill(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, int ldo,
                  const void *bias, int N, int OC)
{
    (void)b;
    (void)s;
    /* a copy: the bytes of the bias in every row, whatever the dtype (the
     * loop block_x.c's strided linear had: same bits) */
    const size_t es = t == WHALE_FLOAT32 ? sizeof(float) : sizeof(uint16_t);
    char *o = out;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(o + (size_t)n * ldo * es, bias, es * OC);
    return 0;
}
