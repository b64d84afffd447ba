/* Whom a task heartbeats (mp.h, mp_ring_targets).
 *
 * Task t with local index l on node n heartbeats the tasks of local index
 * l (modulo that node's task count) on the next nodes of the ring,
 * skipping the ones it knows gone, until it has MP_WATCH targets: every
 * task is watched from MP_WATCH other nodes, so a lost node is seen for
 * each of its tasks, and same-node failures are the pid watchdog's. The
 * map is static and only skips: as tasks die, the set of tasks that
 * heartbeat a given task only grows, so a receiver may treat the silence
 * of anyone it has heard from as a failure. With fewer than MP_WATCH + 1
 * nodes the remaining targets come from the plain task ring. */
#include <stdlib.h>

#include "member/mp.h"

int mp_ring_init(struct mp_ring *r, int ntasks, const int *node_of, int nnodes)
{
    r->ntasks = ntasks;
    r->nnodes = nnodes;
    r->first = calloc((size_t)nnodes + 1, sizeof(int));
    r->tasks = malloc((size_t)ntasks * sizeof(int));
    r->local = malloc((size_t)ntasks * sizeof(int));
    r->node = malloc((size_t)ntasks * sizeof(int));
    if (!r->first || !r->tasks || !r->local || !r->node) {
        mp_ring_free(r);
        return -1;
    }
    for (int t = 0; t < ntasks; t++) {
        int x = node_of && node_of[t] >= 0 && node_of[t] < nnodes ? node_of[t] : 0;
        r->node[t] = x;
        r->first[x + 1]++;
    }
    for (int x = 0; x < nnodes; x++)
        r->first[x + 1] += r->first[x];
    int *fill = calloc((size_t)nnodes, sizeof(int));
    if (!fill) {
        mp_ring_free(r);
        return -1;
    }
    for (int t = 0; t < ntasks; t++) {
        int x = r->node[t];
        r->local[t] = fill[x];
        r->tasks[r->first[x] + fill[x]++] = t;
    }
    free(fill);
    return 0;
}

void mp_ring_free(struct mp_ring *r)
{
    free(r->first);
    free(r->tasks);
    free(r->local);
    free(r->node);
    r->first = r->tasks = r->local = r->node = NULL;
}

static bool chosen(const int *out, int k, int t)
{
    for (int i = 0; i < k; i++)
        if (out[i] == t)
            return true;
    return false;
}

int mp_ring_targets(const struct mp_ring *r, int me, bool (*ok)(int task, void *user), void *user,
                    int *out)
{
    int k = 0, nd = r->node[me], l = r->local[me];
    for (int d = 1; d < r->nnodes && k < MP_WATCH; d++) {
        int x = (nd + d) % r->nnodes, cnt = r->first[x + 1] - r->first[x];
        if (!cnt)
            continue;
        int t = r->tasks[r->first[x] + l % cnt];
        if (ok(t, user) && !chosen(out, k, t))
            out[k++] = t;
    }
    if (r->nnodes <= MP_WATCH)
        for (int d = 1; d < r->ntasks && k < MP_WATCH; d++) {
            int t = (me + d) % r->ntasks;
            if (ok(t, user) && !chosen(out, k, t))
                out[k++] = t;
        }
    return k;
}
