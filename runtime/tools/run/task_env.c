/* Layout and contract environment of whale-run's tasks.
 *
 * whale-run simulates `nodes` nodes on this machine (tasks split in blocks,
 * the last `spares` nodes held back as spares) so that node-aware code
 * (hierarchical collectives, spare promotion) runs without a cluster. */
#include "task_env.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"

struct run_layout {
    struct run_layout_opts o;
    int world;
    int *rank_of_task, *task_of_rank, *node_of_task, *local_of_task;
    char **node_names;
    char *rankmap;
};

int run_env_set(char ***env, const char *name, const char *value)
{
    size_t nl = strlen(name), n = 0;
    char *kv = malloc(nl + strlen(value) + 2);
    if (!kv)
        return WHALE_ENOMEM;
    sprintf(kv, "%s=%s", name, value);
    char **e = *env;
    for (; e && e[n]; n++)
        if (!strncmp(e[n], name, nl) && e[n][nl] == '=') {
            free(e[n]);
            e[n] = kv;
            return 0;
        }
    char **ne = realloc(e, (n + 2) * sizeof *ne);
    if (!ne) {
        free(kv);
        return WHALE_ENOMEM;
    }
    ne[n] = kv;
    ne[n + 1] = NULL;
    *env = ne;
    return 0;
}

static size_t part_len(size_t count, int p, int b)
{
    return count / (size_t)p + ((size_t)b < count % (size_t)p ? 1 : 0);
}

int run_layout_new(const struct run_layout_opts *o, struct run_layout **out)
{
    *out = NULL;
    if (o->nodes < 1 || o->nodes > o->ntasks) {
        whale_error("--nodes=%d must be between 1 and the number of tasks (%d)", o->nodes, o->ntasks);
        return WHALE_EINVAL;
    }
    if (o->spares < 0 || o->spares >= o->nodes) {
        whale_error("--spares=%d: spares are whole nodes and at least one working node must remain "
                    "(use --nodes to simulate more than %d node%s)", o->spares, o->nodes,
                    o->nodes > 1 ? "s" : "");
        return WHALE_EINVAL;
    }
    struct run_layout *l = calloc(1, sizeof *l);
    if (!l)
        return WHALE_ENOMEM;
    l->o = *o;
    int n = o->ntasks;
    l->rank_of_task = malloc(sizeof(int) * (size_t)n);
    l->task_of_rank = malloc(sizeof(int) * (size_t)n);
    l->node_of_task = malloc(sizeof(int) * (size_t)n);
    l->local_of_task = malloc(sizeof(int) * (size_t)n);
    l->node_names = calloc((size_t)o->nodes, sizeof(char *));
    if (!l->rank_of_task || !l->task_of_rank || !l->node_of_task || !l->local_of_task || !l->node_names) {
        run_layout_free(l);
        return WHALE_ENOMEM;
    }
    char host[256];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    int t = 0, w = 0;
    for (int k = 0; k < o->nodes; k++) {
        char name[300];
        if (o->nodes == 1)
            snprintf(name, sizeof name, "%s", host);
        else
            snprintf(name, sizeof name, "node%d", k);
        l->node_names[k] = strdup(name);
        bool spare = k >= o->nodes - o->spares;
        for (size_t j = 0; j < part_len((size_t)n, o->nodes, k); j++, t++) {
            l->node_of_task[t] = k;
            l->local_of_task[t] = (int)j;
            l->rank_of_task[t] = spare ? -1 : w;
            if (!spare)
                l->task_of_rank[w++] = t;
        }
    }
    l->world = w;
    int tp = o->tp, pp = o->pp, dp = o->dp;
    if (tp < 1 || pp < 1 || dp < 0 || w % (tp * pp) || (dp && tp * pp * dp != w)) {
        whale_error("TP=%d x PP=%d x DP=%d does not match the %d working tasks (%d tasks, %d spare "
                    "node(s))", tp, pp, dp ? dp : w / (tp * pp > 0 ? tp * pp : 1), w, n, o->spares);
        run_layout_free(l);
        return WHALE_EINVAL;
    }
    l->o.dp = w / (tp * pp);
    /* WHALE_RANKMAP text: "A-B" ranges of task ids in rank order. */
    size_t cap = 32 + (size_t)w * 12;
    l->rankmap = malloc(cap);
    if (!l->rankmap) {
        run_layout_free(l);
        return WHALE_ENOMEM;
    }
    size_t pos = 0;
    for (int r = 0; r < w;) {
        int e = r;
        while (e + 1 < w && l->task_of_rank[e + 1] == l->task_of_rank[e] + 1)
            e++;
        pos += (size_t)snprintf(l->rankmap + pos, cap - pos, "%s%d", r ? "," : "", l->task_of_rank[r]);
        if (e > r)
            pos += (size_t)snprintf(l->rankmap + pos, cap - pos, "-%d", l->task_of_rank[e]);
        r = e + 1;
    }
    *out = l;
    return 0;
}

int run_layout_rank(const struct run_layout *l, int task) { return l->rank_of_task[task]; }
int run_layout_world(const struct run_layout *l) { return l->world; }

int run_layout_env(const struct run_layout *l, int task, char ***env)
{
    char v[64];
    int rc = 0, r = l->rank_of_task[task];
    const int tp = l->o.tp, pp = l->o.pp, dp = l->o.dp;
#define SETI(name, val) \
    do { snprintf(v, sizeof v, "%d", (val)); if ((rc = run_env_set(env, name, v))) return rc; } while (0)
    SETI(WHALE_ENV_TP, tp);
    SETI(WHALE_ENV_PP, pp);
    SETI(WHALE_ENV_DP, dp);
    SETI(WHALE_ENV_WORLD, l->world);
    SETI(WHALE_ENV_RANK, r);
    SETI(WHALE_ENV_TP_RANK, r >= 0 ? r % tp : -1);
    SETI(WHALE_ENV_DP_RANK, r >= 0 ? (r / tp) % dp : -1);
    SETI(WHALE_ENV_PP_RANK, r >= 0 ? r / (tp * dp) : -1);
    SETI(WHALE_ENV_SPARE, r < 0);
    SETI(WHALE_ENV_NTASKS, l->o.ntasks);
    SETI(WHALE_ENV_TASK_ID, task);
    SETI(WHALE_ENV_LOCAL_RANK, l->local_of_task[task]);
#undef SETI
    if ((rc = run_env_set(env, WHALE_ENV_RANKMAP, l->rankmap)) ||
        (rc = run_env_set(env, WHALE_ENV_NODE, l->node_names[l->node_of_task[task]])))
        return rc;
    if (l->o.plan && (rc = run_env_set(env, WHALE_ENV_PLAN, l->o.plan)))
        return rc;
    return 0;
}

void run_layout_free(struct run_layout *l)
{
    if (!l)
        return;
    free(l->rank_of_task);
    free(l->task_of_rank);
    free(l->node_of_task);
    free(l->local_of_task);
    if (l->node_names)
        for (int k = 0; k < l->o.nodes; k++)
            free(l->node_names[k]);
    free(l->node_names);
    free(l->rankmap);
    free(l);
}
