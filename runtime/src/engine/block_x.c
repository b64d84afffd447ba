/* The configurable transformer block: everything the model description
 * (whale/modeldesc.h) selects besides the plain GPT-2 block of layers.c:
 *
 *   x -> norm1 -> q, k, v projections -> rotary (Position=rotary) ->
 *        causal attention over grouped KV heads (plain or blocked) ->
 *        output projection (row-parallel) -> + x = r1
 *   r1 -> norm2 -> MLP (gelu: fc, GELU, proj; swiglu/geglu: gate and up,
 *        act(gate) * up, down = mlp.proj) -> + r1 = out
 *
 * Norm: LayerNorm or RMSNorm. Bias=no drops every linear bias. TP is
 * Megatron's: q, k, v, fc, gate and up column-parallel, proj row-parallel;
 * KV heads split over TP where TP divides KVHeads, else every rank keeps
 * all KV weights, computes the heads its query heads use, and the weight
 * gradients are summed over TP (kv_rep).
 *
 * With KVHeads == Heads the attention weights keep GPT-2's names and shape
 * (attn.qkv.w (3,C,C)) and, with MLP=gelu Norm=layernorm, the block declares
 * the same parameters as layers.c's: a GPT-2 model with Attention=flash
 * starts from the same weights and reads the same checkpoints. */
#include "attn_blocked.h"
#include "kernels.h"
#include "kernels_llama.h"
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "whale/error.h"
#include "whale/modeldesc.h"

void eng_norm_fwd(const struct eng_dims *d, float *out, float *mean, float *rstd,
                  const float *inp, const float *w, const float *b, int N, int C)
{
    if (d->norm == WHALE_NORM_RMSNORM)
        k_rmsnorm_fwd(out, rstd, inp, w, N, C);
    else
        k_layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
}

void eng_norm_bwd(const struct eng_dims *d, float *dinp, float *dw, float *db, const float *dout,
                  const float *inp, const float *w, const float *mean, const float *rstd, int N,
                  int C)
{
    if (d->norm == WHALE_NORM_RMSNORM)
        k_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C);
    else
        k_layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* ---- parameters ------------------------------------------------------------- */

/* Index of each parameter in the layer's table, -1 when the description
 * has none. Combined q|k|v (KVHeads == Heads): qw/qb are attn.qkv.*, kvw/kvb -1. */
struct xb_ix {
    int ln1w, ln1b, qw, qb, kvw, kvb, ow, ob, ln2w, ln2b, fcw, fcb, upw, upb, pw, pb;
};

static bool xb_glu(const struct eng_dims *d)
{
    return d->mlp == WHALE_MLP_SWIGLU || d->mlp == WHALE_MLP_GEGLU;
}

static bool xb_combined(const struct eng_dims *d)
{
    return d->KV == d->NH * d->tp && !d->kv_rep;
}

/* Declares (p != NULL) and/or indexes the parameters; returns the count. */
static int xb_decl(const struct eng_dims *d, int index, struct eng_param *p, struct xb_ix *ix)
{
    const int64_t C = d->C, F = (int64_t)d->F * d->tp, kvc = (int64_t)d->KV * d->hd;
    const float std = 0.02f, pstd = 0.02f / sqrtf(2.0f * d->L);
    const bool bias = !d->no_bias, ln = d->norm == WHALE_NORM_LAYERNORM;
    const enum whale_tp_split kvs = d->kv_rep ? WHALE_SPLIT_NONE : WHALE_SPLIT_COL;
    struct xb_ix x;
    memset(&x, 0xff, sizeof x); /* all -1 */
    char n[96];
    int i = 0;
#define NAME(s) (snprintf(n, sizeof n, "h.%d.%s", index - 1, s), n)
#define DECL(field, nm, nd, shape, split, sd, decay, sdv, cst) do { \
        if (p) eng_param_decl(&p[i], d, NAME(nm), nd, (int64_t[])shape, split, sd, decay, sdv, cst); \
        x.field = i++; } while (0)
#define S(...) { __VA_ARGS__ }
    DECL(ln1w, "ln1.w", 1, S(C), WHALE_SPLIT_NONE, 0, false, 0, 1);
    if (ln)
        DECL(ln1b, "ln1.b", 1, S(C), WHALE_SPLIT_NONE, 0, false, 0, 0);
    if (xb_combined(d)) {
        DECL(qw, "attn.qkv.w", 3, S(3, C, C), WHALE_SPLIT_COL, 1, true, std, 0);
        if (bias)
            DECL(qb, "attn.qkv.b", 2, S(3, C), WHALE_SPLIT_COL, 1, false, 0, 0);
    } else {
        DECL(qw, "attn.q.w", 2, S(C, C), WHALE_SPLIT_COL, 0, true, std, 0);
        if (bias)
            DECL(qb, "attn.q.b", 1, S(C), WHALE_SPLIT_COL, 0, false, 0, 0);
        DECL(kvw, "attn.kv.w", 3, S(2, kvc, C), kvs, 1, true, std, 0);
        if (bias)
            DECL(kvb, "attn.kv.b", 2, S(2, kvc), kvs, 1, false, 0, 0);
    }
    DECL(ow, "attn.proj.w", 2, S(C, C), WHALE_SPLIT_ROW, 1, true, pstd, 0);
    if (bias)
        DECL(ob, "attn.proj.b", 1, S(C), WHALE_SPLIT_NONE, 0, false, 0, 0);
    DECL(ln2w, "ln2.w", 1, S(C), WHALE_SPLIT_NONE, 0, false, 0, 1);
    if (ln)
        DECL(ln2b, "ln2.b", 1, S(C), WHALE_SPLIT_NONE, 0, false, 0, 0);
    if (xb_glu(d)) {
        DECL(fcw, "mlp.gate.w", 2, S(F, C), WHALE_SPLIT_COL, 0, true, std, 0);
        if (bias)
            DECL(fcb, "mlp.gate.b", 1, S(F), WHALE_SPLIT_COL, 0, false, 0, 0);
        DECL(upw, "mlp.up.w", 2, S(F, C), WHALE_SPLIT_COL, 0, true, std, 0);
        if (bias)
            DECL(upb, "mlp.up.b", 1, S(F), WHALE_SPLIT_COL, 0, false, 0, 0);
    } else {
        DECL(fcw, "mlp.fc.w", 2, S(F, C), WHALE_SPLIT_COL, 0, true, std, 0);
        if (bias)
            DECL(fcb, "mlp.fc.b", 1, S(F), WHALE_SPLIT_COL, 0, false, 0, 0);
    }
    DECL(pw, "mlp.proj.w", 2, S(C, F), WHALE_SPLIT_ROW, 1, true, pstd, 0);
    if (bias)
        DECL(pb, "mlp.proj.b", 1, S(C), WHALE_SPLIT_NONE, 0, false, 0, 0);
#undef S
#undef DECL
#undef NAME
    if (ix)
        *ix = x;
    return i;
}

int eng_xblock_params(const struct eng_dims *d, int index, struct eng_param *p)
{
    return xb_decl(d, index, p, NULL);
}

static float *pw_or_null(const struct eng_layer *l, int i)
{
    return i < 0 ? NULL : eng_pw(l, i);
}
static float *pg_or_null(const struct eng_layer *l, int i)
{
    return i < 0 ? NULL : eng_pg(l, i);
}

/* Width of a token's q|k|v row (N, W): Ct query columns, then KVc key and
 * KVc value columns of the KV heads this rank computes. */
static int xb_kvc(const struct eng_dims *d)
{
    return d->KVl * d->hd;
}
static int xb_w(const struct eng_dims *d)
{
    return d->Ctp + 2 * xb_kvc(d);
}

/* Rows of the local key (value: + plane) weight this rank uses, and the
 * plane size (rows of one of k/v in the local kv parameter). */
static void xb_kv_rows(const struct eng_dims *d, int *row0, int *plane)
{
    *row0 = d->kv_rep ? d->k0 * d->hd : 0;
    *plane = d->kv_rep ? d->KV * d->hd : xb_kvc(d);
}

static struct k_attn_map xb_map(const struct eng_dims *d)
{
    return (struct k_attn_map){ .NH = d->NH, .KVl = d->KVl, .hd = d->hd, .hq0 = d->hq0,
                                .g = (d->NH * d->tp) / d->KV, .k0 = d->k0 };
}

/* Plain attention over the expanded (N,3,NH,hd) layout (GQA). */
static bool xb_expand(const struct eng_dims *d)
{
    return d->attn == WHALE_ATTN_PLAIN && d->KVl != d->NH;
}

/* ---- saved activations ------------------------------------------------------- */

/* N = B*T rows; Ns = the rows of this rank's sequence shard (SP), else N */
struct xb_saved {
    float *ln1, *mean1, *rstd1; /* (Ns,C) (Ns) (Ns) */
    float *qkv;                 /* (N,W), q and k after rotary */
    float *att;                 /* plain: (B,NH,T,T) probabilities */
    float *lse;                 /* flash: (B,NH,T) */
    float *atty;                /* (N,Ct) */
    float *r1;                  /* (Ns,C) */
    float *ln2, *mean2, *rstd2; /* (Ns,C) (Ns) (Ns) */
    float *fc, *up, *h;         /* gelu: fc, h = GELU(fc) (N,F); glu: gate fc, up, h (N,F) */
};

static size_t xb_carve(const struct eng_dims *d, float *base, struct xb_saved *s, bool keep_att)
{
    size_t N = (size_t)d->B * d->T, Ns = (size_t)d->Ns, C = d->C, Ct = d->Ctp, F = d->F;
    size_t o = 0;
    if (s)
        memset(s, 0, sizeof *s);
#define TAKE(f, n) do { if (s) s->f = base + o; o += (n); } while (0)
    TAKE(ln1, Ns * C);
    TAKE(mean1, Ns);
    TAKE(rstd1, Ns);
    TAKE(qkv, N * (size_t)xb_w(d));
    if (d->attn == WHALE_ATTN_FLASH)
        TAKE(lse, (size_t)d->B * d->NH * d->T);
    else if (keep_att)
        TAKE(att, (size_t)d->B * d->NH * d->T * d->T);
    TAKE(atty, N * Ct);
    TAKE(r1, Ns * C);
    TAKE(ln2, Ns * C);
    TAKE(mean2, Ns);
    TAKE(rstd2, Ns);
    TAKE(fc, N * F);
    if (xb_glu(d))
        TAKE(up, N * F);
    TAKE(h, N * F);
#undef TAKE
    return o;
}

static size_t xb_act(const struct eng_layer *l)
{
    return xb_carve(l->d, NULL, NULL, l->rc != ENG_RC_SELECTIVE);
}

static void xb_bind(const struct eng_layer *l, struct eng_io *io, struct xb_saved *s)
{
    xb_carve(l->d, io->saved, s, l->rc != ENG_RC_SELECTIVE);
    if (l->d->attn == WHALE_ATTN_PLAIN && !s->att)
        s->att = io->att_tmp;
}

/* Scratch: sa (N,C) | sb (N,max(2F,W)) | sc (N,max(C,Ct)) | expanded q|k|v
 * and its gradient (2 x (N,3Ct), GQA with plain attention) | the summed
 * kv weight and bias gradient (2 KV hd (C+1), kv_rep) | SP: the gathered
 * norm output and output gradient (2 x (N,C)), norm weight gradients (2C),
 * this rank's rows of a reduce-scatter (Ns,C). */
struct xb_scratch {
    float *sa, *sb, *sc, *ex, *dex, *kvg, *full, *dfull, *nw, *shard;
};

static size_t xb_scratch_carve(const struct eng_dims *d, float *base, struct xb_scratch *s)
{
    size_t N = (size_t)d->B * d->T, W = (size_t)xb_w(d);
    size_t big = 2 * (size_t)d->F > W ? 2 * (size_t)d->F : W;
    size_t mid = (size_t)d->C > (size_t)d->Ctp ? (size_t)d->C : (size_t)d->Ctp;
    size_t o = 0;
#define TAKE(f, n) do { if (s) s->f = base ? base + o : NULL; o += (n); } while (0)
    TAKE(sa, N * d->C);
    TAKE(sb, N * big);
    TAKE(sc, N * mid);
    TAKE(ex, xb_expand(d) ? N * 3 * d->Ctp : 0);
    TAKE(dex, xb_expand(d) ? N * 3 * d->Ctp : 0);
    TAKE(kvg, d->kv_rep ? 2 * (size_t)d->KV * d->hd * (d->C + 1) : 0);
    TAKE(full, d->sp ? N * d->C : 0);
    TAKE(dfull, d->sp ? N * d->C : 0);
    TAKE(nw, d->sp ? 2 * (size_t)d->C : 0);
    TAKE(shard, d->sp ? (size_t)d->Ns * d->C : 0);
#undef TAKE
    return o;
}

static size_t xb_scratch_floats(const struct eng_layer *l)
{
    return xb_scratch_carve(l->d, NULL, NULL);
}

/* ---- linear helpers with a row stride ----------------------------------------- */

/* out (N,OC) rows ldo apart = inp (N,IC) @ w (OC,IC)^T + b (OC; may be NULL) */
static void xlin_fwd(enum whale_dtype mm, float *out, int ldo, const float *inp, const float *w,
                     const float *b, int N, int IC, int OC)
{
    if (b) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * ldo, b, sizeof(float) * OC);
    }
    k_gemm_mm(mm, 0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, b ? 1.0f : 0.0f, out, ldo);
}

/* dinp (N,IC) (= or += with acc) = dout (N,OC; rows ldd apart) @ w (OC,IC);
 * dw (OC,IC) += dout^T @ inp ; db (OC) += column sums of dout (may be NULL) */
static void xlin_bwd(enum whale_dtype mm, float *dinp, float *dw, float *db, const float *dout,
                     int ldd, const float *inp, const float *w, int N, int IC, int OC, int acc)
{
    k_gemm_mm(mm, 0, 0, N, IC, OC, 1.0f, dout, ldd, w, IC, acc ? 1.0f : 0.0f, dinp, IC);
    k_gemm_mm(mm, 1, 0, OC, IC, N, 1.0f, dout, ldd, inp, IC, 1.0f, dw, IC);
    if (db) {
#pragma omp parallel for schedule(static)
        for (int c = 0; c < OC; c++) {
            float a = 0;
            for (int n = 0; n < N; n++)
                a += dout[(size_t)n * ldd + c];
            db[c] += a;
        }
    }
}

/* The rows of a row-parallel output this rank keeps: *rows (Ns,C) = (sum
 * over TP of inp (N,IC) @ w (C,IC)^T) + b. Without SP that is every row
 * (all-reduce, in x->sa); under SP this rank's rows (reduce-scatter into
 * x->shard), the bias added after the sum either way. */
static int xb_row_out(const struct eng_layer *l, struct eng_io *io, struct xb_scratch *x,
                      const float *inp, const float *w, const float *b, int IC,
                      const float **rows)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, Ns = d->Ns, C = d->C;
    if (!d->sp) {
        *rows = x->sa;
        return eng_tp_row_linear_fwd_mm(io->mm, x->sa, inp, w, b, N, IC, C, io->tp_group);
    }
    k_linear_fwd(io->mm, x->sa, inp, w, NULL, N, IC, C);
    int rc = eng_sp_scatter(d, io->tp_group, x->shard, x->sa);
    if (rc)
        return rc;
    if (b) {
        float *o = x->shard;
#pragma omp parallel for schedule(static)
        for (int n = 0; n < Ns; n++)
            for (int c = 0; c < C; c++)
                o[(size_t)n * C + c] += b[c];
    }
    *rows = x->shard;
    return 0;
}

/* The column-parallel GEMMs' input gradient (partial sums (N,C) in x->sa)
 * summed over TP: every row (all-reduce) without SP, this rank's rows
 * (reduce-scatter into x->shard) under SP. *rows: (Ns,C). */
static int xb_col_dinput(const struct eng_layer *l, struct eng_io *io, struct xb_scratch *x,
                         const float **rows)
{
    const struct eng_dims *d = l->d;
    if (d->sp) {
        *rows = x->shard;
        return eng_sp_scatter(d, io->tp_group, x->shard, x->sa);
    }
    *rows = x->sa;
    return io->tp_group ? eng_tp_allreduce(io->tp_group, x->sa, (size_t)d->B * d->T * d->C) : 0;
}

/* ---- forward ----------------------------------------------------------------- */

/* q|k|v (N,W) = ln1 @ [Wq; Wk; Wv]^T (+ biases), then rotary on q and k */
static void xb_qkv_fwd(const struct eng_layer *l, const struct xb_ix *ix, enum whale_dtype mm,
                       float *qkv, const float *ln1)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, C = d->C, Ct = d->Ctp, KVc = xb_kvc(d), W = xb_w(d);
    if (ix->kvw < 0) {
        /* attn.qkv.w (3,Ct,C) local: one GEMM, as layers.c does */
        k_linear_fwd(mm, qkv, ln1, eng_pw(l, ix->qw), pw_or_null(l, ix->qb), N, C, W);
    } else {
        int r0, plane;
        xb_kv_rows(d, &r0, &plane);
        const float *wkv = eng_pw(l, ix->kvw), *bkv = pw_or_null(l, ix->kvb);
        xlin_fwd(mm, qkv, W, ln1, eng_pw(l, ix->qw), pw_or_null(l, ix->qb), N, C, Ct);
        xlin_fwd(mm, qkv + Ct, W, ln1, wkv + (size_t)r0 * C, bkv ? bkv + r0 : NULL, N, C, KVc);
        xlin_fwd(mm, qkv + Ct + KVc, W, ln1, wkv + (size_t)(plane + r0) * C,
                 bkv ? bkv + plane + r0 : NULL, N, C, KVc);
    }
    if (d->pos == WHALE_POS_ROTARY) {
        k_rope(qkv, W, d->B, d->T, d->NH, d->hd, d->rope_theta, 1);
        k_rope(qkv + Ct, W, d->B, d->T, d->KVl, d->hd, d->rope_theta, 1);
    }
}

static int xb_attn_fwd(const struct eng_layer *l, struct xb_saved *s, struct xb_scratch *x)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, Ct = d->Ctp, KVc = xb_kvc(d), W = xb_w(d);
    const struct k_attn_map m = xb_map(d);
    if (d->attn == WHALE_ATTN_FLASH)
        return k_flash_fwd(s->atty, Ct, s->lse, s->qkv, W, s->qkv + Ct, W, s->qkv + Ct + KVc, W,
                           d->B, d->T, &m) ? WHALE_ENOMEM : 0;
    const float *src = s->qkv;
    if (xb_expand(d)) {
        k_gqa_expand(x->ex, s->qkv, W, N, &m);
        src = x->ex;
    }
    k_attention_fwd(s->atty, s->att, src, d->B, d->T, d->NH, d->hd);
    return 0;
}

/* The norm output the column-parallel GEMMs read: the rows of all TP
 * ranks under SP (gathered into x->full), else the saved one itself. */
static int xb_norm_rows(const struct eng_layer *l, struct eng_io *io, struct xb_scratch *x,
                        float *ln, const float **full)
{
    *full = ln;
    if (!l->d->sp)
        return 0;
    *full = x->full;
    return eng_sp_gather(l->d, io->tp_group, x->full, ln);
}

static int xb_fwd(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, Ns = d->Ns, C = d->C, Ct = d->Ctp, F = d->F;
    struct xb_ix ix;
    xb_decl(d, l->index, NULL, &ix);
    struct xb_saved s;
    struct xb_scratch x;
    xb_bind(l, io, &s);
    xb_scratch_carve(d, io->scratch, &x);
    const float *ln, *mine; /* mine: this rank's rows (Ns,C) of a row-parallel output */
    int rc;
    eng_norm_fwd(d, s.ln1, s.mean1, s.rstd1, io->in, eng_pw(l, ix.ln1w), pw_or_null(l, ix.ln1b),
                 Ns, C);
    if ((rc = xb_norm_rows(l, io, &x, s.ln1, &ln)))
        return rc;
    xb_qkv_fwd(l, &ix, io->mm, s.qkv, ln);
    if ((rc = xb_attn_fwd(l, &s, &x)))
        return rc;
    if ((rc = xb_row_out(l, io, &x, s.atty, eng_pw(l, ix.ow), pw_or_null(l, ix.ob), Ct, &mine)))
        return rc;
    k_add(s.r1, io->in, mine, (int64_t)Ns * C);
    eng_norm_fwd(d, s.ln2, s.mean2, s.rstd2, s.r1, eng_pw(l, ix.ln2w), pw_or_null(l, ix.ln2b),
                 Ns, C);
    if ((rc = xb_norm_rows(l, io, &x, s.ln2, &ln)))
        return rc;
    k_linear_fwd(io->mm, s.fc, ln, eng_pw(l, ix.fcw), pw_or_null(l, ix.fcb), N, C, F);
    if (xb_glu(d)) {
        k_linear_fwd(io->mm, s.up, ln, eng_pw(l, ix.upw), pw_or_null(l, ix.upb), N, C, F);
        k_glu_fwd(d->mlp == WHALE_MLP_SWIGLU ? K_GLU_SILU : K_GLU_GELU, s.h, s.fc, s.up,
                  (int64_t)N * F);
    } else {
        k_gelu_fwd(s.h, s.fc, (int64_t)N * F);
    }
    if ((rc = xb_row_out(l, io, &x, s.h, eng_pw(l, ix.pw), pw_or_null(l, ix.pb), F, &mine)))
        return rc;
    k_add(io->out, s.r1, mine, (int64_t)Ns * C);
    return 0;
}

/* ---- backward ---------------------------------------------------------------- */

/* dqkv (N,W) from datty (N,Ct): attention backward, then rotary's */
static int xb_attn_bwd(const struct eng_layer *l, struct xb_saved *s, struct xb_scratch *x,
                       float *dqkv, const float *datty)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, Ct = d->Ctp, KVc = xb_kvc(d), W = xb_w(d);
    const struct k_attn_map m = xb_map(d);
    if (d->attn == WHALE_ATTN_FLASH) {
        if (k_flash_bwd(dqkv, dqkv + Ct, dqkv + Ct + KVc, datty, Ct, s->atty, s->lse, s->qkv, W,
                        s->qkv + Ct, W, s->qkv + Ct + KVc, W, d->B, d->T, &m))
            return WHALE_ENOMEM;
    } else {
        const float *src = s->qkv;
        if (xb_expand(d)) {
            k_gqa_expand(x->ex, s->qkv, W, N, &m);
            src = x->ex;
        }
        if (l->rc == ENG_RC_SELECTIVE) /* att (B,NH,T,T) rebuilt from the saved q,k */
            k_attention_probs(s->att, src, d->B, d->T, d->NH, d->hd);
        if (xb_expand(d)) {
            k_attention_bwd(x->dex, datty, src, s->att, d->B, d->T, d->NH, d->hd);
            k_gqa_fold(dqkv, W, x->dex, N, &m);
        } else {
            k_attention_bwd(dqkv, datty, src, s->att, d->B, d->T, d->NH, d->hd);
        }
    }
    if (d->pos == WHALE_POS_ROTARY) {
        k_rope(dqkv, W, d->B, d->T, d->NH, d->hd, d->rope_theta, -1);
        k_rope(dqkv + Ct, W, d->B, d->T, d->KVl, d->hd, d->rope_theta, -1);
    }
    return 0;
}

/* dln1 (N,C) = dqkv @ [Wq; Wk; Wv] (this rank's part), weight gradients */
static int xb_qkv_bwd(const struct eng_layer *l, const struct xb_ix *ix, struct eng_io *io,
                      struct xb_scratch *x, float *dln1, const float *dqkv, const float *ln1)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, C = d->C, Ct = d->Ctp, KVc = xb_kvc(d), W = xb_w(d);
    if (ix->kvw < 0) {
        k_linear_bwd(io->mm, dln1, eng_pg(l, ix->qw), pg_or_null(l, ix->qb), dqkv, ln1,
                     eng_pw(l, ix->qw), N, C, W, 0);
        return 0;
    }
    int r0, plane;
    xb_kv_rows(d, &r0, &plane);
    const float *wkv = eng_pw(l, ix->kvw);
    float *gkv = eng_pg(l, ix->kvw), *gkb = pg_or_null(l, ix->kvb);
    size_t nkv = 2 * (size_t)plane * C;
    if (d->kv_rep) {
        /* partial gradients of all KV heads' weights: zero but the rows this
         * rank used, summed over TP below (every replica gets the total) */
        memset(x->kvg, 0, sizeof(float) * (nkv + 2 * (size_t)plane));
        gkv = x->kvg;
        gkb = gkb ? x->kvg + nkv : NULL;
    }
    xlin_bwd(io->mm, dln1, eng_pg(l, ix->qw), pg_or_null(l, ix->qb), dqkv, W, ln1,
             eng_pw(l, ix->qw), N, C, Ct, 0);
    xlin_bwd(io->mm, dln1, gkv + (size_t)r0 * C, gkb ? gkb + r0 : NULL, dqkv + Ct, W, ln1,
             wkv + (size_t)r0 * C, N, C, KVc, 1);
    xlin_bwd(io->mm, dln1, gkv + (size_t)(plane + r0) * C, gkb ? gkb + plane + r0 : NULL,
             dqkv + Ct + KVc, W, ln1, wkv + (size_t)(plane + r0) * C, N, C, KVc, 1);
    if (d->kv_rep) {
        size_t n = nkv + (gkb ? 2 * (size_t)plane : 0);
        int rc = eng_tp_allreduce(io->tp_group, x->kvg, n);
        if (rc)
            return rc;
        k_acc(eng_pg(l, ix->kvw), x->kvg, (int64_t)nkv);
        if (gkb)
            k_acc(eng_pg(l, ix->kvb), x->kvg + nkv, 2 * (int64_t)plane);
    }
    return 0;
}

/* Norm backward on this rank's rows: ds (Ns,C) += from dln (Ns,C); under SP
 * the norm's weight gradients are partial sums over rows, added up over TP. */
static int xb_norm_bwd(const struct eng_layer *l, struct eng_io *io, struct xb_scratch *x,
                       float *ds, int wi, int bi, const float *dln, const float *inp,
                       const float *mean, const float *rstd)
{
    const struct eng_dims *d = l->d;
    if (!d->sp) {
        eng_norm_bwd(d, ds, eng_pg(l, wi), pg_or_null(l, bi), dln, inp, eng_pw(l, wi), mean,
                     rstd, d->Ns, d->C);
        return 0;
    }
    const size_t n = (bi >= 0 ? 2 : 1) * (size_t)d->C; /* weight, then bias (LayerNorm) */
    memset(x->nw, 0, sizeof(float) * n);
    eng_norm_bwd(d, ds, x->nw, bi >= 0 ? x->nw + d->C : NULL, dln, inp, eng_pw(l, wi), mean,
                 rstd, d->Ns, d->C);
    int rc = eng_tp_allreduce(io->tp_group, x->nw, n);
    if (rc)
        return rc;
    k_acc(eng_pg(l, wi), x->nw, d->C);
    if (bi >= 0)
        k_acc(eng_pg(l, bi), x->nw + d->C, d->C);
    return 0;
}

static int xb_bwd(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, C = d->C, Ct = d->Ctp, F = d->F;
    struct xb_ix ix;
    xb_decl(d, l->index, NULL, &ix);
    struct xb_saved s;
    struct xb_scratch x;
    xb_bind(l, io, &s);
    xb_scratch_carve(d, io->scratch, &x);
    float *ds = io->dstream; /* (Ns,C), in place: dout -> dinput */
    const float *dsf = ds;   /* (N,C): gathered under SP */
    const float *ln, *dmine; /* dmine: this rank's rows (Ns,C) of a norm output's gradient */
    int rc;
    if (d->sp && (rc = eng_sp_gather(d, io->tp_group, x.dfull, ds)))
        return rc;
    if (d->sp)
        dsf = x.dfull;
    /* MLP: dh (N,F) = ds @ Wproj ; then the activation's and fc/gate/up's backward */
    k_linear_bwd(io->mm, x.sb, eng_pg(l, ix.pw), pg_or_null(l, ix.pb), dsf, s.h,
                 eng_pw(l, ix.pw), N, F, C, 0);
    if ((rc = xb_norm_rows(l, io, &x, s.ln2, &ln)))
        return rc;
    if (xb_glu(d)) {
        float *dgate = x.sb, *dup = x.sb + (size_t)N * F;
        k_glu_bwd(d->mlp == WHALE_MLP_SWIGLU ? K_GLU_SILU : K_GLU_GELU, dgate, dup, x.sb, s.fc,
                  s.up, (int64_t)N * F);
        k_linear_bwd(io->mm, x.sa, eng_pg(l, ix.fcw), pg_or_null(l, ix.fcb), dgate, ln,
                     eng_pw(l, ix.fcw), N, C, F, 0);
        k_linear_bwd(io->mm, x.sa, eng_pg(l, ix.upw), pg_or_null(l, ix.upb), dup, ln,
                     eng_pw(l, ix.upw), N, C, F, 1);
    } else {
        k_gelu_bwd(x.sb, s.fc, x.sb, (int64_t)N * F);
        k_linear_bwd(io->mm, x.sa, eng_pg(l, ix.fcw), pg_or_null(l, ix.fcb), x.sb, ln,
                     eng_pw(l, ix.fcw), N, C, F, 0);
    }
    /* column-parallel input gradient: summed over TP (SP: this rank's rows) */
    if ((rc = xb_col_dinput(l, io, &x, &dmine)))
        return rc;
    if ((rc = xb_norm_bwd(l, io, &x, ds, ix.ln2w, ix.ln2b, dmine, s.r1, s.mean2, s.rstd2)))
        return rc;
    /* attention output projection: datty (N,Ct) = dr1 @ Wproj */
    if (d->sp && (rc = eng_sp_gather(d, io->tp_group, x.dfull, ds)))
        return rc;
    k_linear_bwd(io->mm, x.sc, eng_pg(l, ix.ow), pg_or_null(l, ix.ob), dsf, s.atty,
                 eng_pw(l, ix.ow), N, Ct, C, 0);
    if ((rc = xb_attn_bwd(l, &s, &x, x.sb, x.sc)))
        return rc;
    if ((rc = xb_norm_rows(l, io, &x, s.ln1, &ln)))
        return rc;
    if ((rc = xb_qkv_bwd(l, &ix, io, &x, x.sa, x.sb, ln)))
        return rc;
    if ((rc = xb_col_dinput(l, io, &x, &dmine)))
        return rc;
    return xb_norm_bwd(l, io, &x, ds, ix.ln1w, ix.ln1b, dmine, io->in, s.mean1, s.rstd1);
}

static void xb_flops(const struct eng_layer *l, double *f, double *b)
{
    const struct eng_dims *d = l->d;
    double N = (double)d->B * d->T, C = d->C, Ct = d->Ctp, F = d->F, W = xb_w(d);
    double mm = 2.0 * N * (C * W + Ct * C + (xb_glu(d) ? 3 : 2) * C * F);
    /* causal attention: QK^T and PV over the lower triangle */
    double att = 2.0 * 2.0 * d->B * d->NH * (double)d->T * d->T * d->hd / 2.0;
    *f = mm + att;
    /* blocked attention recomputes QK^T in backward */
    *b = 2.0 * (mm + att) + (d->attn == WHALE_ATTN_FLASH ? att / 2 : 0);
}

const struct eng_layer_ops eng_xblock_ops = {
    .kind = "block", .act_floats = xb_act, .scratch_floats = xb_scratch_floats,
    .forward = xb_fwd, .backward = xb_bwd, .flops = xb_flops,
};
