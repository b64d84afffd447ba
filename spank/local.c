/* srun (S_CTX_LOCAL). Everything a user can get wrong is caught here,
 * before any task starts: option values against the site limits, the plan
 * file, PMIx, and — once the step exists (local_user_init) — the degrees
 * against the real task layout and the topology. The plan goes to the
 * tasks in WHALE_PLAN (inline JSON) through srun's environment. */
#include "plugin.h"
#include "elastic.h"
#include "layout_digest.h"
#include "step.h"
#include "submit_check.h"
#include "trust.h"
#include "whale/env.h"
#include "whale/knobs.h"
#include "whale/log.h"

#include <slurm/slurm.h>

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "whale/clock.h"

static struct whale_plan g_plan;
static double g_work_ms; /* time spent in the plugin's srun callbacks */

int whale_local_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (!whale_opts.enabled)
        return 0;
    double t0 = whale_now_ms();
    if (whale_mpi_check())
        return -1;
    if (whale_site_load())
        return -1;
    if (whale_options_check_site(whale_site.conf))
        return -1;
    if (whale_elastic_check_srun(whale_opts.spares))
        return -1;
    /* degrees that cannot fit srun's own -n/-N: refused before the
     * allocation is even requested (the exact check is local_user_init's) */
    struct whale_submit sub;
    if (!whale_submit_from_self(&sub) && whale_submit_check(&sub, true))
        return -1;
    g_work_ms += whale_now_ms() - t0;
    return 0;
}

static void print_layout(const struct whale_step *s)
{
    char *d = whale_layout_describe(&s->in, &s->layout, 0);
    if (!d)
        return;
    char *save = NULL;
    for (char *line = strtok_r(d, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        slurm_spank_log(PLUGIN_NAME ": %s", line);
    free(d);
}

/* The step exists by local_user_init, but srun's environment holds the
 * job's node list (SLURM_NODELIST), not the step's: ask slurmctld for the
 * step layout (node list, tasks and the exact task ids of each node). The
 * libslurm function comes from srun's own libslurmfull. */
static int build_step(spank_t sp, uint32_t jobid, struct whale_step *step)
{
    uint32_t stepid = 0, ntotal = 0;
    slurm_step_layout_t *sl = NULL;
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) == ESPANK_SUCCESS) {
        slurm_step_id_t id = { .job_id = jobid, .step_het_comp = NO_VAL, .step_id = stepid };
        sl = slurm_job_step_layout_get(&id);
    }
    /* a layout of another shape than this srun's step is not ours */
    if (sl && spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ntotal) == ESPANK_SUCCESS &&
        sl->task_cnt != ntotal) {
        slurm_job_step_layout_free(sl);
        sl = NULL;
    }
    struct whale_step_desc d = { .slurm_conf = getenv("SLURM_CONF") };
    int *ntasks = NULL, *ids = NULL, rc = -1;
    if (sl && sl->node_list && sl->node_cnt > 0) {
        ntasks = malloc(sl->node_cnt * sizeof(int));
        ids = malloc((sl->task_cnt ? sl->task_cnt : 1) * sizeof(int));
        if (!ntasks || !ids)
            goto out;
        uint32_t k = 0;
        for (uint32_t i = 0; i < sl->node_cnt; i++) {
            ntasks[i] = sl->tasks[i];
            for (uint32_t j = 0; j < sl->tasks[i] && k < sl->task_cnt; j++)
                ids[k++] = (int)sl->tids[i][j];
        }
        d.nodelist = sl->node_list;
        d.ntasks = ntasks;
        d.task_ids = k == sl->task_cnt ? ids : NULL;
    } else {
        /* no answer: srun's own view is right when the step has the job's nodes */
        slurm_verbose(PLUGIN_NAME ": no step layout from slurmctld; using SLURM_NODELIST");
        d.nodelist = getenv("SLURM_NODELIST");
        d.tasks_per_node = getenv("SLURM_TASKS_PER_NODE");
        d.distribution = getenv("SLURM_DISTRIBUTION");
    }
    rc = whale_step_describe(step, &d, whale_site.conf) ? -1 : 0;
out:
    free(ntasks);
    free(ids);
    if (sl)
        slurm_job_step_layout_free(sl);
    return rc;
}

int whale_local_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!whale_opts.enabled)
        return 0;
    int rv = -1;
    double t0 = whale_now_ms();
    struct whale_step step = { 0 };
    char *json = NULL;
    uint32_t jobid = 0, uid = 0;
    spank_get_item(sp, S_JOB_ID, &jobid);
    spank_get_item(sp, S_JOB_UID, &uid);
    char jobs[16];
    snprintf(jobs, sizeof jobs, "%u", jobid);
    struct passwd *pw = getpwuid((uid_t)uid);
    /* the step first, so that a plan can be chosen for it (--whale-plan=auto
     * plugs in at whale_plan_from_options), then the layout */
    if (build_step(sp, jobid, &step))
        goto fail;
    if (whale_plan_from_options(whale_site.conf, &step, pw ? pw->pw_name : NULL, jobs, &g_plan))
        goto fail;
    /* spares from a plan file: only known now */
    if (!whale_opts.given[OPT_SPARES] && whale_elastic_check_srun(g_plan.spares))
        goto fail;
    if (whale_step_layout(&step, &g_plan))
        goto fail;
    g_plan.dp = step.layout.dp;
    if (whale_plan_validate(&g_plan, step.layout.world, 0, "the Whale options"))
        goto fail;
    if (whale_opts.given[OPT_MODEL] && strcmp(whale_opts.plan_file, "auto") &&
        whale_plan_check_fit(whale_site.conf, &step, &g_plan, step.layout.world))
        goto fail;
    if (whale_opts.verbose)
        print_layout(&step);
    /* slurmstepd checks the same limits again (it cannot trust srun) */
    if (whale_plan_check_site(whale_site.conf, &g_plan, "the step's plan"))
        goto fail;
    /* an elastic step (spares, or WHALE_ELASTIC=1: DP may shrink): srun's
     * status will be the training's (result.c) */
    const char *el = whale_knob_getenv("WHALE_ELASTIC");
    if (g_plan.spares > 0 || (el && !strcmp(el, "1")))
        whale_result_listen(step.layout.ntasks);
    if (!(json = whale_plan_to_json(&g_plan, 0))) {
        slurm_error(PLUGIN_NAME ": out of memory");
        goto fail;
    }
    if (whale_opts.given[OPT_OFFLOAD_TARGET] &&
        setenv("WHALE_OFFLOAD_TARGET", whale_opts.offload_target, 1)) {
        slurm_error(PLUGIN_NAME ": cannot export WHALE_OFFLOAD_TARGET");
        goto fail;
    }
    /* one environment string holds at most 128 KiB (Linux): refuse here,
     * with the reason, instead of every task failing to exec */
    if (strlen(json) > WHALE_PLAN_MAX_ENV) {
        slurm_error(PLUGIN_NAME ": the plan is %zu bytes of JSON, more than the %d a step can "
                    "carry (a long \"prediction\" or recompute_layers list in the plan file?)",
                    strlen(json), WHALE_PLAN_MAX_ENV);
        goto fail;
    }
    /* each slurmstepd checks that it computes the layout printed here */
    char digest[WHALE_LAYOUT_DIGEST_LEN];
    whale_layout_digest(&step.layout, digest);
    /* SLURM_*: srun forwards it even with --export=NONE (trust.h) */
    if (setenv(WHALE_SPANK_PLAN_ENV, json, 1) || setenv(WHALE_ENV_CONF, whale_site.used_path, 1) ||
        setenv(WHALE_SPANK_LAYOUT_ENV, digest, 1)) {
        slurm_error(PLUGIN_NAME ": cannot export %s", WHALE_SPANK_PLAN_ENV);
        goto fail;
    }
    g_work_ms += whale_now_ms() - t0;
    slurm_verbose(PLUGIN_NAME ": %d ranks laid out on %d node(s); plugin time in srun %.2f ms",
                  step.layout.world, step.nnodes, g_work_ms);
    rv = 0;
fail:
    free(json);
    whale_step_free(&step);
    whale_plan_free(&g_plan);
    return rv;
}
