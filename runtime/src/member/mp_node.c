/* The node agent of the scalable membership protocol (mp.h): detector
 * ring, failure reports, and the tree-shaped two-phase agreement. Pure:
 * time comes in as arguments, messages leave through n->io.send. */
#include <stdlib.h>
#include <string.h>

#include "member/mp.h"

void mp_timing_default(struct mp_timing *t)
{
    t->period = 0.2;
    t->floor = 0.8;
    t->confirm = 0.6;
    t->hop = 0.3;
    t->resend = 0.1;
    t->settle = 0.02;
    t->stop = 10.0;
}

size_t mp_msg_bytes(const struct mp_msg *m, int nnodes)
{
    /* type, lag, from, about, epoch, seq, ab, nack, count, nitems, nacc */
    size_t h = 1 + 1 + 4 + 4 + 8 + 8 + 8 + 8 + 4 + 4 + 4;
    if (m->type == MP_STATE && m->state)
        return h + (size_t)(nnodes + 7) / 8 + 4 * (size_t)m->state->ngone;
    return h + 4 * (size_t)m->nitems;
}

/* ---- small helpers ---------------------------------------------------- */

static uint64_t rnd(struct mp_node *n)
{
    /* splitmix64: deterministic per node and seed */
    uint64_t z = (n->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t mix(int64_t v)
{
    uint64_t z = (uint64_t)v * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    return z ^ (z >> 29);
}

bool mp_is_alive(const struct mp_node *n, int node)
{
    return node >= 0 && node < n->nnodes && (n->alive[node >> 3] >> (node & 7)) & 1;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

bool mp_task_gone(const struct mp_node *n, int task)
{
    if (!mp_is_alive(n, task / n->tasks_per_node))
        return true;
    int32_t k = task;
    return n->ngone && bsearch(&k, n->gone_tasks, n->ngone, sizeof k, cmp_i32);
}

static bool has(const struct mp_item *v, uint32_t nv, int32_t id)
{
    for (uint32_t i = 0; i < nv; i++)
        if (v[i].id == id)
            return true;
    return false;
}

static int push(struct mp_item **v, uint32_t *nv, int32_t id)
{
    if (has(*v, *nv, id))
        return 0;
    /* capacity: the next power of two (at least 16), grown when reached */
    uint32_t c = *nv;
    if (c >= MP_MAXF)
        return -1;
    if (!*v || (c >= 16 && (c & (c - 1)) == 0)) {
        struct mp_item *g = realloc(*v, (c < 16 ? 16 : 2 * (size_t)c) * sizeof **v);
        if (!g)
            return -1;
        *v = g;
    }
    (*v)[(*nv)++].id = id;
    return 1;
}

/* Lists built by push() hold no duplicates: copying keeps that. */
static void copy_items(struct mp_item **dst, uint32_t *nd, const struct mp_item *src, uint32_t ns)
{
    size_t c = 16;
    while (c < ns)
        c *= 2;
    struct mp_item *g = realloc(*dst, c * sizeof *g);
    *nd = 0;
    if (!g)
        return;
    *dst = g;
    if (ns)
        memcpy(g, src, ns * sizeof *g);
    *nd = ns;
}

/* An item still news for this node's committed membership (MP_NOOP is
 * news until the next decision: apply() drops it). */
static bool item_open(const struct mp_node *n, int32_t id)
{
    if (id == MP_NOOP)
        return true;
    if (id >= 0)
        return mp_is_alive(n, id);
    return -(int64_t)id - 1 < (int64_t)n->nnodes * n->tasks_per_node && !mp_task_gone(n, -id - 1);
}

static bool is_task_item(int32_t id)
{
    return id < 0 && id != MP_NOOP;
}

static bool in_gone_tasks(const struct mp_node *n, int32_t task)
{
    return n->ngone && bsearch(&task, n->gone_tasks, n->ngone, sizeof task, cmp_i32);
}

/* Every task of the node is gone for sure (committed or in v as a task
 * item): it is out, and no majority waits for it. */
static bool node_hard(const struct mp_node *n, int node, const struct mp_item *v, uint32_t nv)
{
    for (int k = node * n->tasks_per_node; k < (node + 1) * n->tasks_per_node; k++)
        if (!in_gone_tasks(n, k) && !has(v, nv, -(k + 1)))
            return false;
    return true;
}

static bool excluded_by(const struct mp_node *n, int node, const struct mp_item *v, uint32_t nv)
{
    return !mp_is_alive(n, node) || has(v, nv, node) || node_hard(n, node, v, nv);
}

/* The k-th lowest live node not known failed (news): the root I report to. */
static int root_of(const struct mp_node *n, int skip)
{
    for (int i = 0; i < n->nnodes; i++)
        if (!excluded_by(n, i, n->news, n->nnews) && skip-- == 0)
            return i;
    return -1;
}

static int nlive(const struct mp_node *n)
{
    int c = 0;
    for (int i = 0; i < (n->nnodes + 7) / 8; i++)
        c += __builtin_popcount(n->alive[i]);
    return c;
}

static void send(struct mp_node *n, int to, struct mp_msg *m)
{
    if (to == n->id || to < 0)
        return;
    m->from = n->id;
    size_t b = mp_msg_bytes(m, n->nnodes);
    n->sent_msgs++;
    n->sent_bytes += b;
    if (m->type == MP_PING || m->type == MP_ACK) {
        n->hb_msgs++;
        n->hb_bytes += b;
    }
    n->io.send(n->io.user, to, m);
}

/* ---- membership ------------------------------------------------------- */

/* Watch the first MP_WATCH live ring successors not known failed. */
static void retarget(struct mp_node *n, double now)
{
    int want[MP_WATCH], k = 0;
    for (int d = 1; d < n->nnodes && k < MP_WATCH; d++) {
        int x = (n->id + d) % n->nnodes;
        if (mp_is_alive(n, x) && !has(n->news, n->nnews, x))
            want[k++] = x;
    }
    for (int i = k; i < MP_WATCH; i++)
        want[i] = -1;
    struct mp_watch old[MP_WATCH];
    memcpy(old, n->w, sizeof old);
    for (int i = 0; i < MP_WATCH; i++) {
        int j = 0;
        while (j < MP_WATCH && old[j].target != want[i])
            j++;
        if (want[i] >= 0 && j < MP_WATCH) {
            n->w[i] = old[j];
        } else {
            n->w[i] = (struct mp_watch){ .target = want[i] };
            mp_arrival_init(&n->w[i].arr, now, n->tm.period);
        }
    }
}

static void apply(struct mp_node *n, uint64_t epoch, const struct mp_item *v, uint32_t nv, double now)
{
    for (uint32_t i = 0; i < nv; i++) {
        int32_t id = v[i].id;
        if (id == MP_NOOP)
            continue;
        if (id >= 0 && id < n->nnodes) {
            if (mp_is_alive(n, id)) {
                n->alive[id >> 3] &= (uint8_t)~(1u << (id & 7));
                n->hash += mix(id);
            }
        } else if (id < 0 && -(int64_t)id - 1 < (int64_t)n->nnodes * n->tasks_per_node &&
                   !mp_task_gone(n, -id - 1)) {
            if (n->ngone == n->capgone) {
                uint32_t c = n->capgone ? 2 * n->capgone : 16;
                int32_t *g = realloc(n->gone_tasks, c * sizeof *g);
                if (!g)
                    continue;
                n->gone_tasks = g;
                n->capgone = c;
            }
            n->gone_tasks[n->ngone++] = -id - 1;
            qsort(n->gone_tasks, n->ngone, sizeof *n->gone_tasks, cmp_i32);
            n->hash += mix(id);
            /* its last task gone: the node is out of the tree and the ring */
            int node = (-id - 1) / n->tasks_per_node;
            if (node_hard(n, node, NULL, 0))
                n->alive[node >> 3] &= (uint8_t)~(1u << (node & 7));
        }
    }
    n->epoch = epoch;
    n->hash = n->hash * 31 + mix((int64_t)epoch);
    if (!mp_is_alive(n, n->id)) {
        n->excluded = n->stopped = true;
        return;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n->nnews; i++)
        if (n->news[i].id != MP_NOOP && item_open(n, n->news[i].id))
            n->news[k++] = n->news[i];
    n->nnews = k;
    n->news_since = k ? now : -1;
    n->next_report = now;
    n->skip = 0;
    n->skip_at = now;
    n->promised = n->acc_ballot = 0;
    n->naccv = 0;
    retarget(n, now);
}

static void adopt_state(struct mp_node *n, const struct mp_node *s, double now)
{
    if (s->epoch <= n->epoch)
        return;
    memcpy(n->alive, s->alive, (size_t)(n->nnodes + 7) / 8);
    int32_t *g = s->ngone ? malloc(s->ngone * sizeof *g) : NULL;
    if (s->ngone && !g)
        return;
    if (g)
        memcpy(g, s->gone_tasks, s->ngone * sizeof *g);
    free(n->gone_tasks);
    n->gone_tasks = g;
    n->ngone = n->capgone = s->ngone;
    n->hash = s->hash;
    apply(n, s->epoch, NULL, 0, now);
    /* apply() folded the epoch into the hash once more: take the sender's */
    n->hash = s->hash;
    n->wave.active = false;
}

/* ---- init ------------------------------------------------------------- */

int mp_node_init(struct mp_node *n, int id, int nnodes, int tpn, const struct mp_timing *tm,
                 const struct mp_io *io, uint64_t seed, double now)
{
    memset(n, 0, sizeof *n);
    n->id = id;
    n->nnodes = nnodes;
    n->tasks_per_node = tpn;
    n->tm = *tm;
    n->io = *io;
    n->rng = seed * 0x100000001b3ull + (uint64_t)id;
    n->alive = malloc((size_t)(nnodes + 7) / 8);
    if (!n->alive)
        return -1;
    memset(n->alive, 0, (size_t)(nnodes + 7) / 8);
    for (int i = 0; i < nnodes; i++)
        n->alive[i >> 3] |= (uint8_t)(1u << (i & 7));
    n->news_since = -1;
    n->ballot_at = -1;
    /* stagger the first pings over one period */
    n->next_ping = now + n->tm.period * (double)(rnd(n) % 1000) / 1000.0;
    for (int i = 0; i < MP_WATCH; i++)
        n->w[i].target = -2;
    retarget(n, now);
    return 0;
}

void mp_node_free(struct mp_node *n)
{
    free(n->alive);
    free(n->gone_tasks);
    free(n->news);
    free(n->accv);
    free(n->wave.acc);
    free(n->wave.miss);
    free(n->wave.val);
    free(n->wave.kids);
    free(n->wave.kid_deadline);
    free(n->wave.kid_done);
    memset(n, 0, sizeof *n);
}

static size_t list_cap(const void *v, uint32_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return v ? c : 0;
}

size_t mp_state_bytes(const struct mp_node *n)
{
    return sizeof *n + (size_t)(n->nnodes + 7) / 8 + n->capgone * sizeof(int32_t) +
           (list_cap(n->news, n->nnews) + list_cap(n->accv, n->naccv) +
            list_cap(n->wave.acc, n->wave.nacc) + list_cap(n->wave.miss, n->wave.nmiss) +
            list_cap(n->wave.val, n->wave.nval)) * sizeof(struct mp_item) +
           (size_t)n->wave.capkids * (sizeof(int) + sizeof(double) + sizeof(bool));
}

/* ---- news and reports ------------------------------------------------- */

static void schedule_ballot(struct mp_node *n, double at)
{
    if (!n->proposing && (n->ballot_at < 0 || at < n->ballot_at))
        n->ballot_at = at;
}

static void add_news(struct mp_node *n, int32_t id, double now)
{
    if (!item_open(n, id) || push(&n->news, &n->nnews, id) <= 0)
        return;
    if (n->news_since < 0) {
        n->news_since = now;
        n->skip_at = now;
    }
    n->next_report = now;
    if (id >= 0)
        retarget(n, now);
}

static void report(struct mp_node *n, double now)
{
    /* a ballot under way for the next epoch: its root collects */
    int r = n->wave.active && n->wave.epoch == n->epoch + 1 &&
                    !excluded_by(n, n->wave.root, n->news, n->nnews) ? n->wave.root
          : n->skip ? n->id : root_of(n, 0);
    if (r < 0)
        return;
    if (r == n->id) {
        schedule_ballot(n, now + n->tm.settle);
        return;
    }
    struct mp_msg m = { .type = MP_REPORT, .about = r, .epoch = n->epoch,
                        .nitems = n->nnews, .items = n->news };
    send(n, r, &m);
}

void mp_local_dead(struct mp_node *n, int task, double now)
{
    if (n->stopped)
        return;
    add_news(n, -(task + 1), now);
    report(n, now);
}

void mp_suspect(struct mp_node *n, int node, double now)
{
    if (n->stopped || node == n->id)
        return;
    add_news(n, node, now);
    report(n, now);
}

void mp_request(struct mp_node *n, double now)
{
    if (n->stopped)
        return;
    add_news(n, MP_NOOP, now);
    report(n, now);
}

/* ---- the agreement tree ----------------------------------------------- */

static int pos_of(const struct mp_node *n, int root, int x)
{
    return (x - root + n->nnodes) % n->nnodes;
}

static int levels_below(const struct mp_node *n, int pos)
{
    int h = 0;
    long q = pos;
    while ((long)MP_FANOUT * q + 1 < n->nnodes) {
        q = (long)MP_FANOUT * q + 1;
        h++;
    }
    return h;
}

static int add_kid(struct mp_wave *w, int kid, double deadline)
{
    if (w->nkids == w->capkids) {
        int c = w->capkids ? 2 * w->capkids : 2 * MP_FANOUT;
        int *k = realloc(w->kids, (size_t)c * sizeof *k);
        if (k)
            w->kids = k;
        double *d = realloc(w->kid_deadline, (size_t)c * sizeof *d);
        if (d)
            w->kid_deadline = d;
        bool *b = realloc(w->kid_done, (size_t)c * sizeof *b);
        if (b)
            w->kid_done = b;
        if (!k || !d || !b)
            return -1;
        w->capkids = c;
    }
    w->kids[w->nkids] = kid;
    w->kid_deadline[w->nkids] = deadline;
    w->kid_done[w->nkids] = false;
    w->nkids++;
    return 0;
}

static void wave_send(struct mp_node *n, int to)
{
    struct mp_wave *w = &n->wave;
    struct mp_msg m = { .type = w->type, .about = w->root, .epoch = w->epoch, .seq = w->ballot,
                        .nitems = w->nval, .items = w->val };
    send(n, to, &m);
}

/* Ask the children of tree position pos, routing around excluded nodes. */
static void expand(struct mp_node *n, int pos, double now)
{
    struct mp_wave *w = &n->wave;
    for (int c = 1; c <= MP_FANOUT; c++) {
        long cp = (long)MP_FANOUT * pos + c;
        if (cp >= n->nnodes)
            return;
        int x = (w->root + (int)cp) % n->nnodes;
        if (excluded_by(n, x, w->val, w->nval)) {
            expand(n, (int)cp, now);
            continue;
        }
        /* A subtree of height h answers within 2 hop 2^h even when each of
         * its levels routes around a silent node (each of those waits
         * less than half as long as its parent). */
        double d = 2 * n->tm.hop * (double)(1 << levels_below(n, (int)cp));
        if (add_kid(w, x, now + d) == 0)
            wave_send(n, x);
        else if (w->type == MP_PREPARE)
            push(&w->miss, &w->nmiss, x); /* out of memory: cannot wait for it */
    }
}

static void root_done(struct mp_node *n, double now);

static void wave_reply(struct mp_node *n)
{
    struct mp_wave *w = &n->wave;
    uint8_t rt = w->type == MP_PREPARE ? MP_PROMISE : MP_ACCEPTED;
    struct mp_item *buf = malloc(((size_t)w->nacc + w->nmiss + 1) * sizeof *buf);
    if (!buf)
        return;
    uint32_t k = 0;
    for (uint32_t i = 0; i < w->nacc; i++)
        buf[k++] = w->acc[i];
    for (uint32_t i = 0; i < w->nmiss; i++)
        buf[k++] = w->miss[i];
    struct mp_msg m = { .type = rt, .about = w->root, .epoch = w->epoch, .seq = w->ballot,
                        .ab = w->ab, .nack = w->nack, .count = w->count, .nitems = k,
                        .items = buf, .nacc = w->nacc };
    for (int i = 0; i < w->nreply; i++)
        send(n, w->reply_to[i], &m);
    free(buf);
}

static void wave_check(struct mp_node *n, double now)
{
    struct mp_wave *w = &n->wave;
    if (!w->active || w->replied)
        return;
    for (int i = 0; i < w->nkids; i++)
        if (!w->kid_done[i])
            return;
    w->replied = true;
    if (w->root == n->id)
        root_done(n, now);
    else
        wave_reply(n);
}

/* Join a wave: act on it here (promise / accept / commit), then pass it
 * down. Returns false when this node cannot take part (lagging). */
static void wave_join(struct mp_node *n, const struct mp_msg *m, double now)
{
    struct mp_wave *w = &n->wave;
    if (w->active && w->type == m->type && w->epoch == m->epoch && w->ballot == m->seq &&
        w->root == m->about) {
        /* a resend or a second parent (after routing around) */
        bool known = m->from == n->id;
        for (int i = 0; i < w->nreply; i++)
            known |= w->reply_to[i] == m->from;
        if (!known && w->nreply < 4)
            w->reply_to[w->nreply++] = m->from;
        if (w->replied && m->from != n->id) {
            int save = w->nreply;
            int one = m->from;
            int saved[4];
            memcpy(saved, w->reply_to, sizeof saved);
            w->reply_to[0] = one;
            w->nreply = 1;
            wave_reply(n);
            memcpy(w->reply_to, saved, sizeof saved);
            w->nreply = save;
        }
        return;
    }
    bool ok = true;
    if (m->type == MP_PREPARE) {
        ok = m->seq > n->promised;
        if (ok)
            n->promised = m->seq;
    } else if (m->type == MP_ACCEPT) {
        ok = m->seq >= n->promised;
        if (ok) {
            n->promised = m->seq;
            n->acc_ballot = m->seq;
            n->acc_epoch = m->epoch;
            copy_items(&n->accv, &n->naccv, m->items, m->nitems);
        }
    }
    if (!ok) {
        /* refuse: tell the sender which ballot it must beat */
        struct mp_msg r = { .type = m->type == MP_PREPARE ? MP_PROMISE : MP_ACCEPTED,
                            .about = m->about, .epoch = m->epoch, .seq = m->seq,
                            .nack = n->promised };
        send(n, m->from, &r);
        return;
    }
    /* A root whose decision removes itself still passes it down: it is
     * the only one holding it. */
    if (m->type == MP_COMMIT && m->epoch == n->epoch + 1)
        apply(n, m->epoch, m->items, m->nitems, now);
    w->active = true;
    w->replied = false;
    w->type = m->type;
    w->epoch = m->epoch;
    w->ballot = m->seq;
    w->root = m->about;
    w->nreply = 0;
    if (m->from != n->id)
        w->reply_to[w->nreply++] = m->from;
    w->nkids = 0;
    w->count = 1;
    w->nmiss = 0;
    w->nacc = 0;
    w->ab = 0;
    w->nack = 0;
    if (m->type == MP_PREPARE && n->acc_epoch == m->epoch && n->acc_ballot) {
        w->ab = n->acc_ballot;
        copy_items(&w->acc, &w->nacc, n->accv, n->naccv);
    }
    copy_items(&w->val, &w->nval, m->items, m->nitems);
    w->next_resend = now + n->tm.resend;
    n->skip_at = now;
    if (n->news_since < 0 && m->type != MP_COMMIT)
        n->news_since = now;
    expand(n, pos_of(n, w->root, n->id), now);
    wave_check(n, now);
}

static void wave_answer(struct mp_node *n, const struct mp_msg *m, double now)
{
    struct mp_wave *w = &n->wave;
    uint8_t want = w->type == MP_PREPARE ? MP_PROMISE : MP_ACCEPTED;
    if (!w->active || w->replied || m->type != want || m->epoch != w->epoch ||
        m->seq != w->ballot || m->about != w->root)
        return;
    int i = 0;
    while (i < w->nkids && w->kids[i] != m->from)
        i++;
    if (i == w->nkids || w->kid_done[i])
        return;
    if (m->lag) {
        /* the child missed a decision: hand it our state, ask again */
        struct mp_msg s = { .type = MP_STATE, .epoch = n->epoch, .state = n };
        send(n, m->from, &s);
        wave_send(n, m->from);
        return;
    }
    w->kid_done[i] = true;
    if (m->nack > w->nack)
        w->nack = m->nack;
    if (m->nack > n->seen_ballot)
        n->seen_ballot = m->nack;
    w->count += m->count;
    uint32_t na = m->nacc > m->nitems ? m->nitems : m->nacc;
    if (m->ab > w->ab) {
        w->ab = m->ab;
        copy_items(&w->acc, &w->nacc, m->items, na);
    }
    for (uint32_t k = na; k < m->nitems; k++)
        push(&w->miss, &w->nmiss, m->items[k].id);
    wave_check(n, now);
}

static void start_ballot(struct mp_node *n, double now)
{
    n->ballot_at = -1;
    if (n->stopped || !n->nnews)
        return;
    n->proposing = true;
    uint64_t hi = n->promised > n->seen_ballot ? n->promised : n->seen_ballot;
    uint64_t r = (hi >> 20) + 1;
    if (r <= n->round)
        r = n->round + 1;
    n->round = r;
    uint64_t ballot = (r << 20) | (uint64_t)((1 << 20) - 1 - n->id);
    struct mp_msg m = { .type = MP_PREPARE, .from = n->id, .about = n->id,
                        .epoch = n->epoch + 1, .seq = ballot, .nitems = n->nnews,
                        .items = n->news };
    wave_join(n, &m, now);
}

static void ballot_failed(struct mp_node *n, double now)
{
    n->proposing = false;
    n->wave.active = false;
    schedule_ballot(n, now + n->tm.resend * (2 + (double)(rnd(n) % 100) / 25.0));
}

/* The majority counts the live nodes not gone for sure (every task of
 * theirs a task item of the value): a node known crashed never answers
 * and must not make the survivors a minority. An exact half holding the
 * lowest such node still decides, so that one of two halves goes on. */
static bool majority(const struct mp_node *n, const struct mp_wave *w)
{
    int eligible = nlive(n);
    for (uint32_t i = 0; i < w->nval; i++) {
        int32_t id = w->val[i].id;
        if (!is_task_item(id))
            continue;
        int node = (-id - 1) / n->tasks_per_node;
        bool first = mp_is_alive(n, node);
        for (uint32_t j = 0; j < i && first; j++)
            first = !is_task_item(w->val[j].id) || (-w->val[j].id - 1) / n->tasks_per_node != node;
        if (first && node_hard(n, node, w->val, w->nval))
            eligible--;
    }
    int c = (int)w->count;
    if (2 * c != eligible)
        return 2 * c > eligible;
    int lowest = -1;
    for (int x = 0; x < n->nnodes && lowest < 0; x++)
        if (mp_is_alive(n, x) && !node_hard(n, x, w->val, w->nval))
            lowest = x;
    return lowest == n->id;
}

static void root_done(struct mp_node *n, double now)
{
    struct mp_wave *w = &n->wave;
    bool refused = w->nack > w->ballot;
    if (w->type == MP_COMMIT) {
        w->active = false;
        n->proposing = false;
        if (n->nnews)
            schedule_ballot(n, now + n->tm.settle);
        return;
    }
    if (refused || !majority(n, w)) {
        ballot_failed(n, now);
        return;
    }
    if (w->type == MP_PREPARE) {
        /* Paxos: a value accepted below wins; else ours plus the silent */
        struct mp_item *val = NULL;
        uint32_t nv = 0;
        if (w->ab) {
            copy_items(&val, &nv, w->acc, w->nacc);
        } else {
            copy_items(&val, &nv, w->val, w->nval);
            for (uint32_t i = 0; i < w->nmiss; i++)
                push(&val, &nv, w->miss[i].id);
        }
        struct mp_msg m = { .type = MP_ACCEPT, .from = n->id, .about = n->id, .epoch = w->epoch,
                            .seq = w->ballot, .nitems = nv, .items = val };
        wave_join(n, &m, now);
        free(val);
        return;
    }
    /* accepted by a majority: chosen */
    struct mp_item *val = NULL;
    uint32_t nv = 0;
    copy_items(&val, &nv, w->val, w->nval);
    struct mp_msg m = { .type = MP_COMMIT, .from = n->id, .about = n->id, .epoch = w->epoch,
                        .seq = w->ballot, .nitems = nv, .items = val };
    wave_join(n, &m, now);
    free(val);
}

/* ---- events ----------------------------------------------------------- */

static struct mp_watch *watch_of(struct mp_node *n, int target)
{
    for (int i = 0; i < MP_WATCH; i++)
        if (n->w[i].target == target)
            return &n->w[i];
    return NULL;
}

void mp_recv(struct mp_node *n, const struct mp_msg *m, double now)
{
    if (n->stopped)
        return;
    /* anti-entropy: whoever shows an older epoch gets our state */
    if ((m->type == MP_PING || m->type == MP_ACK) && m->epoch < n->epoch) {
        struct mp_msg s = { .type = MP_STATE, .epoch = n->epoch, .state = n };
        send(n, m->from, &s);
    }
    switch (m->type) {
    case MP_PING: {
        struct mp_msg a = { .type = MP_ACK, .about = m->about, .epoch = n->epoch, .seq = m->seq };
        send(n, m->from, &a);
        break;
    }
    case MP_ACK: {
        if (m->about == -2) {
            n->skip_at = now; /* a root took our report */
            break;
        }
        if (m->about >= 0 && m->about != n->id) {
            /* an indirect probe answered: tell who asked */
            struct mp_msg p = { .type = MP_PACK, .about = m->from, .epoch = n->epoch };
            send(n, m->about, &p);
            break;
        }
        struct mp_watch *w = watch_of(n, m->from);
        if (w) {
            mp_arrival_note(&w->arr, now);
            w->probe_deadline = 0;
        }
        break;
    }
    case MP_PREQ: {
        struct mp_msg p = { .type = MP_PING, .about = m->from, .epoch = n->epoch, .seq = m->seq };
        send(n, m->about, &p);
        break;
    }
    case MP_PACK: {
        struct mp_watch *w = watch_of(n, m->about);
        if (w && w->probe_deadline > 0) {
            w->probe_deadline = 0;
            w->arr.last = now;
        }
        break;
    }
    case MP_REPORT: {
        if (m->epoch > n->epoch)
            break; /* we are behind: the reporter's pings will bring us the state */
        if (m->epoch < n->epoch) {
            /* the reporter missed a decision: it may be the one it waits for */
            struct mp_msg s = { .type = MP_STATE, .epoch = n->epoch, .state = n };
            send(n, m->from, &s);
        }
        for (uint32_t i = 0; i < m->nitems; i++)
            if (m->items[i].id != MP_NOOP || m->epoch == n->epoch)
                add_news(n, m->items[i].id, now);
        struct mp_msg a = { .type = MP_ACK, .about = -2, .epoch = n->epoch };
        send(n, m->from, &a);
        if (n->nnews)
            schedule_ballot(n, now + n->tm.settle);
        break;
    }
    case MP_PREPARE:
    case MP_ACCEPT:
    case MP_COMMIT:
        /* A decision this node already holds (from a STATE that overtook
         * it) is still passed down: its subtree waits for it. */
        if (m->type == MP_COMMIT && m->epoch == n->epoch &&
            !(n->wave.active && n->wave.epoch > m->epoch)) {
            wave_join(n, m, now);
            break;
        }
        if (m->epoch != n->epoch + 1) {
            if (m->epoch > n->epoch + 1) {
                struct mp_msg r = { .type = m->type == MP_PREPARE ? MP_PROMISE : MP_ACCEPTED,
                                    .about = m->about, .epoch = m->epoch, .seq = m->seq,
                                    .lag = 1 };
                send(n, m->from, &r);
            } else if (m->type == MP_COMMIT) {
                /* already applied: answer so that the parent stops waiting */
                struct mp_msg r = { .type = MP_ACCEPTED, .about = m->about, .epoch = m->epoch,
                                    .seq = m->seq, .count = 1 };
                send(n, m->from, &r);
            }
            break;
        }
        /* a lower root steps aside for a proposal from a lower node */
        if (n->proposing && m->about < n->id && m->type == MP_PREPARE) {
            n->proposing = false;
            n->skip = 0;
            struct mp_msg rep = { .type = MP_REPORT, .about = m->about, .epoch = n->epoch,
                                  .nitems = n->nnews, .items = n->news };
            send(n, m->about, &rep);
        }
        wave_join(n, m, now);
        break;
    case MP_PROMISE:
    case MP_ACCEPTED: /* also the acknowledgement of a COMMIT */
        wave_answer(n, m, now);
        break;
    case MP_STATE:
        if (m->state)
            adopt_state(n, m->state, now);
        break;
    }
}

void mp_tick(struct mp_node *n, double now)
{
    if (n->stopped)
        return;
    /* no decision for too long after news: cut off, stop */
    if (n->news_since >= 0 && now - n->news_since > n->tm.stop) {
        n->stopped = true;
        return;
    }
    if (now >= n->next_ping) {
        n->next_ping += n->tm.period;
        if (n->next_ping <= now)
            n->next_ping = now + n->tm.period;
        for (int i = 0; i < MP_WATCH; i++) {
            struct mp_watch *w = &n->w[i];
            if (w->target < 0)
                continue;
            struct mp_msg p = { .type = MP_PING, .about = -1, .epoch = n->epoch, .seq = ++w->seq };
            send(n, w->target, &p);
        }
    }
    for (int i = 0; i < MP_WATCH; i++) {
        struct mp_watch *w = &n->w[i];
        if (w->target < 0)
            continue;
        if (w->probe_deadline > 0) {
            if (now >= w->probe_deadline) {
                w->probe_deadline = 0;
                add_news(n, w->target, now); /* retargets */
                report(n, now);
                i = -1; /* watches moved */
            }
            continue;
        }
        if (now - w->arr.last > mp_arrival_bound(&w->arr, n->tm.floor)) {
            /* suspect: probe again directly and through helpers */
            w->probe_deadline = now + n->tm.confirm;
            struct mp_msg p = { .type = MP_PING, .about = -1, .epoch = n->epoch, .seq = ++w->seq };
            send(n, w->target, &p);
            int live = nlive(n);
            for (int h = 0; h < MP_HELPERS && live > 3; h++) {
                int x;
                do
                    x = (int)(rnd(n) % (uint64_t)n->nnodes);
                while (!mp_is_alive(n, x) || x == n->id || x == w->target);
                struct mp_msg q = { .type = MP_PREQ, .about = w->target, .epoch = n->epoch,
                                    .seq = w->seq };
                send(n, x, &q);
            }
        }
    }
    /* The root does not take our reports (it may be cut off from us):
     * propose ourselves. Paxos keeps concurrent proposers safe, and a
     * proposer steps aside for one of a lower id. */
    if (n->nnews && !n->skip && now - n->skip_at > 6 * n->tm.resend + n->tm.confirm) {
        n->skip = 1;
        n->skip_at = now;
        n->next_report = now;
    }
    if (n->nnews && now >= n->next_report) {
        n->next_report = now + 2 * n->tm.resend;
        report(n, now);
    }
    if (n->ballot_at >= 0 && now >= n->ballot_at && !n->proposing)
        start_ballot(n, now);
    struct mp_wave *w = &n->wave;
    if (w->active && !w->replied) {
        bool resend = now >= w->next_resend;
        if (resend)
            w->next_resend = now + n->tm.resend;
        int nk = w->nkids;
        for (int i = 0; i < nk; i++) {
            if (w->kid_done[i])
                continue;
            if (now >= w->kid_deadline[i]) {
                /* silent subtree: its root is missing, ask its children */
                w->kid_done[i] = true;
                if (w->type == MP_PREPARE)
                    push(&w->miss, &w->nmiss, w->kids[i]);
                expand(n, pos_of(n, w->root, w->kids[i]), now);
            } else if (resend) {
                wave_send(n, w->kids[i]);
            }
        }
        wave_check(n, now);
    }
}

double mp_next(const struct mp_node *n)
{
    if (n->stopped)
        return 1e30;
    double t = n->next_ping;
    for (int i = 0; i < MP_WATCH; i++) {
        const struct mp_watch *w = &n->w[i];
        if (w->target < 0)
            continue;
        double d = w->probe_deadline > 0 ? w->probe_deadline
                                         : w->arr.last + mp_arrival_bound(&w->arr, n->tm.floor) + 1e-6;
        if (d < t)
            t = d;
    }
    if (n->nnews && n->next_report < t)
        t = n->next_report;
    if (n->ballot_at >= 0 && n->ballot_at < t)
        t = n->ballot_at;
    if (n->news_since >= 0 && n->news_since + n->tm.stop + 1e-6 < t)
        t = n->news_since + n->tm.stop + 1e-6;
    const struct mp_wave *w = &n->wave;
    if (w->active && !w->replied) {
        if (w->next_resend < t)
            t = w->next_resend;
        for (int i = 0; i < w->nkids; i++)
            if (!w->kid_done[i] && w->kid_deadline[i] < t)
                t = w->kid_deadline[i];
    }
    return t;
}
