/* Agreement and rebuild (whale/elastic.h "Agreement", "Epochs").
 *
 * Runs on the caller's thread with ctx->lock held (released while it
 * yields and during the closing barrier). The coordinator is the lowest
 * member this task does not suspect; it waits for a proposal from every
 * member it does not suspect, checks the quorum, runs el_decide once and
 * sends the result to all. Every task applies a decision the same way:
 * new rank map, group objects of the new epoch (fresh group ids), then a
 * barrier over all remaining tasks. A failure anywhere before that barrier
 * completes fails it, and the loop runs another round from the newest
 * epoch (a second failure during recovery is one more decision). */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "comm/transport/transport.h"
#include "member/el_internal.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/topo.h"

#define RESEND_S 0.5

static size_t state_size(int n)
{
    return EL_STATE_HEAD + (size_t)n * (sizeof(int32_t) + 1);
}

static void put_state(uint8_t *p, const struct el_state *s)
{
    int32_t deg[EL_GRID_INTS + 1];
    memcpy(deg, &s->grid, sizeof s->grid);
    deg[EL_GRID_INTS] = s->world;
    memcpy(p, deg, sizeof deg);
    p += sizeof deg;
    for (int i = 0; i < s->ntasks; i++) {
        int32_t r = s->rank_of_task[i];
        memcpy(p + (size_t)i * sizeof r, &r, sizeof r);
    }
    memcpy(p + (size_t)s->ntasks * sizeof(int32_t), s->member, (size_t)s->ntasks);
}

int el_get_state(const uint8_t *p, size_t left, int n, uint64_t epoch, struct el_state *s)
{
    if (left < state_size(n))
        return WHALE_EDATA;
    int32_t deg[EL_GRID_INTS + 1];
    memcpy(deg, p, sizeof deg);
    struct el_state t = { .epoch = epoch, .ntasks = n, .world = deg[EL_GRID_INTS] };
    memcpy(&t.grid, deg, sizeof t.grid);
    char why[160];
    if (whale_grid_check(&t.grid, t.world, "", why, sizeof why) || t.world > n)
        return WHALE_EDATA;
    t.rank_of_task = malloc(sizeof(int) * (size_t)n);
    t.member = malloc((size_t)n);
    if (!t.rank_of_task || !t.member) {
        el_state_free(&t);
        return WHALE_ENOMEM;
    }
    p += sizeof deg;
    for (int i = 0; i < n; i++) {
        int32_t r;
        memcpy(&r, p + (size_t)i * sizeof r, sizeof r);
        t.rank_of_task[i] = r < -1 || r >= t.world ? -1 : r;
    }
    memcpy(t.member, p + (size_t)n * sizeof(int32_t), (size_t)n);
    *s = t;
    return 0;
}

static void hdr(whale_ctx *ctx, struct el_hdr *h, int type, uint64_t epoch)
{
    memset(h, 0, sizeof *h);
    h->magic = EL_MAGIC;
    h->type = (uint8_t)type;
    h->task = ctx->boot.task;
    h->ntasks = (uint32_t)ctx->boot.ntasks;
    h->epoch = epoch;
    h->flags = EL_F_RECOVERING | (ctx->boot.spare ? EL_F_SPARE : 0);
}

static void send_proposal(whale_ctx *ctx, int coord, int64_t last_step)
{
    struct comm_elastic *el = ctx->el;
    int n = ctx->boot.ntasks;
    size_t vec = (size_t)n * (2 + sizeof(float));
    size_t len = sizeof(struct el_hdr) + vec + state_size(n);
    uint8_t *m = malloc(len);
    if (!m)
        return;
    struct el_hdr h;
    hdr(ctx, &h, EL_PROPOSE, el->st.epoch);
    h.last_step = last_step;
    memcpy(m, &h, sizeof h);
    uint8_t *p = m + sizeof h;
    for (int t = 0; t < n; t++) {
        p[t] = ctx->dead[t];
        p[n + t] = el->how[t];
        memcpy(p + 2 * n + (size_t)t * sizeof(float), &el->lat[t], sizeof(float));
    }
    put_state(p + vec, &el->st);
    el_send(ctx, coord, m, len);
    free(m);
}

/* Link class between two tasks' nodes for the spare choice. */
static int link_class(int a, int b, void *user)
{
    whale_ctx *ctx = user;
    int na = ctx->boot.node_of_task[a], nb = ctx->boot.node_of_task[b];
    if (na == nb)
        return WHALE_LINK_NODE;
    const struct whale_topo *t = ctx->el->topo;
    if (!t)
        return WHALE_LINK_CORE;
    int ia = whale_topo_find_node(t, ctx->boot.node_names[na]);
    int ib = whale_topo_find_node(t, ctx->boot.node_names[nb]);
    return ia < 0 || ib < 0 ? WHALE_LINK_CORE : (int)whale_topo_link_class(t, ia, ib);
}

static int keep_decision(whale_ctx *ctx, const uint8_t *gone, bool quorum, int drc,
                         struct el_state *nsp, struct whale_membership_event *evp, int64_t step);

/* Coordinator: decide and send the decision to every member still
 * reachable; keep it as if received (the apply path is the same).
 * Returns true while it waits out the grace period instead (no decision). */
static bool decide(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    const struct el_state *b = &el->st;
    int n = ctx->boot.ntasks;
    uint8_t *gone = calloc((size_t)n, 1);
    if (!gone)
        return false;
    int nprev = 0, nhard = 0, nalive = 0, lowest = -1;
    for (int t = 0; t < n; t++) {
        if (!b->member[t])
            continue;
        nprev++;
        gone[t] = ctx->dead[t];
        if (gone[t] && el->hard[t])
            nhard++;
        else if (lowest < 0)
            lowest = t;
        if (!gone[t])
            nalive++;
    }
    int eligible = nprev - nhard;
    bool quorum = 2 * nalive > eligible || (2 * nalive == eligible && lowest >= 0 && !gone[lowest]);
    struct el_state ns = { 0 };
    struct whale_membership_event ev;
    memset(&ev, 0, sizeof ev);
    int drc = quorum ? el_decide(b, gone, el->how, link_class, ctx, &ns, &ev) : 0;
    if (drc && drc != WHALE_ENOFIT) {
        free(gone);
        return false; /* out of memory: try again on the next pass */
    }
    /* The recovery window: rather than drop a replica, stop the step or
     * stop as a minority, wait for members gone only for silence. */
    double left = el->grace > 0 && el_grace_wanted(quorum, drc, &ev)
                      ? el_grace_left(n, b->member, gone, el->hard, el->gone_at, el->grace, el_now())
                      : 0;
    if (left > 0) {
        if (el->grace_logged != b->epoch + 1) {
            el->grace_logged = b->epoch + 1;
            int k = 0;
            char who[256];
            size_t o = 0;
            who[0] = '\0';
            for (int t = 0; t < n && o < sizeof who - 16; t++)
                if (b->member[t] && gone[t] && !el->hard[t]) {
                    o += (size_t)snprintf(who + o, sizeof who - o, "%s%d", k ? "," : "", t);
                    k++;
                    if (!el->grace_how)
                        el->grace_how = el->how[t];
                    if (el->lat[t] > el->grace_lat)
                        el->grace_lat = el->lat[t];
                }
            whale_warn("elastic: %s; waiting up to %.1f s (WHALE_NODE_GRACE) for task(s) %s, "
                       "gone silent, to come back", !quorum ? "this side has no majority"
                       : drc == WHALE_ENOFIT ? "no spare is free and DP = 1"
                                             : "no spare is free: a DP replica would be dropped",
                       left, who);
        }
        el_state_free(&ns);
        free(gone);
        return true;
    }
    /* agreed step: min over surviving working ranks' proposals */
    int64_t step = INT64_MAX;
    for (int t = 0; t < n; t++)
        if (b->member[t] && !gone[t] && b->rank_of_task[t] >= 0 && el->prop[t].valid &&
            el->prop[t].last_step < step)
            step = el->prop[t].last_step;
    if (!quorum)
        whale_error("elastic: only %d of %d tasks of epoch %llu are reachable (%d known crashed): "
                    "this side is a minority and stops", nalive, nprev, (unsigned long long)b->epoch, nhard);
    if (keep_decision(ctx, gone, quorum, drc, &ns, &ev, step) == 0)
        for (int t = 0; t < n; t++)
            if (b->member[t] && !gone[t] && t != ctx->boot.task)
                el_send(ctx, t, el->decide_msg, el->decide_len);
    free(gone);
    return false;
}

/* The decision on base state el->st with gone[] (ns and ev from el_decide,
 * or nothing without quorum): flags, kind, step, detection latency, into
 * el->decide_msg as if received (the apply path is the same everywhere).
 * Frees ns. 0, or -1 out of memory. */
static int keep_decision(whale_ctx *ctx, const uint8_t *gone, bool quorum, int drc,
                         struct el_state *nsp, struct whale_membership_event *evp, int64_t step)
{
    struct comm_elastic *el = ctx->el;
    const struct el_state *b = &el->st;
    int n = ctx->boot.ntasks;
    struct el_state ns = *nsp;
    struct whale_membership_event ev = *evp;
    uint16_t dflags = 0;
    if (!quorum) {
        dflags = EL_D_MINORITY;
    } else if (drc == WHALE_ENOFIT) {
        dflags = EL_D_FATAL;
        whale_error("elastic: %d rank(s) failed, no spare task is left and DP=1: the step cannot "
                    "continue here (resume from the last checkpoint)", ev.nfailed);
    } else if (!ev.nfailed && !ev.nfailed_spares && !ev.ndropped) {
        ev.kind = WHALE_RECOVERY_RESUMED; /* everyone silent came back in time */
        ev.how = el->grace_how ? (enum whale_detect)el->grace_how : WHALE_DETECT_LINK;
    }
    if (dflags) {
        el_state_free(&ns);
        el_state_copy(&ns, b), ns.epoch = b->epoch + 1;
    }
    if (!ns.rank_of_task)
        return -1;
    /* detect: worst lag */
    ev.agreed_step = step;
    double lag = 0;
    for (int t = 0; t < n; t++)
        if (gone[t] && el->lat[t] > lag)
            lag = el->lat[t];
    if (ev.kind == WHALE_RECOVERY_RESUMED && el->grace_lat > lag)
        lag = el->grace_lat;
    ev.detect_s = lag;
    el->grace_how = 0;
    el->grace_lat = 0;
    size_t len = sizeof(struct el_hdr) + state_size(n) + sizeof ev;
    uint8_t *m = malloc(len);
    if (m) {
        struct el_hdr h;
        hdr(ctx, &h, EL_DECIDE, ns.epoch);
        h.dflags = dflags;
        memcpy(m, &h, sizeof h);
        put_state(m + sizeof h, &ns);
        memcpy(m + sizeof h + state_size(n), &ev, sizeof ev);
        free(el->decide_msg);
        el->decide_msg = m;
        el->decide_len = len;
        el->decide_epoch = ns.epoch;
    }
    el_state_free(&ns);
    return m ? 0 : -1;
}

int el_tree_decision(whale_ctx *ctx, const uint8_t *gone)
{
    struct el_state ns = { 0 };
    struct whale_membership_event ev;
    memset(&ev, 0, sizeof ev);
    int drc = el_decide(&ctx->el->st, gone, ctx->el->how, link_class, ctx, &ns, &ev);
    if (drc && drc != WHALE_ENOFIT)
        return drc;
    /* the step is agreed after the rebuild (el_recover) */
    return keep_decision(ctx, gone, true, drc, &ns, &ev, INT64_MAX) ? WHALE_ENOMEM : 0;
}

static void fill_event_names(whale_ctx *ctx, struct whale_membership_event *ev)
{
    int k = ev->nfailed < WHALE_MAX_FAILED ? ev->nfailed : WHALE_MAX_FAILED;
    for (int i = 0; i < k; i++) {
        int t = ev->failed_task[i];
        const char *node = t >= 0 && ctx->boot.node_names ? ctx->boot.node_names[ctx->boot.node_of_task[t]] : "?";
        snprintf(ev->failed_node[i], sizeof ev->failed_node[i], "%s", node);
    }
    k = ev->nfailed_spares < WHALE_MAX_FAILED ? ev->nfailed_spares : WHALE_MAX_FAILED;
    for (int i = 0; i < k; i++) {
        int t = ev->failed_spare_task[i];
        const char *node = t >= 0 && ctx->boot.node_names ? ctx->boot.node_names[ctx->boot.node_of_task[t]] : "?";
        snprintf(ev->failed_spare_node[i], sizeof ev->failed_spare_node[i], "%s", node);
    }
}

static void log_event(whale_ctx *ctx, const struct whale_membership_event *ev)
{
    char buf[1024];
    size_t o = 0;
    int k = ev->nfailed < WHALE_MAX_FAILED ? ev->nfailed : WHALE_MAX_FAILED;
    for (int i = 0; i < k && o < sizeof buf - 160; i++) {
        int rt = ev->replacement_task[i];
        const char *rn = rt >= 0 ? ctx->boot.node_names[ctx->boot.node_of_task[rt]] : "";
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%srank %d (task %d on %s) failed (%s) -> ",
                              i ? "; " : "", ev->failed_rank[i], ev->failed_task[i],
                              ev->failed_node[i], whale_detect_name(ev->failed_how[i]));
        if (rt >= 0)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "task %d on %s", rt, rn);
        else
            o += (size_t)snprintf(buf + o, sizeof buf - o, "dropped with DP replica");
    }
    int ks = ev->nfailed_spares < WHALE_MAX_FAILED ? ev->nfailed_spares : WHALE_MAX_FAILED;
    for (int i = 0; i < ks && o < sizeof buf - 160; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%sspare task %d on %s failed (%s)",
                              k || i ? "; " : "", ev->failed_spare_task[i],
                              ev->failed_spare_node[i], whale_detect_name(ev->failed_spare_how[i]));
    if (!k && !ks)
        snprintf(buf, sizeof buf, "every member gone silent came back within the grace period");
    char step[32];
    if (ev->agreed_step == INT64_MAX)
        snprintf(step, sizeof step, "none");
    else
        snprintf(step, sizeof step, "%lld", (long long)ev->agreed_step);
    /* once per step at warning level (new rank 0), else at info */
    int lvl = ctx->boot.rank == 0 ? WHALE_LOG_WARN : WHALE_LOG_INFO;
    whale_log(lvl, "elastic: epoch %llu %s: %s; detect %.2f s, agree %.2f s, rebuild %.2f s; "
              "agreed step %s; TPxPPxDP %dx%dx%d (was %dx%dx%d)",
              (unsigned long long)ev->epoch, whale_recovery_name(ev->kind), buf, ev->detect_s,
              ev->agree_s, ev->rebuild_s, step, ev->tp, ev->pp, ev->dp, ev->old_grid.tp, ev->old_grid.pp,
              ev->old_grid.dp);
}

/* Apply the decision held in el->decide_msg: 0 applied, or WHALE_EMINORITY
 * / WHALE_ENOFIT / WHALE_EDATA. */
static int apply(whale_ctx *ctx, struct whale_membership_event *ev)
{
    struct comm_elastic *el = ctx->el;
    struct boot *b = &ctx->boot;
    int n = b->ntasks, me = b->task;
    struct el_hdr h;
    if (el->decide_len < sizeof h)
        return WHALE_EDATA;
    memcpy(&h, el->decide_msg, sizeof h);
    const uint8_t *body = el->decide_msg + sizeof h;
    size_t blen = el->decide_len - sizeof h;
    if (h.dflags & EL_D_MINORITY)
        return WHALE_EMINORITY;
    if (h.dflags & EL_D_FATAL)
        return WHALE_ENOFIT;
    struct el_state ns;
    if (el_get_state(body, blen, n, h.epoch, &ns) || blen < state_size(n) + sizeof *ev) {
        whale_error("elastic: malformed decision from task %d", h.task);
        return WHALE_EDATA;
    }
    memcpy(ev, body + state_size(n), sizeof *ev);
    if (!ns.member[me]) {
        el_state_free(&ns);
        whale_error("elastic: the decision of epoch %llu excludes this task", (unsigned long long)h.epoch);
        return WHALE_EMINORITY;
    }
    int *tor = malloc(sizeof(int) * (size_t)ns.world);
    if (!tor) {
        el_state_free(&ns);
        return WHALE_ENOMEM;
    }
    for (int r = 0; r < ns.world; r++)
        tor[r] = -1;
    for (int t = 0; t < n; t++)
        if (ns.member[t] && ns.rank_of_task[t] >= 0)
            tor[ns.rank_of_task[t]] = t;
    /* whoever the decision kept but this task thinks gone for silence was
     * heard by the coordinator within the grace: it is back here too */
    for (int t = 0; t < n; t++)
        if (ns.member[t] && ctx->dead[t] && !el->hard[t] && el->st.member[t])
            el_revive(ctx, t, "kept by the decision");
    /* whoever the decision left out is gone for this task too */
    for (int t = 0; t < n; t++)
        if (!ns.member[t] && !ctx->dead[t]) {
            ctx->dead[t] = true;
            if (!el->how[t])
                el->how[t] = WHALE_DETECT_HANG;
        }
    el_state_free(&el->st);
    el->st = ns;
    free(b->task_of_rank);
    b->task_of_rank = tor;
    memcpy(b->rank_of_task, ns.rank_of_task, sizeof(int) * (size_t)n);
    b->world = ns.world;
    b->grid = ns.grid;
    b->rank = ns.rank_of_task[me];
    b->spare = b->rank < 0;
    if (b->rank >= 0) {
        struct whale_coords c;
        whale_grid_coords(&b->grid, b->rank, &c);
        b->tp_rank = c.tp;
        b->dp_rank = c.dp;
        b->pp_rank = c.pp;
    } else {
        b->tp_rank = b->dp_rank = b->pp_rank = -1;
    }
    whale_log_set_rank(b->rank);
    /* The old group objects stay (failed) for whoever still holds them. */
    int rc = comm_std_groups(ctx, (uint16_t)(EL_GID_BASE + (ns.epoch % 1000) * 16), ns.member);
    for (int t = 0; t < n; t++)
        el->prop[t].valid = false;
    el->suspected = false;
    for (int t = 0; t < n; t++)
        if (ns.member[t] && ctx->dead[t])
            el->suspected = true; /* died meanwhile: the closing barrier fails */
    fill_event_names(ctx, ev);
    return rc;
}

/* Several decisions in one recovery (a failure while rebuilding): the
 * caller gets one event from its last state to the final one. Rank numbers
 * are stable across REPLACED rounds; after a SHRUNK round later entries use
 * the numbering of the round they failed in. */
static void merge_event(const struct whale_membership_event *acc, struct whale_membership_event *ev)
{
    struct whale_membership_event m = *acc;
    m.epoch = ev->epoch;
    if (ev->kind == WHALE_RECOVERY_SHRUNK)
        m.kind = WHALE_RECOVERY_SHRUNK;
    m.grid = ev->grid;
    int k = ev->nfailed < WHALE_MAX_FAILED ? ev->nfailed : WHALE_MAX_FAILED;
    for (int i = 0; i < k; i++) {
        bool was_replacement = false;
        int ka = m.nfailed < WHALE_MAX_FAILED ? m.nfailed : WHALE_MAX_FAILED;
        for (int j = 0; j < ka; j++)
            if (m.replacement_task[j] == ev->failed_task[i] && m.replacement_task[j] >= 0) {
                m.replacement_task[j] = ev->replacement_task[i];
                was_replacement = true;
            }
        if (was_replacement)
            continue;
        if (m.nfailed < WHALE_MAX_FAILED) {
            int j = m.nfailed;
            m.failed_rank[j] = ev->failed_rank[i];
            m.failed_task[j] = ev->failed_task[i];
            m.failed_how[j] = ev->failed_how[i];
            m.replacement_task[j] = ev->replacement_task[i];
            memcpy(m.failed_node[j], ev->failed_node[i], sizeof m.failed_node[j]);
        }
        m.nfailed++;
    }
    for (int i = 0; i < ev->ndropped && i < WHALE_MAX_FAILED; i++) {
        if (m.dropped_dp < 0)
            m.dropped_dp = ev->dropped[i];
        if (m.ndropped < WHALE_MAX_FAILED)
            m.dropped[m.ndropped] = ev->dropped[i];
        m.ndropped++;
    }
    int ks = ev->nfailed_spares < WHALE_MAX_FAILED ? ev->nfailed_spares : WHALE_MAX_FAILED;
    for (int i = 0; i < ks; i++) {
        if (m.nfailed_spares < WHALE_MAX_FAILED) {
            int j = m.nfailed_spares;
            m.failed_spare_task[j] = ev->failed_spare_task[i];
            m.failed_spare_how[j] = ev->failed_spare_how[i];
            memcpy(m.failed_spare_node[j], ev->failed_spare_node[i], sizeof m.failed_spare_node[j]);
        }
        m.nfailed_spares++;
    }
    m.nfailed_spares += ev->nfailed_spares - ks;
    if (ev->agreed_step < m.agreed_step)
        m.agreed_step = ev->agreed_step;
    if (ev->detect_s > m.detect_s)
        m.detect_s = ev->detect_s;
    *ev = m;
}

static void pause_briefly(int idle)
{
    if (idle < 50) {
        sched_yield();
    } else {
        struct timespec ts = { 0, idle < 2000 ? 50000 : 1000000 };
        nanosleep(&ts, NULL);
    }
}

int el_recover(whale_ctx *ctx, int64_t last_step, bool spare_caller,
               struct whale_membership_event *ev)
{
    struct comm_elastic *el = ctx->el;
    int n = ctx->boot.ntasks, me = ctx->boot.task;
    double t0 = el_now(), coord_since = t0, resend = 0, t_decided = 0;
    int sent_to = -1, last_coord = -1, idle = 0, rc;
    uint64_t start_epoch = el->st.epoch;
    struct whale_membership_event acc;
    bool have_acc = false;
    bool any_dead = false;
    for (int t = 0; t < n; t++)
        any_dead |= el->st.member[t] && ctx->dead[t];
    if (!any_dead && !el->suspected && !el->excluded && el->decide_epoch <= el->st.epoch) {
        if (!spare_caller)
            whale_error("whale_elastic_recover: no failure is known in the step");
        return WHALE_ESTATE;
    }
    atomic_fetch_add(&ctx->nwaiters, 1);
    el->recovering = true;
    el->suspected = true;
    el->notice_dirty = true; /* everyone joins, also without heartbeats */
    el->next_hb = el_now();  /* and the coordinator hears from us at once */
    el_fail_all_groups(ctx, -1);
    comm_transports_abort(ctx, "the membership of the step changed");
    for (;;) {
        int ev_seen = comm_progress(ctx);
        if (el->excluded) {
            rc = WHALE_EMINORITY;
            break;
        }
        if (el->decide_epoch > el->st.epoch) {
            if (!t_decided)
                t_decided = el_now();
            double tr = el_now();
            rc = apply(ctx, ev);
            if (rc)
                break;
            if (have_acc)
                merge_event(&acc, ev);
            acc = *ev;
            have_acc = true;
            /* Closing barrier over everyone left, on the new groups. The
             * tree agreement carried only the removed set: the agreed step
             * (min over the working ranks) and the detection latency (max)
             * travel in this barrier, as a reduction. */
            whale_group *all = ctx->all;
            int64_t red[2] = { spare_caller ? INT64_MAX : last_step, -(int64_t)(ev->detect_s * 1e6) };
            pthread_mutex_unlock(&ctx->lock);
            int brc = el->mp ? whale_allreduce(all, red, red, 2, WHALE_INT64, WHALE_MIN)
                             : whale_barrier(all);
            pthread_mutex_lock(&ctx->lock);
            if (brc == 0 && el->mp) {
                if (red[0] < ev->agreed_step)
                    ev->agreed_step = red[0];
                if (-red[1] / 1e6 > ev->detect_s)
                    ev->detect_s = (double)-red[1] / 1e6;
            }
            if (brc == 0 && !el->excluded) {
                ev->agree_s = t_decided - t0;
                ev->rebuild_s = el_now() - tr;
                rc = 0;
                break;
            }
            whale_warn("elastic: another failure while rebuilding epoch %llu: agreeing again",
                       (unsigned long long)el->st.epoch);
            el->suspected = true;
            el->notice_dirty = true;
            sent_to = -1;
            t_decided = 0;
            continue;
        }
        double now = el_now();
        if (el->mp) {
            /* Tree agreement (el_mp.c): report what is known, wait for the
             * commit; a side that cannot get a majority stops. */
            el_mp_feed(ctx, t0);
            if (el_mp_stopped(ctx)) {
                whale_error("elastic: no majority of the tasks of epoch %llu agreed within %.1f s: "
                            "this side is a minority and stops", (unsigned long long)el->st.epoch,
                            now - t0);
                rc = WHALE_EMINORITY;
                break;
            }
            goto wait_pass;
        }
        int coord = -1;
        for (int t = 0; t < n && coord < 0; t++)
            if (el->st.member[t] && !ctx->dead[t])
                coord = t;
        if (coord != last_coord) {
            last_coord = coord;
            coord_since = now;
        }
        /* a member back from silence gets the whole time to propose */
        if (el->last_revival > coord_since)
            coord_since = el->last_revival;
        if (coord == me) {
            el->prop[me] = (struct el_proposal){ true, el->st.epoch, spare_caller ? INT64_MAX : last_step,
                                                 spare_caller };
            int missing = 0;
            for (int t = 0; t < n; t++)
                if (t != me && el->st.member[t] && !ctx->dead[t] &&
                    !(el->prop[t].valid && el->prop[t].epoch == el->st.epoch))
                    missing++;
            if (!missing) {
                if (el->grace_logged != el->st.epoch + 1)
                    whale_debug("elastic: coordinator: all proposals of epoch %llu in after %.3f s",
                                (unsigned long long)el->st.epoch, now - t0);
                if (!decide(ctx)) {
                    idle = 0;
                    continue;
                }
                /* waiting for members gone silent: an idle pass (below) */
            }
            /* A member that neither proposes nor heartbeats (every task
             * heartbeats the coordinator while a recovery is due) for
             * longer than the peer timeout is cut off. */
            if (now - coord_since > ctx->peer_timeout)
                for (int t = 0; t < n; t++)
                    if (t != me && el->st.member[t] && !ctx->dead[t] &&
                        !(el->prop[t].valid && el->prop[t].epoch == el->st.epoch) &&
                        now - el->last_heard[t] > ctx->peer_timeout) {
                        char why[96];
                        snprintf(why, sizeof why, "silent for %.1f s during the agreement",
                                 now - el->last_heard[t]);
                        comm_mark_dead_how(ctx, t, why, WHALE_DETECT_LINK, now - el->last_heard[t]);
                    }
            if (now - coord_since > el->agree_timeout) {
                for (int t = 0; t < n; t++)
                    if (t != me && el->st.member[t] && !ctx->dead[t] &&
                        !(el->prop[t].valid && el->prop[t].epoch == el->st.epoch)) {
                        char why[96];
                        snprintf(why, sizeof why, "did not join the agreement within %.0f s",
                                 el->agree_timeout);
                        comm_mark_dead_how(ctx, t, why, WHALE_DETECT_HANG, now - el->last_heard[t]);
                    }
            }
        } else if (coord >= 0 && (coord != sent_to || now >= resend)) {
            whale_debug("elastic: proposal (epoch %llu) to task %d at %.3f s",
                        (unsigned long long)el->st.epoch, coord, now - t0);
            send_proposal(ctx, coord, spare_caller ? INT64_MAX : last_step);
            sent_to = coord;
            resend = now + RESEND_S;
        }
    wait_pass:
        if (now - t0 > 2 * el->agree_timeout + 2 * ctx->peer_timeout + el->grace) {
            whale_error("elastic: no decision after %.0f s (epoch %llu): giving up", now - t0,
                        (unsigned long long)el->st.epoch);
            rc = WHALE_ETIMEDOUT;
            break;
        }
        pthread_mutex_unlock(&ctx->lock);
        idle = ev_seen ? 0 : idle + 1;
        pause_briefly(idle);
        pthread_mutex_lock(&ctx->lock);
    }
    el->recovering = false;
    if (rc == 0) {
        if (el->st.epoch != start_epoch + 1)
            whale_debug("elastic: epoch %llu -> %llu in one recovery", (unsigned long long)start_epoch,
                        (unsigned long long)el->st.epoch);
        log_event(ctx, ev);
    }
    /* The progress thread parked while this thread drove progress: it
     * must serve again (heartbeats, RMA into our regions). */
    if (atomic_fetch_sub(&ctx->nwaiters, 1) == 1 && comm_needs_thread(ctx))
        comm_wake(ctx);
    return rc;
}
