/* Setup shared by the planner unit tests: a parallel layout, a preset model
 * on a cluster, a search request. Each helper asserts, so a test reads as its
 * checks. Include after <cmocka.h>. */
#ifndef WHALE_TEST_PLAN_FIXTURE_H
#define WHALE_TEST_PLAN_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "whale/modeldesc.h"
#include "whale/plan.h"

/* A layout with no pipeline interleaving and everything else off. */
static inline struct whale_plan_config cfg_of(int tp, int pp, int dp, int mb, int zero, int rc)
{
    struct whale_plan_config c;
    memset(&c, 0, sizeof c);
    c.tp = tp;
    c.pp = pp;
    c.dp = dp;
    c.microbatch = mb;
    c.interleave = 1;
    c.zero = zero;
    c.recompute = rc;
    return c;
}

/* The preset model NAME on NODES nodes of PER_NODE GPUs of kind GPU. */
static inline void plan_setup(struct whale_model_desc *m, const char *name, struct whale_cluster *c,
                              int nodes, int per_node, const char *gpu)
{
    assert_int_equal(whale_model_desc_load(name, m), 0);
    assert_int_equal(whale_cluster_init(c, nodes, per_node, gpu), 0);
}

/* A search request for BATCH sequences of M over all of C, the rest left
 * free, and a result to search into (free it). */
static inline struct whale_plan_result *plan_request(struct whale_plan_request *rq,
                                                     const struct whale_model_desc *m, long batch,
                                                     const struct whale_cluster *c)
{
    whale_plan_request_init(rq);
    rq->model = m;
    rq->global_batch = batch;
    rq->cluster = c;
    struct whale_plan_result *res = malloc(sizeof *res);
    assert_non_null(res);
    return res;
}

#endif
