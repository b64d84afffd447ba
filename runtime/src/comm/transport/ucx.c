/* UCX wire-up: one context/worker per process, an endpoint per task with
 * peer error handling (a dead peer fails its operations instead of hanging),
 * keepalive tuned from WHALE_PEER_TIMEOUT, and tagged transfers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/transport/transport.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/clock.h"

/* Tag layout (64 bits):
 *   63     p2p flag
 *   62..48 group id (15 bits)
 *   47..32 sender's group rank (16 bits)
 *   collectives: 31..20 operation number (12 bits), 19..0 builder tag
 *   point to point: 31..0 user tag */
uint64_t comm_tag_coll(uint16_t gid, int src, uint32_t seq, uint32_t xtag)
{
    return ((uint64_t)(gid & 0x7fff) << 48) | ((uint64_t)(src & 0xffff) << 32) |
           ((uint64_t)(seq & 0xfff) << 20) | (xtag & SCHED_TAG_MASK);
}

uint64_t comm_tag_p2p(uint16_t gid, int src, int tag)
{
    return (1ull << 63) | ((uint64_t)(gid & 0x7fff) << 48) | ((uint64_t)(src & 0xffff) << 32) |
           (uint32_t)tag;
}

#define CONNECT_GID 0x7fff

struct ep_arg {
    whale_ctx *ctx;
    int task;
};
static struct ep_arg *g_ep_args;

static void ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    struct ep_arg *a = arg;
    /* UCX 1.13 reports a peer whose process died (its sockets closed) as
     * an endpoint timeout too, at once; a node behind a broken link goes
     * silent instead and the heartbeat (LINK) fires first. Only an
     * unreachable address says "link". */
    int how = status == UCS_ERR_UNREACHABLE ? WHALE_DETECT_LINK : WHALE_DETECT_CRASH;
    double lat = a->ctx->el ? comm_member->silent_for(a->ctx, a->task) : 0;
    comm_mark_dead_how(a->ctx, a->task, ucs_status_string(status), how, lat);
}

const char *whale_detect_name(enum whale_detect d)
{
    switch (d) {
    case WHALE_DETECT_CRASH: return "CRASH";
    case WHALE_DETECT_NODE: return "NODE";
    case WHALE_DETECT_LINK: return "LINK";
    case WHALE_DETECT_HANG: return "HANG";
    }
    return "?";
}

void comm_mark_dead(whale_ctx *ctx, int task, const char *why)
{
    double lat = ctx->el ? comm_member->silent_for(ctx, task) : 0;
    comm_mark_dead_how(ctx, task, why, WHALE_DETECT_CRASH, lat);
}

void comm_mark_dead_how(whale_ctx *ctx, int task, const char *why, int how, double lat)
{
    if (ctx->dead[task])
        return;
    ctx->dead[task] = true;
    int rank = ctx->boot.rank_of_task[task];
    const char *node = ctx->boot.node_names && ctx->boot.node_of_task
                           ? ctx->boot.node_names[ctx->boot.node_of_task[task]] : "?";
    if (ctx->closing)
        whale_debug("task %d left during finalize: %s", task, why);
    else if (rank >= 0)
        whale_error("rank %d (task %d on %s) failed or is unreachable (%s): %s", rank, task, node,
                    whale_detect_name(how), why);
    else
        whale_error("spare task %d on %s failed or is unreachable (%s): %s", task, node,
                    whale_detect_name(how), why);
    for (int i = 0; i < ctx->ngroups; i++) {
        whale_group *g = ctx->groups[i];
        for (int k = 0; k < g->size; k++)
            if (g->tasks[k] == task && !g->failed) {
                g->failed = true;
                g->failed_rank = rank >= 0 ? rank : -2 - task;
                g->failed_task = task;
            }
    }
    if (ctx->el)
        comm_member->on_dead(ctx, task, how, lat);
}

const char *comm_blame(const whale_group *g)
{
    static __thread char buf[160];
    const whale_ctx *ctx = g->ctx;
    int t = g->failed_task;
    if (t < 0 || t >= ctx->boot.ntasks) {
        snprintf(buf, sizeof buf, "a member");
        return buf;
    }
    const char *node = ctx->boot.node_names && ctx->boot.node_of_task
                           ? ctx->boot.node_names[ctx->boot.node_of_task[t]] : "?";
    bool in = false;
    for (int k = 0; k < g->size; k++)
        in |= g->tasks[k] == t;
    if (g->failed_rank >= 0)
        snprintf(buf, sizeof buf, "%srank %d (task %d on %s)", in ? "" : "a peer elsewhere, ",
                 g->failed_rank, t, node);
    else
        snprintf(buf, sizeof buf, "%sspare task %d on %s", in ? "" : "a peer elsewhere, ", t, node);
    return buf;
}

struct comm_proc_id comm_proc_self(void)
{
    struct comm_proc_id id = { (int64_t)getpid(), 0 };
    struct comm_proc_id probe = id;
    probe.start = -1;
    /* read our own start time the same way peers will read it */
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)id.pid);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        char *rp = strrchr(buf, ')');
        long long st = 0;
        /* fields after the command: state(3) ... starttime(22) */
        if (rp && sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %lld", &st) == 1)
            id.start = st;
    }
    (void)probe;
    return id;
}

int comm_proc_alive(const struct comm_proc_id *id)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)id->pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    char *rp = strrchr(buf, ')');
    char state = 0;
    long long st = 0;
    if (!rp || sscanf(rp + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %lld",
                      &state, &st) != 2)
        return -1;
    if (st != id->start)
        return 0; /* the pid now belongs to another process */
    return state == 'Z' || state == 'X' ? 0 : 1;
}

/* Same-node peers use shared-memory transports, which cannot report a dead
 * peer to UCX: check them by pid, a few times per WHALE_PEER_TIMEOUT, while
 * operations are pending. */
void comm_watchdog(whale_ctx *ctx)
{
    if (!ctx->watch)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (now < ctx->next_watch)
        return;
    double iv = ctx->peer_timeout / 5;
    ctx->next_watch = now + (iv < 0.02 ? 0.02 : iv);
    for (int t = 0; t < ctx->boot.ntasks; t++)
        if (ctx->watch[t] && !ctx->dead[t] && comm_proc_alive(&ctx->procs[t]) == 0)
            comm_mark_dead(ctx, t, "the process exited");
}

int comm_ucx_init(whale_ctx *ctx)
{
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        whale_error("ucp_config_read: %s", ucs_status_string(st));
        return WHALE_EUCX;
    }
    /* Keepalive lets a silent dead peer be noticed: a few checks per bound. */
    if (!getenv("UCX_KEEPALIVE_INTERVAL")) {
        char v[32];
        double ms = ctx->peer_timeout * 1000.0 / 4.0;
        snprintf(v, sizeof v, "%dms", ms < 20 ? 20 : (int)ms);
        ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", v);
    }
    ucp_params_t prm = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
        .estimated_num_eps = (size_t)ctx->boot.ntasks,
        .mt_workers_shared = 0,
    };
    st = ucp_init(&prm, cfg, &ctx->ucp);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        whale_error("ucp_init: %s", ucs_status_string(st));
        return WHALE_EUCX;
    }
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,   /* used under ctx->lock only */
    };
    st = ucp_worker_create(ctx->ucp, &wp, &ctx->worker);
    if (st != UCS_OK) {
        whale_error("ucp_worker_create: %s", ucs_status_string(st));
        ucp_cleanup(ctx->ucp);
        ctx->ucp = NULL;
        return WHALE_EUCX;
    }
    return 0;
}

static void connect_cb(void *req, ucs_status_t st, void *user)
{
    (void)req;
    ucs_status_t *out = user;
    *out = st;
}

static void connect_rcb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req;
    (void)info;
    ucs_status_t *out = user;
    *out = st;
}

/* Endpoints to every task, then one small message each way so that every
 * endpoint is wired up (keepalive then watches all peers, not only those a
 * ring happens to talk to). Called with ctx->lock held, before any op. */
int comm_ucx_connect(whale_ctx *ctx, void **addrs)
{
    int n = ctx->boot.ntasks, me = ctx->boot.task;
    g_ep_args = calloc((size_t)n, sizeof *g_ep_args);
    ctx->eps = calloc((size_t)n, sizeof *ctx->eps);
    ctx->watch = calloc((size_t)n, sizeof *ctx->watch);
    if (!g_ep_args || !ctx->eps || !ctx->watch)
        return WHALE_ENOMEM;
    /* UCX 1.13 offers no shared-memory transport with peer failure
     * handling: an endpoint in PEER mode between two processes of one node
     * falls back to TCP (several times slower). Same-node peers whose
     * process we can see get a plain endpoint (sysv/posix/cma) and the pid
     * watchdog; others keep UCX peer error handling + keepalive.
     * WHALE_UCX_PEER_MODE=1 forces PEER mode everywhere. */
    const char *pm = whale_knob_getenv("WHALE_UCX_PEER_MODE");
    bool all_peer = pm && *pm == '1';
    int mynode = ctx->boot.node_of_task[me];
    for (int t = 0; t < n; t++) {
        g_ep_args[t] = (struct ep_arg){ ctx, t };
        bool local = !all_peer && t != me && ctx->boot.node_of_task[t] == mynode &&
                     comm_proc_alive(&ctx->procs[t]) == 1;
        ctx->watch[t] = local;
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = addrs[t],
            .err_mode = local ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = { .cb = ep_err_cb, .arg = &g_ep_args[t] },
        };
        ucs_status_t st = ucp_ep_create(ctx->worker, &ep, &ctx->eps[t]);
        if (st != UCS_OK) {
            whale_error("ucp_ep_create to task %d: %s", t, ucs_status_string(st));
            return WHALE_EUCX;
        }
    }
    ucs_status_t *sst = calloc((size_t)n * 2, sizeof *sst);
    void **reqs = calloc((size_t)n * 2, sizeof *reqs);
    uint32_t *rbuf = calloc((size_t)n, sizeof *rbuf);
    uint32_t hello = 0x57484c45u;
    int rc = 0;
    if (!sst || !reqs || !rbuf) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    for (int t = 0; t < n; t++) {
        if (t == me)
            continue;
        ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                   .cb.recv = connect_rcb, .user_data = &sst[2 * t] };
        sst[2 * t] = UCS_INPROGRESS;
        reqs[2 * t] = ucp_tag_recv_nbx(ctx->worker, &rbuf[t], sizeof rbuf[t],
                                       comm_tag_coll(CONNECT_GID, t, 0, 0), ~0ull, &rp);
        ucp_request_param_t sp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                   .cb.send = connect_cb, .user_data = &sst[2 * t + 1] };
        sst[2 * t + 1] = UCS_INPROGRESS;
        reqs[2 * t + 1] = ucp_tag_send_nbx(ctx->eps[t], &hello, sizeof hello,
                                           comm_tag_coll(CONNECT_GID, me, 0, 0), &sp);
        for (int k = 0; k < 2; k++) {
            void *r = reqs[2 * t + k];
            if (r == NULL)
                sst[2 * t + k] = UCS_OK;
            else if (UCS_PTR_IS_ERR(r)) {
                sst[2 * t + k] = UCS_PTR_STATUS(r);
                reqs[2 * t + k] = NULL;
            }
        }
    }
    /* Everyone passed the PMIx fence, so all peers are up: a generous bound. */
    double deadline = whale_now_s() + 30.0 + ctx->peer_timeout;
    for (;;) {
        ucp_worker_progress(ctx->worker);
        int pending = 0;
        for (int i = 0; i < 2 * n; i++)
            if (i / 2 != me && sst[i] == UCS_INPROGRESS)
                pending++;
        if (!pending)
            break;
        if (whale_now_s() > deadline) {
            whale_error("connecting to peers timed out after %.0f s", 30.0 + ctx->peer_timeout);
            rc = WHALE_ETIMEDOUT;
            break;
        }
    }
    for (int i = 0; i < 2 * n; i++) {
        if (reqs[i] && !UCS_PTR_IS_ERR(reqs[i])) {
            if (sst[i] == UCS_INPROGRESS) {
                ucp_request_cancel(ctx->worker, reqs[i]);
                while (sst[i] == UCS_INPROGRESS)
                    ucp_worker_progress(ctx->worker);
            }
            ucp_request_free(reqs[i]);
        }
        if (i / 2 != me && sst[i] != UCS_OK && !rc) {
            whale_error("connecting to task %d failed: %s", i / 2, ucs_status_string(sst[i]));
            rc = WHALE_EPEER;
        }
    }
    if (!rc)
        rc = comm_rmat_init(ctx);
out:
    free(sst);
    free(reqs);
    free(rbuf);
    return rc;
}

static void close_cb(void *req, ucs_status_t st, void *user)
{
    (void)req;
    (void)st;
    int *left = user;
    (*left)--;
}

void comm_ucx_fini(whale_ctx *ctx, bool clean)
{
    bool stuck = false;
    comm_rmat_fini(ctx);
    if (ctx->eps) {
        int left = 0;
        void **reqs = calloc((size_t)ctx->boot.ntasks, sizeof *reqs);
        for (int t = 0; t < ctx->boot.ntasks; t++) {
            if (!ctx->eps[t])
                continue;
            ucp_request_param_t p = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                                UCP_OP_ATTR_FIELD_USER_DATA,
                /* After the finalize fence nothing is in flight anywhere and
                 * peers close at the same moment: a flushing close would
                 * wait for a handshake with peers already gone. */
                .flags = !ctx->fenced && !ctx->dead[t] &&
                                 (clean || (ctx->watch && ctx->watch[t]))
                             ? 0 : UCP_EP_CLOSE_FLAG_FORCE,
                .cb.send = close_cb,
                .user_data = &left,
            };
            void *r = ucp_ep_close_nbx(ctx->eps[t], &p);
            if (r && !UCS_PTR_IS_ERR(r)) {
                left++;
                if (reqs)
                    reqs[t] = r;
            }
        }
        double deadline = whale_now_s() + ctx->peer_timeout;
        while (left > 0 && whale_now_s() < deadline)
            ucp_worker_progress(ctx->worker);
        for (int t = 0; reqs && t < ctx->boot.ntasks; t++)
            if (reqs[t] && left == 0)
                ucp_request_free(reqs[t]);
        stuck = left > 0;
        free(reqs);
        free(ctx->eps);
        ctx->eps = NULL;
    }
    bool any_dead = false;
    for (int t = 0; ctx->dead && t < ctx->boot.ntasks; t++)
        any_dead |= ctx->dead[t];
    /* After a peer failure, sends to it never complete and UCX would list
     * each as a leak at worker destruction: leave the worker to process
     * exit instead (the process is going down or rebuilding anyway). */
    /* Likewise when a close never completed: UCX asserts on destroying a
     * worker that still owns the request. */
    if (ctx->worker && !any_dead && !stuck)
        ucp_worker_destroy(ctx->worker);
    if (ctx->ucp && !any_dead && !stuck)
        ucp_cleanup(ctx->ucp);
    ctx->worker = NULL;
    ctx->ucp = NULL;
    free(g_ep_args);
    g_ep_args = NULL;
    free(ctx->watch);
    ctx->watch = NULL;
}

/* ---- transfers of an operation ------------------------------------------ */

static void track(comm_op_t *op, void *r)
{
    if (op->nucx == op->capucx) {
        int nc = op->capucx ? op->capucx * 2 : 8;
        void **np = realloc(op->ucx_reqs, (size_t)nc * sizeof *np);
        if (!np)
            return; /* only used to cancel on failure */
        op->ucx_reqs = np;
        op->capucx = nc;
    }
    op->ucx_reqs[op->nucx++] = r;
}

static void untrack(comm_op_t *op, void *r)
{
    for (int i = 0; i < op->nucx; i++)
        if (op->ucx_reqs[i] == r) {
            op->ucx_reqs[i] = op->ucx_reqs[--op->nucx];
            return;
        }
}

static void done_one(void *req, ucs_status_t st, struct comm_chain_state *cs, bool recv)
{
    comm_op_t *op = cs->op;
    cs->outstanding--;
    if (recv)
        untrack(op, req);
    if (st != UCS_OK && op->status == 0)
        op->status = st == UCS_ERR_CANCELED ? WHALE_ECANCELED : WHALE_EPEER;
    if (st != UCS_OK && st != UCS_ERR_CANCELED)
        whale_debug("transfer failed: %s", ucs_status_string(st));
    ucp_request_free(req);
    comm_op_unref(op);
}

static void send_cb(void *req, ucs_status_t st, void *user)
{
    done_one(req, st, user, false);
}

static void recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)info;
    done_one(req, st, user, true);
}

int comm_post(whale_ctx *ctx, comm_op_t *op, struct comm_chain_state *cs, whale_group *g,
              const struct sched_xfer *x, uint32_t seq)
{
    int task = g->tasks[x->peer];
    if (ctx->dead[task])
        return WHALE_EPEER;
    bool p2p = op->kind != COMM_OP_COLL;
    ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                .user_data = cs };
    void *r;
    if (x->send) {
        uint64_t tag = p2p ? comm_tag_p2p(g->gid, g->rank, (int)seq) : comm_tag_coll(g->gid, g->rank, seq, x->tag);
        prm.cb.send = send_cb;
        r = ucp_tag_send_nbx(ctx->eps[task], x->buf, x->bytes, tag, &prm);
    } else {
        uint64_t tag = p2p ? comm_tag_p2p(g->gid, x->peer, (int)seq) : comm_tag_coll(g->gid, x->peer, seq, x->tag);
        prm.cb.recv = recv_cb;
        r = ucp_tag_recv_nbx(ctx->worker, x->buf, x->bytes, tag, ~0ull, &prm);
    }
    if (r == NULL)
        return 1;
    if (UCS_PTR_IS_ERR(r)) {
        whale_error("%s %zu bytes %s group rank %d: %s", x->send ? "send" : "receive", x->bytes,
                    x->send ? "to" : "from", x->peer, ucs_status_string(UCS_PTR_STATUS(r)));
        return WHALE_EPEER;
    }
    cs->outstanding++;
    op->refs++;
    if (!x->send)
        track(op, r);
    return 0;
}

/* The host transport: tagged messages over the context's endpoints, which
 * live as long as the context (comm_ucx_init/connect/fini from init.c), so
 * it has no per-group hooks; the collectives' schedules run over it. */
const struct comm_transport comm_transport_ucx = { .name = "ucx" };
