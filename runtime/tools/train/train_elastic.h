/* whale-train's side of elastic training: fault
 * injection points, the per-step in-memory copy, the spare's wait and
 * promotion, and the recovery loop after a failed step. The elastic area
 * (train_area_elastic.c) drives it from the run's hooks; the core only asks
 * te_peak, te_take_ckpt_fence_s and te_step_metrics, hands over the metrics
 * file (te_set_metrics) and frees it (te_free). */
#ifndef WHALE_TRAIN_ELASTIC_H
#define WHALE_TRAIN_ELASTIC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "whale/ckpt.h"
#include "whale/comm.h"
#include "whale/data.h"
#include "whale/engine.h"

struct train_elastic;

/* What recovery may rebuild: the engine, the data reader and the batch
 * buffers (a shrink changes DP and the micro-batches per replica). */
struct train_job {
    whale_engine **e;
    struct whale_engine_config *ec;
    whale_data **data;
    struct whale_data_config *dc;
    int32_t **in, **tg;
    long *accum;
    int *rank, *world;
    struct whale_grid *grid;
    int *dp_rank;
    FILE **metrics;         /* rank 0's metrics file (NULL elsewhere) */
    const char *metrics_path;
    const char *ckpt_root;  /* for the in-step restore from disk (NULL: none) */
    whale_ckpt **ck;        /* the checkpointer (reopened for a new world) */
    whale_ckpt_config *ckc;
};

/* Right after whale_init: parses WHALE_FAULT and WHALE_REDUNDANCY_EVERY
 * (a bad value: message, returns 2). */
int  te_init(struct train_elastic **out, whale_ctx *ctx);
/* clean: the run ended normally (working ranks wait for every owner's last
 * refresh before the holders drop their registrations). Before whale_finalize. */
void te_free(struct train_elastic *te, bool clean);
/* Spare task: offer memory for copies, then wait. 1: the step ended (exit
 * 0); 0: promoted (carry on as the rank the ctx now has); < 0: failure. */
int  te_spare(struct train_elastic *te, whale_ctx *ctx);
bool te_promoted(const struct train_elastic *te);
/* Spares of a non-elastic step lend memory to offload instead. */
bool te_elastic(const struct train_elastic *te);
/* Rank 0's measured GEMM peak (GFLOP/s) travels with the setup exchange:
 * set it before te_start; a promoted spare that becomes rank 0 reads it
 * instead of measuring again (seconds of GEMMs that would stall the redo). */
void te_set_peak(struct train_elastic *te, double gflops);
double te_peak(const struct train_elastic *te); /* 0: unknown */
/* The metrics file the recovery record goes to (rank 0's; NULL elsewhere):
 * rank 0 may change with a recovery. */
void te_set_metrics(struct train_elastic *te, FILE *mf);
/* Every working rank once its engine and data exist (a promoted spare:
 * takes the failed rank's state here). 0 or < 0. */
int  te_start(struct train_elastic *te, whale_ctx *ctx, struct train_job *job);
/* Hooks around a step (step1: 1-based number of the step being computed). */
void te_step_begin(struct train_elastic *te, int64_t step1);
void te_ckpt_started(struct train_elastic *te, int64_t step1);
/* Seconds the optimizer phase waited for a deferred checkpoint snapshot
 * since the last call (then 0). */
double te_take_ckpt_fence_s(struct train_elastic *te);
/* After a completed step: the copy (snapshot + refresh of the holder). */
int  te_step_done(struct train_elastic *te, whale_engine *e);
/* Seconds and bytes of the last snapshot, for the step's metrics line. */
void te_step_metrics(const struct train_elastic *te, double *snap_s, double *bytes);
/* After a step failed with rc: recover and return 0 with *redo_from = the
 * 0-based step to compute next, or < 0 (a message saying what happened
 * and how to resume was logged). */
int  te_recover(struct train_elastic *te, whale_ctx *ctx, struct train_job *job, int step_rc,
                int64_t failed_step1, int64_t *redo_from);

#endif
