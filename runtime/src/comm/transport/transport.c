/* The table of collective transports (transport.h) and the loops that run
 * one hook of each. */
#include "comm/transport/transport.h"

const struct comm_transport *const comm_transports[COMM_TRANSPORT_MAX + 1] = {
    &comm_transport_ucx,
    &comm_transport_shm,
#ifdef WHALE_HAVE_CUDA
    &comm_transport_nccl,
#endif
    NULL,
};

void **comm_transport_state(whale_group *g, const struct comm_transport *t)
{
    for (int i = 0; comm_transports[i]; i++)
        if (comm_transports[i] == t)
            return &g->tstate[i];
    return NULL;
}

static int count(void)
{
    int n = 0;
    while (comm_transports[n])
        n++;
    return n;
}

int comm_transports_group_init(whale_group *g)
{
    for (int i = 0; comm_transports[i]; i++) {
        int rc = comm_transports[i]->group_init ? comm_transports[i]->group_init(g) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

void comm_transports_group_fini(whale_group *g)
{
    for (int i = count() - 1; i >= 0; i--)
        if (comm_transports[i]->group_fini)
            comm_transports[i]->group_fini(g);
}

void comm_transports_fini(whale_ctx *ctx)
{
    for (int i = count() - 1; i >= 0; i--)
        if (comm_transports[i]->fini)
            comm_transports[i]->fini(ctx);
}

void comm_transports_abort(whale_ctx *ctx, const char *why)
{
    for (int i = count() - 1; i >= 0; i--)
        if (comm_transports[i]->abort)
            for (int k = 0; k < ctx->ngroups; k++)
                comm_transports[i]->abort(ctx->groups[k], why);
}

const struct comm_dev_ops *comm_transport_dev(void)
{
    for (int i = 0; comm_transports[i]; i++)
        if (comm_transports[i]->dev)
            return comm_transports[i]->dev;
    return NULL;
}
