/* The local offload tier's transport: copies between a process's device
 * memory (the engine's arena) and its registered host memory (the host
 * tier) through UCX RMA, as the design card asks ("UCX underneath": one
 * transport for device<->host and host<->remote host).
 *
 * Why its own UCX context, worker and endpoint (not whale_ctx's): the
 * endpoint a task makes to itself in whale_ctx uses PEER error handling
 * (it must notice dead peers), and UCX 1.13 then cannot use its `self`
 * or shared-memory transports and falls back to tcp. A private endpoint to
 * a private worker with UCP_ERR_HANDLING_MODE_NONE lets UCX pick `self`
 * for host memory (and cuda_copy for device memory in a UCX built with
 * CUDA). It also keeps the mover thread off ctx->lock, so moves never wait
 * for a collective's progress, and it works in a world of one (no ctx).
 *
 * Each copy names the memory type of its unregistered side (the arena:
 * host on the CPU backend, cuda on a GPU); the registered side is host
 * memory registered with whale_ltier_register. dst registered: a put into
 * it; src registered: a get from it. Neither: WHALE_EINVAL (a caller bug).
 * Thread safety: any thread; calls are serialised inside. */
#ifndef WHALE_LTIER_H
#define WHALE_LTIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct whale_ltier whale_ltier;

enum whale_ltier_mem {
    WHALE_LTIER_HOST = 0,
    WHALE_LTIER_CUDA,   /* device memory (needs a UCX with cuda support) */
};

/* A UCX context (RMA), a worker and an endpoint to that worker. Fails with
 * WHALE_EUCX and the reason when UCX cannot give one. */
int  whale_ltier_open(whale_ltier **out);
void whale_ltier_close(whale_ltier *t);
/* Registers [buf, buf+len) of host memory as a tier buffer (at most 16). */
int  whale_ltier_register(whale_ltier *t, void *buf, size_t len);
/* Forgets a registered buffer (before it is freed). */
void whale_ltier_unregister(whale_ltier *t, void *buf);
/* Blocking copy of len bytes; one of dst and src lies in a registered
 * buffer; the other is memory of type `other`. The put is flushed: the
 * bytes are at dst when this returns. */
int  whale_ltier_copy(whale_ltier *t, void *dst, const void *src, size_t len,
                      enum whale_ltier_mem other);
/* The transports UCX chose for RMA on the endpoint, e.g. "self/memory"
 * (what whale-bench and the engine log say). */
const char *whale_ltier_transport(const whale_ltier *t);
/* Bytes moved by puts and gets since open. */
void whale_ltier_counts(const whale_ltier *t, int64_t *put_bytes, int64_t *get_bytes);

#ifdef __cplusplus
}
#endif
#endif
