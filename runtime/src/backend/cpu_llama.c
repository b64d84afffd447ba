/* cpu backend: the Llama-block operations (whale/backend.h, wave 4). fp32
 * calls go straight to backend/kernels_llama.c and backend/attn_blocked.c
 * with the same arguments the engine passes them, so results are
 * bit-identical to calling those kernels. 16-bit operands are widened to
 * fp32 copies, the same kernel runs, and 16-bit outputs are rounded once
 * (nearest even): the reference for the cuda backend's 16-bit kernels. */
#include "backend/cpu_llama.h"

#include <stdlib.h>
#include <string.h>

#include "backend/attn_blocked.h"
#include "backend/kernels_llama.h"
#include "whale/dtype.h"
#include "whale/error.h"
#include "whale/log.h"

/* ---- 16-bit staging (up to 8 fp32 copies per call, freed together) ----------- */

struct stage {
    float *buf[8];
    int n, err;
};

static float *in32(struct stage *st, enum whale_dtype t, const void *p, size_t n)
{
    if (!p || t == WHALE_FLOAT32)
        return (float *)p;
    float *f = malloc((n ? n : 1) * sizeof(float));
    if (!f) {
        whale_error("cpu backend: no memory to widen %zu 16-bit values", n);
        st->err = WHALE_ENOMEM;
        return NULL;
    }
    st->buf[st->n++] = f;
    if (t == WHALE_BFLOAT16)
        whale_bf16_to_f32(f, p, n);
    else
        whale_fp16_to_f32(f, p, n);
    return f;
}

/* An output that is also read (+=, in place) is widened; a write-only one
 * starts at zero so the bytes between strided rows stay defined. */
static float *out32(struct stage *st, enum whale_dtype t, void *p, size_t n, bool read)
{
    if (!p || t == WHALE_FLOAT32)
        return p;
    if (read)
        return in32(st, t, p, n);
    float *f = calloc(n ? n : 1, sizeof(float));
    if (!f) {
        whale_error("cpu backend: no memory for %zu fp32 staging values", n);
        st->err = WHALE_ENOMEM;
        return NULL;
    }
    st->buf[st->n++] = f;
    return f;
}

/* Rounds an fp32 staging copy back into the 16-bit destination: only the
 * columns [0, cols) of each of `rows` rows ld apart, so a strided output
 * never overwrites the columns between its rows. */
static void store(enum whale_dtype t, void *dst, const float *f, size_t rows, size_t cols,
                  size_t ld)
{
    if (!dst || t == WHALE_FLOAT32)
        return;
    uint16_t *d = dst;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            float v = f[r * ld + c];
            d[r * ld + c] = t == WHALE_BFLOAT16 ? whale_float_to_bf16(v) : whale_float_to_fp16(v);
        }
}

static int done(struct stage *st)
{
    for (int i = 0; i < st->n; i++)
        free(st->buf[i]);
    return st->err;
}

static size_t span(size_t rows, size_t cols, size_t ld)
{
    return rows && cols ? (rows - 1) * ld + cols : 0;
}

/* ---- RMSNorm --------------------------------------------------------------------- */

int bkc_rmsnorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *rstd,
                    const void *inp, const void *w, int N, int C)
{
    (void)b;
    (void)s;
    struct stage st = { 0 };
    size_t n = (size_t)N * C;
    const float *x = in32(&st, t, inp, n), *ww = in32(&st, t, w, (size_t)C);
    float *o = out32(&st, t, out, n, false);
    if (!st.err) {
        k_rmsnorm_fwd(o, rstd, x, ww, N, C);
        store(t, out, o, 1, n, n);
    }
    return done(&st);
}

int bkc_rmsnorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                    const void *dout, const void *inp, const void *w, const float *rstd, int N,
                    int C)
{
    (void)b;
    (void)s;
    struct stage st = { 0 };
    size_t n = (size_t)N * C;
    const float *dy = in32(&st, t, dout, n), *x = in32(&st, t, inp, n);
    const float *ww = in32(&st, t, w, (size_t)C);
    float *dx = out32(&st, t, dinp, n, true);
    if (!st.err) {
        k_rmsnorm_bwd(dx, dw, dy, x, ww, rstd, N, C);
        store(t, dinp, dx, 1, n, n);
    }
    return done(&st);
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
    struct stage st = { 0 };
    const float *g = in32(&st, t, gate, (size_t)n), *u = in32(&st, t, up, (size_t)n);
    float *o = out32(&st, t, h, (size_t)n, false);
    if (!st.err) {
        k_glu_fwd(glu_of(act), o, g, u, n);
        store(t, h, o, 1, (size_t)n, (size_t)n);
    }
    return done(&st);
}

int bkc_glu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                int64_t n)
{
    (void)b;
    (void)s;
    struct stage st = { 0 };
    const float *d = in32(&st, t, dh, (size_t)n);
    const float *g = in32(&st, t, gate, (size_t)n), *u = in32(&st, t, up, (size_t)n);
    /* dgate may alias dh: in 16 bits its fp32 copy is then dh's copy */
    float *dg = t != WHALE_FLOAT32 && dgate == dh ? (float *)d : out32(&st, t, dgate, (size_t)n, false);
    float *du = out32(&st, t, dup, (size_t)n, false);
    if (!st.err) {
        k_glu_bwd(glu_of(act), dg, du, d, g, u, n);
        store(t, dgate, dg, 1, (size_t)n, (size_t)n);
        store(t, dup, du, 1, (size_t)n, (size_t)n);
    }
    return done(&st);
}

/* ---- rotary ------------------------------------------------------------------------ */

int bkc_rope(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int ld, int B, int T,
             int nh, int hd, float theta, int sign)
{
    (void)b;
    (void)s;
    struct stage st = { 0 };
    size_t rows = (size_t)B * T, cols = (size_t)nh * hd, n = span(rows, cols, (size_t)ld);
    float *f = out32(&st, t, x, n, true);
    if (!st.err) {
        k_rope(f, ld, B, T, nh, hd, theta, sign);
        store(t, x, f, rows, cols, (size_t)ld);
    }
    return done(&st);
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
    struct stage st = { 0 };
    const struct k_attn_map km = map_of(m);
    size_t rows = (size_t)B * T, qc = (size_t)m->NH * m->hd, kc = (size_t)m->KVl * m->hd;
    const float *qq = in32(&st, t, q, span(rows, qc, (size_t)ldq));
    const float *kk = in32(&st, t, k, span(rows, kc, (size_t)ldk));
    const float *vv = in32(&st, t, v, span(rows, kc, (size_t)ldv));
    float *o = out32(&st, t, out, span(rows, qc, (size_t)ldo), false);
    if (st.err)
        return done(&st);
    if (k_flash_fwd(o, ldo, lse, qq, ldq, kk, ldk, vv, ldv, B, T, &km)) {
        whale_error("cpu backend: attention block buffers could not be allocated");
        st.err = WHALE_ENOMEM;
    } else {
        store(t, out, o, rows, qc, (size_t)ldo);
    }
    return done(&st);
}

int bkc_attention_gqa_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dq, void *dk,
                          void *dv, const void *dout, int ldo, const void *out, const float *lse,
                          const void *q, int ldq, const void *k, int ldk, const void *v, int ldv,
                          int B, int T, const struct whale_attn_heads *m)
{
    (void)b;
    (void)s;
    struct stage st = { 0 };
    const struct k_attn_map km = map_of(m);
    size_t rows = (size_t)B * T, qc = (size_t)m->NH * m->hd, kc = (size_t)m->KVl * m->hd;
    size_t nq = span(rows, qc, (size_t)ldq), nk = span(rows, kc, (size_t)ldk);
    size_t nv = span(rows, kc, (size_t)ldv), no = span(rows, qc, (size_t)ldo);
    const float *go = in32(&st, t, dout, no), *oo = in32(&st, t, out, no);
    const float *qq = in32(&st, t, q, nq), *kk = in32(&st, t, k, nk), *vv = in32(&st, t, v, nv);
    float *gq = out32(&st, t, dq, nq, false), *gk = out32(&st, t, dk, nk, false);
    float *gv = out32(&st, t, dv, nv, false);
    if (st.err)
        return done(&st);
    if (k_flash_bwd(gq, gk, gv, go, ldo, oo, lse, qq, ldq, kk, ldk, vv, ldv, B, T, &km)) {
        whale_error("cpu backend: attention block buffers could not be allocated");
        st.err = WHALE_ENOMEM;
    } else {
        store(t, dq, gq, rows, qc, (size_t)ldq);
        store(t, dk, gk, rows, kc, (size_t)ldk);
        store(t, dv, gv, rows, kc, (size_t)ldv);
    }
    return done(&st);
}

/* ---- bias gradients, embedding rows -------------------------------------------------- */

int bkc_colsum_acc(whale_backend *b, bk_stream s, enum whale_dtype t, float *db, const void *x,
                   int ld, int N, int OC)
{
    (void)b;
    (void)s;
    struct stage st = { 0 };
    const float *d = in32(&st, t, x, span((size_t)N, (size_t)OC, (size_t)ld));
    if (st.err)
        return done(&st);
    /* the loop of the engine's strided linear backward: one column per
     * iteration, rows in order (same bits for any thread count) */
#pragma omp parallel for schedule(static)
    for (int c = 0; c < OC; c++) {
        float a = 0;
        for (int n = 0; n < N; n++)
            a += d[(size_t)n * ld + c];
        db[c] += a;
    }
    return done(&st);
}

int bkc_embed_bwd_rows(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte,
                       const void *dout, const int32_t *tok, int v0, int V, int N, int C)
{
    (void)b;
    (void)s;
    struct stage st = { 0 };
    const float *d = in32(&st, t, dout, (size_t)N * C);
    if (!st.err)
        k_embed_bwd_rows(dwte, d, tok, v0, V, N, C);
    return done(&st);
}
