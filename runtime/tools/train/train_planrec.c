/* The layout a checkpoint records (train_planrec.h). */
#include "train_planrec.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *train_plan_record(const struct whale_plan *plan, const struct whale_engine_config *ec,
                        int dp, long global_batch, long seed)
{
    char *base = NULL;
    if (plan) {
        base = whale_plan_to_json(plan, 0);
    } else {
        struct whale_plan p;
        whale_plan_init(&p);
        base = whale_plan_to_json(&p, 0);
        whale_plan_free(&p);
    }
    json_t *j = base ? json_loads(base, 0, NULL) : NULL;
    free(base);
    if (!j)
        return NULL;
    json_object_set_new(j, "model", json_string(ec->model.name));
    json_object_set_new(j, "tp", json_integer(ec->tp));
    json_object_set_new(j, "pp", json_integer(ec->pp));
    json_object_set_new(j, "dp", json_integer(dp));
    json_object_set_new(j, "zero", json_integer(ec->zero_stage));
    json_object_set_new(j, "micro_batch", json_integer(ec->micro_batch));
    json_object_set_new(j, "num_micro_batches", json_integer(ec->grad_accum));
    json_object_set_new(j, "global_batch", json_integer(global_batch));
    json_object_set_new(j, "schedule", json_string(whale_schedule_name(ec->schedule)));
    json_object_set_new(j, "interleave", json_integer(ec->interleave));
    if (ec->recompute != WHALE_RECOMPUTE_LAYERS) /* a per-layer set keeps the plan's list */
        json_object_set_new(j, "recompute", json_string(whale_recompute_name(ec->recompute)));
    json_object_set_new(j, "precision", json_string(whale_precision_name(ec->precision)));
    json_object_set_new(j, "seed", json_integer(seed));
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    return s;
}
