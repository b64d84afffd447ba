/* The registry of whale-train's feature areas (see train_areas.h): one line
 * per area. The order is the order of their --help sections and hooks. */
#include "train_areas.h"

const struct train_area *const train_areas[] = {
    &train_area_offload,
    &train_area_device,
    &train_area_observe,
    &train_area_models,
    &train_area_data,
    &train_area_moe,
    NULL,
};

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
