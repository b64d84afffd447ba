/* Internals of the planner shared by its source files (not installed). */
#ifndef WHALE_PLAN_INTERNAL_H
#define WHALE_PLAN_INTERNAL_H

#include "whale/plan.h"

/* Query and key block edge of the CPU's blocked attention (K_FLASH_BLOCK
 * of backend/attn_blocked.h; test_plan_model checks they agree): causal
 * masking skips whole blocks only, so s <= 64 computes every score. */
#define PLAN_CPU_FLASH_BLOCK 64

/* The free constants of the GPU model (struct whale_eff_model; 0 there =
 * these): fitted on the whole validation set by test_plan_validation, which
 * also fits them leaving each source out in turn and checks these are the
 * whole-set fit. Everything else is a data sheet or a public measurement. */
#define PLAN_FIT_GEMM_SCALE 0.900  /* achieved / best-shape sustained (MAMF) GEMM rate */
#define PLAN_FIT_COLL_EFF   0.90   /* NCCL bus bandwidth / link rate */
#define PLAN_FIT_LAT_SCALE  1.0    /* x the per-step latency of every link class */
#define PLAN_FIT_Z3_OVERLAP 0.0    /* share of compute that hides ZeRO-3 gather bandwidth */
#define PLAN_DP_BUCKET      40e6   /* parameters per DP gradient bucket */

static inline double plan_gemm_scale(const struct whale_eff_model *e)
{
    return e->gemm_scale > 0 ? e->gemm_scale : PLAN_FIT_GEMM_SCALE;
}
static inline double plan_lat_scale(const struct whale_eff_model *e)
{
    return e->lat_scale > 0 ? e->lat_scale : PLAN_FIT_LAT_SCALE;
}

/* Cost of one transformer layer for one micro-batch on one device type,
 * given (tp, sequence parallel, micro-batch). Times in seconds per GPU. */
struct plan_layer_cost {
    double fwd, bwd;               /* compute + memory-bound kernels */
    double rc_cost[3];             /* extra recompute time: none 0, selective, full */
    double tp_fwd, tp_bwd, tp_rc;  /* TP collectives (tp_rc: the extra ones of full recompute) */
    double act[3];                 /* bytes kept per layer until backward: none, selective, full */
    double act_input;              /* layer input (what full recompute keeps) */
    double flops_fwd;              /* forward FLOPs per GPU */
    double flops_attn_core;        /* FLOPs recomputed by selective recompute */
    /* embedding / output layer (first and last stage) */
    double first_fwd, first_bwd;   /* includes its TP collective */
    double last_fwd, last_bwd;     /* logits GEMM + cross-entropy + collectives */
    double first_act, last_act;    /* bytes: embedding output, logits of one micro-batch */
    double p2p_msg;                /* one pipeline send: bytes */
};

/* Everything fixed during one search (model, batch, cluster). */
struct plan_ctx {
    const struct whale_model_desc *m;
    long batch;
    const struct whale_cluster *c;
    int64_t ngpus;
    double max_idle;               /* fraction of GPUs a plan may leave idle */
    bool fp32;                     /* the plan trains in fp32 (CPU ranks by default) */
    int prec;                      /* enum whale_precision the time and memory model use */
    double es;                     /* activation element size / 2 bytes: 1 (bf16) or 2 (fp32) */
    double wbytes, gbytes, obytes; /* per parameter: weights, gradients, optimizer states */
    double p_layer;                /* parameters of one block (MoE models: the mean over the
                                      blocks, every expert counted) */
    /* Mixture of experts (moe.c; all 0 for a dense model). Layer costs and
     * parameters are means over the blocks: a stage of Ls blocks holds
     * Ls * moe_frac MoE blocks (the layer split does not follow the MoE
     * pattern; the error is at most one block's expert share per stage). */
    bool moe;
    double moe_frac;               /* MoE blocks / blocks */
    double p_expert;               /* routed-expert parameters per block (mean), all experts:
                                      sharded over EP (and TP), reduced over EDP */
    double moe_imbalance;          /* tokens of the busiest expert / the mean: the capacity
                                      factor (padded to capacity), 1 when dropless */
    double p_emb;                  /* V h */
    double p_pos;                  /* s h */
    /* the slowest link figures over node groups (collectives span groups) */
    double nvlink_bw, nic_bw, pcie_bw;
    int gpn_min;                   /* GPUs per node, smallest group */
    bool gpu_model;                /* every device is a GPU type (sms > 0): the GPU
                                      model's fitted constants apply */
};

void plan_eff_defaults(struct whale_eff_model *e);
/* Training precision: the model's Precision= unless `prec` >= 0 (a plan's
 * or request's); auto = fp32 on CPU-only clusters, bf16 on GPUs. Called by
 * plan_ctx_init with -1. Sets fp32, es and the bytes per parameter. */
void plan_ctx_set_precision(struct plan_ctx *x, int prec);
void plan_ctx_init(struct plan_ctx *x, const struct whale_model_desc *m, long batch,
                   const struct whale_cluster *c);

/* Layer cost for (tp, seqpar, microbatch) on device `g`. */
void plan_layer_cost(const struct plan_ctx *x, const struct whale_plan_device *g, int tp, bool sp,
                     int b, struct plan_layer_cost *lc);

/* moe.c: the MoE fields of the context, and the per-micro-batch seconds of
 * the all-to-alls (dispatch + combine) of one MoE block forward on EP
 * degree ep: tokens x hidden x top-k x element size each way, over the EP
 * group's link (stride tp: EP groups are consecutive DP ranks). */
void plan_moe_init(struct plan_ctx *x);
double plan_moe_alltoall(const struct plan_ctx *x, int tp, bool sp, int b, int ep);
/* Bytes of the shared-memory receive window the engine keeps for the MoE
 * exchanges where the EP group lies in one node (its TP x EP ranks fit the
 * smallest node); 0 otherwise. */
double plan_moe_ep_window(const struct plan_ctx *x, const struct whale_plan_config *cfg);
/* FLOPs of one MoE block's MLP part per token, forward, active experts
 * only (top-k routed + shared + router): what rates on active parameters
 * count in place of the dense MLP's 2 nmat h f. */
double plan_moe_mlp_flops(const struct whale_model_desc *m);

/* Collectives (alpha-beta; the faster of ring and tree as NCCL would pick). */
double plan_allreduce(int p, double bytes, double alpha, double bw);
double plan_allgather(int p, double bytes, double alpha, double bw); /* bytes = full result */
/* plan_allreduce, or in-network reduction where the cluster has it (GPU
 * clusters with eff.innet_reduce): every GPU sends its bytes up the
 * switch tree once and receives the result once, log2(p) switch levels. */
double plan_allreduce_net(const struct plan_ctx *x, int p, double bytes, double alpha, double bw);

/* Link class and effective per-rank bus bandwidth of a group of `size`
 * ranks spaced `stride` logical ranks apart under the contract's rank
 * order and a block mapping. */
int plan_group_link(const struct plan_ctx *x, int stride, int size, double *alpha, double *bw);

/* Evaluation with precomputed layer costs (lc[group index]); used by the
 * search. Returns 0, or WHALE_EINVAL with a reason in why. */
int plan_eval_lc(const struct plan_ctx *x, struct whale_plan_config *cfg,
                 const struct plan_layer_cost *lc, struct whale_plan_prediction *pr,
                 char *why, size_t why_len);

/* Even split of L layers over n stages (or virtual-stage chunks); the
 * remainder goes to the middle stages first (the first and last carry
 * the embedding and the output layer). */
void plan_split_even(int L, int n, int *out);

/* Structural validity of a configuration (divisibility, domain, ranges). */
int plan_config_check(const struct plan_ctx *x, const struct whale_plan_config *cfg,
                      char *why, size_t why_len);

/* Uniform-layer recompute choice: n layers each keeping act[k] * inflight
 * bytes and costing cost[k]; returns counts of selective/full layers that
 * minimise cost within budget, or -1 when even all-full exceeds it. */
int plan_rc_uniform(int n, const double act[3], const double cost[3], double budget,
                    int *n_sel, int *n_full, double *total_cost);

/* offload.c: exposed seconds of host<->device offload traffic for a stage
 * holding P parameters (local: the part this rank updates), m micro-batches
 * whose forward / backward take t_fwd / t_bwd in all; *t_host gets the host
 * optimizer time. */
double plan_offload_time(const struct plan_ctx *x, const struct whale_plan_config *cfg,
                         double P, double local, int m, double t_fwd, double t_bwd,
                         double *t_host);

#endif
