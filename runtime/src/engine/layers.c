/* The three GPT layer kinds: token/position embedding, pre-LayerNorm
 * transformer block, and the head (final LayerNorm, output projection tied
 * to wte, cross-entropy). N = B*T rows throughout. Every kernel runs
 * through the engine's backend (whale/backend.h, d->bk) on its compute
 * stream; activations are fp32 (mixed precision rounds them at the layer
 * boundaries, step_chunk.c) and the linear layers multiply in the backend's fp32
 * GEMM arithmetic (the engine's mm). */
#include "layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"

#define F32 WHALE_FLOAT32

/* ---- parameter declarations (param.c) ---------------------------------- */

/* short for the tables below */
static void decl(struct eng_param *p, const struct eng_dims *d, const char *name, int ndim,
                 const int64_t *gshape, enum whale_tp_split split, int split_dim, bool decay,
                 float std, float cst)
{
    eng_param_decl(p, d, name, ndim, gshape, split, split_dim, decay, std, cst);
}

/* wte, and wpe with learned positions (rotary adds no parameters) */
int eng_embed_params(const struct eng_dims *d, int index, struct eng_param *p)
{
    (void)index;
    const bool wpe = d->pos == WHALE_POS_LEARNED;
    if (p) {
        decl(&p[0], d, "wte", 2, (int64_t[]){ d->Vg, d->C }, WHALE_SPLIT_VOCAB, 0, true, 0.02f, 0);
        if (wpe)
            decl(&p[1], d, "wpe", 2, (int64_t[]){ d->T, d->C }, WHALE_SPLIT_NONE, 0, true, 0.01f, 0);
    }
    return wpe ? 2 : 1;
}

int eng_block_params(const struct eng_dims *d, int index, struct eng_param *p)
{
    if (d->xblock)
        return eng_xblock_params(d, index, p);
    if (!p)
        return 12;
    int64_t C = d->C, F = (int64_t)d->F * d->tp;
    float std = 0.02f, pstd = 0.02f / sqrtf(2.0f * d->L);
    char n[96];
    int i = 0;
#define NAME(s) (snprintf(n, sizeof n, "h.%d.%s", index - 1, s), n)
    decl(&p[i++], d, NAME("ln1.w"), 1, (int64_t[]){ C }, WHALE_SPLIT_NONE, 0, false, 0, 1);
    decl(&p[i++], d, NAME("ln1.b"), 1, (int64_t[]){ C }, WHALE_SPLIT_NONE, 0, false, 0, 0);
    decl(&p[i++], d, NAME("attn.qkv.w"), 3, (int64_t[]){ 3, C, C }, WHALE_SPLIT_COL, 1, true, std, 0);
    decl(&p[i++], d, NAME("attn.qkv.b"), 2, (int64_t[]){ 3, C }, WHALE_SPLIT_COL, 1, false, 0, 0);
    decl(&p[i++], d, NAME("attn.proj.w"), 2, (int64_t[]){ C, C }, WHALE_SPLIT_ROW, 1, true, pstd, 0);
    decl(&p[i++], d, NAME("attn.proj.b"), 1, (int64_t[]){ C }, WHALE_SPLIT_NONE, 0, false, 0, 0);
    decl(&p[i++], d, NAME("ln2.w"), 1, (int64_t[]){ C }, WHALE_SPLIT_NONE, 0, false, 0, 1);
    decl(&p[i++], d, NAME("ln2.b"), 1, (int64_t[]){ C }, WHALE_SPLIT_NONE, 0, false, 0, 0);
    decl(&p[i++], d, NAME("mlp.fc.w"), 2, (int64_t[]){ F, C }, WHALE_SPLIT_COL, 0, true, std, 0);
    decl(&p[i++], d, NAME("mlp.fc.b"), 1, (int64_t[]){ F }, WHALE_SPLIT_COL, 0, false, 0, 0);
    decl(&p[i++], d, NAME("mlp.proj.w"), 2, (int64_t[]){ C, F }, WHALE_SPLIT_ROW, 1, true, pstd, 0);
    decl(&p[i++], d, NAME("mlp.proj.b"), 1, (int64_t[]){ C }, WHALE_SPLIT_NONE, 0, false, 0, 0);
#undef NAME
    return i;
}

/* lnf.w, lnf.b (LayerNorm only), lm_head.w (untied: vocabulary-parallel
 * like wte; always the last) */
int eng_head_params(const struct eng_dims *d, int index, struct eng_param *p)
{
    (void)index;
    int n = 0;
    if (p)
        decl(&p[n], d, "lnf.w", 1, (int64_t[]){ d->C }, WHALE_SPLIT_NONE, 0, false, 0, 1);
    n++;
    if (d->norm == WHALE_NORM_LAYERNORM) {
        if (p)
            decl(&p[n], d, "lnf.b", 1, (int64_t[]){ d->C }, WHALE_SPLIT_NONE, 0, false, 0, 0);
        n++;
    }
    if (d->untied) {
        if (p)
            decl(&p[n], d, "lm_head.w", 2, (int64_t[]){ d->Vg, d->C }, WHALE_SPLIT_VOCAB, 0, true,
                 0.02f, 0);
        n++;
    }
    return n;
}


/* ---- embedding ------------------------------------------------------------ */

static size_t embed_act(const struct eng_layer *l)
{
    (void)l;
    return 0;
}

/* scratch: the whole (N,C) output / output gradient under SP */
static size_t embed_scratch(const struct eng_layer *l)
{
    return l->d->sp ? (size_t)l->d->B * l->d->T * l->d->C : 0;
}

static int embed_fwd_full(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    if (d->pos == WHALE_POS_LEARNED && !io->tp_group) {
        /* out (B,T,C) = wte (V,C)[tokens (B,T)] + wpe (T,C) */
        return whale_k_embed_fwd(d->bk, NULL, F32, io->out, io->tokens, eng_pw(l, 0),
                                 eng_pw(l, 1), d->B, d->T, d->C);
    }
    /* vocabulary-parallel: out (B,T,C) = wte rows this rank holds (+ positions
     * once, on TP rank 0), summed over TP */
    const float *wpe = d->pos == WHALE_POS_LEARNED && d->tp_rank == 0 ? eng_pw(l, 1) : NULL;
    return eng_tp_embed_fwd(d->bk, io->tp_group, io->out, io->tokens, eng_pw(l, 0), d->v0, d->V,
                            wpe, d->B, d->T, d->C);
}

/* SP: the vocabulary-parallel partial sums (N,C) reduce-scattered to this
 * rank's rows (Ns,C), where TP alone all-reduces them */
static int embed_fwd(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    if (!d->sp)
        return embed_fwd_full(l, io);
    const float *wpe = d->pos == WHALE_POS_LEARNED && d->tp_rank == 0 ? eng_pw(l, 1) : NULL;
    BK(whale_k_embed_fwd_tp(d->bk, NULL, F32, io->scratch, io->tokens, eng_pw(l, 0), d->v0, d->V,
                            wpe, d->B, d->T, d->C));
    return eng_sp_scatter(d, io->tp_group, io->out, io->scratch);
}

static int embed_bwd_full(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    if (d->pos != WHALE_POS_LEARNED) /* dwte (V,C) local rows += from dstream (B*T,C) */
        return whale_k_embed_bwd_rows(d->bk, NULL, F32, eng_pg(l, 0), io->dstream, io->tokens,
                                      d->v0, d->V, d->B * d->T, d->C);
    /* dwte (V,C) (local rows), dwpe (T,C) += from dstream (B,T,C) */
    return whale_k_embed_bwd_tp(d->bk, NULL, F32, eng_pg(l, 0), eng_pg(l, 1), io->dstream,
                                io->tokens, d->v0, d->V, d->B, d->T, d->C);
}

/* SP: every rank's vocabulary rows see every token: gather the gradient */
static int embed_bwd(struct eng_layer *l, struct eng_io *io)
{
    if (!l->d->sp)
        return embed_bwd_full(l, io);
    float *ds = io->dstream;
    int rc = eng_sp_gather(l->d, io->tp_group, io->scratch, ds);
    io->dstream = io->scratch;
    if (!rc)
        rc = embed_bwd_full(l, io);
    io->dstream = ds;
    return rc;
}

static void embed_flops(const struct eng_layer *l, double *f, double *b)
{
    (void)l;
    *f = 0;
    *b = 0;
}

const struct eng_layer_ops eng_embed_ops = {
    .kind = "embed", .act_floats = embed_act, .scratch_floats = embed_scratch,
    .forward = embed_fwd, .backward = embed_bwd, .flops = embed_flops,
};

/* ---- transformer block ------------------------------------------------------ */

/* Saved activations of a block, carved from io->saved. */
struct blk_saved {
    float *ln1, *mean1, *rstd1; /* (N,C) (N) (N) */
    float *qkv;                 /* (N,3,NH,hd) */
    float *att;                 /* (B,NH,T,T) */
    float *atty;                /* (N,Ctp) */
    float *r1;                  /* (N,C) residual after attention */
    float *ln2, *mean2, *rstd2; /* (N,C) (N) (N) */
    float *fc, *gl;             /* (N,F) pre- and post-GELU */
};

/* keep_att = false (selective recompute): the probabilities are not part of
 * the saved area; s->att is left NULL for the caller to point at att_tmp. */
static size_t blk_carve(const struct eng_dims *d, float *base, struct blk_saved *s, bool keep_att)
{
    size_t N = (size_t)d->B * d->T, C = d->C, Ct = d->Ctp, F = d->F;
    size_t o = 0;
#define TAKE(f, n) do { if (s) s->f = base + o; o += (n); } while (0)
    TAKE(ln1, N * C);
    TAKE(mean1, N);
    TAKE(rstd1, N);
    TAKE(qkv, N * 3 * Ct);
    if (keep_att) /* cpu: probabilities (B,NH,T,T); cuda: log-sum-exp (B,NH,T) */
        TAKE(att, whale_attention_saved_floats(d->bk, d->B, d->T, d->NH, d->hd));
    else if (s)
        s->att = NULL;
    TAKE(atty, N * Ct);
    TAKE(r1, N * C);
    TAKE(ln2, N * C);
    TAKE(mean2, N);
    TAKE(rstd2, N);
    TAKE(fc, N * F);
    TAKE(gl, N * F);
#undef TAKE
    return o;
}

static size_t blk_act(const struct eng_layer *l)
{
    if (l->d->xblock)
        return eng_xblock_ops.act_floats(l);
    return blk_carve(l->d, NULL, NULL, l->rc != ENG_RC_SELECTIVE);
}

static void blk_bind(const struct eng_layer *l, struct eng_io *io, struct blk_saved *s)
{
    blk_carve(l->d, io->saved, s, l->rc != ENG_RC_SELECTIVE);
    if (!s->att)
        s->att = io->att_tmp;
}

static size_t blk_scratch(const struct eng_layer *l)
{
    const struct eng_dims *d = l->d;
    if (d->xblock)
        return eng_xblock_ops.scratch_floats(l);
    size_t N = (size_t)d->B * d->T;
    size_t big = (size_t)d->F > 3 * (size_t)d->Ctp ? (size_t)d->F : 3 * (size_t)d->Ctp;
    size_t mid = (size_t)d->C > (size_t)d->Ctp ? (size_t)d->C : (size_t)d->Ctp;
    return N * d->C + N * big + N * mid;
}

static int blk_fwd(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    if (d->xblock)
        return eng_xblock_ops.forward(l, io);
    const int N = d->B * d->T, C = d->C, Ct = d->Ctp, F = d->F;
    struct blk_saved s;
    blk_bind(l, io, &s);
    whale_backend *bk = d->bk;
    float *tmp = io->scratch; /* (N,C) */
    BK(whale_k_layernorm_fwd(bk, NULL, F32, s.ln1, s.mean1, s.rstd1, io->in, eng_pw(l, 0),
                             eng_pw(l, 1), N, C));
    /* qkv (N,3Ct) = ln1 (N,C) @ Wqkv (3Ct,C)^T + b */
    BK(whale_k_linear_fwd(bk, NULL, F32, s.qkv, s.ln1, eng_pw(l, 2), eng_pw(l, 3), N, C, 3 * Ct));
    /* atty (B,T,NH,hd) from qkv (B,T,3,NH,hd) */
    BK(whale_k_attention_fwd(bk, NULL, F32, s.atty, s.att, s.qkv, d->B, d->T, d->NH, d->hd));
    BK(eng_tp_row_linear_fwd(bk, tmp, s.atty, eng_pw(l, 4), eng_pw(l, 5), N, Ct, C, io->tp_group));
    BK(whale_k_add(bk, NULL, F32, s.r1, io->in, tmp, (int64_t)N * C));
    BK(whale_k_layernorm_fwd(bk, NULL, F32, s.ln2, s.mean2, s.rstd2, s.r1, eng_pw(l, 6),
                             eng_pw(l, 7), N, C));
    /* fc (N,F) = ln2 (N,C) @ Wfc (F,C)^T + b ; gl = GELU(fc) */
    BK(whale_k_linear_gelu_fwd(bk, NULL, F32, s.fc, s.gl, s.ln2, eng_pw(l, 8), eng_pw(l, 9), N, C,
                               F));
    BK(eng_tp_row_linear_fwd(bk, tmp, s.gl, eng_pw(l, 10), eng_pw(l, 11), N, F, C, io->tp_group));
    return whale_k_add(bk, NULL, F32, io->out, s.r1, tmp, (int64_t)N * C);
}

static int blk_bwd(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    if (d->xblock)
        return eng_xblock_ops.backward(l, io);
    const int N = d->B * d->T, C = d->C, Ct = d->Ctp, F = d->F;
    struct blk_saved s;
    blk_bind(l, io, &s);
    whale_backend *bk = d->bk;
    if (l->rc == ENG_RC_SELECTIVE) { /* att (B,NH,T,T) rebuilt from the saved q,k */
        uint64_t r0 = whale_trace_now();
        BK(whale_k_attention_fwd(bk, NULL, F32, NULL, s.att, s.qkv, d->B, d->T, d->NH, d->hd));
        uint64_t r1 = whale_trace_now();
        io->recompute_s += (double)(r1 - r0) * 1e-9;
        if (whale_trace_on()) /* the same span name as full recompute's */
            whale_trace_span_at("recompute", "recompute", r0, r1, -1, -1);
    }
    size_t big = (size_t)F > 3 * (size_t)Ct ? (size_t)F : 3 * (size_t)Ct;
    float *sa = io->scratch;                    /* (N,C) */
    float *sb = sa + (size_t)N * C;             /* (N,max(F,3Ct)) */
    float *sc = sb + (size_t)N * big;           /* (N,max(C,Ct)) */
    float *ds = io->dstream;                    /* (N,C), in place: dout -> dinput */
    int rc;
    /* MLP: dfc (N,F) = GELU'(fc) * (ds @ Wmp) ; gradients of mlp.proj */
    BK(whale_k_linear_bwd_gelu(bk, NULL, F32, sb, s.fc, eng_pg(l, 10), eng_pg(l, 11), ds, s.gl,
                               eng_pw(l, 10), N, F, C));
    /* dln2 (N,C) = dfc @ Wfc, summed over TP (column-parallel input grad) */
    BK(whale_k_linear_bwd(bk, NULL, F32, sa, eng_pg(l, 8), eng_pg(l, 9), sb, s.ln2, eng_pw(l, 8),
                          N, C, F, false));
    if (io->tp_group && (rc = eng_tp_allreduce(io->tp_group, sa, (size_t)N * C)))
        return rc;
    /* ds += LN2 backward: ds now is d(r1) */
    BK(whale_k_layernorm_bwd(bk, NULL, F32, ds, eng_pg(l, 6), eng_pg(l, 7), sa, s.r1,
                             eng_pw(l, 6), s.mean2, s.rstd2, N, C));
    /* attention output projection: datty (N,Ct) = dr1 @ Wproj */
    BK(whale_k_linear_bwd(bk, NULL, F32, sc, eng_pg(l, 4), eng_pg(l, 5), ds, s.atty,
                          eng_pw(l, 4), N, Ct, C, false));
    /* dqkv (N,3Ct) from datty (N,Ct); the flash backward also reads out = atty */
    BK(whale_k_attention_bwd(bk, NULL, F32, sb, sc, s.qkv, s.atty, s.att, d->B, d->T, d->NH,
                             d->hd));
    /* dln1 (N,C) = dqkv @ Wqkv, summed over TP */
    BK(whale_k_linear_bwd(bk, NULL, F32, sa, eng_pg(l, 2), eng_pg(l, 3), sb, s.ln1,
                          eng_pw(l, 2), N, C, 3 * Ct, false));
    if (io->tp_group && (rc = eng_tp_allreduce(io->tp_group, sa, (size_t)N * C)))
        return rc;
    return whale_k_layernorm_bwd(bk, NULL, F32, ds, eng_pg(l, 0), eng_pg(l, 1), sa, io->in,
                                 eng_pw(l, 0), s.mean1, s.rstd1, N, C);
}

static void blk_flops(const struct eng_layer *l, double *f, double *b)
{
    const struct eng_dims *d = l->d;
    if (d->xblock) {
        eng_xblock_ops.flops(l, f, b);
        return;
    }
    double N = (double)d->B * d->T, C = d->C, Ct = d->Ctp, F = d->F;
    double mm = 2.0 * N * (C * 3 * Ct + Ct * C + 2 * C * F);
    /* causal attention: QK^T and PV over the lower triangle */
    double att = 2.0 * 2.0 * d->B * d->NH * (double)d->T * d->T * d->hd / 2.0;
    *f = mm + att;
    *b = 2.0 * (mm + att);
}

const struct eng_layer_ops eng_block_ops = {
    .kind = "block", .act_floats = blk_act, .scratch_floats = blk_scratch,
    .forward = blk_fwd, .backward = blk_bwd, .flops = blk_flops,
};

/* ---- head ------------------------------------------------------------------- */

/* The output projection (V,C): the embedding's wte when tied, else the
 * head's own lm_head.w (its last parameter); the final norm's bias
 * (LayerNorm) or NULL (RMSNorm). */
static float *head_w(const struct eng_layer *l)
{
    return l->tied ? eng_pw(l->tied, 0) : eng_pw(l, l->nparams - 1);
}
static float *head_g(const struct eng_layer *l)
{
    return l->tied ? eng_pg(l->tied, 0) : eng_pg(l, l->nparams - 1);
}
static float *head_nb(const struct eng_layer *l)
{
    return l->d->norm == WHALE_NORM_LAYERNORM ? eng_pw(l, 1) : NULL;
}

/* Rows the head's final norm runs on: this rank's Ns under SP (the norm is
 * an SP region like the blocks' norms), else all N = B*T. The output
 * projection and the loss always see all N rows.
 * saved: lnf (R,C), mean (R), rstd (R), probs (N,V) */
static size_t head_act(const struct eng_layer *l)
{
    const struct eng_dims *d = l->d;
    size_t N = (size_t)d->B * d->T, R = (size_t)d->Ns;
    return R * d->C + 2 * R + N * (size_t)d->V;
}

/* Scratch: losses (N) | dlnf (N,C) | TP reductions (3N) | SP: the gathered
 * norm output (N,C), this rank's rows of dlnf (Ns,C), norm weight gradients (2C). */
struct head_scratch {
    float *losses, *dlnf, *red, *full, *dsh, *nw;
};

static size_t head_scratch_carve(const struct eng_dims *d, float *base, struct head_scratch *h)
{
    size_t N = (size_t)d->B * d->T, C = d->C, o = 0;
#define TAKE(f, n) do { if (h) h->f = base ? base + o : NULL; o += (n); } while (0)
    TAKE(losses, N);
    TAKE(dlnf, N * C);
    TAKE(red, 3 * N);
    TAKE(full, d->sp ? N * C : 0);
    TAKE(dsh, d->sp ? (size_t)d->Ns * C : 0);
    TAKE(nw, d->sp ? 2 * C : 0);
#undef TAKE
    return o;
}

static size_t head_scratch(const struct eng_layer *l)
{
    return head_scratch_carve(l->d, NULL, NULL);
}

/* The norm output the projection reads: lnf itself, or under SP the rows of
 * every TP rank gathered into h->full. */
static int head_rows(const struct eng_layer *l, struct eng_io *io, struct head_scratch *h,
                     const float *lnf, const float **src)
{
    *src = lnf;
    if (!l->d->sp)
        return 0;
    *src = h->full;
    return eng_sp_gather(l->d, io->tp_group, h->full, lnf);
}

static int head_fwd(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, R = d->Ns, C = d->C, V = d->V;
    float *lnf = io->saved, *mean = lnf + (size_t)R * C, *rstd = mean + R, *probs = rstd + R;
    struct head_scratch h;
    head_scratch_carve(d, io->scratch, &h);
    const float *wte = head_w(l), *src;
    whale_backend *bk = d->bk;
    if (d->norm != WHALE_NORM_RMSNORM && head_nb(l)) /* GPT-2's LayerNorm: the backend's kernel */
        BK(whale_k_layernorm_fwd(bk, NULL, F32, lnf, mean, rstd, io->in, eng_pw(l, 0),
                                 head_nb(l), R, C));
    else /* RMSNorm / bias-free norms (block_x.c, through the backend too) */
        BK(eng_norm_fwd(d, lnf, mean, rstd, io->in, eng_pw(l, 0), head_nb(l), R, C));
    int rc = head_rows(l, io, &h, lnf, &src);
    if (rc)
        return rc;
    /* logits (N,V) = lnf (N,C) @ wte (V,C)^T, then softmax in place
     * (vocabulary-parallel under TP: reductions in h.red) */
    BK(whale_k_linear_fwd(bk, NULL, F32, probs, src, wte, NULL, N, C, V));
    BK(eng_tp_xent_fwd(bk, io->tp_group, probs, h.losses, io->targets, d->v0, N, V, h.red));
    /* losses (N) read on the host: backend memory is host-addressable on cpu
     * and on host_coherent cuda (device.c); a host-access point (stream-
     * ordered cuda drains the device here, a no-op elsewhere) */
    BK(whale_backend_host_access(bk));
    double sum = 0; /* ignored targets (< 0, loss_mask) count nothing */
    for (int n = 0; n < N; n++)
        if (io->targets[n] >= 0)
            sum += h.losses[n];
    io->loss_sum = sum;
    return 0;
}

/* Final norm backward on the R rows: dstream (R,C) = from dl (R,C). Under SP
 * the weight gradients are partial sums over this rank's rows, added up over
 * TP (as the blocks' norms, block_x.c). */
static int head_norm_bwd(struct eng_layer *l, struct eng_io *io, struct head_scratch *h,
                         const float *dl, const float *lnf_mean, const float *rstd)
{
    const struct eng_dims *d = l->d;
    const int R = d->Ns, C = d->C;
    whale_backend *bk = d->bk;
    const bool ln = d->norm != WHALE_NORM_RMSNORM && head_nb(l);
    float *dw = eng_pg(l, 0), *db = head_nb(l) ? eng_pg(l, 1) : NULL;
    if (d->sp) {
        memset(h->nw, 0, sizeof(float) * 2 * (size_t)C);
        dw = h->nw;
        db = db ? h->nw + C : NULL;
    }
    BK(whale_memset(bk, io->dstream, 0, sizeof(float) * (size_t)R * C, NULL));
    if (ln)
        BK(whale_k_layernorm_bwd(bk, NULL, F32, io->dstream, dw, db, dl, io->in, eng_pw(l, 0),
                                 lnf_mean, rstd, R, C));
    else
        BK(eng_norm_bwd(d, io->dstream, dw, db, dl, io->in, eng_pw(l, 0), lnf_mean, rstd, R, C));
    if (!d->sp)
        return 0;
    int rc = eng_tp_allreduce(io->tp_group, h->nw, (db ? 2 : 1) * (size_t)C);
    if (rc)
        return rc;
    /* SP runs on the CPU backend only (device.c): host loops */
    float *gw = eng_pg(l, 0), *gb = db ? eng_pg(l, 1) : NULL;
    for (int c = 0; c < C; c++) {
        gw[c] += h->nw[c];
        if (gb)
            gb[c] += h->nw[C + c];
    }
    return 0;
}

static int head_bwd(struct eng_layer *l, struct eng_io *io)
{
    const struct eng_dims *d = l->d;
    const int N = d->B * d->T, R = d->Ns, C = d->C, V = d->V;
    float *lnf = io->saved, *mean = lnf + (size_t)R * C, *rstd = mean + R, *probs = rstd + R;
    struct head_scratch h;
    head_scratch_carve(d, io->scratch, &h);
    whale_backend *bk = d->bk;
    const float *src, *dl = h.dlnf;
    int rc = head_rows(l, io, &h, lnf, &src);
    if (rc)
        return rc;
    /* probs (N,V) -> dlogits in place */
    BK(whale_k_softmax_xent_bwd_tp(bk, NULL, F32, probs, io->targets, d->v0, io->dloss, N, V));
    /* dlnf (N,C) = dlogits @ wte (partial over TP) ; dwte (V,C) += dlogits^T @ lnf */
    BK(whale_k_linear_bwd(bk, NULL, F32, h.dlnf, head_g(l), NULL, probs, src, head_w(l), N, C, V,
                          false));
    /* summed over TP: every row, or this rank's rows under SP */
    if (d->sp) {
        dl = h.dsh;
        rc = eng_sp_scatter(d, io->tp_group, h.dsh, h.dlnf);
    } else {
        rc = eng_tp_allreduce(io->tp_group, h.dlnf, (size_t)N * C);
    }
    if (rc)
        return rc;
    return head_norm_bwd(l, io, &h, dl, mean, rstd);
}

static void head_flops(const struct eng_layer *l, double *f, double *b)
{
    const struct eng_dims *d = l->d;
    double mm = 2.0 * d->B * d->T * (double)d->C * d->V;
    *f = mm;
    *b = 2 * mm;
}

const struct eng_layer_ops eng_head_ops = {
    .kind = "head", .act_floats = head_act, .scratch_floats = head_scratch,
    .forward = head_fwd, .backward = head_bwd, .flops = head_flops,
};
