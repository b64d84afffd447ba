/* Planning on a job step as the SPANK plugin sees it (site config, its
 * topology model, the step's nodes and tasks): the calls the plugin makes
 * for --whale-plan=auto and for checking explicit --whale-tp/pp/dp against
 * memory when --whale-model is given. */
#include "plan_internal.h"
#include "whale/conf.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The working part of the step (whole spare nodes left out) as a cluster. */
static int step_cluster(const struct whale_topo *topo, char *const *nodes, int nnodes,
                        const int *ntasks, int spare_nodes, struct whale_cluster *cl, char *why,
                        size_t why_len)
{
    int work = nnodes - (spare_nodes > 0 ? spare_nodes : 0);
    if (work < 1) {
        snprintf(why, why_len, "%d spare nodes leave none of the step's %d nodes to plan on",
                 spare_nodes, nnodes);
        return WHALE_EINVAL;
    }
    int *idx = malloc(sizeof *idx * (size_t)work);
    if (!idx)
        return WHALE_ENOMEM;
    int rpn = 0;
    for (int i = 0; i < work; i++) {
        if ((idx[i] = whale_topo_find_node(topo, nodes[i])) < 0) {
            snprintf(why, why_len, "node %s is not in the topology model", nodes[i]);
            free(idx);
            return WHALE_EINVAL;
        }
        if (ntasks && (i == 0 || ntasks[i] < rpn))
            rpn = ntasks[i];   /* the smallest node bounds a uniform layout */
    }
    int rc = whale_cluster_from_topo(topo, idx, work, rpn, cl);
    free(idx);
    if (rc)
        snprintf(why, why_len, "cannot describe the step's nodes for the planner (see above)");
    return rc;
}

/* Site limits of whale.conf into a request. */
static void site_limits(const struct whale_conf *conf, struct whale_plan_request *rq)
{
    if (!conf)
        return;
    rq->max_tp = conf->max_tp;
    rq->max_pp = conf->max_pp;
    rq->max_dp = conf->max_dp;
    if (conf->max_microbatch > 0)
        rq->max_microbatch = conf->max_microbatch;
    rq->max_zero = conf->max_zero;
    rq->allowed_offload = conf->allowed_offload;
    rq->allowed_recompute = conf->allowed_recompute;
}

int whale_plan_for_step(const struct whale_conf *conf, const struct whale_topo *topo,
                        char *const *nodes, int nnodes, const int *ntasks, int spare_nodes,
                        const char *model, long global_batch, const struct whale_calib *cal,
                        const struct whale_plan_request *fixed, struct whale_plan *out, char *why,
                        size_t why_len)
{
    why[0] = 0;
    struct whale_model_desc md;
    if (whale_model_desc_load(model, &md)) {
        snprintf(why, why_len, "cannot load model '%s' (see above)", model ? model : "");
        return WHALE_EINVAL;
    }
    if (global_batch < 1) {
        snprintf(why, why_len, "a global batch (sequences per step) is needed to plan");
        return WHALE_EINVAL;
    }
    struct whale_cluster cl;
    int rc = step_cluster(topo, nodes, nnodes, ntasks, spare_nodes, &cl, why, why_len);
    if (rc)
        return rc;
    struct whale_plan_request rq;
    if (fixed) {
        rq = *fixed;
    } else {
        whale_plan_request_init(&rq);
        rq.seqpar = 0;   /* the engine runs no sequence parallelism yet */
    }
    site_limits(conf, &rq);
    return whale_plan_auto(&md, global_batch, &cl, cal, &rq, out, why, why_len);
}

int whale_plan_check_step(const struct whale_topo *topo, char *const *nodes, int nnodes,
                          const int *ntasks, int spare_nodes, const char *model,
                          const struct whale_calib *cal, const struct whale_plan *plan,
                          struct whale_plan_prediction *pred, char *why, size_t why_len)
{
    why[0] = 0;
    struct whale_model_desc md;
    if (whale_model_desc_load(model, &md)) {
        snprintf(why, why_len, "cannot load model '%s' (see above)", model ? model : "");
        return WHALE_EINVAL;
    }
    struct whale_cluster cl;
    int rc = step_cluster(topo, nodes, nnodes, ntasks, spare_nodes, &cl, why, why_len);
    if (rc)
        return rc;
    if (cal)
        whale_calib_apply(cal, &cl);
    struct whale_plan_candidate *cd = malloc(sizeof *cd);
    if (!cd)
        return WHALE_ENOMEM;
    rc = whale_plan_predict(&md, &cl, plan, cd, why, why_len);
    if (pred && (rc == 0 || rc == WHALE_ENOFIT))
        *pred = cd->pred;
    free(cd);
    return rc;
}
