/* DP shares that follow the replicas' measured speeds (train_rebalance.c):
 * --dp-shares=auto and --rebalance. Options, start and summary are the
 * "rebalance" area's (train_areas.c); the step hook is called by the loop
 * because it may stop the run. */
#ifndef WHALE_TRAIN_REBALANCE_H
#define WHALE_TRAIN_REBALANCE_H

#include <jansson.h>
#include <stdbool.h>

#include "train.h"

/* --dp-shares=auto (or WHALE_DP_SHARES=auto): start from the even split. */
bool train_rebalance_auto(const struct train *t);

/* Every working rank after every completed step (a collective): measure,
 * agree, and move the shares when due; line is rank 0's metrics line of
 * the step (NULL elsewhere) and gets a "rebalance" object when one
 * happened. 0, or 1: stop (a message said why). */
int train_rebalance_step(struct train *t, const struct whale_step_stats *st, long step1,
                         json_t *line);

#endif
