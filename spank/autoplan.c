/* The planner inside srun: --whale-plan=auto searches the fastest plan that
 * fits on the step's real nodes (their GPU types, NVLink domains and leaf
 * switches from whale.conf + topology.conf), and --whale-model with
 * explicit degrees checks them against device memory, both before any task
 * starts. Everything here is the dependency-free core (whale/plan.h). */
#include "plugin.h"
#include "step.h"
#include "whale/error.h"
#include "whale/modeldesc.h"
#include "whale/plan.h"
#include "whale/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The cluster the step's working nodes form. Spare nodes are whole nodes
 * the mapper holds back later; they are left out of the count here (the
 * last ones in Slurm order: the exact choice does not change the device
 * mix of a homogeneous step). */
static int step_cluster(const struct whale_step *s, int spares, struct whale_cluster *cl)
{
    if (!s->topo) {
        slurm_error(PLUGIN_NAME ": --whale-plan=auto / --whale-model need the step's topology "
                    "(none was built from %s)", whale_site.used_path);
        return -1;
    }
    /* nodes no NodeName line types: their type from Slurm's features / GRES */
    if (whale_step_types_from_slurm(whale_site.conf, s))
        return -1;
    int nwork = s->nnodes - spares;
    if (nwork < 1) {
        slurm_error(PLUGIN_NAME ": --whale-spares=%d leaves no working node of the step's %d",
                    spares, s->nnodes);
        return -1;
    }
    for (int i = 1; i < nwork; i++)
        if (s->ntasks[i] != s->ntasks[0]) {
            slurm_error(PLUGIN_NAME ": the planner needs the same number of tasks on every node "
                        "(%s has %d, %s has %d); use --ntasks-per-node",
                        s->nodes[0], s->ntasks[0], s->nodes[i], s->ntasks[i]);
            return -1;
        }
    int *idx = malloc((size_t)nwork * sizeof *idx);
    if (!idx) {
        slurm_error(PLUGIN_NAME ": out of memory");
        return -1;
    }
    int rv = -1;
    for (int i = 0; i < nwork; i++) {
        idx[i] = whale_topo_find_node(s->topo, s->nodes[i]);
        if (idx[i] < 0) {
            slurm_error(PLUGIN_NAME ": node %s of the step is not in the topology", s->nodes[i]);
            goto out;
        }
    }
    if (whale_cluster_from_topo(s->topo, idx, nwork, s->ntasks[0], cl))
        goto out;
    rv = 0;
out:
    free(idx);
    return rv;
}

static int load_model(struct whale_model_desc *m)
{
    if (!whale_opts.given[OPT_MODEL]) {
        slurm_error(PLUGIN_NAME ": --whale-plan=auto needs --whale-model=NAME|FILE (a preset such "
                    "as gpt-1.7b, or a model .conf file)");
        return -1;
    }
    if (strlen(whale_opts.model) >= sizeof ((struct whale_plan *)0)->model) {
        slurm_error(PLUGIN_NAME ": --whale-model: path longer than %zu characters",
                    sizeof ((struct whale_plan *)0)->model - 1);
        return -1;
    }
    if (whale_model_desc_load(whale_opts.model, m)) {
        slurm_error(PLUGIN_NAME ": --whale-model=%s: cannot load the model (see above)",
                    whale_opts.model);
        return -1;
    }
    return 0;
}

static void request_limits(const struct whale_conf *c, struct whale_plan_request *rq)
{
    const struct whale_opts *o = &whale_opts;
    whale_plan_request_init(rq);
    rq->seqpar = -1; /* the search may use sequence parallelism: whale-train runs it */
    /* what the user fixed stays fixed; the search fills in the rest */
    if (o->given[OPT_TP]) rq->tp = o->tp;
    if (o->given[OPT_PP]) rq->pp = o->pp;
    if (o->given[OPT_DP]) rq->dp = o->dp;
    if (o->given[OPT_ZERO]) rq->zero = o->zero;
    if (o->given[OPT_MICROBATCH]) rq->microbatch = o->microbatch;
    if (o->given[OPT_RECOMPUTE]) rq->recompute = (int)o->recompute;
    if (o->given[OPT_OFFLOAD]) rq->offload = (int)o->offload;
    rq->max_tp = c->max_tp;
    rq->max_pp = c->max_pp;
    rq->max_dp = c->max_dp;
    rq->max_microbatch = c->max_microbatch;
    rq->max_zero = c->max_zero;
    rq->allowed_recompute = c->allowed_recompute;
    rq->allowed_offload = c->allowed_offload;
}

int whale_plan_auto_for_step(const struct whale_conf *c, const struct whale_step *step,
                             struct whale_plan *p)
{
    const struct whale_opts *o = &whale_opts;
    if (!o->given[OPT_BATCH]) {
        slurm_error(PLUGIN_NAME ": --whale-plan=auto needs --whale-batch=N (global batch in "
                    "sequences per step)");
        return -1;
    }
    struct whale_model_desc m;
    struct whale_cluster cl;
    if (load_model(&m) || step_cluster(step, o->spares, &cl))
        return -1;
    struct whale_plan_request rq;
    request_limits(c, &rq);
    char explain[1024];
    struct whale_plan found;
    int rc = whale_plan_auto(&m, o->batch, &cl, NULL, &rq, &found, explain, sizeof explain);
    if (rc) {
        slurm_error(PLUGIN_NAME ": --whale-plan=auto found no plan for %s, batch %d on this step: %s",
                    m.name, o->batch, explain[0] ? explain : whale_strerror(rc));
        return -1;
    }
    /* the search owns the training knobs; the step-level choices (spares,
     * placement, checkpoints) come from the options as for explicit plans */
    found.spares = p->spares;
    found.map = p->map;
    snprintf(found.ckpt_dir, sizeof found.ckpt_dir, "%s", p->ckpt_dir);
    found.ckpt_every = p->ckpt_every;
    memcpy(found.model, o->model, strlen(o->model) + 1);  /* length checked in load_model */
    whale_plan_free(p);
    *p = found;
    char desc[200];
    whale_cluster_describe(&cl, desc, sizeof desc);
    if (o->verbose)
        slurm_spank_log(PLUGIN_NAME ": auto plan on %s: %s", desc, explain);
    else
        slurm_verbose(PLUGIN_NAME ": auto plan on %s: %s", desc, explain);
    return 0;
}

int whale_plan_check_fit(const struct whale_conf *c, const struct whale_step *step,
                         struct whale_plan *p, int world)
{
    (void)c;
    const struct whale_opts *o = &whale_opts;
    struct whale_model_desc m;
    struct whale_cluster cl;
    if (load_model(&m) || step_cluster(step, p->spares, &cl))
        return -1;
    if (o->given[OPT_BATCH]) {
        /* the batch decides the number of micro-batches per replica */
        long per = (long)p->micro_batch * p->dp;
        if (o->batch % per) {
            slurm_error(PLUGIN_NAME ": --whale-batch=%d is not a multiple of micro-batch x DP "
                        "(%d x %d)", o->batch, p->micro_batch, p->dp);
            return -1;
        }
        p->num_micro_batches = (int)(o->batch / per);
        p->global_batch = o->batch;
    }
    if (!p->model[0])
        memcpy(p->model, o->model, strlen(o->model) + 1);  /* length checked in load_model */
    /* the model is known now: per-stage layers must add up to its layers */
    if (whale_plan_validate(p, world, m.layers,
                            o->given[OPT_PLAN] ? o->plan_file : "the Whale options"))
        return -1;
    struct whale_plan_candidate cand;
    char why[512] = "";
    int rc = whale_plan_predict(&m, &cl, p, &cand, why, sizeof why);
    if (rc == WHALE_ENOFIT || rc == WHALE_EINVAL) {
        slurm_error(PLUGIN_NAME ": tp=%d pp=%d dp=%d does not fit %s on this step: %s (try "
                    "--whale-plan=auto, or whale-plan --model %s --tp %d --pp %d --dp %d)",
                    p->tp, p->pp, p->dp, m.name, why, o->model, p->tp, p->pp, p->dp);
        return -1;
    }
    if (rc) {
        slurm_error(PLUGIN_NAME ": cannot check the plan against %s: %s", m.name,
                    why[0] ? why : whale_strerror(rc));
        return -1;
    }
    if (o->verbose)
        slurm_spank_log(PLUGIN_NAME ": %s on %d ranks: %.1f of %.1f GiB per device, predicted "
                        "%.4g s/step", m.name, world, cand.pred.mem_total / 1073741824.0,
                        cand.pred.mem_capacity / 1073741824.0, cand.pred.t_step);
    return 0;
}
