/* Failure detector and control-message plumbing of the elastic layer.
 *
 * Every task sends a heartbeat (its progress counter and whether it is
 * computing, waiting in a collective, recovering or a spare) each
 * WHALE_HEARTBEAT seconds to MP_WATCH members on other nodes
 * (mp_ring_targets: the same local index on the next nodes of a ring), so
 * heartbeat traffic per task is constant in the size of the step, from
 * whichever thread progresses the
 * worker (the progress thread sleeps in poll() on the UCX event fd with the
 * next heartbeat as its timeout, so an idle task costs ~0 CPU). A member
 * that heartbeats this task and falls silent for longer than both
 * WHALE_PEER_TIMEOUT and the adaptive bound of its own observed heartbeat
 * gaps (mp_arrival: a starved node's late, irregular heartbeats widen it)
 * is failed (LINK, or HANG when it is a
 * same-node process in state T), one whose counter stood still while
 * computing for WHALE_HANG_TIMEOUT is failed (HANG). Crashes arrive faster
 * through UCX peer errors and the pid watchdog (ucx.c). Any failure is
 * broadcast (NOTICE) so that every task fails all its groups at once —
 * except the death of an idle spare (el_idle_spare): the working ranks
 * need nothing from it, so they go on undisturbed; the next agreement
 * drops it from the pool. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "member/el_internal.h"
#include "whale/conf.h"
#include "whale/env.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/report.h"
#include "whale/topo.h"

size_t el_msg_size(int type, int n)
{
    size_t h = sizeof(struct el_hdr), vec = (size_t)n * (2 + sizeof(float));
    size_t st = EL_STATE_HEAD + (size_t)n * (sizeof(int32_t) + 1);
    switch (type) {
    case EL_HB:
    case EL_DONE: return h;
    case EL_NOTICE: return h + vec;
    case EL_PROPOSE: return h + vec + st;
    case EL_DECIDE: return h + st + sizeof(struct whale_membership_event);
    case EL_MP: return h + el_mp_wire_size(); /* the least: its items follow */
    }
    return 0;
}

double el_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char el_proc_state(int64_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' ? rp[2] : 0;
}

static int env_num(const char *name, double lo, double hi, double dflt, double *out, bool *set)
{
    const char *s = whale_knob_getenv(name);
    *out = dflt;
    if (set)
        *set = false;
    if (!s || !*s)
        return 0;
    if (whale_parse_double(s, lo, hi, out)) { /* util's checked parser (whale/envnum.h) */
        whale_error("%s='%s' is not a number of seconds in [%g, %g]", name, s, lo, hi);
        return WHALE_EINVAL;
    }
    if (set)
        *set = true;
    return 0;
}

/* The site topology for the spare choice: best effort (a step without
 * WHALE_CONF, or with a config this process cannot read, treats every other
 * node as equally far). */
static void load_topo(struct comm_elastic *el)
{
    const char *path = getenv(WHALE_ENV_CONF);
    if (!path || !*path)
        return;
    struct whale_conf *c = NULL;
    if (whale_conf_load(path, &c) == 0 && c) {
        if (whale_conf_build_topo(c, getenv("SLURM_CONF"), &el->topo) != 0)
            el->topo = NULL;
        whale_conf_free(c);
    }
    if (!el->topo)
        whale_debug("elastic: no topology from %s: spares are chosen by task id", path);
}

int el_init(whale_ctx *ctx)
{
    int n = ctx->boot.ntasks, rc;
    struct comm_elastic *el = calloc(1, sizeof *el);
    if (!el)
        return WHALE_ENOMEM;
    ctx->el = el;
    pthread_cond_init(&el->cond, NULL);
    double hb, hang, on, grace;
    bool hb_set;
    if ((rc = env_num("WHALE_HEARTBEAT", 0.01, 60, 0.5, &hb, &hb_set)) ||
        (rc = env_num("WHALE_HANG_TIMEOUT", 1, 86400, 0, &hang, NULL)) ||
        (rc = env_num("WHALE_ELASTIC", 0, 1, 0, &on, NULL)) ||
        (rc = env_num("WHALE_NODE_GRACE", 0, 86400, 0, &grace, NULL)))
        return rc;
    el->grace = grace;
    bool spares = ctx->boot.ntasks > ctx->boot.world;
    el->hb_interval = hb;
    el->hang_timeout = hang;
    el->agree_timeout = hang > 0 ? hang : 30.0;
    el->armed = n > 1 && hb > 0 && (spares || on > 0 || hb_set);
    el->last_heard = calloc((size_t)n, sizeof(double));
    el->counter = calloc((size_t)n, sizeof(uint64_t));
    el->counter_at = calloc((size_t)n, sizeof(double));
    el->peer_flags = calloc((size_t)n, 1);
    el->hb_seen = calloc((size_t)n, sizeof(bool));
    el->arr = calloc((size_t)n, sizeof *el->arr);
    el->inflight = calloc((size_t)n, sizeof(int));
    el->how = calloc((size_t)n, 1);
    el->hard = calloc((size_t)n, sizeof(bool));
    el->gone_at = calloc((size_t)n, sizeof(double));
    el->revived_at = calloc((size_t)n, sizeof(double));
    el->done_from = calloc((size_t)n, 1);
    el->lat = calloc((size_t)n, sizeof(float));
    el->prop = calloc((size_t)n, sizeof *el->prop);
    /* the largest control message: a proposal or a decision */
    el->rx_cap = 4096 + (size_t)n * 16 + sizeof(struct whale_membership_event);
    el->rx_buf = malloc(el->rx_cap);
    el->st.rank_of_task = malloc(sizeof(int) * (size_t)n);
    el->st.member = malloc((size_t)n);
    bool by_node = ctx->boot.node_of_task && ctx->boot.nnodes > 0;
    if (mp_ring_init(&el->ring, n, by_node ? ctx->boot.node_of_task : NULL,
                     by_node ? ctx->boot.nnodes : 1))
        return WHALE_ENOMEM;
    if (!el->last_heard || !el->counter || !el->counter_at || !el->peer_flags || !el->hb_seen || !el->arr ||
        !el->inflight || !el->how || !el->hard || !el->gone_at || !el->revived_at || !el->done_from || !el->lat || !el->prop || !el->st.rank_of_task ||
        !el->st.member || !el->rx_buf)
        return WHALE_ENOMEM;
    el->st.ntasks = n;
    el->st.grid = ctx->boot.grid;
    el->st.world = ctx->boot.world;
    double now = el_now();
    for (int t = 0; t < n; t++) {
        el->st.rank_of_task[t] = ctx->boot.rank_of_task[t];
        el->st.member[t] = 1;
        el->last_heard[t] = now;
        el->counter_at[t] = now;
        mp_arrival_init(&el->arr[t], now, hb);
    }
    el->next_hb = now;
    el->last_pass = el->last_poll = now;
    if (el->armed)
        load_topo(el);
    if ((rc = el_mp_init(ctx)))
        return rc;
    whale_debug("elastic: heartbeat %s (every %.2f s, silent after %.1f s), hang timeout %s, "
                "node grace %.1f s", el->armed ? "on" : "off", hb, ctx->peer_timeout,
                hang > 0 ? "set" : "off", grace);
    return 0;
}

void el_cancel_rx(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    if (!el || !el->rx_posted || !ctx->worker)
        return;
    if (!el->rx_done && el->rx_req) {
        ucp_request_cancel(ctx->worker, el->rx_req);
        for (int i = 0; i < 10000 && !el->rx_done; i++)
            ucp_worker_progress(ctx->worker);
    }
    if (el->rx_done) {
        if (el->rx_req)
            ucp_request_free(el->rx_req);
        el->rx_req = NULL;
        el->rx_posted = false;
    }
}

void el_fini(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    if (!el)
        return;
    el_cancel_rx(ctx);
    el_mp_fini(ctx);
    /* A receive UCX still owns stays with the worker (left to process exit
     * after a failure): its buffer must too. */
    if (!el->rx_posted)
        free(el->rx_buf);
    free(el->last_heard);
    free(el->counter);
    free(el->counter_at);
    free(el->peer_flags);
    free(el->hb_seen);
    free(el->arr);
    mp_ring_free(&el->ring);
    free(el->inflight);
    free(el->how);
    free(el->hard);
    free(el->gone_at);
    free(el->revived_at);
    free(el->done_from);
    free(el->lat);
    free(el->prop);
    free(el->decide_msg);
    el_state_free(&el->st);
    if (el->topo)
        whale_topo_free(el->topo);
    pthread_cond_destroy(&el->cond);
    free(el);
    ctx->el = NULL;
}

/* ---- sending ---------------------------------------------------------- */

static int el_send_raw(whale_ctx *ctx, int task, const void *msg, size_t len, bool force);

struct el_tx {
    whale_ctx *ctx;
    int task;
};

static void tx_cb(void *req, ucs_status_t st, void *user)
{
    (void)st;
    struct el_tx *tx = user;
    if (tx->ctx->el)
        tx->ctx->el->inflight[tx->task]--;
    free(tx);
    ucp_request_free(req);
}

int el_send(whale_ctx *ctx, int task, const void *msg, size_t len)
{
    return el_send_raw(ctx, task, msg, len, false);
}

static int el_send_raw(whale_ctx *ctx, int task, const void *msg, size_t len, bool force)
{
    if (!ctx->eps || (ctx->dead[task] && !force) || task == ctx->boot.task)
        return WHALE_EPEER;
    /* the message and its bookkeeping in one block, freed on completion */
    struct el_tx *tx = malloc(sizeof *tx + len);
    if (!tx)
        return WHALE_ENOMEM;
    tx->ctx = ctx;
    tx->task = task;
    memcpy(tx + 1, msg, len);
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = tx_cb,
        .user_data = tx,
    };
    void *r = ucp_tag_send_nbx(ctx->eps[task], tx + 1, len,
                               comm_tag_p2p(EL_GID, ctx->boot.task, 0), &p);
    if (r == NULL) {
        free(tx);
        return 0;
    }
    if (UCS_PTR_IS_ERR(r)) {
        free(tx);
        return WHALE_EPEER;
    }
    ctx->el->inflight[task]++;
    return 0;
}

static void hdr_init(whale_ctx *ctx, struct el_hdr *h, int type)
{
    struct comm_elastic *el = ctx->el;
    memset(h, 0, sizeof *h);
    h->magic = EL_MAGIC;
    h->type = (uint8_t)type;
    h->task = ctx->boot.task;
    h->ntasks = (uint32_t)ctx->boot.ntasks;
    h->epoch = el->st.epoch;
    h->counter = atomic_load(&el->progress);
    h->flags = (uint8_t)((atomic_load(&ctx->nwaiters) > 0 ? EL_F_WAITING : 0) |
                         (el->recovering ? EL_F_RECOVERING : 0) |
                         (ctx->boot.spare || el->waiting_spare ? EL_F_SPARE : 0));
}

static bool reachable(whale_ctx *ctx, int t)
{
    return t != ctx->boot.task && !ctx->dead[t] && ctx->el->st.member[t];
}

static bool ring_ok(int t, void *user)
{
    return reachable(user, t);
}

static void send_heartbeats(whale_ctx *ctx)
{
    struct el_hdr h;
    hdr_init(ctx, &h, EL_HB);
    int to[MP_WATCH];
    int k = mp_ring_targets(&ctx->el->ring, ctx->boot.task, ring_ok, ctx, to);
    for (int i = 0; i < k; i++) {
        whale_trace("elastic: heartbeat to task %d (%d in flight) at %.3f", to[i], ctx->el->inflight[to[i]],
                    el_now());
        if (ctx->el->inflight[to[i]] < 4)
            el_send(ctx, to[i], &h, sizeof h);
    }
    /* Within the grace period a member failed for silence may come back:
     * it must hear from us to know we are still here (O(failed) sends). */
    struct comm_elastic *el = ctx->el;
    double now = el_now();
    for (int t = 0; el->grace > 0 && t < ctx->boot.ntasks; t++)
        if (t != ctx->boot.task &&
            el_grace_may_revive(el->st.member[t], ctx->dead[t], el->hard[t], el->gone_at[t],
                                el->grace, now) && el->inflight[t] < 4) {
            struct el_hdr p = h;
            p.flags |= EL_F_PROBE;
            el_send_raw(ctx, t, &p, sizeof p, true);
        }
    /* While a recovery is due, the coordinator (the lowest member not
     * known dead) hears from everyone: it can tell a task that is busy
     * and will propose later from one that is cut off. */
    if (ctx->el->suspected) {
        int c = 0;
        while (c < ctx->boot.ntasks && !(ctx->el->st.member[c] && !ctx->dead[c]))
            c++;
        bool dup = false;
        for (int i = 0; i < k; i++)
            dup |= to[i] == c;
        if (c < ctx->boot.ntasks && c != ctx->boot.task && !dup && ctx->el->inflight[c] < 4) {
            h.flags |= EL_F_COORD;
            el_send(ctx, c, &h, sizeof h);
        }
    }
}

static void send_notice_to(whale_ctx *ctx, int to, bool force);

static void send_notice(whale_ctx *ctx)
{
    send_notice_to(ctx, -1, false);
}

/* to < 0: every reachable member. force: also to a task considered dead
 * (to tell it that it was left out). */
static void send_notice_to(whale_ctx *ctx, int to, bool force)
{
    int n = ctx->boot.ntasks;
    size_t len = sizeof(struct el_hdr) + (size_t)n * (2 + sizeof(float));
    uint8_t *m = malloc(len);
    if (!m)
        return;
    struct el_hdr *h = (struct el_hdr *)m;
    hdr_init(ctx, h, EL_NOTICE);
    uint8_t *dead = m + sizeof *h, *how = dead + n;
    float *lat = (float *)(how + n);
    for (int t = 0; t < n; t++) {
        dead[t] = ctx->dead[t];
        how[t] = ctx->el->how[t];
        memcpy(&lat[t], &ctx->el->lat[t], sizeof(float));
    }
    for (int t = 0; t < n; t++)
        if ((to < 0 && reachable(ctx, t)) || t == to)
            el_send_raw(ctx, t, m, len, force);
    free(m);
}

void el_broadcast_done(whale_ctx *ctx)
{
    struct el_hdr h;
    hdr_init(ctx, &h, EL_DONE);
    for (int t = 0; t < ctx->boot.ntasks; t++)
        if (reachable(ctx, t) && ctx->el->st.rank_of_task[t] < 0)
            el_send(ctx, t, &h, sizeof h);
}

/* ---- failures --------------------------------------------------------- */

void el_fail_all_groups(whale_ctx *ctx, int task)
{
    /* blame a member known dead rather than nobody */
    for (int t = 0; task < 0 && ctx->el && t < ctx->boot.ntasks; t++)
        if (ctx->dead[t] && ctx->el->st.member[t])
            task = t;
    int label = task < 0 ? -1 : ctx->boot.rank_of_task[task] >= 0 ? ctx->boot.rank_of_task[task]
                                                                  : -2 - task;
    for (int i = 0; i < ctx->ngroups; i++) {
        whale_group *g = ctx->groups[i];
        if (!g->failed) {
            g->failed = true;
            g->failed_rank = label;
            g->failed_task = task;
        }
    }
}

bool el_idle_spare(const whale_ctx *ctx, int task)
{
    const struct comm_elastic *el = ctx->el;
    return el && el->st.member[task] && el->st.rank_of_task[task] < 0 &&
           !(ctx->remote_refs && ctx->remote_refs[task] > 0);
}

/* An idle spare died: nothing of the training is lost, so no group of the
 * working ranks fails and no recovery starts (the groups that hold it,
 * e.g. the step-wide one, failed in comm_mark_dead_how). Slurm is told at
 * once (no agreement follows that would report it), so that the spare's
 * death does not make srun's exit status 137 and its node is drained. */
static void idle_spare_dead(whale_ctx *ctx, int task, int how)
{
    const char *node = ctx->boot.node_names && ctx->boot.node_of_task
                           ? ctx->boot.node_names[ctx->boot.node_of_task[task]] : "?";
    whale_info("elastic: spare task %d on %s is gone (%s); it held nothing: the working ranks "
               "go on", task, node, whale_detect_name((enum whale_detect)how));
    const char *kind = how == WHALE_DETECT_NODE ? "node" : how == WHALE_DETECT_LINK ? "link"
                     : how == WHALE_DETECT_HANG ? "hang" : "crash";
    if (!ctx->closing)
        whale_report_failure(node, kind, -1, task);
    /* a silent or stopped one may still be alive: it must stop waiting */
    if (how == WHALE_DETECT_HANG || how == WHALE_DETECT_LINK)
        send_notice_to(ctx, task, true);
}

/* Called by comm_mark_dead_how after ctx->dead[task] was set. */
void el_on_dead(whale_ctx *ctx, int task, int how, double lat)
{
    struct comm_elastic *el = ctx->el;
    if (!el)
        return;
    if (!el->how[task]) {
        el->how[task] = (uint8_t)how;
        el->lat[task] = (float)lat;
    }
    el->gone_at[task] = el_now();
    el->hard[task] = how == WHALE_DETECT_CRASH || how == WHALE_DETECT_NODE;
    /* a whole node gone: every task of it dead */
    int node = ctx->boot.node_of_task ? ctx->boot.node_of_task[task] : -1;
    bool all = node >= 0, any_other = false;
    for (int t = 0; all && t < ctx->boot.ntasks; t++)
        if (ctx->boot.node_of_task[t] == node && t != task) {
            any_other = true;
            all = ctx->dead[t];
        }
    if (all && any_other && node != ctx->boot.node_of_task[ctx->boot.task])
        for (int t = 0; t < ctx->boot.ntasks; t++)
            if (ctx->boot.node_of_task[t] == node && el->how[t] == WHALE_DETECT_CRASH)
                el->how[t] = WHALE_DETECT_NODE;
    if (el->st.member[task] && el_idle_spare(ctx, task)) {
        idle_spare_dead(ctx, task, el->how[task]);
    } else if (el->st.member[task]) {
        el->suspected = true;
        if (el->armed) {
            el->notice_dirty = true;
            el_fail_all_groups(ctx, task);
        }
        /* A task failed for silence or no progress may still be alive:
         * tell it (best effort) that it is out, so that it stops instead
         * of carrying on alone once the others have left. */
        if (how == WHALE_DETECT_HANG || how == WHALE_DETECT_LINK)
            send_notice_to(ctx, task, true);
    }
    pthread_cond_broadcast(&el->cond);
}

void el_revive(whale_ctx *ctx, int task, const char *why)
{
    struct comm_elastic *el = ctx->el;
    double now = el_now();
    const char *node = ctx->boot.node_names && ctx->boot.node_of_task
                           ? ctx->boot.node_names[ctx->boot.node_of_task[task]] : "?";
    whale_warn("elastic: task %d on %s is back %.1f s after it was declared failed (%s): %s; it "
               "keeps its place", task, node, now - el->gone_at[task],
               whale_detect_name((enum whale_detect)(el->how[task] ? el->how[task] : WHALE_DETECT_LINK)),
               why);
    ctx->dead[task] = false;
    el->how[task] = 0;
    el->lat[task] = 0;
    el->hard[task] = false;
    el->revived_at[task] = now;
    el->last_revival = now;
    el->last_heard[task] = now;
    el->counter_at[task] = now;
    el->hb_seen[task] = false;
    mp_arrival_init(&el->arr[task], now, el->hb_interval);
}

/* Within the grace, reports of a silence are not all news: one that names
 * this task comes from a member that has not heard it yet (it will, and
 * takes it back; a decision that leaves this task out arrives with a newer
 * epoch), and one that comes from, or names, a member heard again lately
 * describes that member's isolation, not a new failure. */
static bool stale_silence(whale_ctx *ctx, int from, int t, int how, uint64_t from_epoch)
{
    struct comm_elastic *el = ctx->el;
    if (!(el->grace > 0) || (how != WHALE_DETECT_LINK && how != WHALE_DETECT_HANG))
        return false;
    double now = el_now();
    if (t == ctx->boot.task)
        return from_epoch <= el->st.epoch;
    return (el->revived_at[from] > 0 && now - el->revived_at[from] < ctx->peer_timeout) ||
           (el->revived_at[t] > 0 && now - el->revived_at[t] < ctx->peer_timeout);
}

/* `from` still counts this task failed for silence, within the grace (it
 * probes it, or reports it): a recovery is under way there. This task
 * joins it (its operations stop, it proposes) and answers, so that it is
 * taken back; a stopped process learns so only once it runs again. Only
 * news of this epoch: a late probe or report of an older one is history. */
static void grace_join(whale_ctx *ctx, int from, uint64_t from_epoch)
{
    struct comm_elastic *el = ctx->el;
    if (from_epoch != el->st.epoch)
        return;
    if (!el->suspected) {
        whale_info("elastic: task %d counts this task as failed (within the grace period): "
                   "joining the recovery", from);
        el->suspected = true;
        el_fail_all_groups(ctx, -1);
        pthread_cond_broadcast(&el->cond);
    }
    if (el->inflight[from] < 4) {
        /* a sign of life, not a probe (a probe would be answered again) */
        struct el_hdr h;
        hdr_init(ctx, &h, EL_HB);
        h.flags |= EL_F_COORD;
        el_send(ctx, from, &h, sizeof h);
    }
}

/* A notice or proposal from `from`: what it knows dead. recovering: the
 * sender is in a recovery (then even an idle spare's death is news: that
 * agreement decides on it). */
static void learn(whale_ctx *ctx, int from, const uint8_t *dead, const uint8_t *how,
                  const float *lat, bool recovering, uint64_t from_epoch)
{
    struct comm_elastic *el = ctx->el;
    int n = ctx->boot.ntasks;
    bool news = false;
    for (int t = 0; t < n; t++) {
        if (!dead[t])
            continue;
        if (!ctx->dead[t] && stale_silence(ctx, from, t, how[t], from_epoch)) {
            if (t == ctx->boot.task)
                grace_join(ctx, from, from_epoch);
            continue;
        }
        if (ctx->dead[t]) {
            /* an idle spare we let go without a recovery: a recovering
             * sender now agrees on it, and this task must join in */
            news |= recovering && el->st.member[t] && el_idle_spare(ctx, t);
            /* We saw its endpoint fail (CRASH), the reporter saw it hang:
             * the hang is the cause. A task failed for no progress is told
             * to leave (el_on_dead) and its leaving closes its endpoints,
             * so whoever had not heard the verdict yet sees a crash (the
             * el_busy test reported CRASH so, once in a loaded run). */
            if (t != ctx->boot.task && el->how[t] == WHALE_DETECT_CRASH &&
                how[t] == WHALE_DETECT_HANG)
                el->how[t] = WHALE_DETECT_HANG;
            continue;
        }
        /* an idle spare's death alone abandons no work (el_on_dead) */
        news |= el->st.member[t] && (recovering || !el_idle_spare(ctx, t));
        if (t == ctx->boot.task) {
            if (!el->excluded)
                whale_error("elastic: task %d reports this task (%d) as failed: leaving the step",
                            from, t);
            el->excluded = true;
            continue;
        }
        float l;
        memcpy(&l, &lat[t], sizeof l);
        char why[64];
        snprintf(why, sizeof why, "reported failed by task %d", from);
        int h = how[t] >= WHALE_DETECT_CRASH && how[t] <= WHALE_DETECT_HANG ? how[t] : WHALE_DETECT_CRASH;
        comm_mark_dead_how(ctx, t, why, h, (double)l);
    }
    /* Only news abandons work: a late copy of an old notice must not fail
     * the groups rebuilt since. */
    if (news) {
        el->suspected = true;
        el_fail_all_groups(ctx, -1);
    }
}

static void handle(whale_ctx *ctx, const uint8_t *m, size_t len)
{
    struct comm_elastic *el = ctx->el;
    int n = ctx->boot.ntasks;
    struct el_hdr h;
    if (len < sizeof h)
        return;
    memcpy(&h, m, sizeof h);
    if (h.magic != EL_MAGIC || h.ntasks != (uint32_t)n || h.task < 0 || h.task >= n)
        return;
    int from = h.task;
    double now = el_now();
    size_t cap = len;
    len = el_msg_size(h.type, n);
    if (!len || len > cap)
        return;
    el->last_heard[from] = now;
    /* A member failed for silence that is heard again within the grace
     * takes its place back (a decision without it would arrive with a
     * newer epoch than the one it is at: such a sender stays out). */
    if (ctx->dead[from] && h.epoch <= el->st.epoch && (h.type != EL_DECIDE) &&
        el_grace_may_revive(el->st.member[from], true, el->hard[from], el->gone_at[from],
                            el->grace, now))
        el_revive(ctx, from, "heard again within the grace period");
    if (ctx->dead[from]) {
        /* failed (or excluded) tasks are no longer heard; one that still
         * proposes learns that it was left out */
        if (h.type == EL_PROPOSE)
            send_notice_to(ctx, from, true);
        return;
    }
    const uint8_t *body = m + sizeof h;
    if (h.type == EL_MP) {
        el_mp_handle(ctx, from, body, cap - sizeof h);
        return;
    }
    size_t blen = len - sizeof h;
    size_t vec = (size_t)n * (2 + sizeof(float));
    switch (h.type) {
    case EL_HB:
        /* Only ring heartbeats make silence count: the coordinator's
         * extra ones stop when the recovery ends. */
        whale_trace("elastic: heartbeat from task %d%s, %.3f s after the last, at %.3f", from,
                    h.flags & EL_F_COORD ? " (coordinator)" : "", now - el->arr[from].last, now);
        if (h.flags & EL_F_PROBE)
            grace_join(ctx, from, h.epoch);
        if (h.flags & (EL_F_COORD | EL_F_PROBE))
            break;
        if (el->hb_seen[from])
            mp_arrival_note(&el->arr[from], now);
        else
            el->arr[from].last = now; /* the first one: no gap yet */
        el->hb_seen[from] = true;
        if (h.counter != el->counter[from]) {
            el->counter[from] = h.counter;
            el->counter_at[from] = now;
        }
        if ((h.flags ^ el->peer_flags[from]) & EL_F_WAITING)
            el->counter_at[from] = now; /* a wait ended or began: not hung */
        el->peer_flags[from] = h.flags;
        break;
    case EL_NOTICE:
        if (blen >= vec)
            learn(ctx, from, body, body + n, (const float *)(body + 2 * n),
                  (h.flags & EL_F_RECOVERING) != 0, h.epoch);
        break;
    case EL_PROPOSE:
        if (blen < vec)
            return;
        learn(ctx, from, body, body + n, (const float *)(body + 2 * n), true, h.epoch);
        if (h.epoch > el->st.epoch) {
            /* the proposer holds a decision this task missed */
            struct el_state ns;
            if (el_get_state(body + vec, blen - vec, n, h.epoch, &ns) == 0) {
                el_state_free(&el->st);
                el->st = ns;
                for (int t = 0; t < n; t++)
                    if (el->prop[t].epoch < h.epoch)
                        el->prop[t].valid = false;
            }
        } else if (h.epoch < el->st.epoch && el->decide_msg && el->decide_epoch == el->st.epoch) {
            /* the proposer missed the last decision: hand it over */
            el_send(ctx, from, el->decide_msg, el->decide_len);
        }
        el->prop[from] = (struct el_proposal){ true, h.epoch, h.last_step,
                                               (h.flags & EL_F_SPARE) != 0 };
        break;
    case EL_DECIDE:
        if (h.epoch > el->decide_epoch) {
            uint8_t *c = malloc(len);
            if (c) {
                memcpy(c, m, len);
                free(el->decide_msg);
                el->decide_msg = c;
                el->decide_len = len;
                el->decide_epoch = h.epoch;
            }
        }
        break;
    case EL_DONE: {
        /* The step ended once every working rank is in whale_finalize:
         * until then puts into a waiting spare may still be on their way. */
        el->done_from[from] = 1;
        bool all = true;
        for (int t = 0; t < n && all; t++)
            if (el->st.member[t] && el->st.rank_of_task[t] >= 0 && !ctx->dead[t] && !el->done_from[t])
                all = false;
        el->done = all;
        break;
    }
    default:
        return;
    }
    if (h.type != EL_HB)
        pthread_cond_broadcast(&el->cond);
}

/* One receive for control messages stays posted (tag mask on the control
 * group id): matching it costs UCX one list entry per incoming message,
 * where probing the unexpected queue on every progress call would scan it. */
static void rx_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req;
    struct comm_elastic *el = user;
    el->rx_status = st;
    el->rx_len = st == UCS_OK ? info->length : 0;
    el->rx_done = true;
}

static int receive(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    int events = 0;
    const uint64_t tag = comm_tag_p2p(EL_GID, 0, 0), mask = 0xffff000000000000ull;
    for (int i = 0; i < 64; i++) {
        if (el->rx_posted && !el->rx_done)
            break;
        if (el->rx_posted) {
            if (el->rx_req)
                ucp_request_free(el->rx_req);
            el->rx_req = NULL;
            el->rx_posted = false;
            /* The length UCX reports for a receive that completed at once
             * is not reliable here (0 seen with UCX 1.13): messages are
             * self-describing, handle() sizes them from their header. */
            if (el->rx_status == UCS_OK)
                handle(ctx, el->rx_buf, el->rx_cap);
            else if (el->rx_status != UCS_ERR_CANCELED)
                whale_debug("elastic: control receive failed: %s", ucs_status_string(el->rx_status));
            events++;
        }
        el->rx_done = false;
        ucp_request_param_t p = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_RECV_INFO,
            .cb.recv = rx_cb,
            .user_data = el,
            .recv_info.tag_info = &el->rx_info,
        };
        void *r = ucp_tag_recv_nbx(ctx->worker, el->rx_buf, el->rx_cap, tag, mask, &p);
        el->rx_posted = true;
        if (r == NULL) {
            el->rx_done = true;
            el->rx_status = UCS_OK;
            el->rx_len = el->rx_info.length;
        } else if (UCS_PTR_IS_ERR(r)) {
            el->rx_done = true;
            el->rx_status = UCS_PTR_STATUS(r);
            el->rx_posted = false;
            break;
        } else {
            el->rx_req = r;
        }
    }
    return events;
}

static void check_silence(whale_ctx *ctx, double now)
{
    struct comm_elastic *el = ctx->el;
    for (int t = 0; t < ctx->boot.ntasks; t++) {
        if (!reachable(ctx, t))
            continue;
        double bound = mp_arrival_bound(&el->arr[t], ctx->peer_timeout);
        if (el->hb_seen[t] && now - el->last_heard[t] > bound) {
            /* Where its process is visible (same node, or nodes sharing a
             * pid namespace) a stopped process is a hang, not a link. */
            char s = comm_proc_alive(&ctx->procs[t]) == 1 ? el_proc_state(ctx->procs[t].pid) : 0;
            int how = s == 'T' || s == 't' ? WHALE_DETECT_HANG : WHALE_DETECT_LINK;
            whale_debug("elastic: task %d silent for %.3f s (bound %.3f s, %d gaps of mean %.3f s); "
                        "this task's previous heartbeat pass %.3f s ago",
                        t, now - el->last_heard[t], bound, el->arr[t].n, el->arr[t].mean, now - el->last_pass);
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %.1f s%s", now - el->last_heard[t],
                     how == WHALE_DETECT_HANG ? " (process stopped)" : "");
            comm_mark_dead_how(ctx, t, why, how, now - el->last_heard[t]);
            continue;
        }
        if (el->hang_timeout > 0 && el->counter[t] > 0 &&
            !(el->peer_flags[t] & (EL_F_WAITING | EL_F_RECOVERING | EL_F_SPARE)) &&
            now - el->counter_at[t] > el->hang_timeout) {
            char why[96];
            snprintf(why, sizeof why, "no progress for %.1f s while computing (WHALE_HANG_TIMEOUT)",
                     now - el->counter_at[t]);
            comm_mark_dead_how(ctx, t, why, WHALE_DETECT_HANG, now - el->counter_at[t]);
        }
    }
}

int el_poll(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    if (!el || !ctx->worker)
        return 0;
    if (el->armed) {
        /* Before receiving: what arrives now was heard now. */
        double stall = mp_own_stall(&el->last_poll, el_now(), el->hb_interval);
        if (stall > 0) {
            whale_debug("elastic: this task did not run for %.2f s: its peers' silence meanwhile "
                        "does not count", stall);
            for (int t = 0; t < ctx->boot.ntasks; t++) {
                el->last_heard[t] += stall;
                el->counter_at[t] += stall;
            }
        }
    }
    int events = receive(ctx);
    if (!el->armed)
        goto notice;
    el_mp_poll(ctx);
    double now = el_now();
    if (now >= el->next_hb) {
        el->next_hb = now + el->hb_interval;
        send_heartbeats(ctx);
        check_silence(ctx, now);
        el->last_pass = now;
        if (!ctx->nactive)
            comm_watchdog(ctx); /* same-node peers, also while idle */
    }
notice:
    if (el->notice_dirty) {
        el->notice_dirty = false;
        send_notice(ctx);
    }
    return events;
}

double el_next_deadline(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    if (!el || !el->armed)
        return -1;
    double next = el->next_hb < el_mp_next(ctx) ? el->next_hb : el_mp_next(ctx);
    double d = next - el_now();
    return d < 0 ? 0 : d;
}
