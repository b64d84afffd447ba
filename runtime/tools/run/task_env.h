/* The contract environment whale-run gives each task: exactly what the
 * SPANK plugin would give it on a cluster (same mapping code). */
#ifndef WHALE_RUN_TASK_ENV_H
#define WHALE_RUN_TASK_ENV_H

#include "whale/grid.h"

struct run_layout_opts {
    int ntasks;       /* tasks to start */
    WHALE_GRID(grid); /* dp 0: derived */
    int spares;       /* spare nodes (whole simulated nodes) */
    int nodes;        /* simulated nodes (tasks split in blocks), >= 1 */
    const char *plan; /* WHALE_PLAN or NULL */
};

struct run_layout;

/* Compute the layout; logs and returns WHALE_E* on bad degrees. */
int run_layout_new(const struct run_layout_opts *o, struct run_layout **out);
/* Logical rank of a task, -1 for a spare. */
int run_layout_rank(const struct run_layout *l, int task);
int run_layout_world(const struct run_layout *l);
/* Append NAME=VALUE strings of task's contract to *env (NULL-terminated). */
int run_layout_env(const struct run_layout *l, int task, char ***env);
void run_layout_free(struct run_layout *l);

/* env helpers: set (replace or append) NAME=VALUE in a malloc'd env array. */
int run_env_set(char ***env, const char *name, const char *value);

#endif
