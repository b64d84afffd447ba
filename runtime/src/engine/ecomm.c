/* eng_comm over the runtime's process groups (whale/comm.h). */
#include "ecomm.h"
#include "layer.h"

#include "whale/error.h"
#include "whale/log.h"

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
    c->test = wc_test;
    c->wait = wc_wait;
}

int eng_tp_allreduce(void *tp_group, float *buf, size_t n)
{
    if (!tp_group)
        return 0;
    return whale_allreduce(tp_group, buf, buf, n, WHALE_FLOAT32, WHALE_SUM);
}

int eng_tp_allreduce_max(void *tp_group, float *buf, size_t n)
{
    if (!tp_group)
        return 0;
    return whale_allreduce(tp_group, buf, buf, n, WHALE_FLOAT32, WHALE_MAX);
}

int eng_comm_from_ctx(whale_ctx *ctx, struct eng_comm *c, bool *have)
{
    int tp = 1, pp = 1, dp = 1;
    whale_degrees(ctx, &tp, &pp, &dp);
    *have = false;
    whale_group *g = whale_dp_group(ctx);
    if (g && whale_group_size(g) > 1) {
        eng_comm_from_group(c, g);
        *have = true;
    }
    return 0;
}
