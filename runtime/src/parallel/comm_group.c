/* struct whale_par_comm over a whale_group (whale/comm.h). */
#include "whale/error.h"
#include "whale/parallel.h"

static int g_isend(struct whale_par_comm *c, const void *buf, size_t bytes, int peer, int tag,
                   void **req)
{
    return whale_isend(c->impl, buf, bytes, WHALE_UINT8, peer, tag, (whale_req **)req);
}

static int g_irecv(struct whale_par_comm *c, void *buf, size_t bytes, int peer, int tag,
                   void **req)
{
    return whale_irecv(c->impl, buf, bytes, WHALE_UINT8, peer, tag, (whale_req **)req);
}

static int g_wait(struct whale_par_comm *c, void *req)
{
    (void)c;
    return whale_wait(req);
}

static int g_test(struct whale_par_comm *c, void *req, bool *done)
{
    (void)c;
    return whale_test(req, done);
}

static int g_allreduce(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op)
{
    return whale_allreduce(c->impl, buf, buf, n, WHALE_FLOAT32, op);
}

static int one_allreduce(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op)
{
    (void)c; (void)buf; (void)n; (void)op;
    return 0;
}

static int one_p2p(struct whale_par_comm *c, void *buf, size_t bytes, int peer, int tag,
                   void **req)
{
    (void)c; (void)buf; (void)bytes; (void)tag; (void)req;
    (void)peer;
    return WHALE_EINVAL; /* a group of one has no peer */
}

static int one_isend(struct whale_par_comm *c, const void *buf, size_t bytes, int peer, int tag,
                     void **req)
{
    return one_p2p(c, (void *)buf, bytes, peer, tag, req);
}

void whale_par_comm_from_group(struct whale_par_comm *c, whale_group *g)
{
    if (!g || whale_group_size(g) == 1) {
        *c = (struct whale_par_comm){ .rank = 0, .size = 1, .impl = g, .isend = one_isend,
                                      .irecv = one_p2p, .wait = g_wait, .test = g_test,
                                      .allreduce = one_allreduce };
        return;
    }
    *c = (struct whale_par_comm){ .rank = whale_group_rank(g), .size = whale_group_size(g),
                                  .impl = g, .isend = g_isend, .irecv = g_irecv, .wait = g_wait,
                                  .test = g_test, .allreduce = g_allreduce };
}
