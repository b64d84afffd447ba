/* Where the holder's copy goes: in-process memory (tests; a holder reading
 * what it holds) or another task's registered memory through the comm
 * module's RMA puts. Plus the transfer of DP-replicated pieces from a
 * surviving replica. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "elastic/elastic_internal.h"
#include "whale/comm.h"
#include "whale/error.h"
#include "whale/log.h"

struct mem_target {
    unsigned char *base;
    size_t len;
};

static int mem_put(void *u, size_t off, const void *src, size_t len, void **req)
{
    struct mem_target *m = u;
    if (off > m->len || len > m->len - off) {
        whale_error("redundancy: put of %zu bytes at %zu exceeds the holder's %zu bytes", len, off,
                    m->len);
        return WHALE_ERANGE;
    }
    memcpy(m->base + off, src, len);
    *req = m; /* completed at once */
    return 0;
}

static int mem_wait(void *u, void *req)
{
    (void)u;
    (void)req;
    return 0;
}

int whale_red_target_mem(void *base, size_t len, struct whale_red_target *out)
{
    struct mem_target *m = malloc(sizeof *m);
    if (!m)
        return WHALE_ENOMEM;
    m->base = base;
    m->len = len;
    *out = (struct whale_red_target){ .put = mem_put, .wait = mem_wait, .release = free, .u = m };
    return 0;
}

/* RMA into the holder's registered region (whale_region_exchange gave us
 * `dst`); the owner's slots start at `base`. */
struct rma_target {
    whale_remote *dst;
    size_t base;
};

static int rma_put(void *u, size_t off, const void *src, size_t len, void **req)
{
    struct rma_target *t = u;
    return whale_iput(t->dst, t->base + off, src, len, (whale_req **)req);
}

static int rma_wait(void *u, void *req)
{
    struct rma_target *t = u;
    int rc = whale_wait(req);
    return rc ? rc : whale_remote_flush(t->dst);
}

int whale_red_target_rma(whale_remote *dst, size_t base, struct whale_red_target *out)
{
    struct rma_target *t = malloc(sizeof *t);
    if (!t)
        return WHALE_ENOMEM;
    t->dst = dst;
    t->base = base;
    *out = (struct whale_red_target){ .put = rma_put, .wait = rma_wait, .release = free, .u = t };
    return 0;
}

/* ---- replicated pieces from a surviving DP replica ------------------------ */
struct sync_walk {
    whale_group *g;
    int root, dp, zero;
    int rc;
};

static int sync_fn(const struct whale_tensor_piece *p, void *user)
{
    struct sync_walk *w = user;
    if (!whale_red_piece_replicated(p, w->dp, w->zero))
        return 0;
    size_t n = red_piece_bytes(p);
    /* as bytes: the pieces may be any dtype */
    int rc = whale_broadcast(w->g, p->data, n, WHALE_UINT8, w->root);
    if (rc)
        whale_error("redundancy: broadcast of %s (%s) from DP rank %d failed: %s", p->name,
                    whale_tensor_kind_name(p->kind), w->root, whale_strerror(rc));
    return rc;
}

int whale_red_sync_replicated(whale_engine *e, whale_group *dp, int root, int zero)
{
    struct sync_walk w = { .g = dp, .root = root, .dp = whale_group_size(dp), .zero = zero };
    if (w.dp <= 1)
        return 0;
    return whale_engine_tensors(e, sync_fn, &w);
}
