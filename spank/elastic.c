/* Whale steps with hot spares must outlive a failed task or node in
 * Slurm's eyes too (spank/ELASTIC.md has the facts behind every choice).
 * Slurm 22.05 by default
 *   - cancels the whole job when one of its nodes goes DOWN (the job's
 *     kill_on_node_fail, cleared only by --no-kill at allocation time),
 *   - SIGKILLs every task of a step that runs on a failed node unless the
 *     step itself was created with --no-kill (SSF_NO_KILL),
 *   - lets srun kill the step when a task exits non-zero (KillOnBadExit,
 *     -K) or some seconds after the first task ended (WaitTime, -W); srun
 *     22.05 applies both even with --no-kill.
 * So a step with spares needs --no-kill, --kill-on-bad-exit=0 and --wait=0,
 * and its allocation needs --no-kill.
 *
 * srun reads its options (and the SLURM_* variables standing for them)
 * after slurm_spank_init and before any option callback, like
 * SLURM_MPI_TYPE in mpi.c: so in slurm_spank_init we look for
 * --whale-spares and, when spares are asked for, export SLURM_NO_KILL=1,
 * SLURM_KILL_BAD_EXIT=0 and SLURM_WAIT=0 unless the user chose otherwise,
 * which init_post_opt then refuses with the exact option to change.
 * sbatch/salloc: SBATCH_NO_KILL/SALLOC_NO_KILL for spares on the command
 * line; for spares in #SBATCH lines init_post_opt sets --no-kill through
 * Slurm's own option table (slurm_option_set, exported by libslurmfull of
 * the release this plugin is built for; sbatch/salloc fill the job request
 * from it after init_post_opt). The allocation then carries
 * WHALE_JOB_NO_KILL=1 so an srun inside it knows (slurmctld does not tell a
 * job's kill_on_node_fail to anyone). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "plugin.h"
#include "elastic.h"
#include "srun_argv.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SPARES_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_" PLUGIN_NAME "_whale_spares"

static struct {
    bool arranged;          /* the SLURM_* variables were exported for spares */
    char conflict[512];     /* what the user set against it, for the refusal */
} g;

/* A value that means "off" for --no-kill, or 0 for -K/-W. */
static bool is_zero(const char *v)
{
    if (!v)
        return false;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return end != v && *end == '\0' && n == 0;
}

static bool is_off(const char *v)
{
    return v && (!strcasecmp(v, "off") || !strcasecmp(v, "no"));
}

int whale_elastic_spares_arg(char *const *argv, int argc, const char *env_value)
{
    int spares = -1;
    bool prev_takes_value = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        enum srun_arg k = srun_arg_kind(a, &prev_takes_value);
        if (k == SRUN_ARG_END)
            break;
        if (k == SRUN_ARG_OPTION && !strncmp(a, "--whale-spares", 14) &&
            (a[14] == '=' || a[14] == '\0')) {
            const char *v = a[14] == '=' ? a + 15 : (i + 1 < argc ? argv[++i] : NULL);
            if (v)
                spares = atoi(v);
            prev_takes_value = false;
        }
    }
    if (spares < 0 && env_value)
        spares = atoi(env_value);
    return spares < 0 ? 0 : spares;
}

void whale_elastic_argv_conflict(char *const *argv, int argc, char *out, size_t n)
{
    out[0] = '\0';
    bool prev_takes_value = false;
    for (int i = 1; i < argc && !out[0]; i++) {
        const char *a = argv[i];
        enum srun_arg k = srun_arg_kind(a, &prev_takes_value);
        if (k == SRUN_ARG_END)
            break;
        if (k == SRUN_ARG_VALUE)
            continue;
        const char *v = NULL;  /* the value, NULL when none was given */
        const char *sep = NULL; /* a value given as the next argument */
        bool bad = false;
        if (!strncmp(a, "--kill-on-bad-exit", 18) && (a[18] == '\0' || a[18] == '=')) {
            v = a[18] == '=' ? a + 19 : NULL;
            bad = !is_zero(v);
        } else if (a[1] == 'K') {
            v = a[2] ? a + 2 : NULL; /* -K takes no separate value */
            bad = !is_zero(v);
            prev_takes_value = false;
        } else if (!strncmp(a, "--wait", 6) && (a[6] == '\0' || a[6] == '=')) {
            v = a[6] == '=' ? a + 7 : (sep = i + 1 < argc ? argv[i + 1] : NULL);
            bad = !is_zero(v);
            if (sep)
                i++, prev_takes_value = false;
        } else if (a[1] == 'W') {
            v = a[2] ? a + 2 : (sep = i + 1 < argc ? argv[i + 1] : NULL);
            bad = !is_zero(v);
            if (sep)
                i++, prev_takes_value = false;
        } else if (!strncmp(a, "--no-kill", 9)) {
            bad = a[9] == '=' && is_off(a + 10);
            prev_takes_value = false;
        }
        if (bad)
            snprintf(out, n, "%s%s%s", a, sep ? " " : "", sep ? sep : "");
    }
}

static int read_cmdline(char ***argv_out, int *argc_out, char *buf, size_t cap)
{
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    int argc = 0;
    for (size_t i = 0; i < n; i++)
        if (!buf[i])
            argc++;
    char **argv = calloc((size_t)argc + 1, sizeof(char *));
    if (!argv)
        return -1;
    size_t off = 0;
    for (int i = 0; i < argc; i++) {
        argv[i] = buf + off;
        off += strlen(buf + off) + 1;
    }
    *argv_out = argv;
    *argc_out = argc;
    return 0;
}

/* Export NAME=want unless the user already set NAME; a user value that is
 * not equivalent to want is a conflict. */
static void arrange(const char *name, const char *want, bool (*ok)(const char *))
{
    const char *cur = getenv(name);
    if (!cur) {
        setenv(name, want, 1);
        return;
    }
    if (!ok(cur) && !g.conflict[0])
        snprintf(g.conflict, sizeof g.conflict, "%s=%s in the environment", name, cur);
}

static bool ok_no_kill(const char *v) { return !is_off(v); }
static bool ok_zero(const char *v) { return is_zero(v); }

void whale_elastic_preset(void)
{
    static char buf[65536];
    char **argv = NULL;
    int argc = 0;
    if (read_cmdline(&argv, &argc, buf, sizeof buf))
        return;
    int spares = whale_elastic_spares_arg(argv, argc, getenv(SPARES_ENV));
    if (spares <= 0) {
        free(argv);
        return;
    }
    if (spank_context() == S_CTX_ALLOCATOR) {
        /* sbatch or salloc (the other one ignores the variable) */
        if (!getenv("SBATCH_NO_KILL"))
            setenv("SBATCH_NO_KILL", "set", 1);
        if (!getenv("SALLOC_NO_KILL"))
            setenv("SALLOC_NO_KILL", "set", 1);
        free(argv);
        return;
    }
    whale_elastic_argv_conflict(argv, argc, g.conflict, sizeof g.conflict);
    arrange("SLURM_NO_KILL", "set", ok_no_kill); /* 22.05 accepts set|off|no */
    arrange("SLURM_KILL_BAD_EXIT", "0", ok_zero);
    arrange("SLURM_WAIT", "0", ok_zero);
    g.arranged = true;
    free(argv);
}

static const char fix[] = "a Whale step with spares must survive a failed task or node: "
                          "run it with --no-kill --kill-on-bad-exit=0 --wait=0";

int whale_elastic_check_srun(int spares)
{
    if (spares <= 0)
        return 0;
    if (g.conflict[0]) {
        slurm_error(PLUGIN_NAME ": --whale-spares=%d conflicts with %s: %s (Whale replaces a "
                    "failed rank inside the step; remove that setting)", spares, g.conflict, fix);
        return -1;
    }
    if (!g.arranged) {
        /* spares from a plan file: srun read its options before we knew */
        slurm_error(PLUGIN_NAME ": the plan asks for %d spare node(s) but srun was started "
                    "without --whale-spares: %s, or give --whale-spares=%d on the command line",
                    spares, fix, spares);
        return -1;
    }
    const char *job = getenv("SLURM_JOB_ID");
    const char *marker = getenv(WHALE_ENV_JOB_NO_KILL);
    if (job && *job && !(marker && !strcmp(marker, "1"))) {
        slurm_error(PLUGIN_NAME ": --whale-spares=%d inside job %s, which was allocated without "
                    "--no-kill: Slurm would cancel the whole job when a node fails; submit it "
                    "with 'sbatch --no-kill' or 'salloc --no-kill' (or give --whale-spares=%d to "
                    "sbatch/salloc, which sets it)", spares, job, spares);
        return -1;
    }
    return 0;
}

/* libslurmfull's option table (src/common/slurm_opt.h of the same release). */
typedef char *(*opt_get_fn)(void *opt, const char *name);
typedef int (*opt_set_fn)(void *opt, const char *name, const char *value, bool early);
typedef bool (*opt_isset_fn)(void *opt, const char *name);

int whale_elastic_allocator(bool whale, int spares)
{
    void *opt = dlsym(RTLD_DEFAULT, "opt");
    opt_get_fn get = (opt_get_fn)dlsym(RTLD_DEFAULT, "slurm_option_get");
    opt_set_fn set = (opt_set_fn)dlsym(RTLD_DEFAULT, "slurm_option_set");
    opt_isset_fn isset = (opt_isset_fn)dlsym(RTLD_DEFAULT, "slurm_option_isset");
    bool api = opt && get && set && isset;
    bool no_kill = false;
    if (api) {
        char *v = get(opt, "no-kill");
        no_kill = v && !strcmp(v, "set");
        /* xmalloc'd (a header before the bytes): only Slurm may free it */
        void (*xfree_fn)(void **) = (void (*)(void **))dlsym(RTLD_DEFAULT, "slurm_xfree");
        if (xfree_fn)
            xfree_fn((void **)&v);
        if (whale && spares > 0 && !no_kill) {
            if (isset(opt, "no-kill")) {
                slurm_error(PLUGIN_NAME ": --whale-spares=%d conflicts with --no-kill=off: a "
                            "job with spares must survive a node failure; remove --no-kill=off "
                            "(or SBATCH_NO_KILL/SALLOC_NO_KILL=off)", spares);
                return -1;
            }
            if (set(opt, "no-kill", NULL, false) == 0) {
                no_kill = true;
                slurm_verbose(PLUGIN_NAME ": --whale-spares=%d: job allocated with --no-kill",
                              spares);
            }
        }
    } else {
        const char *e = getenv("SBATCH_NO_KILL") ? getenv("SBATCH_NO_KILL")
                                                 : getenv("SALLOC_NO_KILL");
        no_kill = e && !is_off(e);
    }
    if (whale && spares > 0 && !no_kill) {
        slurm_error(PLUGIN_NAME ": --whale-spares=%d needs a job that survives a node failure: "
                    "add --no-kill to sbatch/salloc", spares);
        return -1;
    }
    /* the job's sruns learn it from here (also for jobs without --whale*:
     * a user's own --no-kill counts) */
    if (no_kill)
        setenv(WHALE_ENV_JOB_NO_KILL, "1", 1);
    return 0;
}
