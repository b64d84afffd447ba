/* The collective transports of a group, in one table (transport.c): the
 * host path (UCX tagged messages driven by the schedules of collectives/),
 * shared memory (one segment per one-node group, transport/shm_*.c) and the
 * device path (NCCL on device buffers, transport/nccl.c). comm reaches a
 * transport only through this table: when a group is made or freed, at
 * whale_finalize, when a failure breaks every group, and (for a device
 * transport) in whale_dev_*. Adding a transport is one file that defines a
 * struct comm_transport and one entry in comm_transports[]. */
#ifndef WHALE_COMM_TRANSPORT_H
#define WHALE_COMM_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm_internal.h"

/* Collectives on device buffers, with the arguments of whale_dev_*
 * (whale/comm.h). Every entry is set: a device transport runs them all. */
struct comm_dev_ops {
    bool (*available)(void);
    int (*allreduce)(whale_group *g, const void *send, void *recv, size_t count,
                     enum whale_dtype t, enum whale_op op, void *stream);
    int (*reduce_scatter)(whale_group *g, const void *send, void *recv, size_t count,
                          enum whale_dtype t, enum whale_op op, void *stream);
    int (*allgather)(whale_group *g, const void *send, void *recv, size_t count,
                     enum whale_dtype t, void *stream);
    int (*broadcast)(whale_group *g, void *buf, size_t count, enum whale_dtype t, int root,
                     void *stream);
    int (*reduce)(whale_group *g, const void *send, void *recv, size_t count, enum whale_dtype t,
                  enum whale_op op, int root, void *stream);
    int (*send)(whale_group *g, const void *buf, size_t count, enum whale_dtype t, int peer,
                void *stream);
    int (*recv)(whale_group *g, void *buf, size_t count, enum whale_dtype t, int peer,
                void *stream);
    int (*alltoall)(whale_group *g, const void *send, void *recv, size_t count,
                    enum whale_dtype t, void *stream);
    int (*alltoallv)(whale_group *g, const void *send, const size_t *sendcounts,
                     const size_t *sdispls, void *recv, const size_t *recvcounts,
                     const size_t *rdispls, enum whale_dtype t, void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*sync)(whale_group *g, void *stream);
};

/* One transport. Every hook may be NULL (nothing to do). The host (UCX)
 * transport has none: its endpoints live as long as the context (wire-up
 * and teardown in init.c, ucx.c), and every other transport relies on it. */
struct comm_transport {
    const char *name;
    /* A group was made (every member calls it) / is being freed: set up or
     * release the transport's state of the group (comm_transport_state). */
    int (*group_init)(whale_group *g);
    void (*group_fini)(whale_group *g);
    /* whale_finalize, before the closing barrier on the host path: release
     * what needs the peers alive. */
    void (*fini)(whale_ctx *ctx);
    /* A failure broke the group (membership changed): abort what could
     * hang on the dead peer, never a collective finalize. */
    void (*abort)(whale_group *g, const char *why);
    /* Collectives on device buffers, or NULL (host buffers only). */
    const struct comm_dev_ops *dev;
};

/* The table, NULL-terminated, in setup order (teardown runs it backwards);
 * at most COMM_TRANSPORT_MAX (comm_internal.h) entries. */
extern const struct comm_transport *const comm_transports[COMM_TRANSPORT_MAX + 1];
extern const struct comm_transport comm_transport_ucx, comm_transport_shm, comm_transport_nccl;

/* The slot of a group where transport t keeps its state (NULL: none yet). */
void **comm_transport_state(whale_group *g, const struct comm_transport *t);
/* Run a hook of every transport (group_fini, abort: in reverse order). */
int comm_transports_group_init(whale_group *g);
void comm_transports_group_fini(whale_group *g);
void comm_transports_fini(whale_ctx *ctx);
void comm_transports_abort(whale_ctx *ctx, const char *why);
/* The collectives of the first transport that runs device buffers, or NULL. */
const struct comm_dev_ops *comm_transport_dev(void);

#endif
