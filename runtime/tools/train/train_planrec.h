/* The layout a checkpoint records (train_planrec.c). */
#ifndef WHALE_TRAIN_PLANREC_H
#define WHALE_TRAIN_PLANREC_H

#include "whale/engine.h"
#include "whale/planfile.h"

/* The plan JSON a checkpoint's manifest keeps: the plan the step came
 * with (NULL: none) with what this run really uses written over it -
 * model, degrees, ZeRO, micro-batch, micro-batches per step, global batch,
 * schedule, recompute, precision - plus the seed. A plan from the plugin
 * or whale-run names only the degrees; before this, a run with batch 16 and
 * grad-accum 4 showed global_batch 0, model "" and num_micro_batches 1 in
 * `whale-ckpt inspect`. Malloc'd; NULL when out of memory. */
char *train_plan_record(const struct whale_plan *plan, const struct whale_engine_config *ec,
                        int dp, long global_batch, long seed);

#endif
