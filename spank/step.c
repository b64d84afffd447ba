/* Step description -> layout, shared by srun (early checks, --whale-verbose)
 * and slurmstepd (the env of every task). */
#include "step.h"
#include "plugin.h"
#include "whale/error.h"
#include "whale/log.h"

#include <stdlib.h>
#include <string.h>

/* Task ids from srun's distribution when Slurm's exact mapping is not
 * available (srun before launch): block and cyclic are exact; plane and
 * arbitrary fall back to block for these early checks (slurmstepd uses the
 * exact PMIx mapping). */
static int ids_from_distribution(struct whale_step *s, const char *dist)
{
    if (!dist || strncmp(dist, "cyclic", 6))
        return 0;
    int total = 0;
    for (int i = 0; i < s->nnodes; i++)
        total += s->ntasks[i];
    int *fill = calloc((size_t)s->nnodes, sizeof(int));
    int *off = malloc(((size_t)s->nnodes + 1) * sizeof(int));
    int *live = malloc(((size_t)s->nnodes + 1) * sizeof(int));
    s->task_ids = malloc((size_t)total * sizeof(int));
    if (!fill || !off || !live || !s->task_ids) {
        free(fill);
        free(off);
        free(live);
        return WHALE_ENOMEM;
    }
    off[0] = 0;
    int nlive = 0;
    for (int i = 0; i < s->nnodes; i++) {
        off[i + 1] = off[i] + s->ntasks[i];
        if (s->ntasks[i] > 0)
            live[nlive++] = i;
    }
    /* round robin over the nodes that still have room, dropping the full
     * ones as it goes: one node with many tasks among many with one no
     * longer walks every node once per round (O(tasks x nodes)) */
    for (int t = 0; t < total && nlive > 0;) {
        int keep = 0;
        for (int k = 0; k < nlive && t < total; k++) {
            int i = live[k];
            s->task_ids[off[i] + fill[i]++] = t++;
            if (fill[i] < s->ntasks[i])
                live[keep++] = i;
        }
        nlive = keep;
    }
    free(fill);
    free(off);
    free(live);
    return 0;
}

int whale_step_describe(struct whale_step *s, const struct whale_step_desc *d,
                        const struct whale_conf *c)
{
    memset(s, 0, sizeof *s);
    int rc;
    if (!d->nodelist || (!d->tasks_per_node && !d->ntasks)) {
        whale_error("the step's node list or tasks per node is unknown (SLURM_STEP_NODELIST / "
                    "SLURM_STEP_TASKS_PER_NODE not set)");
        return WHALE_EINVAL;
    }
    if ((rc = whale_hostlist_expand(d->nodelist, &s->nodes, &s->nnodes))) {
        whale_error("cannot expand the step's node list '%s'", d->nodelist);
        return rc;
    }
    if (!(s->ntasks = malloc((size_t)s->nnodes * sizeof(int))))
        return WHALE_ENOMEM;
    int total = 0;
    if (d->ntasks) {
        memcpy(s->ntasks, d->ntasks, (size_t)s->nnodes * sizeof(int));
    } else if ((rc = whale_map_parse_tasks_per_node(d->tasks_per_node, s->nnodes, s->ntasks))) {
        return rc;
    }
    for (int i = 0; i < s->nnodes; i++)
        total += s->ntasks[i];
    if (d->task_ids) {
        if (!(s->task_ids = malloc((size_t)total * sizeof(int))))
            return WHALE_ENOMEM;
        memcpy(s->task_ids, d->task_ids, (size_t)total * sizeof(int));
    } else if (d->pmi_mapping && *d->pmi_mapping)
        rc = whale_map_parse_pmi_mapping(d->pmi_mapping, s->nnodes, s->ntasks, &s->task_ids);
    else
        rc = ids_from_distribution(s, d->distribution);
    if (rc)
        return rc;
    if ((rc = whale_conf_build_topo(c, d->slurm_conf, &s->topo)))
        return rc;
    for (int i = 0; i < s->nnodes; i++)
        if ((rc = whale_conf_topo_ensure_node(c, s->topo, s->nodes[i])) < 0)
            return rc;
    return 0;
}

int whale_step_layout(struct whale_step *s, const struct whale_plan *plan)
{
    int rc;
    if (s->have_layout) {
        whale_layout_free(&s->layout);
        s->have_layout = false;
    }
    s->in.grid = plan->grid;
    s->in.spares = plan->spares;
    s->in.policy = plan->map;
    s->in.nnodes = s->nnodes;
    s->in.nodes = (const char *const *)s->nodes;
    s->in.ntasks = s->ntasks;
    s->in.task_ids = s->task_ids;
    s->in.topo = s->topo;
    if ((rc = whale_map_compute(&s->in, &s->layout)))
        return rc;
    s->have_layout = true;
    return 0;
}

int whale_step_build(struct whale_step *s, const struct whale_step_desc *d,
                     const struct whale_plan *plan, const struct whale_conf *c)
{
    int rc = whale_step_describe(s, d, c);
    return rc ? rc : whale_step_layout(s, plan);
}

void whale_step_free(struct whale_step *s)
{
    if (s->have_layout)
        whale_layout_free(&s->layout);
    for (int i = 0; i < s->nnodes; i++)
        free(s->nodes[i]);
    free(s->nodes);
    free(s->ntasks);
    free(s->task_ids);
    whale_topo_free(s->topo);
    memset(s, 0, sizeof *s);
}
