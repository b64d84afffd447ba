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
 * starts from the same weights and reads the same checkpoints.
 *
 * Every kernel runs through the engine's backend (whale/backend.h, d->bk)
 * on its compute stream, as layers.c's GPT block does, so the block runs on
 * cpu and cuda alike. On cpu each backend op calls the kernel this file
 * called before with the same arguments: the bits are those of the direct
 * calls. Left on the host: the q|k|v expansion of plain attention with
 * grouped KV heads (cpu only: a backend that cannot read host memory runs
 * that case through the grouped flash kernel instead), and the TP/SP
 * collectives (host groups; host-coherent backend memory on cuda). */
#include "layer.h"
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "whale/backend.h"
#include "whale/error.h"
#include "whale/modeldesc.h"

#define F32 WHALE_FLOAT32

/* out (N,C), mean and rstd (N): LayerNorm (b may be NULL: Bias=no) or
 * RMSNorm (mean unused) */
int eng_norm_fwd(const struct eng_dims *d, float *out, float *mean, float *rstd,
                 const float *inp, const float *w, const float *b, int N, int C)
{
    if (d->norm == WHALE_NORM_RMSNORM)
        return whale_k_rmsnorm_fwd(d->bk, NULL, F32, out, rstd, inp, w, N, C, d->norm_eps);
    return whale_k_layernorm_fwd(d->bk, NULL, F32, out, mean, rstd, inp, w, b, N, C);
}

/* dinp (N,C) += ; dw (C) += ; db (C) += (LayerNorm with a bias) */
int eng_norm_bwd(const struct eng_dims *d, float *dinp, float *dw, float *db, const float *dout,
                 const float *inp, const float *w, const float *mean, const float *rstd, int N,
                 int C)
{
    if (d->norm == WHALE_NORM_RMSNORM)
        return whale_k_rmsnorm_bwd(d->bk, NULL, F32, dinp, dw, dout, inp, w, rstd, N, C);
    return whale_k_layernorm_bwd(d->bk, NULL, F32, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* ---- parameters ------------------------------------------------------------- */

/* Index of each parameter in the layer's table, -1 when the description
 * has none. Combined q|k|v (KVHeads == Heads): qw/qb are attn.qkv.*, kvw/kvb -1. */
struct xb_ix {
    int ln1w, ln1b, qw, qb, kvw, kvb, ow, ob, ln2w, ln2b, fcw, fcb, upw, upb, pw, pb;
    int moe;   /* MoE block: the first of moe.c's parameters (the MLP's are -1) */
};

static bool xb_glu(const struct eng_dims *d)
{
    return d->mlp == WHALE_MLP_SWIGLU || d->mlp == WHALE_MLP_GEGLU;
}

static enum whale_glu_act xb_glu_act(const struct eng_dims *d)
{
    return d->mlp == WHALE_MLP_SWIGLU ? WHALE_GLU_SILU : WHALE_GLU_GELU;
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
    if (eng_moe_block(d, index)) {
        x.moe = i;
        i += eng_moe_params(d, index, p ? p + i : NULL);
    } else if (xb_glu(d)) {
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
    if (x.moe < 0) {
        DECL(pw, "mlp.proj.w", 2, S(C, F), WHALE_SPLIT_ROW, 1, true, pstd, 0);
        if (bias)
            DECL(pb, "mlp.proj.b", 1, S(C), WHALE_SPLIT_NONE, 0, false, 0, 0);
    }
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

void eng_xblock_ix(const struct eng_dims *d, int index, struct eng_xb_ix *ix)
{
    struct xb_ix x;
    xb_decl(d, index, NULL, &x);
    *ix = (struct eng_xb_ix){ x.ln1w, x.ln1b, x.qw, x.qb, x.kvw, x.kvb, x.ow, x.ob, x.ln2w,
                              x.ln2b, x.fcw, x.fcb, x.upw, x.upb, x.pw, x.pb, x.moe };
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

static struct whale_attn_heads xb_heads(const struct eng_dims *d)
{
    return (struct whale_attn_heads){ .NH = d->NH, .KVl = d->KVl, .hd = d->hd, .hq0 = d->hq0,
                                      .g = (d->NH * d->tp) / d->KV, .k0 = d->k0 };
}

/* Plain attention with grouped KV heads (KVl != NH). On a backend whose
 * kernels read host memory (cpu) q|k|v is expanded to (N,3,NH,hd) on the
 * host and the plain kernel keeps its probabilities; elsewhere (cuda) the
 * grouped flash kernel runs and `att` holds its log-sum-exp (B,NH,T),
 * which fits: whale_attention_saved_floats is (B,NH,T) there. */
static bool xb_gqa_plain(const struct eng_dims *d)
{
    return d->attn == WHALE_ATTN_PLAIN && d->KVl != d->NH;
}
static bool xb_expand(const struct eng_dims *d)
{
    return xb_gqa_plain(d) && whale_backend_reads_host(d->bk); /* NULL bk: cpu */
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
    float *moe;                 /* MoE block: moe.c's saved area instead of fc, up, h */
};

static size_t xb_carve(const struct eng_dims *d, float *base, struct xb_saved *s, bool keep_att,
                       bool moe)
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
    else if (keep_att) /* cpu: probabilities (B,NH,T,T); cuda: log-sum-exp (B,NH,T) */
        TAKE(att, whale_attention_saved_floats(d->bk, d->B, d->T, d->NH, d->hd)); /* NULL bk: cpu's */
    TAKE(atty, N * Ct);
    TAKE(r1, Ns * C);
    TAKE(ln2, Ns * C);
    TAKE(mean2, Ns);
    TAKE(rstd2, Ns);
    if (moe) {
        TAKE(moe, eng_moe_saved_floats(d));
    } else {
        TAKE(fc, N * F);
        if (xb_glu(d))
            TAKE(up, N * F);
        TAKE(h, N * F);
    }
#undef TAKE
    return o;
}

static size_t xb_act(const struct eng_layer *l)
{
    return xb_carve(l->d, NULL, NULL, l->rc != ENG_RC_SELECTIVE, eng_moe_block(l->d, l->index));
}

static void xb_bind(const struct eng_layer *l, struct eng_io *io, struct xb_saved *s)
{
    xb_carve(l->d, io->saved, s, l->rc != ENG_RC_SELECTIVE, eng_moe_block(l->d, l->index));
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
    float *moe; /* a model with MoE blocks: moe.c's scratch */
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
    TAKE(ex, xb_gqa_plain(d) ? N * 3 * d->Ctp : 0); /* cuda: a recomputed output */
    TAKE(dex, xb_expand(d) ? N * 3 * d->Ctp : 0);
    TAKE(kvg, d->kv_rep ? 2 * (size_t)d->KV * d->hd * (d->C + 1) : 0);
    TAKE(full, d->sp ? N * d->C : 0);
    TAKE(dfull, d->sp ? N * d->C : 0);
    TAKE(nw, d->sp ? 2 * (size_t)d->C : 0);
    TAKE(shard, d->sp ? (size_t)d->Ns * d->C : 0);
    TAKE(moe, d->moe.experts ? eng_moe_scratch_floats(d) : 0);
#undef TAKE
    return o;
}

static size_t xb_scratch_floats(const struct eng_layer *l)
{
    return xb_scratch_carve(l->d, NULL, NULL);
}

/* ---- linear helpers with a row stride ----------------------------------------- */

/* out (N,OC) rows ldo apart = inp (N,IC) @ w (OC,IC)^T + b (OC; may be NULL):
 * the rows start as the bias and the GEMM (the backend's fp32 GEMM
 * arithmetic, the engine's mm) adds the product */
static int xlin_fwd(whale_backend *bk, float *out, int ldo, const float *inp, const float *w,
                    const float *b, int N, int IC, int OC)
{
    if (b)
        BK(whale_k_bias_fill(bk, NULL, F32, out, ldo, b, N, OC));
    return whale_gemm(bk, NULL, false, true, N, OC, IC, 1.0f, inp, IC, w, IC, F32,
                      b ? 1.0f : 0.0f, out, ldo, F32);
}

/* dinp (N,IC) (= or += with acc) = dout (N,OC; rows ldd apart) @ w (OC,IC);
 * dw (OC,IC) += dout^T @ inp ; db (OC) += column sums of dout (may be NULL) */
static int xlin_bwd(whale_backend *bk, float *dinp, float *dw, float *db, const float *dout,
                    int ldd, const float *inp, const float *w, int N, int IC, int OC, int acc)
{
    BK(whale_gemm(bk, NULL, false, false, N, IC, OC, 1.0f, dout, ldd, w, IC, F32,
                  acc ? 1.0f : 0.0f, dinp, IC, F32));
    BK(whale_gemm(bk, NULL, true, false, OC, IC, N, 1.0f, dout, ldd, inp, IC, F32, 1.0f, dw, IC,
                  F32));
    return db ? whale_k_colsum_acc(bk, NULL, F32, db, dout, ldd, N, OC) : 0;
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
        return eng_tp_row_linear_fwd(d->bk, x->sa, inp, w, b, N, IC, C, io->tp_group);
    }
    BK(whale_k_linear_fwd(d->bk, NULL, F32, x->sa, inp, w, NULL, N, IC, C));
    BK(eng_sp_scatter(d, io->tp_group, x->shard, x->sa));
    if (b)
        BK(whale_k_bias_add(d->bk, NULL, F32, x->shard, b, Ns, C));
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
static int xb_qkv_fwd(const struct eng_layer *l, const struct xb_ix *ix, float *qkv,
                      const float *ln1)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, C = d->C, Ct = d->Ctp, KVc = xb_kvc(d), W = xb_w(d);
    whale_backend *bk = d->bk;
    if (ix->kvw < 0) {
        /* attn.qkv.w (3,Ct,C) local: one GEMM, as layers.c does */
        BK(whale_k_linear_fwd(bk, NULL, F32, qkv, ln1, eng_pw(l, ix->qw), pw_or_null(l, ix->qb),
                              N, C, W));
    } else {
        int r0, plane;
        xb_kv_rows(d, &r0, &plane);
        const float *wkv = eng_pw(l, ix->kvw), *bkv = pw_or_null(l, ix->kvb);
        BK(xlin_fwd(bk, qkv, W, ln1, eng_pw(l, ix->qw), pw_or_null(l, ix->qb), N, C, Ct));
        BK(xlin_fwd(bk, qkv + Ct, W, ln1, wkv + (size_t)r0 * C, bkv ? bkv + r0 : NULL, N, C,
                    KVc));
        BK(xlin_fwd(bk, qkv + Ct + KVc, W, ln1, wkv + (size_t)(plane + r0) * C,
                    bkv ? bkv + plane + r0 : NULL, N, C, KVc));
    }
    if (d->pos == WHALE_POS_ROTARY) {
        /* q (N,NH,hd) and k (N,KVl,hd) in place, rows W apart */
        BK(whale_k_rope(bk, NULL, F32, qkv, W, d->B, d->T, d->NH, d->hd, d->rope_theta,
                        &d->rope_sc, 1));
        BK(whale_k_rope(bk, NULL, F32, qkv + Ct, W, d->B, d->T, d->KVl, d->hd, d->rope_theta,
                        &d->rope_sc, 1));
    }
    return 0;
}

/* out (N,Ct) rows Ct apart from q, k, v: column ranges of qkv (N,W);
 * lse (B,NH,T) */
static int xb_gqa_fwd(const struct eng_dims *d, float *out, float *lse, const float *qkv)
{
    const int Ct = d->Ctp, KVc = xb_kvc(d), W = xb_w(d);
    const struct whale_attn_heads h = xb_heads(d);
    return whale_k_attention_gqa_fwd(d->bk, NULL, F32, out, Ct, lse, qkv, W, qkv + Ct, W,
                                     qkv + Ct + KVc, W, d->B, d->T, &h);
}

static int xb_attn_fwd(const struct eng_layer *l, struct xb_saved *s, struct xb_scratch *x)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, W = xb_w(d);
    if (d->attn == WHALE_ATTN_FLASH)
        return xb_gqa_fwd(d, s->atty, s->lse, s->qkv);
    if (xb_gqa_plain(d) && !xb_expand(d)) /* cuda: the grouped flash kernel, lse in att */
        return xb_gqa_fwd(d, s->atty, s->att, s->qkv);
    const float *src = s->qkv;
    if (xb_expand(d)) { /* cpu: host memory */
        const struct whale_attn_heads h = xb_heads(d);
        int rc = whale_k_gqa_expand(d->bk, NULL, x->ex, s->qkv, W, N, &h);
        if (rc)
            return rc;
        src = x->ex;
    }
    /* atty (B,T,NH,hd) from (B,T,3,NH,hd) */
    return whale_k_attention_fwd(d->bk, NULL, F32, s->atty, s->att, src, d->B, d->T, d->NH,
                                 d->hd);
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
    whale_backend *bk = d->bk;
    BK(eng_norm_fwd(d, s.ln1, s.mean1, s.rstd1, io->in, eng_pw(l, ix.ln1w),
                    pw_or_null(l, ix.ln1b), Ns, C));
    BK(xb_norm_rows(l, io, &x, s.ln1, &ln));
    BK(xb_qkv_fwd(l, &ix, s.qkv, ln));
    BK(xb_attn_fwd(l, &s, &x));
    BK(xb_row_out(l, io, &x, s.atty, eng_pw(l, ix.ow), pw_or_null(l, ix.ob), Ct, &mine));
    BK(whale_k_add(bk, NULL, F32, s.r1, io->in, mine, (int64_t)Ns * C));
    BK(eng_norm_fwd(d, s.ln2, s.mean2, s.rstd2, s.r1, eng_pw(l, ix.ln2w),
                    pw_or_null(l, ix.ln2b), Ns, C));
    BK(xb_norm_rows(l, io, &x, s.ln2, &ln));
    if (ix.moe >= 0) { /* MoE: x.sa (N,C) = the experts' output summed over TP */
        BK(eng_moe_fwd(l, io, ix.moe, s.moe, x.moe, ln, x.sa));
        return whale_k_add(bk, NULL, F32, io->out, s.r1, x.sa, (int64_t)Ns * C);
    }
    /* fc (gate) (N,F) = ln2 @ Wfc^T ; gelu: h = GELU(fc) ; glu: up (N,F),
     * h = act(gate) * up */
    if (xb_glu(d)) {
        BK(whale_k_linear_fwd(bk, NULL, F32, s.fc, ln, eng_pw(l, ix.fcw), pw_or_null(l, ix.fcb),
                              N, C, F));
        BK(whale_k_linear_fwd(bk, NULL, F32, s.up, ln, eng_pw(l, ix.upw),
                              pw_or_null(l, ix.upb), N, C, F));
        BK(whale_k_glu_fwd(bk, NULL, F32, xb_glu_act(d), s.h, s.fc, s.up, (int64_t)N * F));
    } else {
        BK(whale_k_linear_gelu_fwd(bk, NULL, F32, s.fc, s.h, ln, eng_pw(l, ix.fcw),
                                   pw_or_null(l, ix.fcb), N, C, F));
    }
    BK(xb_row_out(l, io, &x, s.h, eng_pw(l, ix.pw), pw_or_null(l, ix.pb), F, &mine));
    return whale_k_add(bk, NULL, F32, io->out, s.r1, mine, (int64_t)Ns * C);
}

/* ---- backward ---------------------------------------------------------------- */

/* dqkv (N,W) from datty (N,Ct): attention backward, then rotary's */
static int xb_attn_bwd(const struct eng_layer *l, struct xb_saved *s, struct xb_scratch *x,
                       float *dqkv, const float *datty)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, Ct = d->Ctp, KVc = xb_kvc(d), W = xb_w(d);
    whale_backend *bk = d->bk;
    const struct whale_attn_heads h = xb_heads(d);
    if (d->attn == WHALE_ATTN_FLASH || (xb_gqa_plain(d) && !xb_expand(d))) {
        /* grouped flash backward: flash keeps lse; plain GQA on cuda keeps it
         * in att, rebuilt under selective recompute (the output goes to the
         * scratch x->ex: the saved one is what backward reads) */
        float *lse = d->attn == WHALE_ATTN_FLASH ? s->lse : s->att;
        if (d->attn != WHALE_ATTN_FLASH && l->rc == ENG_RC_SELECTIVE)
            BK(xb_gqa_fwd(d, x->ex, lse, s->qkv));
        BK(whale_k_attention_gqa_bwd(bk, NULL, F32, dqkv, dqkv + Ct, dqkv + Ct + KVc, datty, Ct,
                                     s->atty, lse, s->qkv, W, s->qkv + Ct, W,
                                     s->qkv + Ct + KVc, W, d->B, d->T, &h));
    } else {
        const float *src = s->qkv;
        if (xb_expand(d)) { /* cpu: host memory */
            BK(whale_k_gqa_expand(bk, NULL, x->ex, s->qkv, W, N, &h));
            src = x->ex;
        }
        if (l->rc == ENG_RC_SELECTIVE) /* att rebuilt from the saved q,k */
            BK(whale_k_attention_fwd(bk, NULL, F32, NULL, s->att, src, d->B, d->T, d->NH,
                                     d->hd));
        /* d(q|k|v) (B,T,3,NH,hd) from datty (B,T,NH,hd) */
        BK(whale_k_attention_bwd(bk, NULL, F32, xb_expand(d) ? x->dex : dqkv, datty, src,
                                 s->atty, s->att, d->B, d->T, d->NH, d->hd));
        if (xb_expand(d))
            BK(whale_k_gqa_fold(bk, NULL, dqkv, W, x->dex, N, &h));
    }
    if (d->pos == WHALE_POS_ROTARY) {
        BK(whale_k_rope(bk, NULL, F32, dqkv, W, d->B, d->T, d->NH, d->hd, d->rope_theta,
                        &d->rope_sc, -1));
        BK(whale_k_rope(bk, NULL, F32, dqkv + Ct, W, d->B, d->T, d->KVl, d->hd, d->rope_theta,
                        &d->rope_sc, -1));
    }
    return 0;
}

/* dln1 (N,C) = dqkv @ [Wq; Wk; Wv] (this rank's part), weight gradients */
static int xb_qkv_bwd(const struct eng_layer *l, const struct xb_ix *ix, struct eng_io *io,
                      struct xb_scratch *x, float *dln1, const float *dqkv, const float *ln1)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, C = d->C, Ct = d->Ctp, KVc = xb_kvc(d), W = xb_w(d);
    whale_backend *bk = d->bk;
    if (ix->kvw < 0)
        return whale_k_linear_bwd(bk, NULL, F32, dln1, eng_pg(l, ix->qw), pg_or_null(l, ix->qb),
                                  dqkv, ln1, eng_pw(l, ix->qw), N, C, W, false);
    int r0, plane;
    xb_kv_rows(d, &r0, &plane);
    const float *wkv = eng_pw(l, ix->kvw);
    float *gkv = eng_pg(l, ix->kvw), *gkb = pg_or_null(l, ix->kvb);
    size_t nkv = 2 * (size_t)plane * C;
    if (d->kv_rep) {
        /* partial gradients of all KV heads' weights: zero but the rows this
         * rank used, summed over TP below (every replica gets the total) */
        BK(whale_memset(bk, x->kvg, 0, sizeof(float) * (nkv + 2 * (size_t)plane), NULL));
        gkv = x->kvg;
        gkb = gkb ? x->kvg + nkv : NULL;
    }
    BK(xlin_bwd(bk, dln1, eng_pg(l, ix->qw), pg_or_null(l, ix->qb), dqkv, W, ln1,
                eng_pw(l, ix->qw), N, C, Ct, 0));
    BK(xlin_bwd(bk, dln1, gkv + (size_t)r0 * C, gkb ? gkb + r0 : NULL, dqkv + Ct, W, ln1,
                wkv + (size_t)r0 * C, N, C, KVc, 1));
    BK(xlin_bwd(bk, dln1, gkv + (size_t)(plane + r0) * C, gkb ? gkb + plane + r0 : NULL,
                dqkv + Ct + KVc, W, ln1, wkv + (size_t)(plane + r0) * C, N, C, KVc, 1));
    if (d->kv_rep) {
        size_t n = nkv + (gkb ? 2 * (size_t)plane : 0);
        BK(eng_tp_allreduce(io->tp_group, x->kvg, n));
        BK(whale_k_acc(bk, NULL, F32, eng_pg(l, ix->kvw), x->kvg, (int64_t)nkv));
        if (gkb)
            BK(whale_k_acc(bk, NULL, F32, eng_pg(l, ix->kvb), x->kvg + nkv,
                           2 * (int64_t)plane));
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
    if (!d->sp)
        return eng_norm_bwd(d, ds, eng_pg(l, wi), pg_or_null(l, bi), dln, inp, eng_pw(l, wi),
                            mean, rstd, d->Ns, d->C);
    whale_backend *bk = d->bk;
    const size_t n = (bi >= 0 ? 2 : 1) * (size_t)d->C; /* weight, then bias (LayerNorm) */
    BK(whale_memset(bk, x->nw, 0, sizeof(float) * n, NULL));
    BK(eng_norm_bwd(d, ds, x->nw, bi >= 0 ? x->nw + d->C : NULL, dln, inp, eng_pw(l, wi), mean,
                    rstd, d->Ns, d->C));
    BK(eng_tp_allreduce(io->tp_group, x->nw, n));
    BK(whale_k_acc(bk, NULL, F32, eng_pg(l, wi), x->nw, d->C));
    if (bi >= 0)
        BK(whale_k_acc(bk, NULL, F32, eng_pg(l, bi), x->nw + d->C, d->C));
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
    whale_backend *bk = d->bk;
    if (d->sp) {
        BK(eng_sp_gather(d, io->tp_group, x.dfull, ds));
        dsf = x.dfull;
    }
    if (ix.moe >= 0) { /* MoE: x.sa (N,C) = this rank's part of the input gradient */
        BK(xb_norm_rows(l, io, &x, s.ln2, &ln));
        BK(eng_moe_bwd(l, io, ix.moe, s.moe, x.moe, ln, dsf, x.sa));
    } else {
    /* MLP: dh (N,F) = ds @ Wproj ; then the activation's and fc/gate/up's
     * backward (gelu: dfc = GELU'(fc) * dh in the same call) */
    if (xb_glu(d))
        BK(whale_k_linear_bwd(bk, NULL, F32, x.sb, eng_pg(l, ix.pw), pg_or_null(l, ix.pb), dsf,
                              s.h, eng_pw(l, ix.pw), N, F, C, false));
    else
        BK(whale_k_linear_bwd_gelu(bk, NULL, F32, x.sb, s.fc, eng_pg(l, ix.pw),
                                   pg_or_null(l, ix.pb), dsf, s.h, eng_pw(l, ix.pw), N, F, C));
    BK(xb_norm_rows(l, io, &x, s.ln2, &ln));
    if (xb_glu(d)) {
        /* dgate (N,F) in place of dh, dup (N,F) after it */
        float *dgate = x.sb, *dup = x.sb + (size_t)N * F;
        BK(whale_k_glu_bwd(bk, NULL, F32, xb_glu_act(d), dgate, dup, x.sb, s.fc, s.up,
                           (int64_t)N * F));
        BK(whale_k_linear_bwd(bk, NULL, F32, x.sa, eng_pg(l, ix.fcw), pg_or_null(l, ix.fcb),
                              dgate, ln, eng_pw(l, ix.fcw), N, C, F, false));
        BK(whale_k_linear_bwd(bk, NULL, F32, x.sa, eng_pg(l, ix.upw), pg_or_null(l, ix.upb), dup,
                              ln, eng_pw(l, ix.upw), N, C, F, true));
    } else {
        BK(whale_k_linear_bwd(bk, NULL, F32, x.sa, eng_pg(l, ix.fcw), pg_or_null(l, ix.fcb),
                              x.sb, ln, eng_pw(l, ix.fcw), N, C, F, false));
    }
    }
    /* column-parallel input gradient: summed over TP (SP: this rank's rows) */
    BK(xb_col_dinput(l, io, &x, &dmine));
    BK(xb_norm_bwd(l, io, &x, ds, ix.ln2w, ix.ln2b, dmine, s.r1, s.mean2, s.rstd2));
    /* attention output projection: datty (N,Ct) = dr1 @ Wproj */
    if (d->sp)
        BK(eng_sp_gather(d, io->tp_group, x.dfull, ds));
    BK(whale_k_linear_bwd(bk, NULL, F32, x.sc, eng_pg(l, ix.ow), pg_or_null(l, ix.ob), dsf,
                          s.atty, eng_pw(l, ix.ow), N, Ct, C, false));
    BK(xb_attn_bwd(l, &s, &x, x.sb, x.sc));
    BK(xb_norm_rows(l, io, &x, s.ln1, &ln));
    BK(xb_qkv_bwd(l, &ix, io, &x, x.sa, x.sb, ln));
    BK(xb_col_dinput(l, io, &x, &dmine));
    return xb_norm_bwd(l, io, &x, ds, ix.ln1w, ix.ln1b, dmine, io->in, s.mean1, s.rstd1);
}

static void xb_flops(const struct eng_layer *l, double *f, double *b)
{
    const struct eng_dims *d = l->d;
    double N = (double)d->B * d->T, C = d->C, Ct = d->Ctp, F = d->F, W = xb_w(d);
    double mm = 2.0 * N * (C * W + Ct * C);
    double moe_f = 0, moe_b = 0;
    if (eng_moe_block(d, l->index))
        eng_moe_flops(d, &moe_f, &moe_b); /* active experts only */
    else
        mm += 2.0 * N * (xb_glu(d) ? 3 : 2) * C * F;
    /* causal attention: QK^T and PV over the lower triangle */
    double att = 2.0 * 2.0 * d->B * d->NH * (double)d->T * d->T * d->hd / 2.0;
    *f = mm + att + moe_f;
    /* blocked attention recomputes QK^T in backward */
    *b = 2.0 * (mm + att) + (d->attn == WHALE_ATTN_FLASH ? att / 2 : 0) + moe_b;
}

const struct eng_layer_ops eng_xblock_ops = {
    .kind = "block", .act_floats = xb_act, .scratch_floats = xb_scratch_floats,
    .forward = xb_fwd, .backward = xb_bwd, .flops = xb_flops,
};
