/* The training engine: a GPT-2-style decoder built from layers, trained with
 * AdamW under data parallelism with ZeRO stages 0-3 (tensor and pipeline
 * parallelism build on the same structures).
 *
 * Model = a chain of layers: layer 0 embeds tokens (wte, wpe), layers
 * 1..L are transformer blocks, layer L+1 is the head (final LayerNorm, output
 * projection tied to wte, cross-entropy). A pipeline stage is a contiguous
 * range of layers. Every parameter has a global name and global shape and
 * a tensor-parallel split; its values are a function of (seed, global name,
 * global element index) only, so any layout starts from exactly the same
 * model.
 *
 * Checkpoints (whale/ckpt) enumerate everything a rank holds with
 * whale_engine_tensors() and read/write the pieces in place, plus the
 * scalar state of struct whale_train_state. This interface is stable. */
#ifndef WHALE_ENGINE_H
#define WHALE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/comm.h"
#include "whale/modeldesc.h"
#include "whale/planfile.h" /* enum whale_precision */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct whale_engine whale_engine;

#define WHALE_MAX_DIMS 4

/* How tensor parallelism cuts a parameter (Megatron): */
enum whale_tp_split {
    WHALE_SPLIT_NONE = 0, /* replicated on every TP rank (LayerNorm, row-parallel bias) */
    WHALE_SPLIT_COL,      /* output features split (QKV, fc): split_dim holds them */
    WHALE_SPLIT_ROW,      /* input features split (attn.proj, mlp.proj) */
    WHALE_SPLIT_VOCAB,    /* embedding rows split by vocabulary range (wte) */
};

enum whale_tensor_kind {
    WHALE_TENSOR_PARAM = 0, /* the weights the model computes with */
    WHALE_TENSOR_ADAM_M,    /* AdamW first moment */
    WHALE_TENSOR_ADAM_V,    /* AdamW second moment */
    WHALE_TENSOR_MASTER,    /* fp32 master weights when params are stored in 16 bits */
    WHALE_TENSOR_KIND_COUNT_
};
const char *whale_tensor_kind_name(enum whale_tensor_kind k); /* "param", "adam_m", ... */

/* One piece of one tensor held by this rank. The tensor-parallel piece is a
 * box [tp_offset, tp_offset + tp_shape) of the global tensor; of that box
 * (flattened row-major) this rank holds elements [flat_begin, flat_end) at
 * `data` (ZeRO shards; the whole box without ZeRO). */
struct whale_tensor_piece {
    char name[96];                 /* global name, e.g. "h.3.attn.qkv.w" */
    enum whale_tensor_kind kind;
    enum whale_dtype dtype;
    int ndim;
    int64_t global_shape[WHALE_MAX_DIMS];
    int64_t tp_offset[WHALE_MAX_DIMS];
    int64_t tp_shape[WHALE_MAX_DIMS];
    int64_t flat_begin, flat_end;
    void *data;                    /* (flat_end - flat_begin) elements of dtype */
    /* Several ranks may hold identical copies (DP replicas of parameters
     * without ZeRO-3, TP replicas of LayerNorms, the tied embedding on the
     * first and last stage). Exactly one holder of each distinct piece has
     * writer = true; every holder must be restored on load. */
    bool writer;
    /* data lives only during this walk: with a remote offload tier the
     * optimizer state (and with offloaded params the master weights) is
     * fetched into buffers that the end of the walk writes back and frees.
     * Read or write such pieces in fn or in the done hook of
     * whale_engine_tensors_then, never after it returns. */
    bool transient;
    /* expert parallelism: a piece of an expert this rank computes. Only the
     * ranks holding the same experts (the expert-data-parallel group) have
     * it, not every DP replica. */
    bool expert;
};

typedef int (*whale_tensor_fn)(const struct whale_tensor_piece *p, void *user);
/* Calls fn for every parameter and optimizer-state piece of this rank, in a
 * fixed order (same on every rank of the same layout). A non-zero return
 * stops the walk and is returned. Pieces point at live buffers: call
 * between steps only. */
int whale_engine_tensors(whale_engine *e, whale_tensor_fn fn, void *user);
/* The parameters of model m as the engine declares them (one TP rank:
 * global shapes), without building an engine: fn(name, ndim, shape, user)
 * for each, in the engine's order. A non-zero return of fn stops and is
 * returned; WHALE_EINVAL for a model without heads. */
typedef int (*whale_param_fn)(const char *name, int ndim, const int64_t *shape, void *user);
int whale_model_params(const struct whale_model_desc *m, whale_param_fn fn, void *user);
/* The same walk, then done(user) before the walk ends, while every piece
 * (transient ones included) is still valid: for callers that collect the
 * pieces first and use them together (a checkpoint save or load). A
 * non-zero return of done is returned. */
typedef int (*whale_tensor_done_fn)(void *user);
int whale_engine_tensors_then(whale_engine *e, whale_tensor_fn fn, whale_tensor_done_fn done,
                              void *user);
/* The precision the engine trains in. fp32: PARAM pieces are fp32 and there
 * are no MASTER pieces. bf16 / fp16: PARAM pieces are 16-bit (what the
 * model computes with, rounded from the master) and MASTER pieces hold the
 * fp32 master weights (sharded like the AdamW moments); restoring both
 * resumes exactly. */
enum whale_precision whale_engine_precision(const whale_engine *e);

/* Scalar state that, with the tensors, makes a resumed run continue
 * exactly. The data position is `samples` (global sample counter). */
struct whale_train_state {
    int64_t step;          /* optimizer steps taken (including skipped ones) */
    int64_t adam_t;        /* AdamW bias-correction counter (applied steps) */
    int64_t samples;       /* global samples consumed */
    uint64_t seed;         /* model/data seed of the run */
    uint64_t rng_counter;  /* draws taken from the seed's stream (dropout etc.) */
    float loss_scale;      /* dynamic loss scale (1 in fp32) */
    int32_t scaler_good_steps;
    int64_t scaler_skipped;
};
void whale_engine_get_state(const whale_engine *e, struct whale_train_state *s);
int  whale_engine_set_state(whale_engine *e, const struct whale_train_state *s);

struct whale_engine_config {
    struct whale_model_desc model;
    int seq;               /* T (<= model.seq, the position table size) */
    int micro_batch;       /* samples per micro-batch on this rank */
    int grad_accum;        /* micro-batches per step (>= 1) */
    /* Samples per step over the whole DP group. 0: micro_batch x grad_accum
     * x DP (every replica the same share). Set when the replicas run
     * different shares (micro_batch and/or grad_accum differ between
     * replicas): every replica scales its summed per-token loss gradients by
     * 1 / (global_batch x seq), so the DP sum is the global-batch mean
     * whatever the split. The caller keeps the collectives matched: ZeRO 2
     * and 3 reduce at every micro-batch, so there every replica needs the
     * same grad_accum. */
    int global_batch;
    /* Targets < 0 are ignored (instruction data with the loss masked to the
     * responses): the loss and its gradients are the mean over the counted
     * targets of the global batch, their count summed over DP and the
     * micro-batches every step (one extra scalar reduction per step). */
    bool loss_mask;
    uint64_t seed;
    /* The weights start at zero instead of the seeded random initialisation:
     * for a caller that writes every one of them before the first step
     * (whale-train --init-from). The initialisation costs tens of ns per
     * weight, far more than loading them. */
    bool skip_init;

    /* optimizer */
    float lr, min_lr;
    int64_t warmup_steps, total_steps;
    float weight_decay, beta1, beta2, eps;
    float grad_clip;       /* global norm, <= 0 disables */

    /* data parallelism */
    int zero_stage;        /* 0..3 */
    size_t bucket_bytes;   /* gradient bucket target size (ZeRO 3: one layer per bucket) */
    bool overlap;          /* reduce buckets during backward (else after it) */

    /* precision and loss scaling */
    enum whale_precision precision;
    bool loss_scaling;     /* dynamic loss scale (default on for fp16) */
    bool grad_reduce_16;   /* bf16/fp16: reduce gradients over DP in the 16-bit dtype
                              (the collective accumulates in fp32); default fp32 */
    float init_scale;
    int scale_growth_interval;

    int threads;           /* compute threads (0: all CPUs of this task / local ranks) */

    /* tensor and pipeline parallelism (degrees come from the context's
     * groups; these must agree with them, 0 = take the context's) */
    int tp, pp;
    enum whale_schedule schedule;   /* 1f1b (default), interleaved, gpipe */
    int interleave;                 /* virtual stages (model chunks) per pipeline rank */
    /* Transformer blocks per virtual stage (pp*interleave entries, summing to
     * the model's layers; stage 0 also holds the embedding, the last the
     * head). NULL: balanced by layer cost. */
    const int *stage_layers;
    int n_stage_layers;

    /* activation recomputation */
    enum whale_recompute recompute; /* none, selective (attention core), full, layers, auto */
    const int *recompute_layers;    /* with LAYERS: block indices (0-based) recomputed fully */
    int n_recompute_layers;
    int64_t act_budget_bytes;       /* with AUTO: activation memory budget of this rank
                                       (0: half of what no recomputation keeps) */

    /* memory and offload */
    int64_t device_mem;    /* arena budget in bytes for this rank (0: unlimited) */
    int offload;           /* enum whale_offload: none | optimizer | params (params: ZeRO 3) */
    int offload_prefetch;  /* ZeRO 3: layers whose weights are fetched ahead (0: 1) */

    /* compute backend (whale/backend.h): enum whale_device, cpu (0, the
     * default) or cuda; auto is resolved before (whale_device_resolve) */
    int device;
    bool seqpar;           /* Megatron sequence parallelism with TP > 1: norm and residual
                              regions (and the activations between layers) split along the
                              sequence over the TP group; micro_batch * seq must be a
                              multiple of TP. Ignored when TP is 1 */
};
/* Fill defaults (GPT-2 recipe: lr 6e-4, wd 0.1, betas 0.9/0.95, eps 1e-8,
 * clip 1.0, ZeRO 0, 4 MiB buckets, overlap on, fp32). */
void whale_engine_config_defaults(struct whale_engine_config *c);

/* ctx may be NULL: a world of one. Otherwise data parallelism runs over
 * whale_dp_group(ctx). Errors (bad sizes, shapes that do not divide) are
 * logged with the reason. */
int  whale_engine_create(const struct whale_engine_config *c, whale_ctx *ctx, whale_engine **out);
/* Whether the engine runs the architecture a model description selects
 * (GPT-2 and Llama-style blocks: every MLP, Norm, KVHeads, Bias,
 * TiedEmbeddings and Attention value, Position=learned|rotary). Returns 0,
 * or WHALE_ENOTSUP / WHALE_EINVAL with the reason logged ("FILE: KEY=VALUE: ..."). */
int  whale_engine_model_check(const struct whale_model_desc *m);
void whale_engine_destroy(whale_engine *e);

/* Routing of the step's MoE block forwards on this rank (all zero for a
 * dense model). A block forward is one MoE block on one micro-batch. */
struct whale_moe_stats {
    int64_t forwards;      /* MoE block forwards (MoE blocks here x micro-batches) */
    int64_t routed;        /* token-to-expert assignments (tokens x TopK) */
    int64_t dropped;       /* assignments over an expert's capacity (dropped) */
    double aux;            /* mean load-balancing loss per block forward (no coefficient) */
    double zloss;          /* mean router z-loss per block forward (no coefficient) */
    double imbalance;      /* mean over block forwards of max_e tokens_e / mean_e tokens_e */
    double imbalance_max;  /* the worst block forward's */
    int64_t tok_min, tok_max; /* fewest / most tokens one expert got in a block forward */
    double loss_sum;       /* tokens x (AuxLoss x aux + ZLoss x zloss), summed: what the
                              step adds to the loss (TP rank 0 of every stage) */
};

struct whale_step_stats {
    double loss;           /* mean loss over the global batch's counted targets */
    int64_t loss_tokens;   /* targets counted in the loss over the global batch */
    double grad_norm;      /* global gradient norm before clipping */
    float lr;
    bool skipped;          /* loss scaler found inf/NaN: no update */
    float loss_scale;
    double t_total;        /* seconds: whole step */
    double t_compute;      /* forward + backward + optimizer */
    double t_comm;         /* time collectives were in flight */
    double t_wait;         /* time the compute thread blocked on collectives */
    double overlap;        /* fraction of communication hidden behind compute */
    double flops;          /* model FLOPs of the step on this rank (6N + attention) */
    double t_pipe_wait;    /* seconds blocked on pipeline receives (bubble + transfer) */
    double t_recompute;    /* seconds spent re-running forwards for recomputation */
    int64_t act_peak_bytes;/* activation memory held at the peak of the step */
    /* memory arena and offload */
    int64_t arena_peak_bytes; /* device arena peak during the step (all categories) */
    int64_t host_bytes;    /* host-tier bytes held (offloaded state) */
    double t_offload;      /* seconds the mover spent on host<->arena transfers */
    double t_offload_wait; /* seconds the engine blocked on them (exposed) */
    double offload_hidden; /* 1 - wait / transfer (0 when nothing moved) */
    int64_t offload_bytes; /* bytes moved this step */
    struct whale_moe_stats moe; /* routing statistics (MoE models) */
};

/* One optimizer step: grad_accum micro-batches of micro_batch x seq inputs
 * and targets (int32, laid out micro-batch after micro-batch). */
int whale_engine_step(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                      struct whale_step_stats *st);
/* Between two steps: this replica's micro-batches per step and the global
 * batch (samples over all replicas; 0: the even split) change, the
 * micro-batch stays (uneven DP shares that follow the replicas' speeds).
 * PP = 1 and ZeRO 0/1 only (WHALE_EINVAL otherwise). */
int whale_engine_set_batch(whale_engine *e, int grad_accum, int global_batch);
/* Between two steps, any shape: this replica's micro-batch size and count
 * and the global batch (0: the even split). The engine is built again on
 * the same groups with the same state (parameters, optimizer, scalar
 * state, phase hook) and *e changes, for the shapes whale_engine_set_batch
 * cannot change (a new micro-batch size, a pipeline's schedule); a
 * collective of every rank (they all call it at the same step). On failure
 * *e is the old shape again (NULL if even that could not be built). Not
 * with an offload tier. */
int whale_engine_reshape(whale_engine **e, int micro_batch, int grad_accum, int global_batch);
/* Mean loss of the global batch without updating anything. */
int whale_engine_eval(whale_engine *e, const int32_t *inputs, const int32_t *targets,
                      double *loss);

/* Phase hook (fault injection, whale/redundancy.h WHALE_FAULT): called with
 * the 1-based number of the step being computed at every chunk forward,
 * every chunk backward, after every gradient collective is started (it is
 * in flight when fn runs) and before the optimizer update. NULL removes it. */
enum whale_engine_phase {
    WHALE_ENGINE_FORWARD = 0, WHALE_ENGINE_BACKWARD, WHALE_ENGINE_COLLECTIVE,
    WHALE_ENGINE_OPTIMIZER
};
typedef void (*whale_engine_phase_fn)(enum whale_engine_phase ph, int64_t step, void *user);
void whale_engine_set_phase_hook(whale_engine *e, whale_engine_phase_fn fn, void *user);

/* Testing hook: the next step multiplies one gradient element by inf (the
 * loss-scaling test injects an overflow with it). */
void whale_engine_inject_overflow(whale_engine *e);

/* ---- costs (what the planner and the recompute solver read) ------------- */
struct whale_layer_cost {
    char name[32];         /* "embed", "h.3", "head" */
    int64_t params;        /* parameters of the layer (global, before TP) */
    double fwd_flops;      /* per micro-batch, this rank (TP share) */
    double bwd_flops;
    int64_t act_bytes;     /* activations kept from forward to backward */
    int64_t boundary_bytes;/* the layer's output (what a stage boundary sends) */
};
int whale_engine_num_layers(const whale_engine *e);
int whale_engine_layer_cost(const whale_engine *e, int layer, struct whale_layer_cost *out);

/* OpenBLAS sgemm GFLOP/s on this rank's threads (best of a few 1536^3
 * products, ~0.3 s): the peak MFU is measured against. */
double whale_sgemm_peak_gflops(const whale_engine *e);

/* ---- offload to another task's host memory (--whale-offload-target) --------
 * Bytes this rank's offloaded state needs there (fp32 master and AdamW
 * moments of its update range; params mode with 16-bit params also the
 * 16-bit ZeRO-3 shard, in fp32 the master is the shard; 0 without
 * offload), and attaching the region (registered by that task,
 * whale_region_exchange) at an offset: once, before the first step;
 * offload=optimizer or params. The local host tier then keeps only the
 * gradients and two staging sets of one bucket (params: and, DP > 1, the
 * host copy of the shards being gathered). */
size_t whale_engine_offload_bytes(const whale_engine *e);
int whale_engine_offload_attach(whale_engine *e, whale_remote *r, size_t offset);
/* The task whose memory holds the state now, -1: this task's host tier (also
 * after an elastic recovery, which rebuilds the engine with a local tier). */
int whale_engine_offload_remote_task(const whale_engine *e);
/* How the local host tier moves: the UCX transports of its private
 * endpoint ("self/memory0.0,..."; whale/ltier.h), "memcpy"
 * (WHALE_OFFLOAD_MOVER=memcpy or no UCX), "none" without offload. */
const char *whale_engine_offload_transport(const whale_engine *e);

/* Bytes this rank holds persistently, by kind (the ZeRO memory check). */
struct whale_engine_memory {
    int64_t param_bytes;   /* model weights held (ZeRO-3: the shard) */
    int64_t grad_bytes;    /* gradient buffers held (ZeRO-2/3: the shard) */
    int64_t optim_bytes;   /* AdamW moments (and masters) held */
    int64_t scratch_bytes; /* transient buckets / gather buffers (peak) */
    int64_t act_bytes;     /* activations of one micro-batch */
    int64_t num_params;    /* global parameter count */
    /* where it lives (arena = device memory, host = offload tier) */
    int64_t arena_in_use;  /* bytes in the arena now */
    int64_t arena_peak;    /* arena peak since creation (or the last step's start) */
    int64_t arena_budget;  /* 0: unlimited */
    int64_t host_bytes;    /* bytes in the host tier */
    int64_t arena_cat_peak[5]; /* per category (enum whale_mem_cat) */
};
void whale_engine_memory(const whale_engine *e, struct whale_engine_memory *m);

#ifdef __cplusplus
}
#endif
#endif
