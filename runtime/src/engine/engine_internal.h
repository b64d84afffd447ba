/* Engine internals shared by its source files and the unit tests. */
#ifndef ENGINE_INTERNAL_H
#define ENGINE_INTERNAL_H

#include "whale/par_comm.h"
#include "offload.h"
#include "layer.h"
#include "whale/backend.h"
#include "whale/clock.h"
#include "whale/engine.h"
#include "whale/optim.h"
#include "whale/parallel.h"

/* A gradient bucket: contiguous layers [l0, l1) whose parameters occupy the
 * flat range [flat, flat + n) (n padded to a multiple of 16 * G, G the size
 * of its group `comm`: DP, or for an expert bucket the expert-data-parallel
 * group). Rank r of the group owns [flat + r*n/G, flat + (r+1)*n/G) of it
 * under ZeRO, stored at shard_off in the shard arrays. */
struct eng_bucket {
    int l0, l1;
    size_t flat, n, shard_off;
    int pending;        /* layers whose backward has not finished this micro-batch */
    float *gbuf;        /* ZeRO 2/3: full-size gradient scratch while in backward */
    void *greq;         /* gradient reduction in flight */
    float *rs_tmp;      /* ZeRO 2/3 accumulation target for micro-batches > 0 */
    uint16_t *g16;      /* 16-bit gradient reduction: the bucket's send/receive buffer (n) */
    float *wbuf;        /* ZeRO 3 or 16-bit params: the bucket's fp32 compute weights */
    uint16_t *wbuf16;   /* ZeRO 3 with 16-bit params: the gathered 16-bit weights */
    void *wreq;
    void *agreq;        /* ZeRO 1/2: the allgather of the updated weights, in flight from
                           the optimizer until the bucket's next use (eng_w_settle) */
    bool ag_late;       /* testing: that gather is issued only when the bucket is used */
    int wref;
    int chunk;          /* model chunk whose backward fills it (-1: the tied wte copy) */
    bool tied_defer;    /* PP > 1: holds wte; reduced after the step's pipeline, once the
                           first and last stage have summed their halves of its gradient */
    bool expert;        /* EP > 1: the expert parameters of layer l0 (= l1 - 1) */
    struct whale_par_comm *comm; /* the group it is reduced and sharded over: DP, or for an
                                    expert bucket the expert-data-parallel group */
    /* offload (offload.c): moves between the arena and the host tier */
    struct eng_move gdown;  /* final gradient of this rank's range -> host */
    struct eng_move wup;    /* updated weights of this rank's range -> arena */
    struct eng_move wfetch; /* ZeRO 3 + params offload, DP 1: host shard -> wbuf */
};

/* One model chunk (virtual pipeline stage) of this rank: local layers
 * [l0, l1), buckets [b0, b1). */
struct eng_chunk {
    int l0, l1, b0, b1;
    int vstage;
    size_t *saved_off;  /* per layer (l1-l0+1): offset of its saved area in a slot */
    size_t saved_floats;
};

/* Activations of one (chunk, micro-batch) from its forward to the end of its
 * backward and of the transfers out of its buffers. */
struct eng_slot {
    int chunk, mb;      /* mb < 0: free */
    bool done;          /* backward finished */
    int sends;          /* transfers of its buffers still in flight */
    float *bnd;         /* (l1-l0+1) x (N,C): [0] chunk input, [k] output of local layer k-1 */
    float *saved;       /* saved activations (policy-dependent), saved_floats (fp32 mode) */
    uint16_t *saved16;  /* the same in 16 bits (mixed precision; saved == NULL then) */
    float *dgrad;       /* (N,C): received output gradient, becomes the input gradient */
    size_t nb_floats, saved_bytes; /* sizes of bnd and saved / saved16 (arena accounting) */
};

/* Communicators of one rank; size 1 where there is no such parallelism. */
struct eng_groups {
    struct whale_par_comm dp;          /* data parallel / ZeRO (size 0 or 1: none) */
    struct whale_par_comm tp;    /* tensor parallel */
    struct whale_par_comm pp;    /* pipeline */
    struct whale_par_comm emb;   /* first and last pipeline stage of this (dp, tp) coordinate */
    void *emb_group;             /* whale_group owned (freed with the engine) */
    bool dp_group;               /* dp is the table over a whale_group (not a test's) */
    /* expert parallelism (moe_ep.c): EP consecutive DP ranks exchange the
     * tokens of their MoE blocks; ep_group is the whale_group (owned), NULL
     * when ep <= 1 (in-process tests, dense models) */
    int ep, ep_rank;
    void *ep_group;
    /* the ranks holding the same experts (WHALE_AXIS_EDP): expert buckets
     * are reduced and sharded over it; size 1 (no group) when EP = DP or
     * without EP; edp_group the whale_group (owned) or NULL */
    struct whale_par_comm edp;
    void *edp_group;
};

struct whale_engine {
    struct whale_engine_config cfg;
    struct eng_dims d;
    whale_ctx *ctx;
    struct whale_par_comm dp;      /* dp.size == 1: no communication */
    bool own_comm;
    struct eng_groups grp;   /* tp, pp, emb (dp mirrored above) */

    int nl;                  /* layers of this stage */
    struct eng_layer *layers;
    struct eng_param *params;
    int np;
    int nb;
    struct eng_bucket *buckets;
    size_t P;                /* padded flat size */
    size_t S;                /* shard size = P / DP */

    float *W;                /* ZeRO 0-2: full weights (P); ZeRO 3: NULL.
                                16-bit params: ZeRO 0's fp32 master (P), else NULL */
    float *Wsh;              /* ZeRO 3: weight shard (S). 16-bit params: ZeRO 1-3's fp32
                                master shard (S) */
    /* mixed precision (precision.c): lp is the 16-bit dtype of the params,
     * activations kept for backward and the gradient stream between layers;
     * WHALE_FLOAT32 when training in fp32 */
    enum whale_dtype lp;
    enum whale_dtype mm;     /* GEMM arithmetic: WHALE_BFLOAT16 with bf16 params on a CPU
                                with AVX512_BF16 (kernels_lp.c), else WHALE_FLOAT32 */
    uint16_t *W16;           /* ZeRO 0-2: 16-bit params (P) */
    uint16_t *W16sh;         /* ZeRO 3: 16-bit param shard (S) */
    float *sv32;             /* one layer's saved area in fp32 while it runs */
    size_t sv32_floats;
    int64_t act_bytes;       /* activations of one micro-batch per chunk (bytes) */
    float *G;                /* ZeRO 0-1: full gradients (P) */
    float *Gsh;              /* ZeRO 2-3: gradient shard (S) */
    float *M, *V;            /* ZeRO 0: (P); ZeRO 1-3: (S) */
    float *agtmp;            /* ZeRO 1-2: own shard copy for the allgather (S) */
    size_t agtmp_floats;     /* its size (arena accounting) */

    /* activations of one micro-batch */
    float *xb;               /* layer outputs: nl-1 boundaries of (N,C) */
    float *saved;            /* per-layer saved areas */
    size_t *saved_off;
    float *scratch;
    size_t scratch_floats;
    float *dstream;          /* (N,C) */
    size_t act_floats;

    /* pipeline layout and activation slots (part 2) */
    int nchunks;             /* v */
    struct eng_chunk *chunks;
    int shadow;              /* local index of the last stage's wte copy (PP > 1), else -1 */
    bool first_stage, last_stage; /* holds the embedding / the head */
    struct whale_pp_schedule psched;
    struct eng_slot *slots;
    int nslots;
    int *slot_of;            /* [chunk * m + mb] -> slot, -1 */
    float *rc_saved;         /* FULL recompute: one layer's saved area */
    float *rc_out;           /* (N,C) output of a recomputed forward (discarded) */
    float *att_tmp;          /* SELECTIVE: (B,NH,T,T) */
    size_t rc_floats, att_floats; /* sizes of rc_saved and att_tmp */
    const int32_t *cur_in, *cur_tg; /* the step's micro-batches */
    double cur_loss, cur_tc;
    float cur_dloss;
    int64_t act_now, act_peak;
    double t_recompute;
    struct whale_moe_stats moe; /* the step's MoE routing and auxiliary losses (forwards) */
    int cur_err;
    bool pipe_abandoned;     /* a step with PP or TP > 1 failed with transfers posted into slots: never free them */

    /* state */
    int64_t step, adam_t, samples;
    uint64_t rng_counter;
    struct whale_loss_scaler scaler;
    struct whale_lr_schedule sched;
    struct whale_adamw adam;
    bool inject_overflow;
    bool late_gather;        /* WHALE_ZERO_LATE_GATHER (step_optim.c: ag_poison) */
    whale_engine_phase_fn phase_fn; /* fault injection (whale_engine_set_phase_hook) */
    void *phase_user;

    /* memory: every working buffer comes from the arena (budget, per-category
     * peaks); optimizer / parameter offload keeps state in the host tier */
    whale_arena *arena;
    struct eng_offload off;
    /* compute backend (device.c): every kernel, cast, the optimizer and the
     * arena's memory go through it */
    whale_backend *bk;
    int32_t *tok_dev;        /* cuda: the step's tokens and targets in backend memory */

    /* accounting */
    int64_t scratch_now, scratch_peak;
    int inflight;
    double busy_since, t_comm, t_wait;
};

/* Tell the phase hook (if any) where the step is. */
static inline void eng_phase(whale_engine *e, enum whale_engine_phase ph)
{
    if (e->phase_fn)
        e->phase_fn(ph, e->step + 1, e->phase_user);
}

/* Create over an explicit DP backend (NULL: single rank). Tests use it with
 * an in-process backend. */
int eng_create(const struct whale_engine_config *c, whale_ctx *ctx, struct whale_par_comm *dp,
               whale_engine **out);
/* Create over explicit communicators (in-process tests of TP/PP/DP). */
int eng_create_groups(const struct whale_engine_config *c, whale_ctx *ctx,
                      const struct eng_groups *g, whale_engine **out);
/* The communicators of a context (TP, PP, DP groups and the embedding group). */
int eng_groups_from_ctx(whale_ctx *ctx, struct eng_groups *g);
void eng_groups_free(struct eng_groups *g);
/* moe_ep.c: the EP group of this rank from the context's layout (g->ep 1 and
 * no group when EP is 1) */
int eng_ep_group_from_ctx(whale_ctx *ctx, struct eng_groups *g);

/* pipe.c: layout, slots, and the micro-batch loop of a step */
int  eng_layout(whale_engine *e, int *blocks_per_vstage);
int  eng_pipe_init(whale_engine *e);
void eng_pipe_free(whale_engine *e);
int  eng_pipe_set_accum(whale_engine *e, int m);
/* Runs every forward and backward of the step (schedule of the plan);
 * loss_sum gets the summed token losses this rank computed. */
int  eng_pipe_step(whale_engine *e, const int32_t *in, const int32_t *tg, float dloss,
                   double *loss_sum, double *tc, struct whale_pp_stats *pst);
/* Forward only over the step's micro-batches (eval). */
int  eng_pipe_forward_only(whale_engine *e, const int32_t *in, const int32_t *tg,
                           double *loss_sum);

/* step_chunk.c: one pass of one chunk for one micro-batch */
int eng_chunk_forward(whale_engine *e, int c, struct eng_slot *s, const int32_t *in,
                      const int32_t *tg, double *loss_sum, double *tc);
int eng_chunk_backward(whale_engine *e, int c, struct eng_slot *s, const int32_t *in,
                       const int32_t *tg, float dloss, bool first_micro, bool last_micro,
                       double *tc);
/* step_grads.c, after the pipeline: finish DP reductions, sync the tied embedding. */
int eng_grads_finish(whale_engine *e);

/* Monotonic seconds (whale/clock.h), for the step's timings. */
static inline double eng_now(void)
{
    return whale_now_s();
}

/* shard.c: this rank's range of a bucket's flat space [flat, flat + n). */
enum eng_range {
    ENG_RANGE_UPDATE, /* what this rank's optimizer updates: its 1/DP under ZeRO 1-3,
                         the whole bucket under ZeRO 0 */
    ENG_RANGE_SHARD,  /* its 1/DP of the bucket at any stage (ZeRO 0: each element
                         counted on one rank) */
    ENG_RANGE_ALL,    /* the whole bucket */
};
void eng_bucket_range(const whale_engine *e, const struct eng_bucket *bk, enum eng_range r,
                      size_t *lo, size_t *hi);
/* p's flat elements inside [lo, hi) as [*a, *z); false when there are none. */
bool eng_param_clip(const struct eng_param *p, size_t lo, size_t hi, size_t *a, size_t *z);
/* The walk over buckets [k0, k1): each parameter's non-empty piece of its
 * bucket's range, in flat order (= e->params order):
 *     struct eng_pieces it;
 *     for (eng_pieces_init(&it, e, 0, e->nb, ENG_RANGE_UPDATE); eng_pieces_next(&it);)
 *         use(it.bk, it.lo, it.l, it.p, it.a, it.z);  */
struct eng_pieces {
    whale_engine *e;
    enum eng_range range;
    int k, k1, li, pi;        /* position: bucket, end, layer, next parameter */
    struct eng_bucket *bk;    /* the bucket (index k) and its range [lo, hi) */
    size_t lo, hi;
    struct eng_layer *l;      /* the parameter, its layer, its piece [a, z) */
    const struct eng_param *p;
    size_t a, z;
};
void eng_pieces_init(struct eng_pieces *it, whale_engine *e, int k0, int k1, enum eng_range r);
bool eng_pieces_next(struct eng_pieces *it);
/* Where flat element a of bucket bk (range starting at lo) lives for this
 * rank: its gradient; its weight (16-bit params: the fp32 master); its
 * 16-bit param (NULL in fp32); its offset in the update-range arrays
 * (moments, host tier). */
float    *eng_gptr(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a);
float    *eng_wptr(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a);
uint16_t *eng_w16ptr(whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a);
size_t    eng_mvoff(const whale_engine *e, const struct eng_bucket *bk, size_t lo, size_t a);

/* arch.c: what the description selects. eng_arch_check refuses what the
 * engine does not run (logged, WHALE_ENOTSUP / WHALE_EINVAL); eng_arch_dims
 * fills the architecture fields of d (d->tp, tp_rank, NH set) and logs, once,
 * why KV heads are replicated over TP when TP does not divide them. */
int  eng_arch_check(const struct whale_model_desc *m);
void eng_arch_dims(const struct whale_model_desc *m, struct eng_dims *d);

/* precision.c: 16-bit storage at the boundaries of fp32 arithmetic. Each
 * does nothing in fp32 mode (e->lp == WHALE_FLOAT32). */
static inline bool eng_lp(const whale_engine *e)
{
    return e->lp != WHALE_FLOAT32;
}
/* dst (n) 16-bit = round(src (n)) / dst (n) fp32 = widen(src (n)) */
void eng_lp_store(const whale_engine *e, uint16_t *dst, const float *src, size_t n);
void eng_lp_load(const whale_engine *e, float *dst, const uint16_t *src, size_t n);
/* buf (n) = widen(round(buf)): an fp32 buffer holding 16-bit values */
void eng_lp_round(const whale_engine *e, float *buf, size_t n);

/* generate.c: 0 when the engine can generate (one fp32 rank, micro-batch
 * 1, no ZeRO or offload), else WHALE_EINVAL with the requirement said */
int eng_gen_check_layout(const whale_engine *e);

#endif
