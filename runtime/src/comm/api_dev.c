/* whale_dev_* (whale/comm.h): collectives on device buffers, run by the
 * first transport of the table that has device collectives (NCCL in a CUDA
 * build). A build without one refuses them by name of the option it needs. */
#include "comm/comm_internal.h"
#include "comm/transport/transport.h"
#include "whale/error.h"
#include "whale/log.h"

static int nodev(void)
{
    whale_error("device collectives need a build with CUDA and NCCL (meson -Dcuda=enabled)");
    return WHALE_ENOTSUP;
}

bool whale_dev_available(void)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d && d->available();
}

int whale_dev_allreduce(whale_group *g, const void *send, void *recv, size_t count,
                        enum whale_dtype t, enum whale_op op, void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->allreduce(g, send, recv, count, t, op, stream) : nodev();
}

int whale_dev_reduce_scatter(whale_group *g, const void *send, void *recv, size_t count,
                             enum whale_dtype t, enum whale_op op, void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->reduce_scatter(g, send, recv, count, t, op, stream) : nodev();
}

int whale_dev_allgather(whale_group *g, const void *send, void *recv, size_t count,
                        enum whale_dtype t, void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->allgather(g, send, recv, count, t, stream) : nodev();
}

int whale_dev_broadcast(whale_group *g, void *buf, size_t count, enum whale_dtype t, int root,
                        void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->broadcast(g, buf, count, t, root, stream) : nodev();
}

int whale_dev_reduce(whale_group *g, const void *send, void *recv, size_t count,
                     enum whale_dtype t, enum whale_op op, int root, void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->reduce(g, send, recv, count, t, op, root, stream) : nodev();
}

int whale_dev_send(whale_group *g, const void *buf, size_t count, enum whale_dtype t, int peer,
                   void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->send(g, buf, count, t, peer, stream) : nodev();
}

int whale_dev_recv(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer,
                   void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->recv(g, buf, count, t, peer, stream) : nodev();
}

int whale_dev_alltoall(whale_group *g, const void *send, void *recv, size_t count,
                       enum whale_dtype t, void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->alltoall(g, send, recv, count, t, stream) : nodev();
}

int whale_dev_alltoallv(whale_group *g, const void *send, const size_t *sendcounts,
                        const size_t *sdispls, void *recv, const size_t *recvcounts,
                        const size_t *rdispls, enum whale_dtype t, void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->alltoallv(g, send, sendcounts, sdispls, recv, recvcounts, rdispls, t, stream)
             : nodev();
}

int whale_dev_group_start(void)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->group_start() : nodev();
}

int whale_dev_group_end(void)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->group_end() : nodev();
}

/* Nothing was enqueued without a device transport: nothing to wait for. */
int whale_dev_sync(whale_group *g, void *stream)
{
    const struct comm_dev_ops *d = comm_transport_dev();
    return d ? d->sync(g, stream) : 0;
}
