/* The tree agreement (member/mp_node.c, the state machine the simulator in
 * tests/sim/ checks) bound to the runtime: WHALE_MEMBERSHIP=tree.
 *
 * Every task runs one protocol agent (an mp "node" of one task). Its
 * messages travel as EL_MP control messages on the membership endpoint,
 * its clock is el_now(). The runtime's detector (el_detect.c: ring
 * heartbeats, pid watchdog, notices, the grace window) decides who failed;
 * the agent only agrees: tasks known crashed go in as task items
 * (mp_local_dead: no majority waits for them), tasks failed for silence as
 * node items (mp_suspect) once the grace window no longer holds them. The
 * agreed value is the removed set of the next epoch; every survivor runs
 * the pure el_decide on it and so computes the same next state, without
 * a per-member vector on the wire. The agent's own ring detector is off
 * (its floor is never reached): its pings only carry the epoch, so that a
 * task that missed a commit catches up. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm/comm_internal.h"
#include "member/el_internal.h"
#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"

struct el_mp {
    struct mp_node node;
    uint8_t *fed;          /* [ntasks] reported to the agreement in fed_epoch */
    uint64_t fed_epoch;
    bool noop_fed;
    bool hold;             /* the grace window holds members gone silent */
    double hold_at;        /* when hold was last worked out */
    uint64_t proto_sent, proto_bytes; /* agreement traffic before this decision */
};

/* Wire form of an mp_msg after the el_hdr; items (int32) follow, or for
 * MP_STATE the alive bitmap and the gone tasks. */
struct el_mp_wire {
    uint8_t type, lag;
    uint16_t pad;
    int32_t about;
    uint64_t epoch, seq, ab, nack, hash;
    uint32_t count, nitems, nacc, ngone;
};

size_t el_mp_wire_size(void)
{
    return sizeof(struct el_mp_wire);
}

static void mp_send(void *user, int to, const struct mp_msg *m)
{
    whale_ctx *ctx = user;
    struct comm_elastic *el = ctx->el;
    int n = ctx->boot.ntasks;
    size_t nb = (size_t)(n + 7) / 8;
    bool state = m->type == MP_STATE && m->state;
    size_t body = state ? nb + sizeof(int32_t) * (size_t)m->state->ngone
                        : sizeof(int32_t) * (size_t)m->nitems;
    size_t len = sizeof(struct el_hdr) + sizeof(struct el_mp_wire) + body;
    if (len > el->rx_cap) {
        whale_debug("elastic: agreement message of %zu bytes to task %d dropped (receive buffer "
                    "%zu bytes)", len, to, el->rx_cap);
        return;
    }
    uint8_t *p = malloc(len);
    if (!p)
        return;
    struct el_hdr h = { .magic = EL_MAGIC, .type = EL_MP, .task = ctx->boot.task,
                        .ntasks = (uint32_t)n, .epoch = el->st.epoch };
    struct el_mp_wire w = { .type = m->type, .lag = m->lag, .about = m->about, .epoch = m->epoch,
                            .seq = m->seq, .ab = m->ab, .nack = m->nack, .count = m->count,
                            .nitems = state ? 0 : m->nitems, .nacc = m->nacc };
    uint8_t *q = p + sizeof h + sizeof w;
    if (state) {
        w.hash = m->state->hash;
        w.ngone = m->state->ngone;
        memcpy(q, m->state->alive, nb);
        if (w.ngone)
            memcpy(q + nb, m->state->gone_tasks, sizeof(int32_t) * w.ngone);
    } else if (m->nitems) {
        memcpy(q, m->items, sizeof(int32_t) * m->nitems);
    }
    memcpy(p, &h, sizeof h);
    memcpy(p + sizeof h, &w, sizeof w);
    el_send(ctx, to, p, len);
    free(p);
}

int el_mp_init(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    const char *v = getenv(WHALE_ENV_MEMBERSHIP);
    if (!v || !*v || !strcasecmp(v, "coordinator"))
        return 0;
    if (strcasecmp(v, "tree")) {
        whale_error("WHALE_MEMBERSHIP=%s: want tree (the tree agreement) or coordinator "
                    "(the default)", v);
        return WHALE_EINVAL;
    }
    if (!el->armed)
        return 0;
    int n = ctx->boot.ntasks;
    struct el_mp *mp = calloc(1, sizeof *mp);
    if (!mp || !(mp->fed = calloc((size_t)n, 1))) {
        free(mp);
        return WHALE_ENOMEM;
    }
    /* The runtime's detector decides who failed: the agent's never
     * suspects (floor). A member silent within a ballot is routed around
     * and removed only after the peer timeout plus the grace window, the
     * time the detector would give it. The stop bound covers a ballot
     * whose both phases wait that long. */
    struct mp_timing tm;
    mp_timing_default(&tm);
    tm.period = 1.0;
    tm.floor = 1e9;
    tm.confirm = 1.0;
    tm.hop = (ctx->peer_timeout + el->grace) / 2;
    tm.resend = 0.2;
    tm.stop = 2 * (ctx->peer_timeout + el->grace) + 2;
    struct mp_io io = { .send = mp_send, .user = ctx };
    if (mp_node_init(&mp->node, ctx->boot.task, n, 1, &tm, &io, 1, el_now())) {
        free(mp->fed);
        free(mp);
        return WHALE_ENOMEM;
    }
    el->mp = mp;
    whale_debug("elastic: tree agreement (WHALE_MEMBERSHIP=tree), stop after %.1f s without a "
                "decision", tm.stop);
    return 0;
}

void el_mp_fini(whale_ctx *ctx)
{
    struct el_mp *mp = ctx->el ? ctx->el->mp : NULL;
    if (!mp)
        return;
    mp_node_free(&mp->node);
    free(mp->fed);
    free(mp);
    ctx->el->mp = NULL;
}

/* After every event of the agent: a commit it holds becomes this task's
 * decision (el_tree_decision), an exclusion ends its part. */
static void sync(whale_ctx *ctx)
{
    struct comm_elastic *el = ctx->el;
    struct el_mp *mp = el->mp;
    struct mp_node *a = &mp->node;
    int n = ctx->boot.ntasks;
    if (a->excluded && !el->excluded) {
        whale_error("elastic: the agreed membership of epoch %llu leaves this task out: leaving "
                    "the step", (unsigned long long)a->epoch);
        el->excluded = true;
        pthread_cond_broadcast(&el->cond);
        return;
    }
    if (a->epoch <= el->st.epoch || el->decide_epoch >= a->epoch)
        return;
    if (a->epoch > el->st.epoch + 1) {
        /* the decisions in between are not known here: the state this
         * task would compute could differ from the others' */
        if (!el->excluded)
            whale_error("elastic: this task missed the decisions of epochs %llu to %llu: leaving "
                        "the step", (unsigned long long)el->st.epoch + 1,
                        (unsigned long long)a->epoch - 1);
        el->excluded = true;
        pthread_cond_broadcast(&el->cond);
        return;
    }
    uint8_t *gone = calloc((size_t)n, 1);
    if (!gone)
        return;
    int k = 0;
    for (int t = 0; t < n; t++) {
        gone[t] = el->st.member[t] && mp_task_gone(a, t);
        k += gone[t];
        if (gone[t] && !el->how[t])
            el->how[t] = WHALE_DETECT_LINK; /* others saw it fail */
    }
    int rc = el_tree_decision(ctx, gone);
    free(gone);
    if (rc) {
        whale_error("elastic: cannot build the decision of epoch %llu: %s",
                    (unsigned long long)a->epoch, whale_strerror(rc));
        return;
    }
    uint64_t msgs = a->sent_msgs - a->hb_msgs, bytes = a->sent_bytes - a->hb_bytes;
    whale_debug("elastic: tree agreement of epoch %llu: %d task(s) removed; this task sent %llu "
                "agreement message(s), %llu bytes", (unsigned long long)a->epoch, k,
                (unsigned long long)(msgs - mp->proto_sent),
                (unsigned long long)(bytes - mp->proto_bytes));
    mp->proto_sent = msgs;
    mp->proto_bytes = bytes;
    if (!el->recovering && !el->suspected) {
        /* decided while this task computed: its operations stop */
        el->suspected = true;
        el_fail_all_groups(ctx, -1);
    }
    pthread_cond_broadcast(&el->cond);
}

void el_mp_handle(whale_ctx *ctx, int from, const uint8_t *body, size_t len)
{
    struct el_mp *mp = ctx->el->mp;
    struct el_mp_wire w;
    if (!mp || len < sizeof w)
        return;
    memcpy(&w, body, sizeof w);
    body += sizeof w;
    len -= sizeof w;
    int n = ctx->boot.ntasks;
    size_t nb = (size_t)(n + 7) / 8;
    if (w.type < MP_PING || w.type > MP_STATE)
        return;
    struct mp_msg m = { .type = w.type, .from = from, .about = w.about, .epoch = w.epoch,
                        .seq = w.seq, .ab = w.ab, .nack = w.nack, .lag = w.lag, .count = w.count,
                        .nacc = w.nacc };
    struct mp_node s;
    int32_t *v = NULL;
    if (w.type == MP_STATE) {
        if (w.ngone > (uint32_t)n || len < nb + sizeof(int32_t) * (size_t)w.ngone)
            return;
        memset(&s, 0, sizeof s);
        s.nnodes = n;
        s.tasks_per_node = 1;
        s.epoch = w.epoch;
        s.hash = w.hash;
        s.alive = (uint8_t *)body;
        s.ngone = w.ngone;
        if (w.ngone) {
            v = malloc(sizeof(int32_t) * w.ngone);
            if (!v)
                return;
            memcpy(v, body + nb, sizeof(int32_t) * w.ngone);
            for (uint32_t i = 0; i < w.ngone; i++)
                if (v[i] < 0 || v[i] >= n || (i && v[i] <= v[i - 1])) {
                    free(v); /* gone tasks are sorted and in range */
                    return;
                }
        }
        s.gone_tasks = v;
        m.state = &s;
    } else {
        if (w.nitems > 4 * (uint32_t)n + 4 || len < sizeof(int32_t) * (size_t)w.nitems)
            return;
        m.nitems = w.nitems;
        if (w.nitems) {
            v = malloc(sizeof(int32_t) * w.nitems);
            if (!v)
                return;
            memcpy(v, body, sizeof(int32_t) * w.nitems);
        }
        _Static_assert(sizeof(struct mp_item) == sizeof(int32_t), "mp_item is one int32");
        m.items = (struct mp_item *)v;
    }
    mp_recv(&mp->node, &m, el_now());
    free(v);
    sync(ctx);
}

void el_mp_poll(whale_ctx *ctx)
{
    struct el_mp *mp = ctx->el->mp;
    if (!mp)
        return;
    double now = el_now();
    if (now >= mp_next(&mp->node)) {
        mp_tick(&mp->node, now);
        sync(ctx);
    }
}

double el_mp_next(whale_ctx *ctx)
{
    struct el_mp *mp = ctx->el->mp;
    return mp ? mp_next(&mp->node) : 1e30;
}

bool el_mp_stopped(const whale_ctx *ctx)
{
    const struct el_mp *mp = ctx->el->mp;
    return mp && mp->node.stopped && !mp->node.excluded;
}

/* The recovery window (el_grace.c), as the coordinator applies it: while
 * the decision on what this task knows would cost something a member gone
 * silent could spare by coming back, such members are not reported. */
static bool grace_holds(whale_ctx *ctx, double now)
{
    struct comm_elastic *el = ctx->el;
    const struct el_state *b = &el->st;
    int n = ctx->boot.ntasks;
    bool silent = false;
    for (int t = 0; t < n; t++)
        silent |= b->member[t] && ctx->dead[t] && !el->hard[t];
    if (!silent)
        return false;
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
    int drc = quorum ? el_decide(b, gone, el->how, NULL, NULL, &ns, &ev) : 0;
    el_state_free(&ns);
    double left = (drc == 0 || drc == WHALE_ENOFIT) && el_grace_wanted(quorum, drc, &ev)
                      ? el_grace_left(n, b->member, gone, el->hard, el->gone_at, el->grace, now)
                      : 0;
    if (left > 0) {
        for (int t = 0; t < n; t++)
            if (b->member[t] && gone[t] && !el->hard[t]) {
                if (!el->grace_how)
                    el->grace_how = el->how[t];
                if (el->lat[t] > el->grace_lat)
                    el->grace_lat = el->lat[t];
            }
        if (el->grace_logged != b->epoch + 1) {
            el->grace_logged = b->epoch + 1;
            whale_warn("elastic: %s; waiting up to %.1f s (WHALE_NODE_GRACE) for the task(s) gone "
                       "silent to come back", !quorum ? "this side has no majority"
                       : drc == WHALE_ENOFIT ? "no spare is free and DP = 1"
                                             : "no spare is free: a DP replica would be dropped",
                       left);
        }
    }
    free(gone);
    return left > 0;
}

void el_mp_feed(whale_ctx *ctx, double since)
{
    struct comm_elastic *el = ctx->el;
    struct el_mp *mp = el->mp;
    struct mp_node *a = &mp->node;
    int n = ctx->boot.ntasks;
    if (mp->fed_epoch != el->st.epoch) {
        memset(mp->fed, 0, (size_t)n);
        mp->fed_epoch = el->st.epoch;
        mp->noop_fed = false;
        mp->hold_at = 0;
    }
    if (a->epoch != el->st.epoch || a->stopped)
        return; /* a decision to apply first (sync) */
    double now = el_now();
    if (el->grace > 0 && now - mp->hold_at > 0.1) {
        mp->hold = grace_holds(ctx, now);
        mp->hold_at = now;
    }
    bool any = false;
    for (int t = 0; t < n; t++) {
        if (!el->st.member[t] || !ctx->dead[t] || t == ctx->boot.task)
            continue;
        any = true;
        if (el->hard[t] && mp->fed[t] != 1) {
            mp->fed[t] = 1;
            mp_local_dead(a, t, now);
        } else if (!el->hard[t] && !mp->fed[t] && !(el->grace > 0 && mp->hold)) {
            mp->fed[t] = 2;
            mp_suspect(a, t, now);
        }
    }
    /* Nobody known failed, yet a recovery is under way: members gone
     * silent came back within the grace (then at once), or another task
     * recovers for a reason not heard here yet (then after a second, for
     * its notice to arrive first). Everyone goes on by a decision that
     * removes nobody (RESUMED). */
    if (!any && !mp->noop_fed && !a->nnews &&
        ((el->last_revival > 0 && el->last_revival >= since) || now - since > 1.0)) {
        mp->noop_fed = true;
        mp_request(a, now);
    }
    sync(ctx);
}
