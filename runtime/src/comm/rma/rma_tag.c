/* One-sided transfers emulated with tagged messages, for peers whose
 * endpoint runs in UCX's PEER error mode (other nodes; see ucx.c).
 *
 * Why: without RDMA hardware (tcp) UCX 1.13 emulates put/get with active
 * messages, and the passive side answers each one (a put's completion ack,
 * a get's reply) through ucp_request_send(), which treats any error as fatal:
 * a put cut short by its sender's death aborts the *target* with
 * "unexpected error: Endpoint timeout" in ucp_put_handler (ucp_request.inl:
 * ucp_request_try_send). A holder or a spare must outlive any peer, so these
 * transfers go over the tag API instead, whose failures complete requests
 * with an error (the collectives already rely on that):
 *
 *   put:  origin -> target  header {PUT, id, addr, len}  (eager)
 *         origin -> target  data, synchronous send      (tag PUT|origin|id)
 *         the target posts a receive straight into its region when the
 *         header arrives; the synchronous send completes once the target
 *         has matched it (rendezvous: once the bytes have landed), which is
 *         the remote completion whale_remote_flush promises.
 *   get:  origin posts a receive (tag REP|target|id), then sends the header
 *         {GET, id, addr, len}; the target sends the bytes back.
 *
 * The target keeps one receive for headers posted (like the elastic control
 * receive) and checks every request against its registered regions before
 * touching memory. WHALE_RMA_PROTO=ucx keeps UCX's own RMA (RDMA networks,
 * where puts are done by the NIC and have no passive side), =tag forces
 * this path for every remote peer; auto (default) = tag for PEER-mode
 * endpoints. Same-node peers (shared memory, no error handling) always use
 * UCX's RMA, which has no passive-side handler there either. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>

#include "comm/comm_internal.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"

#define RMAT_GID 0x7ffdull   /* above every group id (el_internal.h, ucx.c) */
#define RMAT_MAGIC 0x524d4154u /* "RMAT" */
enum { RMAT_HDR = 1, RMAT_PUT = 2, RMAT_REP = 3 };
enum { RMAT_OP_PUT = 1, RMAT_OP_GET = 2 };

/* 63: 0 | 62..48 gid | 47..32 sender task | 31..30 kind | 29..0 id */
static uint64_t rmat_tag(int kind, int src, uint32_t id)
{
    return (RMAT_GID << 48) | ((uint64_t)(src & 0xffff) << 32) | ((uint64_t)kind << 30) |
           (id & 0x3fffffffu);
}
#define RMAT_ANY_SRC (~(0xffffull << 32))

struct rmat_hdr {
    uint32_t magic, op, id;
    int32_t src;
    uint64_t addr, len;
};

/* A send whose buffer (the header) must live until UCX lets go. */
struct rmat_cell {
    comm_op_t *op;          /* NULL: a reply the target sends (no op) */
    struct rmat_hdr h;
};

/* A transfer the target serves for a peer. */
struct rmat_serve {
    int task;
    void *req;
    bool done, cancelled, recv;
    struct rmat_serve *next;
};

struct comm_rmat {
    bool *emulate;          /* [ntasks] */
    struct rmat_hdr rx;
    ucp_tag_recv_info_t rx_info;
    void *rx_req;
    bool rx_posted, rx_done;
    ucs_status_t rx_st;
    struct rmat_serve *serving;
    struct { uintptr_t base; size_t len; } *regs;
    int nregs, capregs;
    uint32_t next_id;
    bool warned;
};

bool comm_rmat_emulated(const whale_ctx *ctx, int task)
{
    return ctx->rmat && ctx->rmat->emulate[task];
}

int comm_rmat_init(whale_ctx *ctx)
{
    const char *m = whale_knob_getenv("WHALE_RMA_PROTO");
    int mode = 0; /* auto */
    if (m && *m) {
        if (!strcmp(m, "auto"))
            mode = 0;
        else if (!strcmp(m, "tag"))
            mode = 1;
        else if (!strcmp(m, "ucx"))
            mode = 2;
        else {
            whale_error("WHALE_RMA_PROTO=%s: expected auto, tag or ucx", m);
            return WHALE_EINVAL;
        }
    }
    struct comm_rmat *r = calloc(1, sizeof *r);
    if (!r || !(r->emulate = calloc((size_t)ctx->boot.ntasks, sizeof *r->emulate))) {
        free(r);
        return WHALE_ENOMEM;
    }
    for (int t = 0; t < ctx->boot.ntasks; t++)
        r->emulate[t] = t != ctx->boot.task && mode != 2 && !(ctx->watch && ctx->watch[t]);
    ctx->rmat = r;
    return 0;
}

void comm_rmat_fini(whale_ctx *ctx)
{
    struct comm_rmat *r = ctx->rmat;
    if (!r)
        return;
    /* Pending receives point into regions about to be freed: cancel them.
     * Requests UCX still holds after that are left to process exit (the
     * worker is not destroyed after a failure, see comm_ucx_fini). */
    if (ctx->worker) {
        if (r->rx_posted && !r->rx_done && r->rx_req)
            ucp_request_cancel(ctx->worker, r->rx_req);
        for (struct rmat_serve *s = r->serving; s; s = s->next)
            if (!s->done && s->recv)
                ucp_request_cancel(ctx->worker, s->req);
        for (int i = 0; i < 100 && ((r->rx_posted && !r->rx_done) || r->serving); i++) {
            ucp_worker_progress(ctx->worker);
            for (struct rmat_serve **ps = &r->serving; *ps;) {
                struct rmat_serve *s = *ps;
                if (s->done) {
                    *ps = s->next;
                    free(s);
                } else {
                    ps = &s->next;
                }
            }
        }
        if (r->rx_posted && r->rx_done && r->rx_req)
            ucp_request_free(r->rx_req);
    }
    if (r->serving || (r->rx_posted && !r->rx_done)) {
        ctx->rmat = NULL; /* UCX may still call back into it: leave it to exit */
        return;
    }
    free(r->emulate);
    free(r->regs);
    free(r);
    ctx->rmat = NULL;
}

void comm_rmat_region(whale_ctx *ctx, const void *buf, size_t len, bool add)
{
    struct comm_rmat *r = ctx->rmat;
    if (!r)
        return;
    if (!add) {
        for (int i = 0; i < r->nregs; i++)
            if (r->regs[i].base == (uintptr_t)buf && r->regs[i].len == len) {
                r->regs[i] = r->regs[--r->nregs];
                return;
            }
        return;
    }
    if (r->nregs == r->capregs) {
        int nc = r->capregs ? 2 * r->capregs : 8;
        void *np = realloc(r->regs, (size_t)nc * sizeof *r->regs);
        if (!np)
            return; /* requests into it are then refused, with a message */
        r->regs = np;
        r->capregs = nc;
    }
    r->regs[r->nregs].base = (uintptr_t)buf;
    r->regs[r->nregs].len = len;
    r->nregs++;
}

static bool in_region(const struct comm_rmat *r, uint64_t addr, uint64_t len)
{
    for (int i = 0; i < r->nregs; i++)
        if (addr >= r->regs[i].base && len <= r->regs[i].len &&
            addr - r->regs[i].base <= r->regs[i].len - len)
            return true;
    return false;
}

/* ---- the origin's side ------------------------------------------------------ */
static void part_done(comm_op_t *op, ucs_status_t st)
{
    if (st != UCS_OK && op->status == 0)
        op->status = WHALE_EPEER;
    if (st != UCS_OK && st != UCS_ERR_CANCELED)
        whale_debug("one-sided transfer to task %d failed: %s", op->rma_task,
                    ucs_status_string(st));
    if (--op->rma_parts == 0)
        op->rma_inflight = false;
    comm_op_unref(op); /* this part's reference */
}

static void cell_cb(void *req, ucs_status_t st, void *user)
{
    struct rmat_cell *c = user;
    ucp_request_free(req);
    if (c->op)
        part_done(c->op, st);
    free(c);
}

static void data_send_cb(void *req, ucs_status_t st, void *user)
{
    ucp_request_free(req);
    part_done(user, st);
}

static void data_recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)info;
    comm_op_t *op = user;
    op->rma_ucx = NULL;
    ucp_request_free(req);
    part_done(op, st);
}

/* A part posted: count it unless UCX completed it at once. */
static int track(comm_op_t *op, void *r, void (*at_once)(void *), void *arg)
{
    if (r == NULL) {
        if (at_once)
            at_once(arg);
        return 0;
    }
    if (UCS_PTR_IS_ERR(r)) {
        if (at_once)
            at_once(arg);
        if (op->status == 0)
            op->status = WHALE_EPEER;
        return WHALE_EPEER;
    }
    op->rma_parts++;
    op->refs++;
    return 1;
}

/* Posts the parts of one transfer (lock held). Returns <0 only when
 * nothing was posted; a failure after a part went out leaves op->status
 * set and the op completes when its posted parts have. */
int comm_rmat_post(whale_ctx *ctx, comm_op_t *op, uint64_t addr, void *local, size_t len, bool put)
{
    struct comm_rmat *r = ctx->rmat;
    int task = op->rma_task, me = ctx->boot.task;
    uint32_t id = r->next_id++ & 0x3fffffffu;
    struct rmat_cell *c = malloc(sizeof *c);
    if (!c)
        return WHALE_ENOMEM;
    c->op = op;
    c->h = (struct rmat_hdr){ RMAT_MAGIC, put ? RMAT_OP_PUT : RMAT_OP_GET, id, me, addr, len };
    op->rma_parts = 0;
    op->rma_ucx = NULL;
    int rc;
    if (!put) {
        /* the reply's receive first, so it never waits as unexpected */
        ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                   UCP_OP_ATTR_FIELD_USER_DATA,
                                   .cb.recv = data_recv_cb, .user_data = op };
        void *q = ucp_tag_recv_nbx(ctx->worker, local, len, rmat_tag(RMAT_REP, task, id), ~0ull, &rp);
        if ((rc = track(op, q, NULL, NULL)) < 0) {
            free(c);
            return rc;
        }
        if (rc == 1)
            op->rma_ucx = q;
    }
    ucp_request_param_t hp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = cell_cb, .user_data = c };
    void *q = ucp_tag_send_nbx(ctx->eps[task], &c->h, sizeof c->h, rmat_tag(RMAT_HDR, me, 0), &hp);
    rc = track(op, q, free, c);
    if (rc < 0)
        comm_rmat_abandon(ctx, op); /* no request: no reply */
    if (put && rc >= 0) {
        ucp_request_param_t dp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                   UCP_OP_ATTR_FIELD_USER_DATA,
                                   .cb.send = data_send_cb, .user_data = op };
        q = ucp_tag_send_sync_nbx(ctx->eps[task], local, len, rmat_tag(RMAT_PUT, me, id), &dp);
        rc = track(op, q, NULL, NULL);
    }
    op->rma_inflight = op->rma_parts > 0;
    return rc < 0 && !op->rma_parts ? rc : 0;
}

/* A dead target: its get's reply never comes, take the receive back. */
void comm_rmat_abandon(whale_ctx *ctx, comm_op_t *op)
{
    if (op->rma_ucx) {
        void *q = op->rma_ucx;
        op->rma_ucx = NULL;
        ucp_request_cancel(ctx->worker, q);
    }
}

int comm_rmat_pending(const whale_ctx *ctx, int task)
{
    int n = 0;
    for (const comm_op_t *op = ctx->rma; op; op = op->next)
        n += op->rma_task == task && op->rma_inflight;
    return n;
}

/* ---- the target's side ------------------------------------------------------ */
static void serve_send_cb(void *req, ucs_status_t st, void *user)
{
    struct rmat_serve *s = user;
    (void)st;
    ucp_request_free(req);
    s->done = true;
}

static void serve_recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)info;
    struct rmat_serve *s = user;
    if (st != UCS_OK && st != UCS_ERR_CANCELED)
        whale_debug("one-sided transfer from task %d cut short: %s", s->task, ucs_status_string(st));
    ucp_request_free(req);
    s->done = true;
}

static void serve(whale_ctx *ctx, const struct rmat_hdr *h)
{
    struct comm_rmat *r = ctx->rmat;
    int n = ctx->boot.ntasks;
    if (h->magic != RMAT_MAGIC || h->src < 0 || h->src >= n || h->src == ctx->boot.task ||
        (h->op != RMAT_OP_PUT && h->op != RMAT_OP_GET)) {
        whale_error("one-sided transfer: a malformed request (op %u from task %d): ignored",
                    h->op, h->src);
        return;
    }
    if (!in_region(r, h->addr, h->len)) {
        whale_error("one-sided transfer: task %d asked to %s %llu bytes at 0x%llx, outside every "
                    "region registered here: refused", h->src, h->op == RMAT_OP_PUT ? "write" : "read",
                    (unsigned long long)h->len, (unsigned long long)h->addr);
        return;
    }
    if (ctx->dead[h->src])
        return;
    struct rmat_serve *s = calloc(1, sizeof *s);
    if (!s) {
        whale_error("one-sided transfer from task %d: out of memory", h->src);
        return;
    }
    s->task = h->src;
    void *q;
    if (h->op == RMAT_OP_PUT) {
        s->recv = true;
        ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                  .cb.recv = serve_recv_cb, .user_data = s };
        q = ucp_tag_recv_nbx(ctx->worker, (void *)(uintptr_t)h->addr, h->len,
                             rmat_tag(RMAT_PUT, h->src, h->id), ~0ull, &p);
    } else {
        ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                  .cb.send = serve_send_cb, .user_data = s };
        q = ucp_tag_send_nbx(ctx->eps[h->src], (void *)(uintptr_t)h->addr, h->len,
                             rmat_tag(RMAT_REP, ctx->boot.task, h->id), &p);
    }
    if (q == NULL || UCS_PTR_IS_ERR(q)) {
        free(s);
        return;
    }
    s->req = q;
    s->next = r->serving;
    r->serving = s;
}

static void rx_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req;
    (void)info;
    struct comm_rmat *r = user;
    r->rx_st = st;
    r->rx_done = true;
}

int comm_rmat_progress(whale_ctx *ctx)
{
    struct comm_rmat *r = ctx->rmat;
    if (!r || !ctx->worker)
        return 0;
    int events = 0;
    for (int i = 0; i < 64; i++) {
        if (r->rx_posted && !r->rx_done)
            break;
        if (r->rx_posted) {
            if (r->rx_req)
                ucp_request_free(r->rx_req);
            r->rx_req = NULL;
            r->rx_posted = false;
            if (r->rx_st == UCS_OK)
                serve(ctx, &r->rx);
            events++;
        }
        r->rx_done = false;
        ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                                  UCP_OP_ATTR_FIELD_RECV_INFO,
                                  .cb.recv = rx_cb, .user_data = r,
                                  .recv_info.tag_info = &r->rx_info };
        void *q = ucp_tag_recv_nbx(ctx->worker, &r->rx, sizeof r->rx, rmat_tag(RMAT_HDR, 0, 0),
                                   RMAT_ANY_SRC, &p);
        r->rx_posted = true;
        if (q == NULL) {
            r->rx_done = true;
            r->rx_st = UCS_OK;
        } else if (UCS_PTR_IS_ERR(q)) {
            r->rx_posted = false;
            if (!r->warned)
                whale_error("one-sided transfers: cannot post the request receive: %s",
                            ucs_status_string(UCS_PTR_STATUS(q)));
            r->warned = true;
            break;
        } else {
            r->rx_req = q;
        }
    }
    for (struct rmat_serve **ps = &r->serving; *ps;) {
        struct rmat_serve *s = *ps;
        if (s->done) {
            *ps = s->next;
            free(s);
            events++;
            continue;
        }
        /* a receive from a dead origin that never matched: take it back
         * (a matched one is failed by UCX with the endpoint) */
        if (ctx->dead[s->task] && s->recv && !s->cancelled) {
            s->cancelled = true;
            ucp_request_cancel(ctx->worker, s->req);
        }
        ps = &s->next;
    }
    return events;
}

int comm_rmat_flush(whale_ctx *ctx, int task)
{
    /* Every emulated put completes remotely (synchronous send): the flush
     * waits for those still in flight. */
    double last = 0;
    struct timespec ts;
    while (comm_rmat_pending(ctx, task) && !ctx->dead[task]) {
        int ev = comm_progress(ctx);
        comm_watchdog(ctx);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
        if (ev || last == 0)
            last = t;
        else if (t - last > ctx->peer_timeout) {
            whale_error("flush to task %d made no progress for %.1f s", task, ctx->peer_timeout);
            return WHALE_ETIMEDOUT;
        }
        pthread_mutex_unlock(&ctx->lock);
        sched_yield();
        pthread_mutex_lock(&ctx->lock);
    }
    if (ctx->dead[task]) {
        whale_error("flush to task %d: the task is dead", task);
        return WHALE_EPEER;
    }
    return 0;
}
