/* Deterministic simulation of the membership protocol (member/mp.h).
 *
 * The same node-agent code as the runtime, driven by a simulated network
 * and clock: one thread, one seeded generator, events in a binary heap
 * ordered by (time, sequence number), so a seed replays exactly. Each
 * seed picks a scenario -- task crash, node loss, two failures (the
 * second during the recovery of the first, sometimes the root), a
 * partition, slow (starved) nodes, message loss/delay/reordering -- and
 * checks on every run:
 *   agreement  every node that commits epoch e commits the same membership;
 *   validity   no node that met the timing model (not crashed, not cut
 *              off, slow within the model) is removed or stops;
 *   liveness   within 5 s of the last fault (12 s for a partition) every survivor holds
 *              the same membership, without any crashed task or node and
 *              without the cut-off minority; a cut-off node never commits,
 *              and one that learnt of a failure has stopped.
 * Timing model: one-way latency LAT + up to JIT of jitter (reordering),
 * loss <= 2 % per message, 5 % of messages up to 0.3 s late (delay spikes),
 * a slow node adds up to 0.3 s to every message it receives and to every
 * timer it sets.
 *
 *   el_sim [--ranks N] [--per-node K] [--seeds S] [--seed X] [--trace]
 *          [--bench] [--quiet]
 * --seed X runs that one seed (with --trace: every message and event). */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "member/mp.h"

#define LAT 10e-6
#define JIT 20e-6
#define SLOW_MAX 0.3
#define WATCHDOG 0.1     /* pid watchdog period of a node leader */
/* liveness: converged this long after the last fault (a partition waits
 * out the tree deadlines of the cut-off subtrees, and the minority's stop) */
#define BOUND 5.0
#define BOUND_PARTITION 12.0

enum { EV_MSG, EV_TICK, EV_CRASH_NODE, EV_CRASH_TASK, EV_LOCAL_DEAD, EV_PARTITION, EV_SLOW };

struct ev {
    double t;
    uint64_t seq;
    int kind, dst, arg;
    struct mp_msg *m;
};

struct sim {
    uint64_t rng;
    int nnodes, tpn;
    struct mp_node *nodes;
    double *tick_at;
    uint8_t *dead, *side, *slow;
    uint8_t *task_dead;   /* [nnodes * tpn] */
    double loss;
    double spike;         /* probability of a message delayed up to SLOW_MAX */
    bool jitter;
    /* heap */
    struct ev *h;
    size_t nh, caph;
    uint64_t seq;
    double now;
    bool trace;
    /* agreement record: epoch -> hash */
    uint64_t *ehash;
    size_t nehash;
    uint64_t *last_epoch;
    double *applied_at;
    double first_news, last_fault;
    bool partitioned;
    const char *fail;
    char why[256];
    uint64_t events;
};

static uint64_t rnd(struct sim *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unif(struct sim *s)
{
    return (double)(rnd(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- heap ------------------------------------------------------------- */

static bool before(const struct ev *a, const struct ev *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(struct sim *s, struct ev e)
{
    if (s->nh == s->caph) {
        s->caph = s->caph ? 2 * s->caph : 4096;
        s->h = realloc(s->h, s->caph * sizeof *s->h);
        if (!s->h) {
            fprintf(stderr, "el_sim: out of memory\n");
            exit(2);
        }
    }
    e.seq = s->seq++;
    size_t i = s->nh++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&e, &s->h[p]))
            break;
        s->h[i] = s->h[p];
        i = p;
    }
    s->h[i] = e;
}

static struct ev pop(struct sim *s)
{
    struct ev top = s->h[0], last = s->h[--s->nh];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->nh)
            break;
        if (c + 1 < s->nh && before(&s->h[c + 1], &s->h[c]))
            c++;
        if (!before(&s->h[c], &last))
            break;
        s->h[i] = s->h[c];
        i = c;
    }
    if (s->nh)
        s->h[i] = last;
    return top;
}

/* ---- network ---------------------------------------------------------- */

static void free_msg(struct mp_msg *m)
{
    if (!m)
        return;
    free(m->items);
    if (m->state) {
        struct mp_node *st = (struct mp_node *)m->state;
        free(st->alive);
        free(st->gone_tasks);
        free(st);
    }
    free(m);
}

static const char *tname(int t)
{
    static const char *n[] = { "?", "PING", "ACK", "PREQ", "PACK", "REPORT", "PREPARE", "PROMISE",
                               "ACCEPT", "ACCEPTED", "COMMIT", "STATE" };
    return t > 0 && t <= MP_STATE ? n[t] : "?";
}

static void net_send(void *user, int to, const struct mp_msg *m)
{
    struct sim *s = user;
    if (s->trace)
        printf("%.6f send %s %d->%d about=%d epoch=%" PRIu64 " seq=%" PRIu64 " n=%u count=%u\n",
               s->now, tname(m->type), m->from, to, m->about, m->epoch, m->seq, m->nitems, m->count);
    if (s->side[m->from] != s->side[to] || unif(s) < s->loss)
        return;
    struct mp_msg *c = malloc(sizeof *c);
    *c = *m;
    c->items = NULL;
    c->state = NULL;
    if (m->nitems) {
        c->items = malloc(m->nitems * sizeof *c->items);
        memcpy(c->items, m->items, m->nitems * sizeof *c->items);
    }
    if (m->type == MP_STATE && m->state) {
        /* a snapshot: the sender's state as it is now */
        struct mp_node *st = calloc(1, sizeof *st);
        const struct mp_node *src = m->state;
        size_t nb = (size_t)(src->nnodes + 7) / 8;
        st->nnodes = src->nnodes;
        st->epoch = src->epoch;
        st->hash = src->hash;
        st->alive = malloc(nb);
        memcpy(st->alive, src->alive, nb);
        st->ngone = src->ngone;
        st->gone_tasks = malloc((src->ngone + 1) * sizeof(int32_t));
        memcpy(st->gone_tasks, src->gone_tasks ? src->gone_tasks : st->gone_tasks,
               src->ngone * sizeof(int32_t));
        c->state = st;
    }
    double d = LAT + (s->jitter ? JIT * unif(s) : 0);
    if (s->slow[to])
        d += SLOW_MAX * unif(s);
    if (s->spike > 0 && unif(s) < s->spike)
        d += SLOW_MAX * unif(s); /* a congested link: late, out of order */
    push(s, (struct ev){ .t = s->now + d, .kind = EV_MSG, .dst = to, .m = c });
}

/* ---- the run ---------------------------------------------------------- */

static void resched(struct sim *s, int i)
{
    struct mp_node *n = &s->nodes[i];
    double t = mp_next(n);
    if (t > 1e29)
        return;
    if (s->slow[i])
        t += SLOW_MAX * unif(s);
    if (t < s->now)
        t = s->now;
    if (t < s->tick_at[i]) {
        s->tick_at[i] = t;
        push(s, (struct ev){ .t = t, .kind = EV_TICK, .dst = i });
    }
}

static void fail(struct sim *s, const char *kind, const char *fmt, int a, int b)
{
    if (s->fail)
        return;
    s->fail = kind;
    snprintf(s->why, sizeof s->why, fmt, a, b);
}

/* After every event at node i: record what it committed. */
static void observe(struct sim *s, int i)
{
    struct mp_node *n = &s->nodes[i];
    if (n->nnews && s->first_news < 0)
        s->first_news = s->now;
    if (n->epoch == s->last_epoch[i])
        return;
    s->last_epoch[i] = n->epoch;
    s->applied_at[i] = s->now;
    if (s->trace)
        printf("%.6f node %d commits epoch %" PRIu64 " hash %016" PRIx64 "%s\n", s->now, i, n->epoch,
               n->hash, n->stopped ? " (stopped)" : "");
    if (n->epoch >= s->nehash) {
        size_t c = n->epoch + 16;
        s->ehash = realloc(s->ehash, c * sizeof *s->ehash);
        memset(s->ehash + s->nehash, 0, (c - s->nehash) * sizeof *s->ehash);
        s->nehash = c;
    }
    if (!s->ehash[n->epoch])
        s->ehash[n->epoch] = n->hash;
    else if (s->ehash[n->epoch] != n->hash)
        fail(s, "agreement", "node %d committed a different membership for epoch %d", i,
             (int)n->epoch);
}

static bool survivor(const struct sim *s, int i)
{
    return !s->dead[i] && s->side[i] == 0;
}

/* All survivors on one membership, without what failed: done. */
static bool converged(struct sim *s, bool report)
{
    int ref = -1;
    for (int i = 0; i < s->nnodes; i++) {
        if (!survivor(s, i))
            continue;
        struct mp_node *n = &s->nodes[i];
        if (n->stopped) {
            fail(s, "validity", "healthy node %d stopped (excluded=%d)", i, n->excluded);
            return false;
        }
        if (ref < 0)
            ref = i;
        else if (n->epoch != s->nodes[ref].epoch || n->hash != s->nodes[ref].hash || n->nnews) {
            if (report)
                fail(s, "liveness", "node %d differs from node %d at the bound", i, ref);
            return false;
        }
    }
    /* a cut-off node that knows of a failure must stop: no quorum */
    for (int i = 0; i < s->nnodes; i++)
        if (s->side[i] && !s->dead[i] && s->nodes[i].nnews && !s->nodes[i].stopped) {
            if (report)
                fail(s, "liveness", "cut-off node %d knows of a failure and did not stop (%d)", i, 0);
            return false;
        }
    if (ref < 0)
        return true;
    struct mp_node *r = &s->nodes[ref];
    if (r->nnews) {
        if (report)
            fail(s, "liveness", "node %d still has undecided news at the bound (%d items)", ref, (int)r->nnews);
        return false;
    }
    for (int i = 0; i < s->nnodes; i++) {
        bool gone = !mp_is_alive(r, i);
        if (survivor(s, i) && gone) {
            fail(s, "validity", "healthy node %d removed (seen by node %d)", i, ref);
            return false;
        }
        if (!survivor(s, i) && !gone) {
            if (report)
                fail(s, "liveness", "failed node %d still a member at the bound (node %d)", i, ref);
            return false;
        }
        if (!survivor(s, i))
            continue;
        for (int k = 0; k < s->tpn; k++) {
            int t = i * s->tpn + k;
            if (s->task_dead[t] != mp_task_gone(r, t)) {
                if (s->task_dead[t]) {
                    if (report)
                        fail(s, "liveness", "crashed task %d still a member (node %d)", t, ref);
                } else {
                    fail(s, "validity", "healthy task %d removed (node %d)", t, ref);
                }
                return false;
            }
        }
    }
    return true;
}

struct result {
    const char *scenario;
    double detect, agree;    /* after the first fault: first news, all survivors applied */
    uint64_t hb_msgs, hb_bytes, msgs, bytes;
    double span;
    size_t state_bytes;
    uint64_t events;
};

enum scen { S_TASK, S_NODE, S_TWO, S_ROOT, S_PART, S_SLOW, S_LOSS, S_DELAY, S_NONE, S_N };
static const char *scen_name[] = { "task-crash", "node-loss", "two-in-recovery", "root-loss",
                                   "partition", "slow-nodes+crash", "loss+reorder+crash",
                                   "delay-spikes+crash", "quiet" };

static int run(uint64_t seed, int nranks, int tpn, int force, bool trace, bool bench,
               struct result *res)
{
    struct sim s = { 0 };
    s.rng = seed * 0x2545f4914f6cdd1dull + 1;
    s.tpn = tpn;
    s.nnodes = nranks / tpn;
    s.trace = trace;
    s.first_news = -1;
    int M = s.nnodes;
    s.nodes = calloc((size_t)M, sizeof *s.nodes);
    s.tick_at = malloc((size_t)M * sizeof(double));
    s.dead = calloc((size_t)M, 1);
    s.side = calloc((size_t)M, 1);
    s.slow = calloc((size_t)M, 1);
    s.task_dead = calloc((size_t)nranks, 1);
    s.last_epoch = calloc((size_t)M, sizeof(uint64_t));
    s.applied_at = calloc((size_t)M, sizeof(double));
    struct mp_timing tm;
    mp_timing_default(&tm);
    struct mp_io io = { .send = net_send, .user = &s };
    for (int i = 0; i < M; i++) {
        mp_node_init(&s.nodes[i], i, M, tpn, &tm, &io, seed, 0);
        s.tick_at[i] = 1e30;
        resched(&s, i);
    }
    enum scen sc = force >= 0 ? (enum scen)force : (enum scen)(rnd(&s) % S_N);
    s.jitter = !bench;
    double t0 = 1.0 + (bench ? 0 : unif(&s));
    s.last_fault = t0;
    int victim = (int)(rnd(&s) % (uint64_t)M);
    switch (sc) {
    case S_TASK:
        push(&s, (struct ev){ .t = t0, .kind = EV_CRASH_TASK, .arg = victim * tpn + (int)(rnd(&s) % (uint64_t)tpn) });
        break;
    case S_NODE:
        push(&s, (struct ev){ .t = t0, .kind = EV_CRASH_NODE, .dst = victim });
        break;
    case S_TWO: {
        double t1 = t0 + 1.5 * unif(&s);
        push(&s, (struct ev){ .t = t0, .kind = EV_CRASH_NODE, .dst = victim });
        int v2 = (victim + 1 + (int)(rnd(&s) % (uint64_t)(M - 1))) % M;
        if (rnd(&s) & 1)
            push(&s, (struct ev){ .t = t1, .kind = EV_CRASH_NODE, .dst = v2 });
        else
            push(&s, (struct ev){ .t = t1, .kind = EV_CRASH_TASK, .arg = v2 * tpn });
        s.last_fault = t1;
        break;
    }
    case S_ROOT: {
        /* the root dies, then a node dies while the new root decides */
        double t1 = t0 + 1.0 + 1.5 * unif(&s);
        push(&s, (struct ev){ .t = t0, .kind = EV_CRASH_NODE, .dst = 0 });
        push(&s, (struct ev){ .t = t1, .kind = EV_CRASH_NODE, .dst = 1 + (int)(rnd(&s) % (uint64_t)(M - 1)) });
        s.last_fault = t1;
        break;
    }
    case S_PART: {
        /* a minority cut off: a contiguous block (sometimes holding the
         * root) or a scattered set */
        int sz = 1 + (int)(rnd(&s) % (uint64_t)(M / 3));
        int start = (rnd(&s) & 1) ? 0 : victim;
        bool scattered = (rnd(&s) % 3) == 0;
        for (int k = 0; k < sz; k++) {
            int x = scattered ? (int)(rnd(&s) % (uint64_t)M) : (start + k) % M;
            push(&s, (struct ev){ .t = t0, .kind = EV_PARTITION, .dst = x });
        }
        s.partitioned = true;
        break;
    }
    case S_SLOW: {
        int ns = 1 + (int)(rnd(&s) % 8);
        for (int k = 0; k < ns; k++)
            push(&s, (struct ev){ .t = 0.5 * unif(&s), .kind = EV_SLOW, .dst = (int)(rnd(&s) % (uint64_t)M) });
        push(&s, (struct ev){ .t = t0, .kind = EV_CRASH_NODE, .dst = victim });
        break;
    }
    case S_DELAY:
        s.spike = 0.05;
        push(&s, (struct ev){ .t = t0, .kind = EV_CRASH_NODE, .dst = victim });
        break;
    case S_LOSS:
        s.loss = 0.02;
        push(&s, (struct ev){ .t = t0, .kind = EV_CRASH_NODE, .dst = victim });
        break;
    default:
        break;
    }
    double end = s.last_fault + (sc == S_PART ? BOUND_PARTITION : BOUND);
    double next_check = s.last_fault + 0.5;
    while (s.nh && !s.fail) {
        struct ev e = pop(&s);
        if (e.t > end) {
            free_msg(e.m);
            break;
        }
        s.now = e.t;
        s.events++;
        int i = e.dst;
        switch (e.kind) {
        case EV_MSG:
            if (!s.dead[i]) {
                if (trace)
                    printf("%.6f recv %s %d->%d\n", s.now, tname(e.m->type), e.m->from, i);
                mp_recv(&s.nodes[i], e.m, s.now);
                observe(&s, i);
                resched(&s, i);
            }
            free_msg(e.m);
            break;
        case EV_TICK:
            if (s.dead[i] || e.t != s.tick_at[i])
                break;
            s.tick_at[i] = 1e30;
            mp_tick(&s.nodes[i], s.now);
            observe(&s, i);
            resched(&s, i);
            break;
        case EV_CRASH_NODE:
            if (trace)
                printf("%.6f FAULT node %d lost\n", s.now, i);
            s.dead[i] = 1;
            for (int k = 0; k < tpn; k++)
                s.task_dead[i * tpn + k] = 1;
            break;
        case EV_CRASH_TASK: {
            int node = e.arg / tpn;
            if (trace)
                printf("%.6f FAULT task %d (node %d) crashed\n", s.now, e.arg, node);
            s.task_dead[e.arg] = 1;
            /* the leader's pid watchdog sees it within one period */
            push(&s, (struct ev){ .t = s.now + WATCHDOG * unif(&s), .kind = EV_LOCAL_DEAD, .dst = node, .arg = e.arg });
            break;
        }
        case EV_LOCAL_DEAD:
            if (!s.dead[i]) {
                mp_local_dead(&s.nodes[i], e.arg, s.now);
                observe(&s, i);
                resched(&s, i);
            }
            break;
        case EV_PARTITION:
            if (trace)
                printf("%.6f FAULT node %d cut off\n", s.now, i);
            s.side[i] = 1;
            break;
        case EV_SLOW:
            s.slow[i] = 1;
            break;
        }
        if (s.now >= next_check) {
            next_check = s.now + 0.25;
            if (converged(&s, false) && s.first_news >= 0)
                break;
            if (sc == S_NONE && s.now > s.last_fault + 3)
                break;
        }
    }
    if (!s.fail)
        converged(&s, true);
    /* a cut-off minority never reaches a quorum: it never commits */
    for (int i = 0; i < M && !s.fail; i++)
        if (s.side[i] && !s.dead[i] && s.nodes[i].epoch > 0)
            fail(&s, "agreement", "cut-off node %d committed epoch %d", i, (int)s.nodes[i].epoch);
    if (res) {
        res->scenario = scen_name[sc];
        res->detect = s.first_news >= 0 ? s.first_news - t0 : -1;
        double last = 0;
        for (int i = 0; i < M; i++)
            if (survivor(&s, i) && s.applied_at[i] > last)
                last = s.applied_at[i];
        res->agree = s.first_news >= 0 ? last - s.first_news : -1;
        res->span = s.now;
        res->hb_msgs = res->hb_bytes = res->msgs = res->bytes = 0;
        size_t sb = 0;
        for (int i = 0; i < M; i++) {
            res->hb_msgs += s.nodes[i].hb_msgs;
            res->hb_bytes += s.nodes[i].hb_bytes;
            res->msgs += s.nodes[i].sent_msgs;
            res->bytes += s.nodes[i].sent_bytes;
            if (mp_state_bytes(&s.nodes[i]) > sb)
                sb = mp_state_bytes(&s.nodes[i]);
        }
        res->state_bytes = sb;
        res->events = s.events;
    }
    int rc = 0;
    if (s.fail) {
        printf("seed %" PRIu64 " (%s, %d ranks): %s violated: %s (t=%.3f)\n", seed, scen_name[sc],
               nranks, s.fail, s.why, s.now);
        printf("  replay: el_sim --ranks %d --per-node %d --seed %" PRIu64 " --trace\n", nranks, tpn,
               seed);
        rc = 1;
    }
    while (s.nh) {
        struct ev e = pop(&s);
        free_msg(e.m);
    }
    for (int i = 0; i < M; i++)
        mp_node_free(&s.nodes[i]);
    free(s.nodes);
    free(s.tick_at);
    free(s.dead);
    free(s.side);
    free(s.slow);
    free(s.task_dead);
    free(s.last_epoch);
    free(s.applied_at);
    free(s.ehash);
    free(s.h);
    return rc;
}

static void bench(int nranks, int tpn)
{
    /* a quiet period for the steady heartbeat cost, then a crash and a node
     * loss with a fixed 10 us one-way latency and no jitter */
    struct result q, c, l;
    run(1, nranks, tpn, S_NONE, false, true, &q);
    run(2, nranks, tpn, S_TASK, false, true, &c);
    run(3, nranks, tpn, S_NODE, false, true, &l);
    double per = (double)nranks * q.span;
    struct mp_timing tm;
    mp_timing_default(&tm);
    /* the root's batching window is a wait, not network rounds */
    double ca = c.agree - tm.settle, la = l.agree - tm.settle;
    printf("%6d ranks (%d per node, %d nodes): heartbeat %.2f msg/rank/s %.1f B/rank/s\n"
           "    task crash: detect %.3f s, agree %.4f s (%.4f s + %.3f s batching; %.0f one-way hops of %.0f us)\n"
           "    node loss:  detect %.3f s, agree %.4f s (%.4f s + %.3f s batching; %.0f one-way hops)\n"
           "    membership state: %zu B per node agent (%.0f B per rank)\n",
           nranks, tpn, nranks / tpn, (double)q.hb_msgs / per, (double)q.hb_bytes / per,
           c.detect, c.agree, ca, tm.settle, ca / LAT, LAT * 1e6,
           l.detect, l.agree, la, tm.settle, la / LAT, l.state_bytes,
           (double)l.state_bytes / tpn);
}

int main(int argc, char **argv)
{
    int nranks = 16384, tpn = 8, seeds = 20, force = -1;
    long long one = -1;
    bool trace = false, do_bench = false, quiet = false;
    static const struct option opts[] = {
        { "ranks", required_argument, NULL, 'r' }, { "per-node", required_argument, NULL, 'k' },
        { "seeds", required_argument, NULL, 's' }, { "seed", required_argument, NULL, 'x' },
        { "scenario", required_argument, NULL, 'c' }, { "trace", no_argument, NULL, 't' },
        { "bench", no_argument, NULL, 'b' }, { "quiet", no_argument, NULL, 'q' },
        { NULL, 0, NULL, 0 }
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'r': nranks = atoi(optarg); break;
        case 'k': tpn = atoi(optarg); break;
        case 's': seeds = atoi(optarg); break;
        case 'x': one = atoll(optarg); break;
        case 'c': force = atoi(optarg); break;
        case 't': trace = true; break;
        case 'b': do_bench = true; break;
        case 'q': quiet = true; break;
        default:
            fprintf(stderr, "usage: el_sim [--ranks N] [--per-node K] [--seeds S] [--seed X] "
                            "[--scenario 0-%d] [--trace] [--bench] [--quiet]\n", S_N - 1);
            return 2;
        }
    }
    if (tpn < 1 || nranks < 8 * tpn || nranks % tpn) {
        fprintf(stderr, "el_sim: --ranks must be a multiple of --per-node and at least 8 nodes\n");
        return 2;
    }
    if (do_bench) {
        bench(nranks, tpn);
        return 0;
    }
    if (one >= 0) {
        struct result r;
        int rc = run((uint64_t)one, nranks, tpn, force, trace, false, &r);
        printf("seed %lld: %s, detect %.3f s, agree %.3f s, %" PRIu64 " events: %s\n", one,
               r.scenario, r.detect, r.agree, r.events, rc ? "FAILED" : "ok");
        return rc;
    }
    int bad = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    double worst_detect = 0, worst_agree = 0;
    uint64_t events = 0;
    for (int k = 0; k < seeds; k++) {
        struct result r;
        uint64_t seed = (uint64_t)k + 1;
        if (run(seed, nranks, tpn, force, false, false, &r))
            bad++;
        events += r.events;
        if (r.detect > worst_detect)
            worst_detect = r.detect;
        if (r.agree > worst_agree)
            worst_agree = r.agree;
        if (!quiet && trace)
            printf("seed %" PRIu64 ": %s detect %.3f agree %.3f\n", seed, r.scenario, r.detect, r.agree);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double wall = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    printf("el_sim: %d ranks, %d per node, %d seeds: %d failed; worst detect %.3f s, worst "
           "agreement %.3f s (simulated); %" PRIu64 " events in %.1f s\n",
           nranks, tpn, seeds, bad, worst_detect, worst_agree, events, wall);
    return bad ? 1 : 0;
}
