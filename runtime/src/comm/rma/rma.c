/* One-sided transfers (whale/comm.h "RMA"): registered regions, key
 * exchange over a group, put/get requests and flush.
 *
 * A put/get is a request like any other (whale_wait / whale_test): it is
 * posted at once under ctx->lock, UCX's completion callback drops UCX's
 * reference, and comm_rma_progress (called from the progress engine)
 * completes it, or fails it when its target has been marked dead (the pid
 * watchdog for same-node peers, UCX peer errors and keepalive for the
 * others, the elastic detector for hung peers). Transfers to and from the
 * calling process itself are plain memcpy (no UCX, also in a world of one). */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/clock.h"

struct whale_region {
    whale_ctx *ctx;
    void *buf;
    size_t len;
    ucp_mem_h memh;      /* NULL without UCX (world of one) */
    void *rkey_buf;      /* packed remote key, released with the region */
    size_t rkey_len;
};

struct whale_remote {
    whale_ctx *ctx;
    int task;            /* owner of the region */
    uint64_t addr;       /* base address in the owner's address space */
    size_t len;
    ucp_rkey_h rkey;     /* NULL for my own region */
    void *local;         /* my own region's memory, else NULL */
};

/* What every member publishes in the exchange (fixed size, then the key). */
struct rma_desc {
    uint64_t present;
    uint64_t addr;
    uint64_t len;
    uint64_t rkey_len;
};

int whale_region_register(whale_ctx *ctx, void *buf, size_t len, whale_region **out)
{
    if (out)
        *out = NULL;
    if (!ctx || !buf || !len || !out) {
        whale_error("whale_region_register: %s", !ctx ? "NULL context" : !out ? "NULL out" :
                    !buf ? "NULL buffer" : "length 0 (a region needs at least one byte)");
        return WHALE_EINVAL;
    }
    whale_region *r = calloc(1, sizeof *r);
    if (!r)
        return WHALE_ENOMEM;
    r->ctx = ctx;
    r->buf = buf;
    r->len = len;
    if (ctx->ucp) {
        ucp_mem_map_params_t mp = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            .address = buf,
            .length = len,
        };
        pthread_mutex_lock(&ctx->lock);
        ucs_status_t st = ucp_mem_map(ctx->ucp, &mp, &r->memh);
        if (st == UCS_OK) {
            st = ucp_rkey_pack(ctx->ucp, r->memh, &r->rkey_buf, &r->rkey_len);
            if (st != UCS_OK) {
                ucp_mem_unmap(ctx->ucp, r->memh);
                r->memh = NULL;
            }
        }
        pthread_mutex_unlock(&ctx->lock);
        if (st != UCS_OK) {
            whale_error("registering %zu bytes for remote access failed: %s", len,
                        ucs_status_string(st));
            free(r);
            return WHALE_EUCX;
        }
    }
    pthread_mutex_lock(&ctx->lock);
    ctx->nregions++;
    comm_rmat_region(ctx, buf, len, true);
    comm_wake(ctx); /* serve puts of peers while idle from now on */
    pthread_mutex_unlock(&ctx->lock);
    *out = r;
    return 0;
}

void whale_region_free(whale_region *r)
{
    if (!r)
        return;
    whale_ctx *ctx = r->ctx;
    pthread_mutex_lock(&ctx->lock);
    ctx->nregions--;
    comm_rmat_region(ctx, r->buf, r->len, false);
    if (r->memh) {
        ucp_rkey_buffer_release(r->rkey_buf);
        if (ctx->ucp)
            ucp_mem_unmap(ctx->ucp, r->memh);
    }
    pthread_mutex_unlock(&ctx->lock);
    free(r);
}

void whale_remote_free(whale_remote *rem)
{
    if (!rem)
        return;
    if (rem->rkey) {
        pthread_mutex_lock(&rem->ctx->lock);
        ucp_rkey_destroy(rem->rkey);
        if (rem->ctx->remote_refs && rem->task >= 0 && rem->task < rem->ctx->boot.ntasks)
            rem->ctx->remote_refs[rem->task]--;
        pthread_mutex_unlock(&rem->ctx->lock);
    }
    free(rem);
}

size_t whale_remote_size(const whale_remote *rem) { return rem ? rem->len : 0; }
int whale_remote_task(const whale_remote *rem) { return rem ? rem->task : -1; }

static void free_remotes(whale_remote **v, int n)
{
    for (int i = 0; v && i < n; i++)
        whale_remote_free(v[i]);
    free(v);
}

int whale_region_exchange(whale_group *g, whale_region *mine, whale_remote ***out)
{
    if (out)
        *out = NULL;
    if (!g || !out || g->rank < 0) {
        whale_error("whale_region_exchange: %s", !g ? "NULL group" : !out ? "NULL out"
                    : "this process is not a member of the group");
        return WHALE_EINVAL;
    }
    whale_ctx *ctx = g->ctx;
    if (mine && mine->ctx != ctx) {
        whale_error("whale_region_exchange: the region belongs to another context");
        return WHALE_EINVAL;
    }
    int n = g->size, me = g->rank;
    struct rma_desc d = { 0 };
    if (mine)
        d = (struct rma_desc){ 1, (uint64_t)(uintptr_t)mine->buf, mine->len, mine->rkey_len };
    struct rma_desc *all = calloc((size_t)n, sizeof *all);
    whale_remote **v = calloc((size_t)n, sizeof *v);
    uint8_t *keys = NULL, *mykey = NULL;
    int rc = 0;
    if (!all || !v) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    /* Round 1: who has a region, where, and how long its key is. Every
     * member takes part even on a local error so nobody is left waiting. */
    rc = whale_allgather(g, &d, all, sizeof d, WHALE_UINT8);
    if (rc)
        goto out;
    size_t kmax = 0;
    for (int i = 0; i < n; i++) {
        if (all[i].rkey_len > (1u << 20)) {
            whale_error("region exchange: member %d sent a %llu-byte key", i,
                        (unsigned long long)all[i].rkey_len);
            rc = WHALE_EDATA;
        }
        if (all[i].rkey_len > kmax)
            kmax = all[i].rkey_len;
    }
    if (rc)
        goto out;
    if (kmax) {
        /* Round 2: the packed keys, padded to the longest. */
        keys = calloc((size_t)n, kmax);
        mykey = calloc(1, kmax);
        if (!keys || !mykey) {
            /* cannot skip the collective: send zeros, then fail */
            rc = WHALE_ENOMEM;
        }
        if (mykey && mine && mine->rkey_len)
            memcpy(mykey, mine->rkey_buf, mine->rkey_len);
        int rc2 = keys && mykey ? whale_allgather(g, mykey, keys, kmax, WHALE_UINT8) : rc;
        if (rc2 || rc) {
            rc = rc ? rc : rc2;
            goto out;
        }
    }
    for (int i = 0; i < n; i++) {
        if (!all[i].present)
            continue;
        whale_remote *h = calloc(1, sizeof *h);
        if (!h) {
            rc = WHALE_ENOMEM;
            goto out;
        }
        v[i] = h;
        h->ctx = ctx;
        h->task = g->tasks[i];
        h->addr = all[i].addr;
        h->len = (size_t)all[i].len;
        if (i == me) {
            h->local = mine->buf;
            continue;
        }
        if (!all[i].rkey_len || !ctx->worker) {
            whale_error("region exchange: member %d (task %d) sent no usable key", i, h->task);
            rc = WHALE_EDATA;
            goto out;
        }
        pthread_mutex_lock(&ctx->lock);
        ucs_status_t st = ucp_ep_rkey_unpack(ctx->eps[h->task], keys + (size_t)i * kmax, &h->rkey);
        if (st == UCS_OK && ctx->remote_refs)
            ctx->remote_refs[h->task]++; /* its death loses what we put there */
        pthread_mutex_unlock(&ctx->lock);
        if (st != UCS_OK) {
            h->rkey = NULL;
            whale_error("region exchange: cannot unpack the key of task %d: %s", h->task,
                        ucs_status_string(st));
            rc = WHALE_EUCX;
            goto out;
        }
    }
    *out = v;
    v = NULL;
out:
    free_remotes(v, n);
    free(all);
    free(keys);
    free(mykey);
    return rc;
}

/* ---- transfers ----------------------------------------------------------- */

static void rma_cb(void *request, ucs_status_t st, void *user)
{
    comm_op_t *op = user;
    op->rma_inflight = false;
    if (st != UCS_OK && op->status == 0)
        op->status = WHALE_EPEER;
    if (st != UCS_OK)
        whale_debug("one-sided transfer to task %d failed: %s", op->rma_task, ucs_status_string(st));
    ucp_request_free(request);
    comm_op_unref(op); /* UCX's reference */
}

static void finish(comm_op_t *op)
{
    atomic_store_explicit(&op->done, 1, memory_order_release);
    comm_op_unref(op); /* the engine's reference */
}

int comm_rma_progress(whale_ctx *ctx)
{
    int events = 0;
    for (comm_op_t **po = &ctx->rma; *po;) {
        comm_op_t *op = *po;
        bool dead = ctx->dead[op->rma_task];
        if (op->rma_inflight && !dead) {
            po = &op->next;
            continue;
        }
        if (op->rma_inflight && op->status == 0)
            op->status = WHALE_EPEER; /* UCX keeps its reference until it lets go */
        if (op->rma_inflight)
            comm_rmat_abandon(ctx, op);
        *po = op->next;
        ctx->nactive--;
        events++;
        finish(op);
    }
    return events;
}

static int bounds(const char *what, const whale_remote *rem, size_t off, size_t len,
                  const void *buf, whale_req **req)
{
    if (req)
        *req = NULL;
    if (!rem || !req || (len && !buf)) {
        whale_error("%s: %s", what, !rem ? "NULL remote handle" : !req ? "NULL request pointer"
                                                                 : "NULL local buffer");
        return WHALE_EINVAL;
    }
    if (off > rem->len || len > rem->len - off) {
        whale_error("%s: bytes [%zu, %zu) are outside task %d's region of %zu bytes", what, off,
                    off + len, rem->task, rem->len);
        return WHALE_ERANGE;
    }
    return 0;
}

static int rma_post(whale_remote *rem, size_t off, void *local, size_t len, bool put,
                    whale_req **req)
{
    whale_ctx *ctx = rem->ctx;
    comm_op_t *op = comm_op_new(ctx, NULL, -1);
    if (!op)
        return WHALE_ENOMEM;
    op->kind = COMM_OP_RMA;
    op->rma_task = rem->task;
    if (rem->local || len == 0) {
        if (len)
            memmove(put ? (char *)rem->local + off : local,
                    put ? local : (char *)rem->local + off, len);
        op->refs = 1;
        atomic_store(&op->done, 1);
        *req = op;
        return 0;
    }
    pthread_mutex_lock(&ctx->lock);
    if (ctx->dead[rem->task]) {
        pthread_mutex_unlock(&ctx->lock);
        op->refs = 1;
        comm_op_unref(op);
        whale_error("%s %zu bytes %s task %d: the task is dead", put ? "put" : "get", len,
                    put ? "to" : "from", rem->task);
        return WHALE_EPEER;
    }
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = rma_cb,
        .user_data = op,
    };
    void *r;
    if (comm_rmat_emulated(ctx, rem->task)) {
        int erc = comm_rmat_post(ctx, op, rem->addr + off, local, len, put);
        r = erc ? UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET) : op->rma_parts ? (void *)op : NULL;
    } else {
        r = put ? ucp_put_nbx(ctx->eps[rem->task], local, len, rem->addr + off, rem->rkey, &prm)
                : ucp_get_nbx(ctx->eps[rem->task], local, len, rem->addr + off, rem->rkey, &prm);
    }
    if (UCS_PTR_IS_ERR(r)) {
        pthread_mutex_unlock(&ctx->lock);
        op->refs = 1;
        comm_op_unref(op);
        whale_error("%s %zu bytes %s task %d: %s", put ? "put" : "get", len, put ? "to" : "from",
                    rem->task, ucs_status_string(UCS_PTR_STATUS(r)));
        return WHALE_EPEER;
    }
    if (r == NULL) {
        /* completed in place */
        op->refs = 1;
        atomic_store(&op->done, 1);
    } else {
        if (r != (void *)op) {
            op->refs++;      /* UCX's request (emulated parts hold their own) */
            op->rma_inflight = true;
        }
        op->next = ctx->rma;
        ctx->rma = op;
        ctx->nactive++;
        if (atomic_load(&ctx->nwaiters) == 0 && ctx->thread_running)
            comm_wake(ctx);
    }
    pthread_mutex_unlock(&ctx->lock);
    *req = op;
    return 0;
}

int whale_iput(whale_remote *dst, size_t dst_off, const void *src, size_t len, whale_req **req)
{
    int rc = bounds("whale_iput", dst, dst_off, len, src, req);
    return rc ? rc : rma_post(dst, dst_off, (void *)src, len, true, req);
}

int whale_iget(whale_remote *src, size_t src_off, void *dst, size_t len, whale_req **req)
{
    int rc = bounds("whale_iget", src, src_off, len, dst, req);
    return rc ? rc : rma_post(src, src_off, dst, len, false, req);
}

/* A flush request cannot be cancelled: when the caller gives up on it the
 * cell stays with UCX and the callback frees both. */
struct flush_cell {
    ucs_status_t st;
    bool abandoned;
};

static void flush_cb(void *request, ucs_status_t st, void *user)
{
    struct flush_cell *c = user;
    if (c->abandoned) {
        ucp_request_free(request);
        free(c);
        return;
    }
    c->st = st;
}

int whale_remote_flush(whale_remote *rem)
{
    if (!rem) {
        whale_error("whale_remote_flush: NULL remote handle");
        return WHALE_EINVAL;
    }
    if (rem->local)
        return 0;
    whale_ctx *ctx = rem->ctx;
    struct flush_cell *c = calloc(1, sizeof *c);
    if (!c)
        return WHALE_ENOMEM;
    c->st = UCS_INPROGRESS;
    ucs_status_t st = UCS_INPROGRESS;
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = flush_cb,
        .user_data = c,
    };
    /* Count as a waiter: this thread drives progress itself. */
    atomic_fetch_add(&ctx->nwaiters, 1);
    pthread_mutex_lock(&ctx->lock);
    int rc = 0;
    bool emul = comm_rmat_emulated(ctx, rem->task);
    void *r = ctx->dead[rem->task] ? UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET)
            : emul                 ? NULL
                                   : ucp_ep_flush_nbx(ctx->eps[rem->task], &prm);
    if (emul && !ctx->dead[rem->task]) {
        rc = comm_rmat_flush(ctx, rem->task);
        st = rc ? UCS_ERR_CONNECTION_RESET : UCS_OK;
    } else if (r == NULL) {
        st = UCS_OK;
    } else if (UCS_PTR_IS_ERR(r)) {
        st = UCS_PTR_STATUS(r);
    } else {
        /* The flush of a live but stalled target over TCP would never end:
         * bound the time without any progress by WHALE_PEER_TIMEOUT. */
        double last = whale_now_s();
        int idle = 0;
        while ((st = c->st) == UCS_INPROGRESS) {
            int ev = comm_progress(ctx);
            comm_watchdog(ctx);
            if (ctx->dead[rem->task])
                break;
            double t = whale_now_s();
            idle = ev ? 0 : idle + 1;
            if (ev)
                last = t;
            else if (t - last > ctx->peer_timeout) {
                whale_error("flush to task %d made no progress for %.1f s", rem->task,
                            ctx->peer_timeout);
                rc = WHALE_ETIMEDOUT;
                break;
            }
            /* Spin a little before yielding: on a busy machine a yield
             * hands the core away for a whole time slice, and a flush
             * usually completes within a few progress calls (measured:
             * whale-bench offload bw). */
            pthread_mutex_unlock(&ctx->lock);
            if (idle < 64) {
#if defined(__x86_64__)
                __builtin_ia32_pause();
#endif
            } else {
                sched_yield();
            }
            pthread_mutex_lock(&ctx->lock);
        }
        st = c->st;
        if (st == UCS_INPROGRESS) {
            c->abandoned = true;
            c = NULL;
        } else {
            ucp_request_free(r);
        }
    }
    free(c);
    if (!rc && (st != UCS_OK || ctx->dead[rem->task])) {
        whale_error("flush to task %d: %s", rem->task,
                    ctx->dead[rem->task] ? "the task is dead" : ucs_status_string(st));
        rc = WHALE_EPEER;
    }
    int left = atomic_fetch_sub(&ctx->nwaiters, 1);
    if (left == 1 && comm_needs_thread(ctx))
        comm_wake(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}
