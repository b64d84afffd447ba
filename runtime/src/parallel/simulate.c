/* Deterministic pipeline simulator: runs the per-rank pass lists under the
 * executor's semantics (in-order passes per rank, a pass waits only for its
 * input, sends never block) to prove them complete and deadlock-free and to
 * measure the bubble and the activation stash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/pipeline.h"

struct sim {
    int p, v, m, S;
    int *idx;        /* [r][kind][chunk][mb] -> op index, -1 */
    double *end;     /* [r][op] end time, < 0 not run */
};

static int *slot(struct sim *z, int r, int kind, int chunk, int mb)
{
    return &z->idx[(((size_t)r * 2 + (size_t)kind) * (size_t)z->v + (size_t)chunk) * (size_t)z->m +
                   (size_t)mb];
}

#define FAIL(...) do { snprintf(res->why, sizeof res->why, __VA_ARGS__); res->ok = false; goto out; } while (0)

int whale_pp_simulate(const struct whale_pp_schedule *scheds, int p,
                      const struct whale_pp_sim_cost *cost, double *start,
                      struct whale_pp_sim_result *res)
{
    memset(res, 0, sizeof *res);
    if (p < 1 || !scheds || !cost)
        return WHALE_EINVAL;
    struct sim z = { .p = p, .v = scheds[0].v, .m = scheds[0].m };
    z.S = p * z.v;
    int n = 2 * z.v * z.m;
    int rc = 0;
    int *next = calloc((size_t)p, sizeof *next);
    int *stash = calloc((size_t)p, sizeof *stash);
    double *clock = calloc((size_t)p, sizeof *clock);
    z.idx = malloc((size_t)p * (size_t)n * sizeof *z.idx);
    z.end = malloc((size_t)p * (size_t)n * sizeof *z.end);
    if (!next || !stash || !clock || !z.idx || !z.end) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < (size_t)p * (size_t)n; i++) {
        z.idx[i] = -1;
        z.end[i] = -1;
    }
    res->ok = true;

    /* structure: sizes, each pass once, forward before backward, peers */
    for (int r = 0; r < p; r++) {
        const struct whale_pp_schedule *s = &scheds[r];
        if (s->p != p || s->v != z.v || s->m != z.m || s->rank != r)
            FAIL("rank %d: list built for p=%d v=%d m=%d rank=%d", r, s->p, s->v, s->m, s->rank);
        if (s->n != n)
            FAIL("rank %d: %d passes, expected %d", r, s->n, n);
        for (int i = 0; i < n; i++) {
            const struct whale_pp_op *o = &s->ops[i];
            if (o->kind < 0 || o->kind > 1 || o->chunk < 0 || o->chunk >= z.v || o->mb < 0 ||
                o->mb >= z.m)
                FAIL("rank %d pass %d: bad (kind %d, chunk %d, mb %d)", r, i, o->kind, o->chunk,
                     o->mb);
            int *sl = slot(&z, r, o->kind, o->chunk, o->mb);
            if (*sl >= 0)
                FAIL("rank %d: %c%d.%d runs twice", r, o->kind ? 'B' : 'F', o->chunk, o->mb);
            *sl = i;
            if (o->kind == WHALE_PP_BACKWARD && *slot(&z, r, 0, o->chunk, o->mb) < 0)
                FAIL("rank %d: B%d.%d before its forward", r, o->chunk, o->mb);
            int vs = whale_pp_vstage(p, r, o->chunk);
            int prev = vs > 0 ? (vs - 1) % p : -1, nxt = vs < z.S - 1 ? (vs + 1) % p : -1;
            int want_recv = o->kind == WHALE_PP_FORWARD ? prev : nxt;
            int want_send = o->kind == WHALE_PP_FORWARD ? nxt : prev;
            if (o->recv_peer != want_recv || o->send_peer != want_send)
                FAIL("rank %d: %c%d.%d receives from %d / sends to %d, expected %d / %d", r,
                     o->kind ? 'B' : 'F', o->chunk, o->mb, o->recv_peer, o->send_peer,
                     want_recv, want_send);
        }
    }

    /* execution */
    int remaining = p * n;
    while (remaining > 0) {
        bool progress = false;
        for (int r = 0; r < p; r++) {
            const struct whale_pp_schedule *s = &scheds[r];
            while (next[r] < n) {
                const struct whale_pp_op *o = &s->ops[next[r]];
                int vs = whale_pp_vstage(p, r, o->chunk);
                double ready = 0;
                if (o->recv_peer >= 0) {
                    int pvs = o->kind == WHALE_PP_FORWARD ? vs - 1 : vs + 1;
                    int pr = pvs % p, pc = pvs / p;
                    int pi = *slot(&z, pr, o->kind, pc, o->mb);
                    double e = z.end[(size_t)pr * (size_t)n + (size_t)pi];
                    if (e < 0)
                        break; /* input not produced yet */
                    ready = e + cost->p2p;
                }
                double t0 = clock[r] > ready ? clock[r] : ready;
                double t1 = t0 + (o->kind == WHALE_PP_FORWARD ? cost->fwd : cost->bwd);
                if (start)
                    start[(size_t)r * (size_t)n + (size_t)next[r]] = t0;
                z.end[(size_t)r * (size_t)n + (size_t)next[r]] = t1;
                clock[r] = t1;
                if (o->kind == WHALE_PP_FORWARD) {
                    stash[r]++;
                    if (r < 64 && stash[r] > res->stash[r])
                        res->stash[r] = stash[r];
                    if (stash[r] > res->max_stash)
                        res->max_stash = stash[r];
                } else {
                    stash[r]--;
                }
                next[r]++;
                remaining--;
                progress = true;
            }
        }
        if (!progress) {
            int used = snprintf(res->why, sizeof res->why, "deadlock:");
            for (int r = 0; r < p && used < (int)sizeof res->why; r++) {
                if (next[r] >= n)
                    continue;
                const struct whale_pp_op *o = &scheds[r].ops[next[r]];
                used += snprintf(res->why + used, sizeof res->why - (size_t)used,
                                 " rank %d waits in %c%d.%d;", r, o->kind ? 'B' : 'F', o->chunk,
                                 o->mb);
            }
            res->ok = false;
            goto out;
        }
    }
    for (int r = 0; r < p; r++)
        if (clock[r] > res->makespan)
            res->makespan = clock[r];
    res->busy = (double)z.v * z.m * (cost->fwd + cost->bwd);
    res->bubble = res->busy > 0 ? (res->makespan - res->busy) / res->busy : 0;
out:
    free(next);
    free(stash);
    free(clock);
    free(z.idx);
    free(z.end);
    return rc;
}
