/* The layer interface of the engine (module-internal).
 *
 * A model is a chain of layers; a pipeline stage is a contiguous range of
 * them. Each layer declares its parameters (global name, global shape,
 * tensor-parallel split), runs forward into an explicit `saved` area of
 * act_floats() floats and backward from it, and reports its FLOPs and
 * activation bytes per call. Dropping `saved` and calling forward again
 * before backward is recomputation. */
#ifndef ENGINE_LAYER_H
#define ENGINE_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/backend.h"
#include "whale/engine.h"
#include "whale/parallel.h"

struct eng_param {
    char name[96];
    int ndim;
    int64_t gshape[WHALE_MAX_DIMS];   /* global shape */
    int64_t off[WHALE_MAX_DIMS];      /* this TP rank's box in it */
    int64_t shape[WHALE_MAX_DIMS];
    enum whale_tp_split split;
    int split_dim;
    size_t numel;                     /* elements of the box */
    size_t flat;                      /* offset in the stage's flat parameter space */
    bool decay;                       /* AdamW weight decay applies (matrices, not biases/LN) */
    bool expert;                      /* EP > 1: a weight of an expert this rank computes; it
                                         lives in the layer's expert bucket (wx, gx), whose
                                         gradients are reduced over the expert-data-parallel
                                         group instead of DP */
    float init_std;                   /* 0: constant init_const */
    float init_const;
};

/* Dimensions shared by every layer of one model instance. */
struct eng_dims {
    int B, T;        /* micro-batch, sequence */
    int C, NH, hd;   /* hidden, local heads, head size */
    int F;           /* local MLP width */
    int V;           /* local rows of wte (the whole vocabulary without TP) */
    int Vg, v0;      /* global vocabulary, first local row (vocab-parallel) */
    int Ctp;         /* local attention width NH*hd */
    int L;           /* transformer blocks in the whole model */
    int tp, tp_rank;
    whale_backend *bk; /* the engine's compute backend: every kernel runs through it */
    /* architecture from the model description (all zero: the GPT-2 block,
     * run by layers.c; block_x.c runs every other combination) */
    bool xblock;     /* blocks are block_x.c's */
    int mlp;         /* enum whale_mlp_kind */
    int norm;        /* enum whale_norm_kind (also the head's final norm) */
    int pos;         /* enum whale_pos_kind: learned adds wpe to the embedding */
    int attn;        /* enum whale_attn_kind */
    bool no_bias;    /* linear layers without biases */
    bool untied;     /* the head has its own lm_head.w (vocab-parallel) */
    float rope_theta;
    struct whale_rope_scaling rope_sc; /* rotary context extension (kind NONE: none) */
    float norm_eps;  /* RMSNorm epsilon (NormEps=; LayerNorm's is 1e-5) */
    int KV;          /* global key/value heads */
    int KVl, k0;     /* key/value heads this rank computes, first one's global index */
    int hq0;         /* global index of this rank's first query head */
    bool kv_rep;     /* TP does not divide KVHeads: every TP rank keeps all key/value
                        weights (their gradients are summed over TP) */
    /* sequence parallelism (Megatron): the residual stream between and inside
     * layers keeps rows [r0, r0 + Ns) of the B*T rows on this TP rank */
    bool sp;
    int Ns, r0;      /* without SP: Ns = B*T, r0 = 0 */
    /* mixture of experts (moe.c; moe.experts == 0: every block dense) */
    struct whale_moe_desc moe;
    int Fe, Fs;      /* local width of one routed expert / of the shared experts together */
    /* expert parallelism (moe_ep.c): this rank computes experts
     * [ep_rank * E/ep, (ep_rank + 1) * E/ep) for the ep ranks of its EP group
     * (ep_group, a whale_group; ep 1: every expert here, no exchange) */
    int ep, ep_rank;
    void *ep_group;
    /* the receive buffer of the EP exchanges where the group is on one node
     * (moe_ep.c, whale_shm_alloc; NULL: none), ep_win_floats its size */
    float *ep_win;
    size_t ep_win_floats;
};

struct eng_layer;

/* Forward / backward arguments. Activations are (B,T,C) fp32. */
struct eng_io {
    const int32_t *tokens;   /* (B,T) embed input */
    const int32_t *targets;  /* (B,T) head targets */
    const float *in;         /* block/head input (B,T,C) */
    float *out;              /* embed/block output (B,T,C) */
    float *saved;            /* this layer's saved activations, act_floats() */
    float *scratch;          /* shared scratch, scratch_floats() */
    double loss_sum;         /* head forward: sum of token losses */
    float dloss;             /* head backward: d(objective)/d(token loss) */
    float *dstream;          /* backward: gradient of the layer output (B,T,C) on entry,
                                of the layer input on exit (in place); NULL for embed */
    bool need_dinput;        /* false for the first layer of the model */
    struct whale_par_comm *tp_group; /* the TP group, NULL when tp == 1 */
    float *att_tmp;          /* selective recompute: (B,NH,T,T) attention probabilities */
    enum whale_dtype mm;     /* operand type of the linear layers' GEMMs (k_gemm_mm) */
    double recompute_s;      /* backward: seconds spent re-building what selective
                                recompute dropped (the step adds it to t_recompute) */
    struct whale_moe_stats *moe; /* MoE block forward: routing statistics and auxiliary
                                    losses go here (NULL: a recomputation, not counted) */
};

struct eng_layer_ops {
    const char *kind;
    size_t (*act_floats)(const struct eng_layer *l);
    size_t (*scratch_floats)(const struct eng_layer *l);
    int (*forward)(struct eng_layer *l, struct eng_io *io);
    int (*backward)(struct eng_layer *l, struct eng_io *io);
    void (*flops)(const struct eng_layer *l, double *fwd, double *bwd);
};

struct eng_layer {
    const struct eng_layer_ops *ops;
    int index;                 /* global layer index: 0 embed, 1..L blocks, L+1 head */
    char name[32];
    const struct eng_dims *d;
    struct eng_param *params;  /* nparams entries (owned by the engine) */
    int nparams;
    size_t flat_begin, flat_end; /* range of the flat parameter space */
    float *w, *g;              /* weight / gradient of flat_begin (rebound under ZeRO 2/3) */
    size_t flat_xbegin, flat_xend; /* EP > 1: the range of its expert parameters (empty: none) */
    float *wx, *gx;            /* weight / gradient of flat_xbegin (the expert bucket's) */
    int xbucket;               /* the bucket of its expert parameters, -1: none */
    struct eng_layer *tied;    /* head: the embedding layer whose wte it uses */
    int bucket;                /* gradient bucket of this layer */
    int chunk;                 /* model chunk (virtual stage) of this rank; -1: tied copy */
    int rc;                    /* recomputation: ENG_RC_NONE / SELECTIVE / FULL */
};

/* Recomputation of one layer. SELECTIVE: a block keeps everything but the
 * attention probabilities, which backward rebuilds from the saved q,k
 * (io->att_tmp). FULL: nothing is kept but the layer input; the engine runs
 * forward again into a shared area right before backward. */
enum { ENG_RC_NONE = 0, ENG_RC_SELECTIVE = 1, ENG_RC_FULL = 2 };

static inline float *eng_pw(const struct eng_layer *l, int i)
{
    const struct eng_param *p = &l->params[i];
    return p->expert ? l->wx + (p->flat - l->flat_xbegin) : l->w + (p->flat - l->flat_begin);
}
static inline float *eng_pg(const struct eng_layer *l, int i)
{
    const struct eng_param *p = &l->params[i];
    return p->expert ? l->gx + (p->flat - l->flat_xbegin) : l->g + (p->flat - l->flat_begin);
}

/* param.c: declares parameter p: global shape, TP split (this rank's box from d),
 * AdamW decay, init (std, or the constant cst when std is 0). */
void eng_param_decl(struct eng_param *p, const struct eng_dims *d, const char *name, int ndim,
                    const int64_t *gshape, enum whale_tp_split split, int split_dim, bool decay,
                    float std, float cst);

/* Parameters a layer of this kind declares (count, then fill). */
int eng_embed_params(const struct eng_dims *d, int index, struct eng_param *p);
int eng_block_params(const struct eng_dims *d, int index, struct eng_param *p);
int eng_head_params(const struct eng_dims *d, int index, struct eng_param *p);

extern const struct eng_layer_ops eng_embed_ops, eng_block_ops, eng_head_ops;

/* block_x.c: the configurable block (RMSNorm/LayerNorm, SwiGLU/GeGLU/GELU,
 * rotary/learned positions, GQA, biases or none, plain or blocked
 * attention); eng_block_ops hands over to it when d->xblock. */
int eng_xblock_params(const struct eng_dims *d, int index, struct eng_param *p);
extern const struct eng_layer_ops eng_xblock_ops;
/* Where each parameter of a configurable block sits in its layer's table
 * (-1: none; combined q|k|v: q is attn.qkv, kv -1; moe: the first MoE
 * parameter), for decode.c's one-token forward. */
struct eng_xb_ix {
    int ln1w, ln1b, qw, qb, kvw, kvb, ow, ob, ln2w, ln2b, fcw, fcb, upw, upb, pw, pb, moe;
};
void eng_xblock_ix(const struct eng_dims *d, int index, struct eng_xb_ix *ix);
/* The description's norm through the backend (d->bk): LayerNorm (b may be
 * NULL: Bias=no) or RMSNorm (b and mean unused). out, inp (N,C); mean, rstd
 * (N); dinp (N,C) +=; dw, db (C) +=. 0 or the backend's error. */
int eng_norm_fwd(const struct eng_dims *d, float *out, float *mean, float *rstd,
                 const float *inp, const float *w, const float *b, int N, int C);
int eng_norm_bwd(const struct eng_dims *d, float *dinp, float *dw, float *db, const float *dout,
                 const float *inp, const float *w, const float *mean, const float *rstd, int N,
                 int C);

/* Sequence parallelism (seqpar.c) over the TP group:
 * all-gather: full (N,C) = the TP ranks' row shards (Ns,C) in rank order;
 * reduce-scatter: shard (Ns,C) = this rank's rows of the sum over TP of
 * full (N,C) (full is left untouched; shard must not overlap it). */
int eng_sp_gather(const struct eng_dims *d, struct whale_par_comm *tp, float *full,
                  const float *shard);
int eng_sp_scatter(const struct eng_dims *d, struct whale_par_comm *tp, float *shard,
                   const float *full);

/* tp_ops.c: the engine's tensor-parallel operators (tp_group NULL: tp == 1,
 * no communication). Sum / max over the TP group, in place: */
int eng_tp_allreduce(struct whale_par_comm *tp_group, float *buf, size_t n);
int eng_tp_allreduce_max(struct whale_par_comm *tp_group, float *buf, size_t n);
/* Row-parallel linear (input features split, bias replicated):
 * out (N,OC) = sum over TP of inp (N,IC) @ w (OC,IC)^T, + b (OC; may be NULL) once */
int eng_tp_row_linear_fwd(whale_backend *bk, float *out, const float *inp, const float *w,
                          const float *b, int N, int IC, int OC, struct whale_par_comm *tp);
/* Vocabulary-parallel embedding: this rank holds wte rows [v0, v0+Vl) (Vl,C);
 * out (B,T,C) = sum over TP of (tok in range ? wte[tok-v0] : 0) + wpe (T,C)
 * (wpe: NULL, or given on one TP rank only) */
int eng_tp_embed_fwd(whale_backend *bk, struct whale_par_comm *tp, float *out,
                     const int32_t *tok, const float *wte, int v0, int Vl, const float *wpe,
                     int B, int T, int C);
/* Vocabulary-parallel softmax cross-entropy over logits (N,Vl) of columns
 * [v0, v0+Vl): in place logits -> probabilities, losses (N) = logsumexp -
 * logit[target] (the same on every TP rank); red: 3N floats of scratch.
 * Backward is whale_k_softmax_xent_bwd_tp (no communication). */
int eng_tp_xent_fwd(whale_backend *bk, struct whale_par_comm *tp, float *probs, float *losses,
                    const int32_t *targets, int v0, int N, int Vl, float *red);

/* Rows [off, off + len) of a dimension of size g cut into tp pieces; the
 * vocabulary split rounds up so the last piece may be shorter. */
void eng_split(int64_t g, int tp, int rank, bool uneven, int64_t *off, int64_t *len);

/* Deterministic value of element `gidx` of parameter `name` for `seed`:
 * independent of layout, so TP/PP/ZeRO runs start from the same model. */
void eng_param_init(const struct eng_param *p, uint64_t seed, float *dst);

/* A backend call inside a layer (block_x.c, layers.c): its error (already
 * logged, with the kernel named) ends the layer. */
#define BK(call)                                                                             \
    do {                                                                                     \
        int bk_rc_ = (call);                                                                 \
        if (bk_rc_)                                                                          \
            return bk_rc_;                                                                   \
    } while (0)

#endif
