/* whale-plan: what offload buys. */
#ifndef WHALE_PLAN_OFFLOAD_TOOL_H
#define WHALE_PLAN_OFFLOAD_TOOL_H

#include <stdio.h>

#include "whale/plan.h"

/* When the chosen plan offloads (or --offload asked for it): says whether
 * anything fits without offload, and the largest model of this width (layers
 * grown or shrunk) that any layout fits without offload and with it. Runs
 * the search once per probe (silenced); a few dozen searches at most. */
void plan_offload_report(const struct whale_plan_request *rq,
                         const struct whale_plan_result *res, FILE *out);

#endif
