/* slurmstepd (S_CTX_REMOTE). user_init runs once per node before any task
 * is forked: it computes the whole step's layout from the same inputs as
 * every other node (deterministic mapper), so each node agrees without
 * talking to the others. task_init applies it: the contract env of one
 * task. */
#include "layout_digest.h"
#include "plugin.h"
#include "elastic.h"
#include "step.h"
#include "trust.h"
#include "whale/env.h"
#include "whale/log.h"
#include "whale/sitelimits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Linux limits one environment string to 128 KiB (MAX_ARG_STRLEN); rank
 * maps longer than whale_site.rankmap_inline_max go to a file that
 * WHALE_RANKMAP names with '@'. */

static struct {
    struct whale_step step;
    struct whale_plan plan;
    bool ready;
    bool failed;           /* user_init failed: every task refuses to start */
    char *plan_json;
    char *rankmap;         /* inline list or "@file" */
    struct whale_private_file rankmap_file;
    struct whale_private_file limits_file; /* the site limits record (whale/sitelimits.h) */
} g = { .rankmap_file = { .parent_fd = -1, .dir_fd = -1 },
        .limits_file = { .parent_fd = -1, .dir_fd = -1 } };

/* A variable of the step's environment, at most max bytes (the user sets
 * it: slurmstepd must not grow without bound). */
static char *step_getenv(spank_t sp, const char *name, size_t max)
{
    size_t cap = 4096;
    for (;;) {
        char *buf = malloc(cap);
        if (!buf)
            return NULL;
        spank_err_t e = spank_getenv(sp, name, buf, (int)cap);
        if (e == ESPANK_SUCCESS)
            return buf;
        free(buf);
        if (e != ESPANK_NOSPACE || cap > max)
            return NULL;
        cap *= 4;
    }
}

/* Long rank maps: a 0600 file in a fresh 0700 directory under the job's
 * TMPDIR (else /tmp), created without following links (trust.h). */
/* The site limits for the runtime: root's read-only record in a private
 * directory under /tmp (sticky: nobody else can move the directory), so
 * the task reads the limits slurmstepd used and cannot change them. */
static int write_limits_file(void)
{
    char *text = whale_site_limits_to_json(whale_site.conf);
    if (!text) {
        slurm_error(PLUGIN_NAME ": out of memory for the site limits record");
        return -1;
    }
    int rc = whale_private_file_write_readonly("/tmp", "limits", text, &g.limits_file);
    free(text);
    return rc;
}

static int write_rankmap_file(spank_t sp, const char *text)
{
    uid_t uid = 0;
    gid_t gid = 0;
    spank_get_item(sp, S_JOB_UID, &uid);
    spank_get_item(sp, S_JOB_GID, &gid);
    char *tmp = step_getenv(sp, "TMPDIR", 4096);
    int rc = -1;
    if (tmp && tmp[0] == '/')
        rc = whale_private_file_write(tmp, "rankmap", text, uid, gid, &g.rankmap_file);
    if (rc)
        rc = whale_private_file_write("/tmp", "rankmap", text, uid, gid, &g.rankmap_file);
    free(tmp);
    return rc;
}

/* The failure report FIFO (report.c) next to the rank-map file: the job's
 * TMPDIR on this node when it exists, else /tmp. A step without it still
 * runs; its failed nodes are then not drained. */
static void open_report(spank_t sp)
{
    uint32_t job = 0, stepid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    spank_get_item(sp, S_JOB_ID, &job);
    spank_get_item(sp, S_JOB_STEPID, &stepid);
    spank_get_item(sp, S_JOB_UID, &uid);
    spank_get_item(sp, S_JOB_GID, &gid);
    char *tmp = step_getenv(sp, "TMPDIR", 4096);
    const char *dir = tmp && *tmp && !access(tmp, W_OK | X_OK) ? tmp : "/tmp";
    whale_report_open(dir, job, stepid, uid, gid, &g.step);
    /* this node's name as the step knows it (the reports name nodes so) */
    uint32_t nodeid = 0;
    if (spank_get_item(sp, S_JOB_NODEID, &nodeid) == ESPANK_SUCCESS &&
        (int)nodeid < g.step.nnodes && g.step.nodes)
        whale_report_this_node(g.step.nodes[nodeid]);
    free(tmp);
}

/* The layout computed here must be the one srun computed (and printed with
 * --whale-verbose): a node with another whale.conf or topology.conf than
 * the submit host would otherwise hand out other ranks, silently. */
static int check_layout_digest(spank_t sp)
{
    char *sent = step_getenv(sp, WHALE_SPANK_LAYOUT_ENV, 64);
    if (!sent) /* srun without the plugin's digest (e.g. an older build): nothing to compare */
        return 0;
    char mine[WHALE_LAYOUT_DIGEST_LEN];
    whale_layout_digest(&g.step.layout, mine);
    int rc = 0;
    if (strcmp(sent, mine)) {
        char *node = step_getenv(sp, "SLURMD_NODENAME", 256);
        slurm_error(PLUGIN_NAME ": node %s computes another rank layout than srun did (layout "
                    "digest %s here, %.16s from srun): whale.conf (%s) or the topology differ "
                    "between this node and the submit host; the tasks are not started",
                    node ? node : "?", mine, sent, whale_site.used_path);
        free(node);
        rc = -1;
    }
    free(sent);
    return rc;
}

int whale_remote_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!whale_opts.enabled)
        return 0;
    int rv = -1;
    const size_t big = (size_t)1 << 24;
    char *nodelist = step_getenv(sp, "SLURM_STEP_NODELIST", big);
    char *tpn = step_getenv(sp, "SLURM_STEP_TASKS_PER_NODE", big);
    char *mapping = step_getenv(sp, "SLURM_PMIX_MAPPING_SERV", big);
    char *dist = step_getenv(sp, "SLURM_DISTRIBUTION", 4096);
    char *slurm_conf = step_getenv(sp, "SLURM_CONF", 4096);
    /* bounded: a longer value is refused by whale_plan_accept_remote */
    char *plan = step_getenv(sp, WHALE_SPANK_PLAN_ENV, 4 * (size_t)WHALE_PLAN_MAX_ENV);
    if (whale_site_load())
        goto out;
    /* untrusted: inline only, re-checked against this node's whale.conf
     * and the options Slurm replayed here (trust.c) */
    if (whale_plan_accept_remote(plan, whale_site.conf, &g.plan))
        goto out;
    struct whale_step_desc d = {
        .nodelist = nodelist, .tasks_per_node = tpn, .pmi_mapping = mapping,
        .distribution = dist, .slurm_conf = slurm_conf ? slurm_conf : getenv("SLURM_CONF"),
    };
    if (whale_step_build(&g.step, &d, &g.plan, whale_site.conf))
        goto out;
    if (g.step.layout.dp != g.plan.dp) {
        slurm_error(PLUGIN_NAME ": node layout gives DP=%d but the plan says dp=%d",
                    g.step.layout.dp, g.plan.dp);
        goto out;
    }
    if (check_layout_digest(sp) || write_limits_file())
        goto out;
    char *enc = whale_rankmap_encode(g.step.layout.task_of_rank, g.step.layout.world);
    if (!enc)
        goto out;
    if ((long)strlen(enc) > whale_site.rankmap_inline_max) {
        if (write_rankmap_file(sp, enc)) {
            free(enc);
            goto out;
        }
        free(enc);
        size_t n = strlen(g.rankmap_file.path) + 2;
        if (!(g.rankmap = malloc(n)))
            goto out;
        snprintf(g.rankmap, n, "@%s", g.rankmap_file.path);
    } else {
        g.rankmap = enc;
    }
    /* the tasks get the plan as parsed and checked here, not the raw text */
    if (!(g.plan_json = whale_plan_to_json(&g.plan, 0)))
        goto out;
    g.ready = true;
    open_report(sp);
    char *comm = step_getenv(sp, "SLURM_SRUN_COMM_HOST", 4096);
    char *res = step_getenv(sp, WHALE_SPANK_RESULT_ENV, 4096);
    whale_result_target(comm, res);
    free(comm);
    free(res);
    rv = 0;
out:
    free(nodelist);
    free(tpn);
    free(mapping);
    free(dist);
    free(slurm_conf);
    free(plan);
    /* A failing user_init makes Slurm 22.05 abort the launch while srun
     * still exits 0. Failing each task in task_init instead (before exec:
     * the user's program never runs) gives srun a non-zero exit status. */
    if (rv)
        g.failed = true;
    return 0;
}

/* WHALE_* always win (a stale value from an enclosing step must not leak);
 * device variables already in the task's environment are kept: Slurm's GPU
 * binding (gres, cgroup-renumbered) and a user's explicit NCCL/UCX choice
 * know better than our even split. */
static int set_task_env(const char *name, const char *value, void *user)
{
    spank_t sp = user;
    int overwrite = !strncmp(name, "WHALE_", 6);
    spank_err_t e = spank_setenv(sp, name, value, overwrite);
    if (e == ESPANK_ENV_EXISTS && !overwrite)
        return 0;
    if (e != ESPANK_SUCCESS) {
        slurm_error(PLUGIN_NAME ": cannot set %s: %s", name, spank_strerror(e));
        return -1;
    }
    return 0;
}

int whale_remote_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!whale_opts.enabled)
        return 0;
    if (!g.ready) {
        slurm_error(PLUGIN_NAME ": %s", g.failed ? "task not started: the step's layout failed on "
                                                   "this node (see above)"
                                                 : "no layout for this step");
        return -1;
    }
    uint32_t gid = 0;
    int local = -1;
    if (spank_get_item(sp, S_TASK_GLOBAL_ID, &gid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_TASK_ID, &local) != ESPANK_SUCCESS) {
        slurm_error(PLUGIN_NAME ": cannot read the task id");
        return -1;
    }
    const struct whale_layout *l = &g.step.layout;
    if ((int)gid >= l->ntasks || l->local_of_task[gid] != local) {
        slurm_error(PLUGIN_NAME ": task %u (local %d) does not match the computed layout "
                    "(unsupported task distribution?)", gid, local);
        return -1;
    }
    const struct whale_conf *c = whale_site.conf;
    struct whale_env_opts eo = {
        .plan = g.plan_json,
        .conf_path = whale_site.used_path,
        .rankmap = g.rankmap,
        .set_cuda = c->set_cuda_visible_devices,
        .set_nics = c->set_ucx_net_devices,
        .set_nccl = c->set_nccl_env,
    };
    /* the transport variable is not part of the contract: WHALE_PLAN is */
    spank_unsetenv(sp, WHALE_SPANK_PLAN_ENV);
    spank_unsetenv(sp, WHALE_SPANK_LAYOUT_ENV);
    spank_unsetenv(sp, WHALE_SPANK_RESULT_ENV); /* slurmstepd's, not the task's */
    if (whale_map_task_env(&g.step.in, l, (int)gid, &eo, set_task_env, sp))
        return -1;
    if (set_task_env(WHALE_ENV_SITE_LIMITS, g.limits_file.path, sp))
        return -1;
    const char *report = whale_report_path();
    if (report && set_task_env(WHALE_ENV_REPORT, report, sp))
        return -1;
    /* from the option Slurm replayed here, not from srun's environment
     * (which --export=NONE does not forward) */
    if (whale_opts.given[OPT_OFFLOAD_TARGET] &&
        set_task_env("WHALE_OFFLOAD_TARGET", whale_opts.offload_target, sp))
        return -1;
    /* the recovery window: the option, else the site's default */
    int grace = whale_opts.given[OPT_NODE_GRACE] ? whale_opts.node_grace : c->node_grace;
    if (grace >= 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", grace);
        if (set_task_env(WHALE_ENV_NODE_GRACE, v, sp))
            return -1;
    }
    return 0;
}

/* slurmstepd's side of a task: the report thread may have to stop it. */
static void note_task(spank_t sp, bool alive)
{
    uint32_t gid = 0;
    pid_t pid = 0;
    if (!g.ready || spank_get_item(sp, S_TASK_GLOBAL_ID, &gid) != ESPANK_SUCCESS)
        return;
    if (alive && spank_get_item(sp, S_TASK_PID, &pid) != ESPANK_SUCCESS)
        return;
    whale_report_task_pid((int)gid, alive ? pid : 0);
}

int whale_remote_task_post_fork(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (whale_opts.enabled)
        note_task(sp, true);
    return 0;
}

int whale_remote_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!whale_opts.enabled)
        return 0;
    note_task(sp, false);
    uint32_t gid = 0;
    int status = 0;
    if (g.ready && spank_get_item(sp, S_TASK_GLOBAL_ID, &gid) == ESPANK_SUCCESS &&
        spank_get_item(sp, S_TASK_EXIT_STATUS, &status) == ESPANK_SUCCESS)
        whale_result_task_exit((int)gid, status);
    return 0;
}

int whale_remote_exit(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    whale_report_close();
    if (g.rankmap_file.dir[0])
        whale_private_file_remove(&g.rankmap_file);
    if (g.limits_file.dir[0])
        whale_private_file_remove(&g.limits_file);
    if (g.ready || g.step.nodes)
        whale_step_free(&g.step);
    whale_plan_free(&g.plan);
    free(g.plan_json);
    free(g.rankmap);
    memset(&g, 0, sizeof g);
    g.rankmap_file.parent_fd = g.rankmap_file.dir_fd = -1;
    g.limits_file.parent_fd = g.limits_file.dir_fd = -1;
    whale_site_free();
    return 0;
}
