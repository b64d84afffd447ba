/* Layout and contract environment of whale-run's tasks, computed by the
 * same mapping code the SPANK plugin runs (whale/map.h), so a program sees
 * the same WHALE_* variables under whale-run and under srun.
 *
 * whale-run simulates `nodes` nodes on this machine (tasks split in blocks,
 * WHALE_NODE=node<i>) so that node-aware code (hierarchical collectives,
 * spare nodes) runs without a cluster; with one node WHALE_NODE is the
 * host name, as on a cluster. */
#include "task_env.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/map.h"

struct run_layout {
    struct run_layout_opts o;
    struct whale_map_input in;
    struct whale_layout lay;
    char **node_names;
    int *ntasks;
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
    l->node_names = calloc((size_t)o->nodes, sizeof(char *));
    l->ntasks = calloc((size_t)o->nodes, sizeof(int));
    if (!l->node_names || !l->ntasks) {
        run_layout_free(l);
        return WHALE_ENOMEM;
    }
    char host[256];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    for (int k = 0; k < o->nodes; k++) {
        char name[300];
        if (o->nodes == 1)
            snprintf(name, sizeof name, "%s", host);
        else
            snprintf(name, sizeof name, "node%d", k);
        l->node_names[k] = strdup(name);
        /* block distribution, as srun's default */
        l->ntasks[k] = o->ntasks / o->nodes + (k < o->ntasks % o->nodes ? 1 : 0);
        if (!l->node_names[k]) {
            run_layout_free(l);
            return WHALE_ENOMEM;
        }
    }
    l->in = (struct whale_map_input){
        .grid = o->grid, .spares = o->spares, .policy = WHALE_MAP_BLOCK,
        .nnodes = o->nodes, .nodes = (const char *const *)l->node_names, .ntasks = l->ntasks,
        .task_ids = NULL, .topo = NULL,
    };
    int rc = whale_map_compute(&l->in, &l->lay);
    if (rc) {
        run_layout_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int run_layout_rank(const struct run_layout *l, int task) { return l->lay.rank_of_task[task]; }
int run_layout_world(const struct run_layout *l) { return l->lay.world; }

static int add_env(const char *name, const char *value, void *user)
{
    return run_env_set(user, name, value);
}

int run_layout_env(const struct run_layout *l, int task, char ***env)
{
    struct whale_env_opts eo = { .plan = l->o.plan };
    return whale_map_task_env(&l->in, &l->lay, task, &eo, add_env, env);
}

void run_layout_free(struct run_layout *l)
{
    if (!l)
        return;
    if (l->lay.rank_of_task)
        whale_layout_free(&l->lay);
    if (l->node_names)
        for (int k = 0; k < l->o.nodes; k++)
            free(l->node_names[k]);
    free(l->node_names);
    free(l->ntasks);
    free(l);
}
