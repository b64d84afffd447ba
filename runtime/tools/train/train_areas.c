/* The registry of whale-train's feature areas (see train_areas.h): one line
 * per area. The order is the order of their --help sections and hooks. */
#include "train_areas.h"
#include "whale/error.h"
#include "whale/log.h"

const struct train_area *const train_areas[] = {
    &train_area_offload,
    &train_area_device,
    &train_area_observe,
    &train_area_models,
    &train_area_data,
    &train_area_moe,
    &train_area_elastic,
    &train_area_rebalance,
    NULL,
};

int train_areas_ranks(struct train *t)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->ranks) {
            int rc = train_areas[i]->ranks(t);
            if (rc != TRAIN_GO)
                return rc;
        }
    return TRAIN_GO;
}

int train_areas_configure(struct train *t)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->configure) {
            int rc = train_areas[i]->configure(t);
            if (rc != TRAIN_GO)
                return rc;
        }
    return TRAIN_GO;
}

int train_areas_setup(struct train *t)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->setup) {
            int rc = train_areas[i]->setup(t);
            if (rc != TRAIN_GO)
                return rc;
        }
    return TRAIN_GO;
}

int train_areas_start(struct train *t)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->start) {
            int rc = train_areas[i]->start(t);
            if (rc != TRAIN_GO)
                return rc;
        }
    return TRAIN_GO;
}

void train_areas_step_begin(struct train *t, long step1)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->step_begin)
            train_areas[i]->step_begin(t, step1);
}

int train_areas_step_done(struct train *t)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->step_done && train_areas[i]->step_done(t))
            return 1;
    return 0;
}

void train_areas_ckpt_saved(struct train *t, long step1)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->ckpt_saved)
            train_areas[i]->ckpt_saved(t, step1);
}

int train_areas_step_failed(struct train *t, int rc, long step1, long *redo)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->step_failed)
            return train_areas[i]->step_failed(t, rc, step1, redo);
    whale_error("stopping: step %ld failed: %s", step1, whale_strerror(rc));
    return 1;
}

void train_areas_step(struct train *t, const struct whale_step_stats *st, json_t *line)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->step)
            train_areas[i]->step(t, st, line);
}

void train_areas_report(struct train *t, json_t *summary)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->report)
            train_areas[i]->report(t, summary);
}

int train_areas_teardown(struct train *t, int rc)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->teardown)
            rc = train_areas[i]->teardown(t, rc);
    return rc;
}

void train_areas_usage(FILE *f)
{
    for (int i = 0; train_areas[i]; i++)
        if (train_areas[i]->usage)
            train_areas[i]->usage(f);
}
