/* struct whale_par_comm over a whale_group (whale/comm.h): the one adapter
 * between the runtime's groups and the parallel blocks / the engine. */
#include <string.h>

#include "whale/error.h"
#include "whale/par_comm.h"

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

static bool g_done(struct whale_par_comm *c, void *req)
{
    (void)c;
    return whale_req_done(req);
}

static int g_allreduce(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op)
{
    return whale_allreduce(c->impl, buf, buf, n, WHALE_FLOAT32, op);
}

static int g_iallreduce(struct whale_par_comm *c, float *buf, size_t n, void **req)
{
    return whale_iallreduce(c->impl, buf, buf, n, WHALE_FLOAT32, WHALE_SUM, (whale_req **)req);
}

static int g_ireduce_scatter(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                             void **req)
{
    return whale_ireduce_scatter(c->impl, send, recv, n, WHALE_FLOAT32, WHALE_SUM,
                                 (whale_req **)req);
}

static int g_iallgather(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                        void **req)
{
    return whale_iallgather(c->impl, send, recv, n, WHALE_FLOAT32, (whale_req **)req);
}

static int g_iallreduce16(struct whale_par_comm *c, uint16_t *buf, size_t n, enum whale_dtype dt,
                          void **req)
{
    return whale_iallreduce(c->impl, buf, buf, n, dt, WHALE_SUM, (whale_req **)req);
}

static int g_ireduce_scatter16(struct whale_par_comm *c, const uint16_t *send, uint16_t *recv,
                               size_t n, enum whale_dtype dt, void **req)
{
    return whale_ireduce_scatter(c->impl, send, recv, n, dt, WHALE_SUM, (whale_req **)req);
}

static int g_iallgather16(struct whale_par_comm *c, const uint16_t *send, uint16_t *recv,
                          size_t n, void **req)
{
    /* a gather moves bits: 16-bit elements travel as such, whatever their type */
    return whale_iallgather(c->impl, send, recv, n, WHALE_BFLOAT16, (whale_req **)req);
}

/* ---- a group of one ---------------------------------------------------------- */

/* Requests of a group of one complete at once; this address marks them. */
static char one_done;

static int one_wait(struct whale_par_comm *c, void *req)
{
    (void)c;
    return req == &one_done ? 0 : WHALE_EINVAL;
}

static int one_test(struct whale_par_comm *c, void *req, bool *done)
{
    *done = true;
    return one_wait(c, req);
}

static int one_allreduce(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op)
{
    (void)c; (void)buf; (void)n; (void)op;
    return 0;
}

static int one_iallreduce(struct whale_par_comm *c, float *buf, size_t n, void **req)
{
    (void)c; (void)buf; (void)n;
    *req = &one_done;
    return 0;
}

static int one_copy(const void *send, void *recv, size_t bytes, void **req)
{
    if (send != recv)
        memmove(recv, send, bytes);
    *req = &one_done;
    return 0;
}

static int one_ireduce_scatter(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                               void **req)
{
    (void)c;
    return one_copy(send, recv, n * sizeof *recv, req);
}

static int one_iallgather(struct whale_par_comm *c, const float *send, float *recv, size_t n,
                          void **req)
{
    (void)c;
    return one_copy(send, recv, n * sizeof *recv, req);
}

static int one_iallreduce16(struct whale_par_comm *c, uint16_t *buf, size_t n,
                            enum whale_dtype dt, void **req)
{
    (void)c; (void)buf; (void)n; (void)dt;
    *req = &one_done;
    return 0;
}

static int one_ireduce_scatter16(struct whale_par_comm *c, const uint16_t *send, uint16_t *recv,
                                 size_t n, enum whale_dtype dt, void **req)
{
    (void)c; (void)dt;
    return one_copy(send, recv, n * sizeof *recv, req);
}

static int one_iallgather16(struct whale_par_comm *c, const uint16_t *send, uint16_t *recv,
                            size_t n, void **req)
{
    (void)c;
    return one_copy(send, recv, n * sizeof *recv, req);
}

static int one_irecv(struct whale_par_comm *c, void *buf, size_t bytes, int peer, int tag,
                     void **req)
{
    (void)c; (void)buf; (void)bytes; (void)peer; (void)tag; (void)req;
    return WHALE_EINVAL; /* a group of one has no peer */
}

static int one_isend(struct whale_par_comm *c, const void *buf, size_t bytes, int peer, int tag,
                     void **req)
{
    return one_irecv(c, (void *)buf, bytes, peer, tag, req);
}

void whale_par_comm_from_group(struct whale_par_comm *c, whale_group *g)
{
    if (!g || whale_group_size(g) == 1) {
        *c = (struct whale_par_comm){
            .rank = 0, .size = 1, .impl = g, .isend = one_isend, .irecv = one_irecv,
            .wait = one_wait, .test = one_test, .allreduce = one_allreduce,
            .iallreduce = one_iallreduce, .ireduce_scatter = one_ireduce_scatter,
            .iallgather = one_iallgather, .iallreduce16 = one_iallreduce16,
            .ireduce_scatter16 = one_ireduce_scatter16, .iallgather16 = one_iallgather16 };
        return;
    }
    *c = (struct whale_par_comm){
        .rank = whale_group_rank(g), .size = whale_group_size(g), .impl = g,
        .isend = g_isend, .irecv = g_irecv, .wait = g_wait, .test = g_test, .done = g_done,
        .allreduce = g_allreduce, .iallreduce = g_iallreduce,
        .ireduce_scatter = g_ireduce_scatter, .iallgather = g_iallgather,
        .iallreduce16 = g_iallreduce16, .ireduce_scatter16 = g_ireduce_scatter16,
        .iallgather16 = g_iallgather16 };
}
