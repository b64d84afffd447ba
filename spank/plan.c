/* The plan a Whale step runs with: built from --whale-* options, or loaded
 * from --whale-plan=FILE and checked against any option also given. srun
 * exports it as inline JSON in WHALE_PLAN: every task gets exactly what
 * srun validated, with no shared filesystem needed and no later edits of
 * the file seen halfway through a job. */
#include "plugin.h"
#include "trust.h"
#include "whale/log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int contradicts(int id, long flag, long file, const char *path)
{
    if (whale_opts.given[id] && flag != file) {
        slurm_error(PLUGIN_NAME ": --%s=%ld contradicts the plan file %s (%ld)", whale_option_name(id),
                    flag, path, file);
        return 1;
    }
    return 0;
}

static int contradicts_str(int id, const char *flag, const char *file, const char *path)
{
    if (whale_opts.given[id] && strcmp(flag, file)) {
        slurm_error(PLUGIN_NAME ": --%s=%s contradicts the plan file %s (%s)", whale_option_name(id),
                    flag, path, file[0] ? file : "unset");
        return 1;
    }
    return 0;
}

static int expand_ckpt(const char *pattern, const char *user, const char *jobid, char *out,
                       size_t n)
{
    char *s = whale_conf_expand_path(pattern, user, jobid);
    if (!s)
        return -1;
    int ok = strlen(s) < n;
    if (ok)
        snprintf(out, n, "%s", s);
    else
        slurm_error(PLUGIN_NAME ": checkpoint path '%s' is too long", s);
    free(s);
    return ok ? 0 : -1;
}

int whale_plan_from_options(const struct whale_conf *c, const struct whale_step *step,
                            const char *user, const char *jobid, struct whale_plan *p)
{
    (void)step;
    const struct whale_opts *o = &whale_opts;
    whale_plan_init(p);
    bool autoplan = o->given[OPT_PLAN] && !strcmp(o->plan_file, "auto");
    if (o->given[OPT_PLAN] && !autoplan) {
        if (whale_plan_load_file(o->plan_file, p)) {
            slurm_error(PLUGIN_NAME ": --whale-plan=%s: cannot use this plan file (see above)",
                        o->plan_file);
            return -1;
        }
        const char *f = o->plan_file;
        char ckpt[1024] = "";
        if (o->given[OPT_CKPT_DIR] && expand_ckpt(o->ckpt_dir, user, jobid, ckpt, sizeof ckpt))
            return -1;
        if (contradicts(OPT_TP, o->tp, p->tp, f) || contradicts(OPT_PP, o->pp, p->pp, f) ||
            contradicts(OPT_DP, o->dp, p->dp, f) || contradicts(OPT_EP, o->ep, p->ep, f) || contradicts(OPT_SPARES, o->spares, p->spares, f) ||
            contradicts(OPT_ZERO, o->zero, p->zero, f) ||
            contradicts(OPT_MICROBATCH, o->microbatch, p->micro_batch, f) ||
            contradicts(OPT_CKPT_EVERY, o->ckpt_every, p->ckpt_every, f) ||
            contradicts_str(OPT_MAP, whale_map_policy_name(o->map), whale_map_policy_name(p->map), f) ||
            contradicts_str(OPT_RECOMPUTE, whale_recompute_name(o->recompute),
                            whale_recompute_name(p->recompute), f) ||
            contradicts_str(OPT_OFFLOAD, whale_offload_name(o->offload), whale_offload_name(p->offload), f) ||
            contradicts_str(OPT_PRECISION, whale_precision_name(o->precision),
                            whale_precision_name(p->precision), f) ||
            contradicts_str(OPT_CKPT_DIR, ckpt, p->ckpt_dir, f))
            return -1;
        /* the plan's own choices must also respect the site's limits */
        /* the plan's own choices must also respect the site's limits
         * (the same function slurmstepd runs again: trust.c) */
        if (whale_plan_check_site(c, p, f)) {
            slurm_error(PLUGIN_NAME ": plan file %s asks for more than this site allows "
                        "(tp=%d pp=%d dp=%d spares=%d zero=%d micro_batch=%d offload=%s "
                        "recompute=%s ckpt_every=%d; limits in %s)",
                        f, p->tp, p->pp, p->dp, p->spares, p->zero, p->micro_batch,
                        whale_offload_name(p->offload), whale_recompute_name(p->recompute),
                        p->ckpt_every, whale_site.used_path);
            return -1;
        }
        if (p->ckpt_dir[0] && expand_ckpt(p->ckpt_dir, user, jobid, p->ckpt_dir, sizeof p->ckpt_dir))
            return -1;
        return 0;
    }
    p->grid = o->grid;
    p->dp = o->given[OPT_DP] ? o->dp : 0; /* 0 until the step's tasks are known */
    p->spares = o->spares;
    p->map = o->given[OPT_MAP] ? o->map : c->default_map;
    if (o->given[OPT_ZERO])
        p->zero = o->zero;
    /* batch sizes the user did not give stay unset: whale-train's own
     * defaults apply, as under whale-run */
    p->unset = WHALE_PLAN_UNSET_BATCH;
    if (o->given[OPT_MICROBATCH]) {
        p->micro_batch = o->microbatch;
        p->unset &= ~WHALE_PLAN_UNSET_MICRO_BATCH;
    }
    if (o->given[OPT_RECOMPUTE])
        p->recompute = o->recompute;
    if (o->given[OPT_OFFLOAD])
        p->offload = o->offload;
    if (o->given[OPT_PRECISION])
        p->precision = o->precision;
    if (o->given[OPT_CKPT_EVERY])
        p->ckpt_every = o->ckpt_every;
    /* retention's site defaults travel with the plan like CheckpointRoot;
     * whale-train's --ckpt-keep / WHALE_CKPT_* override them */
    p->ckpt_keep = c->ckpt_keep;
    p->ckpt_milestone_every = c->ckpt_milestone_every;
    const char *dir = o->given[OPT_CKPT_DIR] ? o->ckpt_dir : NULL;
    if (!dir && o->given[OPT_CKPT_EVERY])
        dir = c->checkpoint_root;
    if (o->given[OPT_CKPT_EVERY] && !dir) {
        slurm_error(PLUGIN_NAME ": --whale-ckpt-every needs --whale-ckpt-dir (this site sets no "
                    "CheckpointRoot in %s)", whale_site.used_path);
        return -1;
    }
    if (dir && expand_ckpt(dir, user, jobid, p->ckpt_dir, sizeof p->ckpt_dir))
        return -1;
    if (autoplan) {
        /* sbatch/salloc: no step yet; the script's sruns plan on their own
         * nodes. Catch what can be caught now. */
        if (!step) {
            if (!o->given[OPT_MODEL] || !o->given[OPT_BATCH]) {
                slurm_error(PLUGIN_NAME ": --whale-plan=auto needs --whale-model=NAME|FILE and "
                            "--whale-batch=N");
                return -1;
            }
            return 0;
        }
        int arc = whale_plan_auto_for_step(c, step, p);
        if (!arc && o->given[OPT_PRECISION]) /* the planner's choice yields to the user's */
            p->precision = o->precision;
        return arc;
    }
    return 0;
}
