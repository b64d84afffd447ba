/* The membership decision (whale/elastic.h "Decision"): pure and
 * deterministic, computed once by the coordinator of an agreement.
 *
 * Input: the base state (who holds which logical rank), the tasks that are
 * gone, and the link class between two tasks' nodes. Output: the next
 * state and the event. Greedy in rank order: each failed rank takes the
 * remaining spare task with the lowest (link class to the failed task's
 * node, task id), so the ranks of a failed node fill the nearest spare node
 * together. When spares run out and DP > 1, the DP replica with the most
 * failed ranks (ties: highest dp index) is dropped, its healthy tasks join
 * the spare pool, and the assignment runs again. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "member/el_internal.h"
#include "whale/error.h"

int el_state_copy(struct el_state *dst, const struct el_state *src)
{
    *dst = *src;
    dst->rank_of_task = malloc(sizeof(int) * (size_t)src->ntasks);
    dst->member = malloc((size_t)src->ntasks);
    if (!dst->rank_of_task || !dst->member) {
        free(dst->rank_of_task);
        free(dst->member);
        dst->rank_of_task = NULL;
        dst->member = NULL;
        return WHALE_ENOMEM;
    }
    memcpy(dst->rank_of_task, src->rank_of_task, sizeof(int) * (size_t)src->ntasks);
    memcpy(dst->member, src->member, (size_t)src->ntasks);
    return 0;
}

void el_state_free(struct el_state *s)
{
    free(s->rank_of_task);
    free(s->member);
    s->rank_of_task = NULL;
    s->member = NULL;
}

/* One assignment pass: assigned[r] = task for every rank of a kept replica.
 * Returns the number of ranks left without a task. */
static int assign(const struct el_state *b, const int *task_of_rank, const uint8_t *gone,
                  const uint8_t *dropped, const uint8_t *alive, el_class_fn cls, void *user,
                  int *assigned)
{
    int n = b->ntasks, left = 0;
    const struct whale_grid *g = &b->grid;
    uint8_t *used = calloc((size_t)n, 1);
    if (!used)
        return -1;
    /* pool: alive spares and healthy members of dropped replicas */
    for (int r = 0; r < b->world; r++) {
        int d = whale_grid_group_index(g, WHALE_AXIS_DP, r);
        assigned[r] = -1;
        if (dropped[d])
            continue;
        int t = task_of_rank[r];
        if (t >= 0 && !gone[t]) {
            assigned[r] = t;
            used[t] = 1;
        }
    }
    for (int r = 0; r < b->world; r++) {
        int d = whale_grid_group_index(g, WHALE_AXIS_DP, r);
        if (dropped[d] || assigned[r] >= 0)
            continue;
        int ft = task_of_rank[r], best = -1, bestc = INT_MAX;
        for (int t = 0; t < n; t++) {
            if (!alive[t] || used[t])
                continue;
            int rt = b->rank_of_task[t];
            bool pool = rt < 0 || dropped[whale_grid_group_index(g, WHALE_AXIS_DP, rt)];
            if (!pool)
                continue;
            int c = ft >= 0 && cls ? cls(ft, t, user) : 0;
            if (c < bestc) {
                bestc = c;
                best = t;
            }
        }
        if (best < 0) {
            left++;
            continue;
        }
        assigned[r] = best;
        used[best] = 1;
    }
    free(used);
    return left;
}

int el_decide(const struct el_state *b, const uint8_t *gone, const uint8_t *how, el_class_fn cls,
              void *user, struct el_state *out, struct whale_membership_event *ev)
{
    int n = b->ntasks, DP = b->dp, W = b->world;
    const struct whale_grid *g = &b->grid;
    memset(ev, 0, sizeof *ev);
    int *task_of_rank = malloc(sizeof(int) * (size_t)(W > 0 ? W : 1));
    int *assigned = malloc(sizeof(int) * (size_t)(W > 0 ? W : 1));
    uint8_t *dropped = calloc((size_t)DP + 1, 1), *alive = calloc((size_t)n, 1);
    int *nfail_d = calloc((size_t)DP + 1, sizeof(int));
    int rc = 0;
    out->rank_of_task = NULL;
    out->member = NULL;
    if (!task_of_rank || !assigned || !dropped || !alive || !nfail_d) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    for (int r = 0; r < W; r++)
        task_of_rank[r] = -1;
    for (int t = 0; t < n; t++) {
        alive[t] = b->member[t] && !gone[t];
        int r = b->rank_of_task[t];
        if (b->member[t] && r >= 0 && r < W)
            task_of_rank[r] = t;
    }
    for (int r = 0; r < W; r++)
        if (task_of_rank[r] < 0 || gone[task_of_rank[r]])
            nfail_d[whale_grid_group_index(g, WHALE_AXIS_DP, r)]++;
    int ndropped = 0;
    for (;;) {
        int left = assign(b, task_of_rank, gone, dropped, alive, cls, user, assigned);
        if (left < 0) {
            rc = WHALE_ENOMEM;
            goto out;
        }
        if (left == 0)
            break;
        /* with EP > 1 one replica less would leave a DP that EP does not
         * divide (expert groups are EP consecutive DP ranks): spares only */
        if (DP - ndropped <= 1 || whale_grid_ep(g) > 1) {
            rc = WHALE_ENOFIT;
            break;
        }
        int worst = -1;
        for (int d = 0; d < DP; d++)
            if (!dropped[d] && (worst < 0 || nfail_d[d] >= nfail_d[worst]))
                worst = d;
        dropped[worst] = 1;
        ndropped++;
    }
    /* the event */
    ev->epoch = b->epoch + 1;
    ev->kind = ndropped ? WHALE_RECOVERY_SHRUNK : WHALE_RECOVERY_REPLACED;
    ev->old_grid = *g;
    ev->grid = *g;
    ev->dp = DP - ndropped;
    ev->dropped_dp = -1;
    ev->agreed_step = INT64_MAX;
    for (int d = 0; d < DP; d++)
        if (dropped[d]) {
            if (ev->dropped_dp < 0)
                ev->dropped_dp = d;
            if (ev->ndropped < WHALE_MAX_FAILED)
                ev->dropped[ev->ndropped] = d;
            ev->ndropped++;
        }
    for (int r = 0; r < W; r++) {
        int t = task_of_rank[r];
        if (t >= 0 && !gone[t])
            continue;
        if (ev->nfailed < WHALE_MAX_FAILED) {
            int k = ev->nfailed;
            ev->failed_rank[k] = r;
            ev->failed_task[k] = t;
            ev->failed_how[k] = t >= 0 && how[t] ? (enum whale_detect)how[t] : WHALE_DETECT_CRASH;
            ev->replacement_task[k] =
                dropped[whale_grid_group_index(g, WHALE_AXIS_DP, r)] ? -1 : assigned[r];
            if (k == 0)
                ev->how = ev->failed_how[k];
        }
        ev->nfailed++;
    }
    for (int t = 0; t < n; t++)
        if (b->member[t] && gone[t] && b->rank_of_task[t] < 0) {
            if (ev->nfailed_spares < WHALE_MAX_FAILED) {
                ev->failed_spare_task[ev->nfailed_spares] = t;
                ev->failed_spare_how[ev->nfailed_spares] =
                    how[t] ? (enum whale_detect)how[t] : WHALE_DETECT_CRASH;
            }
            ev->nfailed_spares++;
            if (!ev->how && how[t])
                ev->how = (enum whale_detect)how[t];
        }
    if (!ev->how)
        ev->how = WHALE_DETECT_CRASH;
    if (rc)
        goto out;
    /* the next state */
    int NDP = DP - ndropped;
    int *newdp = calloc((size_t)DP, sizeof(int));
    if (!newdp || (rc = el_state_copy(out, b))) {
        free(newdp);
        rc = rc ? rc : WHALE_ENOMEM;
        goto out;
    }
    for (int d = 0, k = 0; d < DP; d++)
        newdp[d] = dropped[d] ? -1 : k++;
    out->epoch = b->epoch + 1;
    out->dp = NDP;
    out->world = whale_grid_world(&out->grid);
    for (int t = 0; t < n; t++) {
        out->member[t] = alive[t];
        out->rank_of_task[t] = -1;
    }
    for (int r = 0; r < W; r++) {
        struct whale_coords c;
        whale_grid_coords(g, r, &c);
        if (dropped[c.dp] || assigned[r] < 0)
            continue;
        c.dp = newdp[c.dp]; /* same (pp, tp), renumbered among the kept replicas */
        out->rank_of_task[assigned[r]] = whale_grid_rank(&out->grid, &c);
    }
    free(newdp);
out:
    if (rc)
        el_state_free(out);
    free(task_of_rank);
    free(assigned);
    free(dropped);
    free(alive);
    free(nfail_d);
    return rc;
}
