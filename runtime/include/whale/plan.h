/* The planner: memory + time model of a hybrid-parallel GPT training step
 * and a search over TP x PP x DP x micro-batching x ZeRO x recompute x
 * offload that returns the fastest plan that fits.
 *
 * Part of the dependency-free core (linked into the SPANK plugin too): no
 * UCX, PMIx, BLAS or CUDA here. All sizes are bytes, times seconds, rates
 * bytes/s or FLOP/s unless a name says otherwise.
 *
 * Pieces:
 *   - whale_plan_device: catalogue of accelerator types (peak, memory, links)
 *   - whale_cluster    : a (possibly hypothetical, possibly mixed) cluster:
 *                        node groups, NVLink domain, leaf switches, link
 *                        classes with alpha-beta, efficiency constants
 *   - whale_calib      : calibration profile (Key=Value, written by
 *                        whale-bench, read by whale-plan --calib)
 *   - whale_plan_eval  : prediction (memory breakdown + step time) of one
 *                        configuration
 *   - whale_plan_search: the search, with top alternatives and rejections
 *   - whale_plan_recompute_select: exact per-layer recompute selection (dynamic
 *                        program), shared with the engine's recompute=auto
 *   - whale_plan_auto  : one call for the plugin (model + batch + cluster ->
 *                        struct whale_plan + explanation)
 */
#ifndef WHALE_PLAN_H
#define WHALE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "whale/modeldesc.h"
#include "whale/planfile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- accelerators ------------------------------------------------------- */

struct whale_plan_device {
    char name[32];
    double peak_flops;     /* dense bf16/fp16 tensor FLOP/s (CPU: measured GEMM peak) */
    double mem_bytes;      /* device memory */
    double hbm_bw;         /* device memory bandwidth, bytes/s */
    double nvlink_bw;      /* NVLink bandwidth per GPU, one direction (x coll_eff in the model) */
    double nic_bw;         /* scale-out bandwidth per GPU (one rail), bytes/s (x coll_eff) */
    double pcie_bw;        /* host <-> device bandwidth (offload), bytes/s */
    int domain;            /* GPUs per NVLink domain when it spans nodes (72 for GB200
                              NVL72); 0 = the node */
    /* Measured kernel efficiencies of this generation (sources in gpu.c). */
    double gemm_eff;       /* sustained fraction of peak of large 16-bit GEMMs */
    double gemm_half;      /* matrix dimension at which one GEMM dimension halves efficiency */
    double flash_eff;      /* fraction of peak a fused (flash) attention kernel sustains,
                              forward + backward, on the FLOPs it executes; 0 = as GEMMs */
    double fp32_ratio;     /* fp32 (TF32 tensor core) peak / peak_flops */
    /* CPU (calibrated; 0 = no term): the cache one core's kernels work in
     * (its L2) and how much slower memory-bound kernels run when a layer's
     * activations outgrow it. A layer keeping W bytes of activations streams
     * a share 1 - C/W of them from farther out (L3, DRAM): its memory-bound
     * kernels run 1 + spill x (1 - C/W) times as long, its GEMMs as before
     * (CacheBytes=, SpillFactor=). */
    double cache_bytes;
    double spill;
    /* GPU GEMM shape model (0 = the CPU's per-dimension model, gemm_half on
     * all three dimensions): streaming multiprocessors and the output tile
     * of the generation's large-GEMM kernels. A GEMM of M x N outputs runs
     * T = (M / tile_m)(N / tile_n) tiles; it fills the SMs like
     * T / (T + sms / 2) (the last, partial wave) and its depth K like
     * K / (K + gemm_half). */
    int sms;
    double tile_m, tile_n;
};

/* The catalogue (A100-40GB, A100-80GB, H100-80GB, H200, B200, GB200,
 * V100-32GB, cpu). Lookup is case-insensitive; returns WHALE_ENOENT and
 * logs the known names when absent. */
int whale_plan_device_find(const char *name, struct whale_plan_device *out);
const struct whale_plan_device *whale_plan_devices(int *n);

/* ---- cluster ------------------------------------------------------------ */

enum whale_plan_link {
    WHALE_PLAN_LINK_NVLINK = 0, /* inside one NVLink domain (node or rack) */
    WHALE_PLAN_LINK_LEAF   = 1, /* between domains under one leaf switch */
    WHALE_PLAN_LINK_SPINE  = 2, /* across leaf switches */
    WHALE_PLAN_NLINK
};
const char *whale_plan_link_name(int cls);

struct whale_alpha_beta {
    double alpha;          /* latency per message step, seconds */
    double bw;             /* per-GPU bus bandwidth on this class, bytes/s (0 = from GPU type) */
};

#define WHALE_CLUSTER_MAX_GROUPS 8

struct whale_node_group {
    int nodes;
    int gpus_per_node;
    struct whale_plan_device gpu;
};

/* Efficiency constants of the time model (see plan/README in the report
 * and whale-plan --explain-model). Calibrated values override them. */
struct whale_eff_model {
    double gemm_eff;       /* fraction of peak for large GEMMs; 0 = the device type's
                              measured value (whale_plan_device.gemm_eff) */
    double gemm_half_dim;  /* matrix dimension at which one dimension halves efficiency;
                              0 = the device type's */
    double mem_eff;        /* achieved fraction of hbm_bw for memory-bound kernels */
    double coll_eff;       /* achieved fraction of link bw by large collectives */
    double dp_overlap;     /* fraction of the DP/ZeRO reduction hidden behind backward */
    double overlap_cost;   /* compute slowdown per second of hidden communication */
    double zero3_overlap;  /* fraction of the compute time that can hide ZeRO-3 gathers
                              (bandwidth part; each collective's latency stays exposed) */
    double offload_overlap;/* fraction of the compute time that can hide host -> device parameter
                              fetches (offload=params); was zero3_overlap's 0.3 before v2 */
    double zero3_msgs;     /* collectives per layer per ZeRO-3 pass; 0 (default) = one per
                              parameter tensor of the block (whale_plan_block_tensors(), what
                              the published DeepSpeed/FSDP runs behave like); 1 = one flat
                              buffer per layer */
    double grad_reduce_bytes; /* bytes per gradient element of the DP reduction (ZeRO 0-2);
                              0 (default) = the training precision's gradient (2 in bf16);
                              4 = fp32, as Megatron-LM reduces bf16 gradients unless
                              --grad-reduce-in-bf16 (megatron/training/arguments.py) */
    double host_adam_rate; /* parameters/s the host updates with Adam (optimizer offload) */
    double kernel_overhead;/* seconds of launch/sync overhead per layer per micro-batch pass */
    /* Free constants of the GPU model, fitted on published runs
     * (tests/data/plan-validation.txt, leave-one-source-out; docs/planning.md).
     * They apply to GPU device types only (whale_plan_device.sms > 0): a CPU
     * cluster keeps its calibrated figures. 0 = the fitted default. */
    double gemm_scale;     /* achieved / best-shape GEMM and flash efficiency of the
                              training software stack */
    double lat_scale;      /* multiplies every link's per-step collective latency */
    double tp_overlap;     /* share of the TP collectives hidden behind the GEMMs
                              (Megatron-Core --tp-comm-overlap); default 0 */
    double dp_bucket;      /* parameters per DP gradient bucket (each bucket pays the
                              collective's latency); 0 = 40M (Megatron / PyTorch DDP) */
    int innet_reduce;      /* 1: all-reduces reduce in the network (NVLS inside the NVLink
                              domain, InfiniBand SHARP across it; whale-plan --sharp) */
};

struct whale_cluster {
    char name[64];
    int ngroups;
    struct whale_node_group group[WHALE_CLUSTER_MAX_GROUPS];
    int nvlink_domain;     /* GPUs per NVLink domain; 0 = GPUs per node */
    int nodes_per_leaf;    /* nodes under one leaf switch; 0 = all under one switch */
    double spine_oversub;  /* >= 1: bandwidth divisor across leaves */
    struct whale_alpha_beta link[WHALE_PLAN_NLINK];
    double overhead_bytes; /* per device: CUDA context, NCCL, workspaces */
    double frag;           /* fraction of device memory lost to fragmentation */
    double host_mem_per_gpu; /* host memory available per GPU for offload */
    struct whale_eff_model eff;
    /* CPU ranks (device "cpu"): ranks on a node share its cores. 0 =
     * unknown: the calibration profile's figures hold per rank as they are. */
    int cpu_cores_per_node;
    int cpu_threads_per_rank; /* 0: whale-train's default, cores / ranks per node */
};

/* A homogeneous cluster of `nodes` x `gpus_per_node` GPUs of `gpu_type`,
 * with the default links for that GPU generation (NVLink domain = node,
 * or the type's domain such as 72 for GB200; 32 nodes per leaf switch). */
int whale_cluster_init(struct whale_cluster *c, int nodes, int gpus_per_node,
                       const char *gpu_type);
/* Adds a node group (mixed clusters); the first group comes from init. */
int whale_cluster_add_group(struct whale_cluster *c, int nodes, int gpus_per_node,
                            const char *gpu_type);
int64_t whale_cluster_gpus(const struct whale_cluster *c);
bool whale_cluster_is_mixed(const struct whale_cluster *c);
int whale_cluster_validate(const struct whale_cluster *c);
/* The cluster of one job step from the plugin's topology model
 * (whale/topo.h, built from whale.conf + topology.conf): `nodes` are the
 * step's working node indices in t (spares left out), `ranks_per_node` its
 * tasks per node (0 = the node's GPUs, or cores on CPU-only nodes).
 * Consecutive nodes of one GPU type form a node group; the NVLink domain
 * comes from the first node, nodes per leaf from the largest share of the
 * step under one leaf switch. Defined when the core has the topo module. */
struct whale_topo;
int whale_cluster_from_topo(const struct whale_topo *t, const int *nodes, int nnodes,
                            int ranks_per_node, struct whale_cluster *c);
/* One-line description ("384 x 8 A100-80GB, NVLink 8, 32 nodes/leaf"). */
void whale_cluster_describe(const struct whale_cluster *c, char *buf, size_t len);

/* ---- calibration profile (Key=Value; written by whale-bench) ------------
 *
 *   # whale calibration profile
 *   Calibration=1 Source=whale-bench Host=node1 Date=2026-11-29T15:00:00Z
 *   Device=cpu PeakTFLOPS=0.2 MemoryGiB=24 MemBandwidthGBs=22 GemmEfficiency=0.62
 *          GemmHalfDim=48 MemEfficiency=0.6 KernelOverheadUs=5 DPOverlap=0.5
 *   Link=nvlink AlphaUs=0.4 BandwidthGBs=8.2
 *   Link=leaf AlphaUs=30 BandwidthGBs=2.0
 *   Link=spine AlphaUs=40 BandwidthGBs=1.8
 *
 * One record per line, named by its first key (Calibration, Device, Link).
 * Every value but the record name is optional; only what is present
 * overrides the cluster description. Units: TFLOP/s, GiB, GB/s (1e9 B/s),
 * microseconds. Device: PeakTFLOPS = peak of the GEMM kernel used (the
 * model's GemmEfficiency multiplies it), MemBandwidthGBs = streaming
 * bandwidth, GemmHalfDim = matrix dimension at which efficiency halves per
 * dimension (0: flat), KernelOverheadUs = per layer pass, DPOverlap and
 * ZeRO3Overlap in [0,1]. CPU ranks: Threads and CoresPerNode (what the peak
 * was measured with), ParallelFraction in [0,1] (Amdahl) and ThreadSyncUs
 * (per layer pass and doubling of threads), see struct whale_calib;
 * CacheBytes (a core's L2) and SpillFactor >= 0 (both or neither), see
 * struct whale_plan_device.
 * Link: per-rank bus bandwidth and per-step latency of collectives on that
 * class (nvlink = inside a node/domain, leaf = between nodes under one
 * switch, spine = across switches). Unknown keys are errors (file:line). */
enum {
    WHALE_CAL_PEAK        = 1u << 0,
    WHALE_CAL_MEM         = 1u << 1,
    WHALE_CAL_HBM         = 1u << 2,
    WHALE_CAL_GEMM_EFF    = 1u << 3,
    WHALE_CAL_GEMM_HALF   = 1u << 4,
    WHALE_CAL_MEM_EFF     = 1u << 5,
    WHALE_CAL_KERNEL_OVH  = 1u << 6,
    WHALE_CAL_DP_OVERLAP  = 1u << 7,
    WHALE_CAL_Z3_OVERLAP  = 1u << 9,
    WHALE_CAL_LINK0       = 1u << 10, /* << class: alpha/bw of that class present */
    WHALE_CAL_CPU         = 1u << 14, /* threads (and cores) the CPU peak was measured with */
    WHALE_CAL_THREAD_SYNC = 1u << 15, /* CPU: fork/join cost per layer pass (ThreadSyncUs=) */
    WHALE_CAL_PAR_FRAC    = 1u << 16, /* CPU: Amdahl parallel fraction (ParallelFraction=) */
    WHALE_CAL_SPILL       = 1u << 17, /* CPU: CacheBytes= and SpillFactor= */
};

struct whale_calib {
    char source[64];
    char host[64];
    char date[32];
    char device[32];       /* device type measured ("cpu", "H100-80GB") */
    unsigned has;          /* WHALE_CAL_* bits */
    double peak_flops, mem_bytes, hbm_bw;
    double gemm_eff, gemm_half_dim, mem_eff, kernel_overhead, dp_overlap, zero3_overlap;
    struct whale_alpha_beta link[WHALE_PLAN_NLINK];
    /* CPU: PeakTFLOPS and MemBandwidthGBs were measured by one rank running
     * `threads` threads on a node of `cores_per_node` cores (Device line
     * keys Threads= and CoresPerNode=). whale_calib_apply turns them into a
     * per-rank rate for the cluster's ranks per node and threads per rank:
     * rate = peak x S(min(threads per rank, cores / ranks per node)) /
     * S(threads), S(n) = 1 / ((1 - p) + p / n) (Amdahl) with p the
     * measured parallel fraction of a step (ParallelFraction=; absent: 1,
     * threads add linearly). Below one core a rank gets its time share. */
    double threads, cores_per_node, parallel_fraction;
    /* CPU: seconds a layer pass loses to waking and joining its threads
     * (every kernel is one OpenMP region; idle threads sleep), per doubling
     * of the threads a rank runs on its own cores: kernel overhead +=
     * thread_sync x log2(n). Fitted from one layout at 1 thread and at all
     * cores (contrib/bench/plan-calibration.sh). */
    double thread_sync;
    double cache_bytes, spill;   /* CacheBytes=, SpillFactor= (struct whale_plan_device) */
};

/* The share of the calibrated per-rank CPU rate that one of `ranks_per_node`
 * ranks gets (pure; 1 when the profile has no Threads=): S(min(threads per
 * rank, cores / ranks)) / S(calibrated threads), S as above (a fraction of
 * a core below 1: that fraction of S(1)). threads_per_rank and
 * cores_per_node 0 take the profile's cores and whale-train's default
 * threads (cores / ranks, at least 1). */
double whale_calib_cpu_share(const struct whale_calib *cal, int ranks_per_node, int cores_per_node,
                             int threads_per_rank);
/* The threads one rank runs on cores of its own, n = min(threads per rank,
 * cores / ranks per node) (same defaults as above; 1 when the profile has
 * no Threads=): what ThreadSyncUs= is charged for. */
double whale_calib_cpu_threads(const struct whale_calib *cal, int ranks_per_node,
                               int cores_per_node, int threads_per_rank);

int whale_calib_load(const char *path, struct whale_calib *out);
int whale_calib_parse_string(const char *text, const char *origin, struct whale_calib *out);
/* Writes the profile (only the fields present in `has`). */
int whale_calib_write(FILE *f, const struct whale_calib *cal);
int whale_calib_save(const char *path, const struct whale_calib *cal);
/* Helpers for whale-bench to turn measurements into profile values.
 * GEMM: the rates (FLOP/s) of square d x d x d GEMMs at a small and a
 * large size give PeakTFLOPS, GemmEfficiency=1 and GemmHalfDim of the
 * model f(d) = d / (d + half) per dimension. Link: an all-reduce over p
 * ranks timed at a tiny message (latency) and a large one of `bytes`
 * gives alpha and the per-rank bus bandwidth of the ring model
 * t = 2(p-1) alpha + 2 (p-1)/p bytes / bw. Both return WHALE_EINVAL when
 * the measurements are inconsistent (e.g. the small GEMM faster). */
int whale_calib_fit_gemm(double d_small, double rate_small, double d_large, double rate_large,
                         struct whale_calib *cal);
int whale_calib_fit_link(int p, double t_tiny, double bytes, double t_large, int cls,
                         struct whale_calib *cal);
/* Overrides the cluster's device/link/efficiency values with the profile's
 * (every node group when the cluster is homogeneous, else the groups whose
 * GPU type is the profile's Device). */
void whale_calib_apply(const struct whale_calib *cal, struct whale_cluster *c);

/* ---- plans ---------------------------------------------------------------- */

/* Recompute (none / selective / full / auto) and offload (none / optimizer
 * / params) use the enums of whale/planfile.h. */

#define WHALE_PLAN_MAX_STAGES 512

/* One configuration. Zero in tp/pp/dp/microbatch/interleave means "free"
 * for the search; whale_plan_eval needs them all set. */
struct whale_plan_config {
    WHALE_GRID(grid);
    int microbatch;        /* sequences per micro-batch, b */
    int nmicro;            /* micro-batches per step per replica, m (derived: B / (dp b)) */
    int interleave;        /* virtual stages per rank, v (1 = plain 1F1B) */
    int zero;              /* 0..3 */
    int recompute;         /* enum whale_recompute (NONE..AUTO) */
    int offload;           /* enum whale_offload */
    bool seqpar;           /* Megatron sequence parallelism (with tp > 1) */
    int precision;         /* enum whale_precision the prediction assumed (filled by eval) */
    /* Result of recompute=auto on the worst stage: layers per policy. */
    int rc_full, rc_selective;
    /* Layers per pipeline stage (filled by eval; an input when uneven). */
    bool uneven;           /* mixed clusters: balance layers and batch by device speed */
    bool layers_given;     /* stage_layers is an input (else eval fills it) */
    int stage_layers[WHALE_PLAN_MAX_STAGES];
    /* Micro-batches per DP replica when uneven (first WHALE_PLAN_MAX_STAGES
     * replicas; 0 = nmicro). */
    int replica_micro[WHALE_PLAN_MAX_STAGES];
};

/* One-point end-to-end calibration: scales the compute efficiencies
 * (GemmEfficiency and MemEfficiency together) of `cal` (applied on top of
 * cluster `c`) so that the predicted step time of `cfg` for `model` and
 * `global_batch` equals `measured_s` (e.g. a whale-train step). Captures
 * what kernel-level probes miss (the engine's non-GEMM kernels, threading,
 * a loaded machine). WHALE_ERANGE when no efficiency in (0, 1] matches. */
int whale_calib_fit_step(const struct whale_model_desc *model, long global_batch,
                         const struct whale_cluster *c, const struct whale_plan_config *cfg,
                         double measured_s, struct whale_calib *cal);
/* Prediction for one configuration on the worst (bottleneck) device. */
struct whale_plan_prediction {
    bool fits;
    /* memory per device, bytes (worst stage) */
    double mem_weights, mem_grads, mem_optim, mem_act, mem_buffers, mem_overhead, mem_total;
    double mem_capacity;   /* usable: capacity x (1 - frag) */
    int worst_stage;
    /* time per step, seconds */
    double t_step;
    double t_compute;      /* forward + backward on the bottleneck stage, m micro-batches */
    double t_recompute;    /* part of t_compute spent recomputing */
    double t_bubble;       /* pipeline fill/drain */
    double t_tp;           /* tensor-parallel collectives on the critical path */
    double t_ep;           /* MoE all-to-alls (token dispatch and combine over the EP group) */
    double t_pp;           /* pipeline send/recv on the critical path */
    double t_dp;           /* exposed DP / ZeRO collectives */
    double t_optim;        /* optimizer step */
    double t_offload;      /* exposed host<->device transfers */
    /* rates: "hardware" counts recomputation (Megatron-LM's TFLOP/s per GPU,
     * HFU), "model" does not (6N + attention per token: MFU, the MosaicML,
     * NeMo and Llama 3 figures). Attention scores count the full s x s. */
    double flops_step;     /* hardware FLOPs per step incl. recompute */
    double model_flops_step; /* model FLOPs per step (no recompute) */
    double tflops_per_gpu; /* hardware: flops_step / (t_step * gpus) / 1e12 */
    double model_tflops_per_gpu; /* model: model_flops_step / (t_step * gpus) / 1e12 */
    double mfu;            /* model_flops_step / (t_step * sum of peaks) */
    double hfu;            /* flops_step / (t_step * sum of peaks) */
    double tokens_per_s;
    int link_tp, link_pp, link_dp; /* link classes the mapping uses */
};

/* Predicts memory and step time of `cfg` (tp, pp, dp, microbatch,
 * interleave set) for `model` with `global_batch` sequences per step.
 * cfg->nmicro, rc_* (auto) and stage_layers (even when !uneven) are filled
 * in. Returns 0 (pred->fits says whether it fits), or WHALE_EINVAL with a
 * logged reason when the configuration is inconsistent. */
int whale_plan_eval(const struct whale_model_desc *model, long global_batch,
                    const struct whale_cluster *c, struct whale_plan_config *cfg,
                    struct whale_plan_prediction *pred);
/* How much larger a model fits with offload: the largest models
 * of `model`'s width (layers grown) that fit cfg without offload and with
 * it (cfg's offload, or optimizer / params with ZeRO 3 when cfg has none),
 * as parameter counts. Returns the offload mode compared. */
int whale_plan_offload_gain(const struct whale_model_desc *model, long global_batch,
                            const struct whale_cluster *c, const struct whale_plan_config *cfg,
                            double *params_without, double *params_with);

/* Like eval, but returns the reason instead of logging it. */
int whale_plan_check(const struct whale_model_desc *model, long global_batch,
                     const struct whale_cluster *c, const struct whale_plan_config *cfg,
                     char *why, size_t why_len);

/* ---- search --------------------------------------------------------------- */

#define WHALE_PLAN_TOPK 16

struct whale_plan_candidate {
    struct whale_plan_config cfg;
    struct whale_plan_prediction pred;
};

struct whale_plan_request {
    const struct whale_model_desc *model;
    long global_batch;                /* sequences per step */
    const struct whale_cluster *cluster;
    /* Constraints: 0 / -1 = free. */
    WHALE_GRID(grid);
    int microbatch, interleave;
    int zero;                         /* -1 free */
    int recompute;                    /* -1 free */
    int offload;                      /* -1 free */
    int seqpar;                       /* -1 free, 0 off, 1 on */
    int max_microbatch;               /* 0: 16 */
    int topk;                         /* alternatives kept (<= WHALE_PLAN_TOPK) */
    bool exhaustive;                  /* no pruning (benchmark baseline) */
    /* Site limits (whale.conf): 0 = none; bit masks of allowed enum
     * values (1 << WHALE_RECOMPUTE_x, 1 << WHALE_OFFLOAD_x), 0 = all. */
    int max_tp, max_pp, max_dp;
    int max_zero;                     /* -1: 3 */
    unsigned allowed_recompute, allowed_offload;
    double max_idle;                  /* share of GPUs a plan may leave idle (0: use all);
                                         lets awkward GPU counts (100,000) factor well */
    int precision;                    /* enum whale_precision; -1: the model's Precision=,
                                         else fp32 on CPU ranks, bf16 on GPUs */
};
void whale_plan_request_init(struct whale_plan_request *r);

struct whale_plan_result {
    bool found;
    struct whale_plan_candidate best;
    int ntop;
    struct whale_plan_candidate top[WHALE_PLAN_TOPK];   /* best first (top[0] == best) */
    int nrejected;
    struct whale_plan_candidate rejected[4];   /* faster than best but do not fit */
    /* mixed clusters: the best even split, to report the gain */
    bool mixed;
    struct whale_plan_candidate even;
    /* statistics */
    int64_t evaluated, pruned;
    double search_seconds;
    char why_none[256];                        /* when !found */
};

/* Runs the search. Returns 0 with result->found, WHALE_ENOFIT (and
 * result->why_none, also logged) when nothing fits, WHALE_EINVAL on bad
 * input (e.g. seqpar = 1 with tp = 1). When nothing fits, rejected[0]
 * (nrejected = 1) is the evaluated candidate closest to fitting, if any
 * was evaluated (exhaustive searches always evaluate). */
int whale_plan_search(const struct whale_plan_request *req, struct whale_plan_result *res);

/* Human-readable report: table of the best + alternatives, why the winner
 * wins, why faster plans were rejected. */
void whale_plan_explain(const struct whale_plan_request *req, const struct whale_plan_result *res,
                        char *buf, size_t len);
/* One table row / header for a candidate. */
void whale_plan_format_header(char *buf, size_t len);
void whale_plan_format_row(const struct whale_plan_candidate *c, char *buf, size_t len);
/* Multi-line breakdown (memory and time components). */
void whale_plan_format_breakdown(const struct whale_plan_candidate *c, char *buf, size_t len);
/* "tp=8 pp=64 dp=6 mb=1 m=512 v=2 zero=1 rc=full" */
void whale_plan_format_config(const struct whale_plan_config *cfg, char *buf, size_t len);

/* How sure a prediction is. The kind of a configuration on a cluster is its
 * GPU generation and parallelism family ("hopper/3d", "ampere/sharded",
 * "blackwell/dp"); whale_plan_kind writes it, or returns WHALE_ENOENT for
 * CPU and mixed-generation clusters (no published runs to judge by).
 * whale_plan_range gives the range the measured rate falls in, as fractions
 * of the prediction (lo <= 0 <= hi usually: measured = predicted x (1 + lo)
 * .. (1 + hi)), from the 10th-90th percentile of the planner's
 * leave-one-source-out errors on published runs of that kind
 * (tests/data/plan-validation.txt, docs/planning.md). */
int whale_plan_kind(const struct whale_cluster *c, const struct whale_plan_config *cfg, char *kind,
                    size_t len);
int whale_plan_range(const struct whale_cluster *c, const struct whale_plan_config *cfg, double *lo,
                     double *hi);

/* Parameter tensors of one block (weights, biases, norm scales and
 * shifts): the collectives per layer of a per-tensor ZeRO-3 (DeepSpeed
 * stage 3) for whale_eff_model.zero3_msgs. */
int whale_plan_block_tensors(const struct whale_model_desc *m);

/* ---- optimal per-layer recompute (dynamic program) -----------------------
 *
 * A chain of n layers; layer i offers `nopt` policies (e.g. none / selective
 * / full), option k keeping mem[i*nopt+k] bytes of activations until its
 * backward and costing time[i*nopt+k] extra seconds of recomputation.
 * Chooses one option per layer minimising total time subject to
 * sum(mem) <= budget. Memory is discretised into `slots` units of
 * budget/slots, each option's memory rounded UP, so the choice never
 * exceeds the budget; with integer memories and slots == budget the answer
 * is exact. O(n * nopt * slots) time, O(n * slots) bytes.
 * choice[i] receives the option of layer i. Returns 0, WHALE_ENOFIT when
 * even the smallest options exceed the budget, WHALE_EINVAL/ENOMEM. */
int whale_plan_recompute_select(int n, int nopt, const double *mem, const double *time,
                      double budget, int slots, int *choice, double *total_time);

/* The engine's recompute=auto for a GPT stage: `nlayers` identical layers
 * of `model` (TP degree tp, sequence parallelism sp, micro-batch b), each
 * kept for `inflight` micro-batches, activations within `budget` bytes.
 * Uses the planner's activation sizes (Korthikanti et al.) and recompute
 * costs on `device` (NULL: A100-80GB; only the ratios matter) and the
 * exact DP above. policy[i] receives WHALE_RECOMPUTE_NONE / SELECTIVE /
 * FULL for layer i (full first, at the start of the stage: its activations
 * live longest). Returns 0 or WHALE_ENOFIT when even all-full exceeds the
 * budget. */
int whale_plan_recompute_auto(const struct whale_model_desc *model, int tp, bool sp, int b,
                              int nlayers, double inflight, double budget,
                              const struct whale_plan_device *device, int *policy);

/* ---- the one call for the SPANK plugin ----------------------------------- */

/* Plans `model` with `global_batch` sequences per step on cluster `c`
 * (built from the allocation; see whale_cluster_from_topo), applying `cal`
 * when non-NULL. `limits` (may be NULL) carries the constraint and site
 * limit fields of a request (tp/pp/dp/zero/..., max_*, allowed_*); its
 * model/cluster/batch are ignored. Without limits, sequence parallelism is
 * the search's choice (the engine runs it; limits->seqpar = 0 turns it
 * off). Fills `out` (the plan the runtime executes, prediction
 * included) and writes a short explanation into `explain`. Returns 0,
 * WHALE_ENOFIT (nothing fits; reason in explain and logged) or another
 * WHALE_E* code. */
int whale_plan_auto(const struct whale_model_desc *model, long global_batch,
                    const struct whale_cluster *c, const struct whale_calib *cal,
                    const struct whale_plan_request *limits,
                    struct whale_plan *out, char *explain, size_t explain_len);

/* Prediction for a plan the runtime would execute (from flags or a plan
 * file): memory per device and step time on cluster `c`. Returns 0 when it
 * fits, WHALE_ENOFIT when it does not (why: "needs 93.1 GiB per device,
 * 76.0 usable: weights ..., activations ..."), WHALE_EINVAL when the plan
 * is inconsistent with the model/cluster (why says how). */
int whale_plan_predict(const struct whale_model_desc *model, const struct whale_cluster *c,
                       const struct whale_plan *plan, struct whale_plan_candidate *out,
                       char *why, size_t why_len);

/* Converts a candidate into the runtime's plan structure. */
int whale_plan_to_planfile(const struct whale_model_desc *model, long global_batch,
                           const struct whale_cluster *c, const struct whale_plan_candidate *cand,
                           struct whale_plan *out);

#ifdef __cplusplus
}
#endif
#endif
