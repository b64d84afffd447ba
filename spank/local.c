/* srun (S_CTX_LOCAL). Everything a user can get wrong is caught here,
 * before any task starts: option values against the site limits, the plan
 * file, PMIx, and — once the step exists (local_user_init) — the degrees
 * against the real task layout and the topology. The plan goes to the
 * tasks in WHALE_PLAN (inline JSON) through srun's environment. */
#include "plugin.h"
#include "step.h"
#include "whale/env.h"
#include "whale/log.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct whale_plan g_plan;

int whale_local_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (!whale_opts.enabled)
        return 0;
    if (whale_mpi_check())
        return -1;
    if (whale_site_load())
        return -1;
    if (whale_options_check_site(whale_site.conf))
        return -1;
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

int whale_local_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!whale_opts.enabled)
        return 0;
    int rv = -1;
    struct whale_step step = { 0 };
    char *json = NULL;
    uint32_t jobid = 0, uid = 0;
    spank_get_item(sp, S_JOB_ID, &jobid);
    spank_get_item(sp, S_JOB_UID, &uid);
    char jobs[16];
    snprintf(jobs, sizeof jobs, "%u", jobid);
    struct passwd *pw = getpwuid((uid_t)uid);
    if (whale_plan_from_options(whale_site.conf, pw ? pw->pw_name : NULL, jobs, &g_plan))
        goto fail;
    /* srun has the step's layout in its environment by now */
    struct whale_step_desc d = {
        .nodelist = getenv("SLURM_STEP_NODELIST") ? getenv("SLURM_STEP_NODELIST") : getenv("SLURM_NODELIST"),
        .tasks_per_node = getenv("SLURM_STEP_TASKS_PER_NODE") ? getenv("SLURM_STEP_TASKS_PER_NODE")
                                                              : getenv("SLURM_TASKS_PER_NODE"),
        .distribution = getenv("SLURM_DISTRIBUTION"),
        .slurm_conf = getenv("SLURM_CONF"),
    };
    if (whale_step_build(&step, &d, &g_plan, whale_site.conf))
        goto fail;
    g_plan.dp = step.layout.dp;
    if (whale_plan_validate(&g_plan, step.layout.world, 0, "the Whale options"))
        goto fail;
    if (whale_opts.verbose)
        print_layout(&step);
    if (!(json = whale_plan_to_json(&g_plan, 0))) {
        slurm_error(PLUGIN_NAME ": out of memory");
        goto fail;
    }
    if (setenv(WHALE_ENV_PLAN, json, 1) || setenv(WHALE_ENV_CONF, whale_site.used_path, 1)) {
        slurm_error(PLUGIN_NAME ": cannot export WHALE_PLAN");
        goto fail;
    }
    rv = 0;
fail:
    free(json);
    whale_step_free(&step);
    return rv;
}
