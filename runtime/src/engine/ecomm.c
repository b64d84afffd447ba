/* eng_comm over the runtime's process groups (whale/comm.h). */
#include "ecomm.h"
#include "layer.h"

#include "whale/error.h"
#include "whale/log.h"
#include "engine_internal.h"

#include <string.h>

static int wc_iallreduce(struct eng_comm *c, float *buf, size_t n, void **req)
{
    return whale_iallreduce(c->impl, buf, buf, n, WHALE_FLOAT32, WHALE_SUM, (whale_req **)req);
}

static int wc_ireduce_scatter(struct eng_comm *c, const float *send, float *recv, size_t n,
                              void **req)
{
    return whale_ireduce_scatter(c->impl, send, recv, n, WHALE_FLOAT32, WHALE_SUM,
                                 (whale_req **)req);
}

static int wc_iallreduce16(struct eng_comm *c, uint16_t *buf, size_t n, enum whale_dtype dt,
                           void **req)
{
    return whale_iallreduce(c->impl, buf, buf, n, dt, WHALE_SUM, (whale_req **)req);
}

static int wc_ireduce_scatter16(struct eng_comm *c, const uint16_t *send, uint16_t *recv,
                                size_t n, enum whale_dtype dt, void **req)
{
    return whale_ireduce_scatter(c->impl, send, recv, n, dt, WHALE_SUM, (whale_req **)req);
}

static int wc_iallgather(struct eng_comm *c, const float *send, float *recv, size_t n, void **req)
{
    return whale_iallgather(c->impl, send, recv, n, WHALE_FLOAT32, (whale_req **)req);
}

static int wc_test(struct eng_comm *c, void *req, bool *done)
{
    (void)c;
    return whale_test(req, done);
}

static int wc_wait(struct eng_comm *c, void *req)
{
    (void)c;
    return whale_wait(req);
}

static void eng_comm_from_group(struct eng_comm *c, whale_group *g)
{
    c->impl = g;
    c->rank = whale_group_rank(g);
    c->size = whale_group_size(g);
    c->iallreduce = wc_iallreduce;
    c->ireduce_scatter = wc_ireduce_scatter;
    c->iallgather = wc_iallgather;
    c->iallreduce16 = wc_iallreduce16;
    c->ireduce_scatter16 = wc_ireduce_scatter16;
    c->test = wc_test;
    c->wait = wc_wait;
}


int eng_groups_from_ctx(whale_ctx *ctx, struct eng_groups *g)
{
    memset(g, 0, sizeof *g);
    whale_group *dpg = whale_dp_group(ctx);
    if (dpg && whale_group_size(dpg) > 1) {
        eng_comm_from_group(&g->dp, dpg);
        g->dp_group = true;
    } else
        g->dp.size = 1;
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
    return 0;
}

void eng_groups_free(struct eng_groups *g)
{
    if (g->emb_group)
        whale_group_free(g->emb_group);
    g->emb_group = NULL;
}
