/* The plan: everything a rank needs to run its part of a step (degrees,
 * micro-batching, pipeline schedule, ZeRO, recompute, offload, checkpoints),
 * as produced by the SPANK plugin (from --whale-* flags or a plan file), by
 * whale-plan (search) and by whale-run, and consumed by whale-train through
 * WHALE_PLAN (a path, or inline JSON when it starts with '{').
 *
 * JSON form (machine-written; unknown keys are rejected so typos surface):
 * {
 *   "version": 1,
 *   "model": "gpt-tiny",            preset name or path ("" = given to the tool)
 *   "tp": 2, "pp": 2, "dp": 2, "spares": 0,
 *   "ep": 1,                        expert-parallel degree, divides dp (optional;
 *                                   written only when > 1)
 *   "map": "topo",                  topo | block
 *   "micro_batch": 4,               sequences per micro-batch
 *   "num_micro_batches": 8,         micro-batches per DP replica per step
 *   "global_batch": 64,             sequences per step (0 = micro*num*dp)
 *   "schedule": "1f1b",             1f1b | interleaved | gpipe
 *   "interleave": 1,                virtual stages per rank (>1 with interleaved)
 *   "sequence_parallel": false,     Megatron sequence parallelism in the TP group
 *                                   (optional; written only when true)
 *   "zero": 1,                      0..3
 *   "recompute": "selective",       none | selective | full | auto | layers
 *   "recompute_layers": [0,1,...],  with "layers": global layer indices recomputed
 *   "offload": "none",              none | optimizer | params
 *   "precision": "fp32",            fp32 | bf16 | fp16
 *   "stage_layers": [12, 12],       layers per pipeline stage (empty = balanced)
 *   "dp_batch": [32, 32],           sequences per DP replica (empty = even)
 *   "ckpt_dir": "/ckpt/%u/%j", "ckpt_every": 100,
 *   "prediction": { ... }           free-form object from the planner, kept as is
 * }
 */
#ifndef WHALE_PLANFILE_H
#define WHALE_PLANFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "whale/grid.h"
#ifdef __cplusplus
extern "C" {
#endif

#define WHALE_PLAN_VERSION 1

/* Bounds on untrusted plans: a plan travels in one environment string
 * (Linux caps one at 128 KiB) and sizes per-rank tables. */
#define WHALE_PLAN_MAX_WORLD WHALE_GRID_MAX_WORLD /* tp*pp*dp */
#define WHALE_PLAN_MAX_LIST 65536           /* entries of any array */
#define WHALE_PLAN_MAX_PREDICTION 16384     /* bytes of "prediction" */
#define WHALE_PLAN_MAX_FILE ((size_t)4 << 20) /* bytes of a plan file */
#define WHALE_PLAN_MAX_ENV 100000           /* bytes of the inline JSON a step carries */

enum whale_schedule { WHALE_SCHED_1F1B = 0, WHALE_SCHED_INTERLEAVED, WHALE_SCHED_GPIPE };
enum whale_recompute {
    WHALE_RECOMPUTE_NONE = 0,
    WHALE_RECOMPUTE_SELECTIVE, /* attention core only */
    WHALE_RECOMPUTE_FULL,
    WHALE_RECOMPUTE_AUTO,      /* per-layer optimum for a memory budget */
    WHALE_RECOMPUTE_LAYERS,    /* explicit per-layer set */
};
enum whale_offload { WHALE_OFFLOAD_NONE = 0, WHALE_OFFLOAD_OPTIMIZER, WHALE_OFFLOAD_PARAMS };
enum whale_precision { WHALE_PREC_FP32 = 0, WHALE_PREC_BF16, WHALE_PREC_FP16 };
enum whale_map_policy { WHALE_MAP_TOPO = 0, WHALE_MAP_BLOCK };

struct whale_plan {
    char model[256];
    WHALE_GRID(grid);
    int spares;
    enum whale_map_policy map;
    int micro_batch;
    int num_micro_batches;
    int global_batch;
    enum whale_schedule schedule;
    int interleave;
    bool sequence_parallel;   /* shard layernorm/dropout activations over TP (Korthikanti et al.) */
    int zero;
    enum whale_recompute recompute;
    int *recompute_layers; int n_recompute_layers;
    enum whale_offload offload;
    enum whale_precision precision;
    int *stage_layers; int n_stage_layers;
    int *dp_batch; int n_dp_batch;
    char ckpt_dir[1024];
    int ckpt_every;
    int ckpt_keep;            /* site default of --ckpt-keep (-1: none; absent in JSON) */
    int ckpt_milestone_every; /* site default milestone interval (0: none; absent) */
    char *prediction_json;    /* serialized "prediction" object or NULL */
    /* Batch fields nobody chose (WHALE_PLAN_UNSET_*): the JSON form leaves
     * them out, so a tool's own documented default applies (whale-train's
     * --batch 8) instead of whale_plan_init's 1. Set by the parser for
     * absent keys and by the plugin for options not given. */
    unsigned unset;
};
#define WHALE_PLAN_UNSET_MICRO_BATCH 1u
#define WHALE_PLAN_UNSET_NUM_MICRO 2u
#define WHALE_PLAN_UNSET_GLOBAL_BATCH 4u
#define WHALE_PLAN_UNSET_BATCH 7u /* all three */

/* Defaults: tp=pp=dp=1, micro_batch=1, num_micro_batches=1, 1f1b,
 * interleave=1, zero=0, recompute none, offload none, fp32, map topo. */
void whale_plan_init(struct whale_plan *p);
void whale_plan_free(struct whale_plan *p);   /* frees arrays, keeps scalars */
int  whale_plan_copy(struct whale_plan *dst, const struct whale_plan *src);

/* Parse JSON text; origin names the source in messages. */
int whale_plan_from_json(const char *text, const char *origin, struct whale_plan *out);
int whale_plan_load_file(const char *path, struct whale_plan *out);
/* WHALE_PLAN value: inline JSON when it starts with '{', else a path. */
int whale_plan_from_env_value(const char *value, struct whale_plan *out);
/* Serialize (compact when indent == 0). Caller frees. NULL on ENOMEM. */
char *whale_plan_to_json(const struct whale_plan *p, int indent);

/* Structural checks independent of any model: ranges, array lengths
 * (stage_layers has pp*interleave entries, dp_batch dp), schedule vs
 * interleave, num_micro_batches a multiple of pp for interleaved. When world
 * > 0 also checks tp*pp*dp == world. When layers > 0 checks stage_layers
 * sums to it and every recompute layer index < layers. Logs the reason. */
int whale_plan_validate(const struct whale_plan *p, int world, int layers, const char *origin);

const char *whale_schedule_name(enum whale_schedule s);
const char *whale_recompute_name(enum whale_recompute r);
const char *whale_offload_name(enum whale_offload o);
const char *whale_precision_name(enum whale_precision p);
const char *whale_map_policy_name(enum whale_map_policy m);
int whale_schedule_parse(const char *s, enum whale_schedule *out);
int whale_recompute_parse(const char *s, enum whale_recompute *out);
int whale_offload_parse(const char *s, enum whale_offload *out);
int whale_precision_parse(const char *s, enum whale_precision *out);
int whale_map_policy_parse(const char *s, enum whale_map_policy *out);

#ifdef __cplusplus
}
#endif
#endif
