/* A way back into a running step: pure decisions and the join request
 * check (no ctx, no lock, no transport), so that whichever agreement runs
 * them (the coordinator of el_agree.c today, the tree of mp_node.c later)
 * gets the same result from the same inputs.
 *
 * Task slots are fixed from the start of the step; a decision that removed
 * a task left its slot with member = 0. A process started again for that
 * slot (same task id, same node: its node came back, slurmd restarted)
 * asks to take it again with a join request (el_join_check decides whether
 * the request may be agreed on at all); the agreement then decides JOINED
 * (el_decide_join): the slot is a member again, as a spare with no rank.
 *
 * A step that dropped DP replicas (SHRUNK) runs below its planned DP. At a
 * step boundary, when free spares can fill at least one whole replica,
 * el_decide_grow decides GROWN: the kept replicas keep their dp index and
 * their (pp, tp) places, the added replicas take the next dp indices, each
 * added rank the free spare nearest (link class) to the task holding the
 * same (pp, tp) place in replica 0, ties by lowest task id. The kept
 * replicas were numbered 0..D-1 in their old order by the shrink, so after
 * a shrink from P to D and a grow back to P with the dropped replicas last
 * the layout is the planned one again; the global batch never changes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "member/el_internal.h"
#include "whale/error.h"

int el_decide_join(const struct el_state *b, const int *tasks, int ntasks_join,
                   struct el_state *out, struct whale_membership_event *ev)
{
    memset(ev, 0, sizeof *ev);
    out->rank_of_task = NULL;
    out->member = NULL;
    if (ntasks_join <= 0)
        return WHALE_EINVAL;
    for (int i = 0; i < ntasks_join; i++) {
        int t = tasks[i];
        /* a live member keeps its place: only a removed slot is taken again */
        if (t < 0 || t >= b->ntasks || b->member[t])
            return WHALE_ESTATE;
    }
    int rc = el_state_copy(out, b);
    if (rc)
        return rc;
    out->epoch = b->epoch + 1;
    ev->epoch = out->epoch;
    ev->kind = WHALE_RECOVERY_JOINED;
    ev->how = WHALE_DETECT_CRASH;
    ev->grid = b->grid;
    ev->old_grid = b->grid;
    ev->dropped_dp = -1;
    ev->agreed_step = INT64_MAX;
    for (int i = 0; i < ntasks_join; i++) {
        int t = tasks[i];
        if (out->member[t])
            continue; /* named twice */
        out->member[t] = 1;
        out->rank_of_task[t] = -1;
        if (ev->njoined < WHALE_MAX_FAILED)
            ev->joined_task[ev->njoined++] = t;
    }
    return 0;
}

int el_grow_count(const struct el_state *b, int planned_dp)
{
    const struct whale_grid *g = &b->grid;
    if (planned_dp <= g->dp || g->dp <= 0 || whale_grid_ep(g) > 1)
        return 0; /* with EP > 1 the expert groups fix DP (the shrink refuses too) */
    int per = b->world / g->dp, free_spares = 0;
    for (int t = 0; t < b->ntasks; t++)
        free_spares += b->member[t] && b->rank_of_task[t] < 0;
    int k = per > 0 ? free_spares / per : 0;
    return k < planned_dp - g->dp ? k : planned_dp - g->dp;
}

int el_decide_grow(const struct el_state *b, int planned_dp, el_class_fn cls, void *user,
                   struct el_state *out, struct whale_membership_event *ev)
{
    memset(ev, 0, sizeof *ev);
    out->rank_of_task = NULL;
    out->member = NULL;
    int add = el_grow_count(b, planned_dp);
    if (add <= 0)
        return WHALE_ENOFIT;
    const struct whale_grid *g = &b->grid;
    int n = b->ntasks, D = g->dp;
    struct whale_grid ng = *g;
    ng.dp = D + add;
    int NW = whale_grid_world(&ng);
    int *tor = malloc(sizeof(int) * (size_t)(b->world > 0 ? b->world : 1));
    int rc = tor ? el_state_copy(out, b) : WHALE_ENOMEM;
    if (rc) {
        free(tor);
        return rc;
    }
    for (int r = 0; r < b->world; r++)
        tor[r] = -1;
    for (int t = 0; t < n; t++)
        if (b->member[t] && b->rank_of_task[t] >= 0 && b->rank_of_task[t] < b->world)
            tor[b->rank_of_task[t]] = t;
    out->epoch = b->epoch + 1;
    out->grid = ng;
    out->world = NW;
    /* the kept replicas: same coordinates, numbered for the new DP */
    for (int t = 0; t < n; t++) {
        int r = b->rank_of_task[t];
        if (!b->member[t] || r < 0)
            continue;
        struct whale_coords c;
        whale_grid_coords(g, r, &c);
        out->rank_of_task[t] = whale_grid_rank(&ng, &c);
    }
    ev->epoch = out->epoch;
    ev->kind = WHALE_RECOVERY_GROWN;
    ev->how = WHALE_DETECT_CRASH;
    ev->old_grid = *g;
    ev->grid = ng;
    ev->dropped_dp = -1;
    ev->agreed_step = INT64_MAX;
    /* the added replicas, in new rank order */
    for (int r = 0; r < NW; r++) {
        struct whale_coords c;
        whale_grid_coords(&ng, r, &c);
        if (c.dp < D)
            continue;
        struct whale_coords c0 = c;
        c0.dp = 0;
        int near = tor[whale_grid_rank(g, &c0)], best = -1, bestc = INT_MAX;
        for (int t = 0; t < n; t++) {
            if (!out->member[t] || out->rank_of_task[t] >= 0)
                continue;
            int k = near >= 0 && cls ? cls(near, t, user) : 0;
            if (k < bestc) {
                bestc = k;
                best = t;
            }
        }
        if (best < 0) { /* cannot happen: el_grow_count counted the spares */
            el_state_free(out);
            free(tor);
            return WHALE_ENOFIT;
        }
        out->rank_of_task[best] = r;
        if (ev->nadded < WHALE_MAX_FAILED) {
            ev->added_rank[ev->nadded] = r;
            ev->added_task[ev->nadded] = best;
        }
        ev->nadded++;
    }
    free(tor);
    return 0;
}

/* Constant time: how long a wrong secret takes says nothing about it. */
static bool same_secret(const uint8_t *a, const uint8_t *b)
{
    uint8_t d = 0;
    for (int i = 0; i < EL_JOIN_SECRET; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

int el_join_check(const void *msg, size_t len, const struct el_join_expect *x,
                  struct el_join_req *out, char *why, size_t whylen)
{
    struct el_join_req rq;
    if (len < sizeof rq) {
        snprintf(why, whylen, "a join request of %zu bytes (at least %zu expected)", len, sizeof rq);
        return WHALE_EDATA;
    }
    memcpy(&rq, msg, sizeof rq);
    rq.step_id[sizeof rq.step_id - 1] = '\0';
    rq.node[sizeof rq.node - 1] = '\0';
    if (rq.magic != EL_JOIN_MAGIC) {
        snprintf(why, whylen, "not a join request (magic %#x)", rq.magic);
        return WHALE_EDATA;
    }
    if ((size_t)rq.addr_len != len - sizeof rq || rq.addr_len == 0) {
        snprintf(why, whylen, "a join request whose worker address is %u bytes in a message of %zu",
                 rq.addr_len, len);
        return WHALE_EDATA;
    }
    /* the secret first: whoever does not hold it learns nothing else */
    if (!same_secret(rq.secret, x->secret)) {
        snprintf(why, whylen, "a join request for task %d with a wrong secret", rq.task);
        return WHALE_EINVAL;
    }
    if (strcmp(rq.step_id, x->step_id)) {
        snprintf(why, whylen, "a join request for step '%s', this step is '%s'", rq.step_id,
                 x->step_id);
        return WHALE_EINVAL;
    }
    if (rq.ntasks != x->ntasks || rq.task < 0 || rq.task >= x->ntasks) {
        snprintf(why, whylen, "a join request for task %d of %d, this step has %d tasks", rq.task,
                 rq.ntasks, x->ntasks);
        return WHALE_EINVAL;
    }
    const char *want = x->node_of_task ? x->node_of_task[rq.task] : NULL;
    if (want && strcmp(want, rq.node)) {
        snprintf(why, whylen, "a join request for task %d from node '%s', the task's node is '%s'",
                 rq.task, rq.node, want);
        return WHALE_EINVAL;
    }
    if (x->member && x->member[rq.task]) {
        snprintf(why, whylen, "a join request for task %d, which is still a member", rq.task);
        return WHALE_ESTATE;
    }
    if (out)
        *out = rq;
    return 0;
}

int el_decide_rejoin(const struct el_state *b, const int *tasks, int k, int planned_dp,
                     el_class_fn cls, void *user, struct el_state *out,
                     struct whale_membership_event *ev)
{
    struct el_state joined;
    struct whale_membership_event jev;
    const struct el_state *from = b;
    int rc;
    out->rank_of_task = NULL;
    out->member = NULL;
    if (k > 0) {
        if ((rc = el_decide_join(b, tasks, k, &joined, &jev)))
            return rc;
        from = &joined;
    }
    if (el_grow_count(from, planned_dp) <= 0) {
        if (k <= 0) {
            memset(ev, 0, sizeof *ev);
            return WHALE_ENOFIT; /* nothing joined, nothing to grow */
        }
        *out = joined;
        *ev = jev;
        return 0;
    }
    rc = el_decide_grow(from, planned_dp, cls, user, out, ev);
    if (k > 0) {
        /* one decision, one epoch: the grown state follows b directly */
        if (!rc) {
            out->epoch = b->epoch + 1;
            ev->epoch = out->epoch;
            ev->njoined = jev.njoined;
            memcpy(ev->joined_task, jev.joined_task, sizeof ev->joined_task);
        }
        el_state_free(&joined);
    }
    return rc;
}

/* ---- peer table: who is where, for a joiner and about a joiner ----------
 * Per entry: int32 task, uint16 node name length, the name (no NUL),
 * uint32 address length, the UCX worker address, uint32 process id
 * length, the process id (comm_proc_id: the same-node watchdog's). The
 * joiner gets every member's entry with the decision that takes it in;
 * the survivors get the joiners' entries with that decision. Parsed
 * entries point into the message. */
static size_t peer_size(const struct el_peer *p)
{
    return sizeof(int32_t) + sizeof(uint16_t) + strlen(p->node) + 2 * sizeof(uint32_t) +
           p->addr_len + p->proc_len;
}

size_t el_peers_size(int k, const struct el_peer *p)
{
    size_t s = sizeof(uint32_t);
    for (int i = 0; i < k; i++)
        s += peer_size(&p[i]);
    return s;
}

static uint8_t *put(uint8_t *o, const void *v, size_t n)
{
    if (n) /* a removed slot has no address (NULL) */
        memcpy(o, v, n);
    return o + n;
}

size_t el_peers_put(uint8_t *out, int k, const struct el_peer *p)
{
    uint8_t *o = out;
    uint32_t nk = (uint32_t)k;
    o = put(o, &nk, sizeof nk);
    for (int i = 0; i < k; i++) {
        int32_t t = p[i].task;
        size_t nl = strlen(p[i].node);
        uint16_t l16 = (uint16_t)(nl < UINT16_MAX ? nl : UINT16_MAX);
        uint32_t al = (uint32_t)p[i].addr_len, pl = (uint32_t)p[i].proc_len;
        o = put(o, &t, sizeof t);
        o = put(o, &l16, sizeof l16);
        o = put(o, p[i].node, l16);
        o = put(o, &al, sizeof al);
        o = put(o, p[i].addr, al);
        o = put(o, &pl, sizeof pl);
        o = put(o, p[i].proc, pl);
    }
    return (size_t)(o - out);
}

int el_peers_get(const uint8_t *in, size_t len, int ntasks, int max, struct el_peer *p,
                 char (*names)[64], int *k)
{
    size_t off = 0;
    uint32_t nk;
    *k = 0;
    if (len < sizeof nk)
        return WHALE_EDATA;
    memcpy(&nk, in, sizeof nk);
    off += sizeof nk;
    if (nk > (uint32_t)max)
        return WHALE_EDATA;
    for (uint32_t i = 0; i < nk; i++) {
        int32_t t;
        uint16_t nl;
        uint32_t al, pl;
        if (len - off < sizeof t + sizeof nl)
            return WHALE_EDATA;
        memcpy(&t, in + off, sizeof t);
        memcpy(&nl, in + off + sizeof t, sizeof nl);
        off += sizeof t + sizeof nl;
        if (t < 0 || t >= ntasks || nl >= 64 || len - off < (size_t)nl + sizeof al)
            return WHALE_EDATA;
        memcpy(names[i], in + off, nl);
        names[i][nl] = '\0';
        if (memchr(names[i], '\0', nl))
            return WHALE_EDATA;
        off += nl;
        memcpy(&al, in + off, sizeof al);
        off += sizeof al;
        if (al > EL_JOIN_ADDR_MAX || len - off < (size_t)al + sizeof pl)
            return WHALE_EDATA;
        const uint8_t *addr = in + off;
        off += al;
        memcpy(&pl, in + off, sizeof pl);
        off += sizeof pl;
        if (pl > 256 || len - off < pl)
            return WHALE_EDATA;
        p[i] = (struct el_peer){ .task = t, .node = names[i], .addr = addr, .addr_len = al,
                                 .proc = in + off, .proc_len = pl };
        off += pl;
    }
    if (off != len)
        return WHALE_EDATA;
    *k = (int)nk;
    return 0;
}
