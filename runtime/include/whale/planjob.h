/* Does a plan belong to the job about to use it? A plan is made for one
 * model, one global batch and one set of degrees (its memory and time
 * predictions, micro-batch split and stage layers follow from them); a
 * job that trains another model or batch, or runs other degrees, must not
 * use it silently. No option re-plans for the job: the user makes a new
 * plan (whale-plan, --whale-plan=auto with the job's model and batch) or
 * drops the contradicting flag. */
#ifndef WHALE_PLANJOB_H
#define WHALE_PLANJOB_H

#include "whale/planfile.h"

#ifdef __cplusplus
extern "C" {
#endif

struct whale_plan_job {
    const char *model;      /* the job's model (preset name or file); NULL: not given */
    const char *model_from; /* where it came from ("--model"), for messages */
    long batch;             /* the job's global batch; <= 0: not given */
    const char *batch_from; /* "--batch" */
    int tp, pp, dp;         /* the step's degrees; 0: not known yet (not compared) */
};

/* 0, or WHALE_EINVAL after logging both values, e.g. "the plan (WHALE_PLAN)
 * was made for model gpt-tiny but --model gives gpt-small". A model named
 * differently but describing the same architecture (a preset and a copy of
 * its file) agrees. plan_src names the plan in messages. */
int whale_plan_check_job(const struct whale_plan *p, const char *plan_src,
                         const struct whale_plan_job *job);

#ifdef __cplusplus
}
#endif
#endif
