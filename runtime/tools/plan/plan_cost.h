/* whale-plan --train-tokens: what training on N tokens with the chosen plan
 * costs (plan_cost.c). */
#ifndef WHALE_PLAN_COST_H
#define WHALE_PLAN_COST_H

#include <stdio.h>

#include "whale/plan.h"

struct plan_price {
    double node_hour, gpu_hour; /* flags; < 0: not given */
    const char *conf, *nodelist; /* --conf/--nodelist: PricePer*Hour of those nodes */
};

struct plan_cost {
    double steps, hours, usd_per_hour, usd, usd_per_mtok;
    char price[200];
};

/* Steps = ceil(train_tokens / (batch x seq)); hours = steps x t_step / 3600;
 * the price per hour of every node of the cluster (idle ones are paid for
 * too). 0, 1 when no price is known (the message says how to give one),
 * or 1 after a config error. */
int plan_cost_compute(const struct whale_cluster *cl, const struct plan_price *pr,
                      double t_step, long batch, int seq, double train_tokens, struct plan_cost *out);
void plan_cost_print(FILE *f, double train_tokens, const struct plan_cost *c);

#endif
