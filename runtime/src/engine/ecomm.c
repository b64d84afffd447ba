/* The engine's process groups as whale_par_comm tables (whale/par_comm.h,
 * filled by parallel/comm_group.c: the one adapter over whale/comm.h). */
#include "layer.h"

#include "whale/error.h"
#include "whale/log.h"
#include "engine_internal.h"

#include <string.h>

int eng_groups_from_ctx(whale_ctx *ctx, struct eng_groups *g)
{
    memset(g, 0, sizeof *g);
    whale_group *dpg = whale_dp_group(ctx);
    if (dpg && whale_group_size(dpg) > 1) {
        whale_par_comm_from_group(&g->dp, dpg);
        g->dp_group = true;
    } else
        whale_par_comm_from_group(&g->dp, NULL);
    whale_group *tpg = whale_tp_group(ctx), *ppg = whale_pp_group(ctx);
    whale_par_comm_from_group(&g->tp, tpg && whale_group_size(tpg) > 1 ? tpg : NULL);
    whale_par_comm_from_group(&g->pp, ppg && whale_group_size(ppg) > 1 ? ppg : NULL);
    whale_par_comm_from_group(&g->emb, NULL);
    if (g->pp.size > 1) {
        /* first and last stage of this (dp, tp): the tied embedding's two copies.
         * Collective over the pipeline group; middle stages get no group. */
        int ends[2] = { whale_group_world_rank(ppg, 0),
                        whale_group_world_rank(ppg, g->pp.size - 1) };
        whale_group *emb = NULL;
        int rc = whale_group_create(ppg, ends, 2, &emb);
        if (rc) {
            whale_error("cannot create the tied-embedding group of pipeline ranks %d and %d: %s",
                        ends[0], ends[1], whale_strerror(rc));
            return rc;
        }
        if (emb) {
            whale_par_comm_from_group(&g->emb, emb);
            g->emb_group = emb;
        }
    }
    return eng_ep_group_from_ctx(ctx, g);
}

void eng_groups_free(struct eng_groups *g)
{
    if (g->emb_group)
        whale_group_free(g->emb_group);
    g->emb_group = NULL;
    if (g->ep_group)
        whale_group_free(g->ep_group);
    g->ep_group = NULL;
    if (g->edp_group)
        whale_group_free(g->edp_group);
    g->edp_group = NULL;
}
