/* The step as Whale sees it: nodes, tasks per node, task ids, topology,
 * and the layout computed by the shared mapper (step.c). */
#ifndef SPANK_WHALE_STEP_H
#define SPANK_WHALE_STEP_H

#include "whale/conf.h"
#include "whale/map.h"

struct whale_step {
    char **nodes;
    int nnodes;
    int *ntasks;
    int *task_ids;            /* NULL: block */
    struct whale_topo *topo;
    struct whale_map_input in;
    struct whale_layout layout;
    bool have_layout;
};

struct whale_step_desc {
    const char *nodelist;        /* SLURM_STEP_NODELIST */
    const char *tasks_per_node;  /* SLURM_STEP_TASKS_PER_NODE (NULL with ntasks) */
    const int *ntasks;           /* or tasks per node as numbers */
    const int *task_ids;         /* node-major task ids (exact, from slurmctld) */
    const char *pmi_mapping;     /* SLURM_PMIX_MAPPING_SERV (exact), or NULL */
    const char *distribution;    /* SLURM_DISTRIBUTION when no mapping (srun) */
    const char *slurm_conf;      /* to find topology.conf */
};

/* Two stages so a planner can look at the step before degrees exist
 * (--whale-plan=auto: describe, search a plan on s->topo / s->nodes, then
 * lay out). Errors are logged.
 * describe: node list, tasks, task ids and the topology model. */
int whale_step_describe(struct whale_step *s, const struct whale_step_desc *d,
                        const struct whale_conf *c);
/* layout: the mapper with tp/pp/dp/spares/map from the plan (dp 0 = derive). */
int whale_step_layout(struct whale_step *s, const struct whale_plan *plan);
/* describe + layout */
int whale_step_build(struct whale_step *s, const struct whale_step_desc *d,
                     const struct whale_plan *plan, const struct whale_conf *c);
void whale_step_free(struct whale_step *s);

#endif
