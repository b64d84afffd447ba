/* Submission-time check of the degrees against the job's task count
 * (submit_check.h). Only plain numbers count: a node range (-N 2-4) or
 * anything unparsed leaves that value unknown, and nothing is refused on a
 * guess. The default srun inside the job starts every task of the
 * allocation, and the --whale-* options given to sbatch become every
 * srun's defaults: that srun is what must fit. */
#include "submit_check.h"
#include "plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long num(const char *s)
{
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    return s && end != s && !*end && v > 0 && v < (1L << 30) ? v : 0;
}

/* One option: "-n8", "-n 8", "--ntasks=8", "--ntasks 8". Returns how many
 * argv entries it used (0: not this option). */
static int opt(char *const *a, const char *shrt, const char *lng, long *out)
{
    size_t ll = strlen(lng);
    if (shrt && !strcmp(a[0], shrt) && a[1]) {
        *out = num(a[1]);
        return 2;
    }
    if (shrt && !strncmp(a[0], shrt, 2) && a[0][2] && a[0][1] != '-') {
        *out = num(a[0] + 2);
        return 1;
    }
    if (!strncmp(a[0], lng, ll) && a[0][ll] == '=') {
        *out = num(a[0] + ll + 1);
        return 1;
    }
    if (!strcmp(a[0], lng) && a[1]) {
        *out = num(a[1]);
        return 2;
    }
    return 0;
}

/* Options of one argv-like list; returns the index of the first operand
 * (sbatch's script) or -1. Unknown options are skipped (their values too
 * only when glued: "--x=1"); that can misread an operand as the script,
 * which only means no #SBATCH lines are read. */
static int scan(char *const *a, struct whale_submit *s, bool set)
{
    for (int i = 0; a[i];) {
        long v = -1;
        int k;
        if ((k = opt(a + i, "-n", "--ntasks", &v)) && set)
            s->ntasks = v;
        else if (!k && (k = opt(a + i, "-N", "--nodes", &v)) && set)
            s->nodes = v;
        else if (!k && (k = opt(a + i, NULL, "--ntasks-per-node", &v)) && set)
            s->per_node = v;
        if (k) {
            i += k;
            continue;
        }
        if (a[i][0] != '-')
            return i;
        i++;
    }
    return -1;
}

void whale_submit_parse(char *const *argv, struct whale_submit *out)
{
    memset(out, 0, sizeof *out);
    if (!argv || !argv[0])
        return;
    int script = scan(argv + 1, out, true);
    const char *prog = strrchr(argv[0], '/');
    prog = prog ? prog + 1 : argv[0];
    if (script < 0 || strcmp(prog, "sbatch"))
        return;
    FILE *f = fopen(argv[1 + script], "r");
    if (!f)
        return;
    /* #SBATCH lines (sbatch stops at the first command); the command line wins */
    struct whale_submit fs = { 0 };
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && n++ < 1000) {
        if (line[0] != '#' && line[0] != '\n')
            break;
        if (strncmp(line, "#SBATCH", 7))
            continue;
        char *words[8] = { 0 }, *save = NULL;
        int w = 0;
        for (char *t = strtok_r(line + 7, " \t\r\n", &save); t && w < 7;
             t = strtok_r(NULL, " \t\r\n", &save))
            words[w++] = t;
        if (w)
            scan(words, &fs, true);
    }
    fclose(f);
    if (!out->ntasks)
        out->ntasks = fs.ntasks;
    if (!out->nodes)
        out->nodes = fs.nodes;
    if (!out->per_node)
        out->per_node = fs.per_node;
}

int whale_submit_from_self(struct whale_submit *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (!f)
        return -1;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *argv[512];
    int argc = 0;
    for (size_t i = 0; i < n && argc < 511; i += strlen(buf + i) + 1)
        argv[argc++] = buf + i;
    argv[argc] = NULL;
    whale_submit_parse(argv, out);
    return 0;
}

/* EP divides DP (expert groups are carved out of the data-parallel ranks):
 * checked as soon as DP is known, given or derived from the task count. */
static int check_ep(const struct whale_opts *o, long dp, bool derived)
{
    struct whale_grid g = o->grid;
    g.dp = (int)dp;
    if (!o->given[OPT_EP] || dp < 1 || dp > WHALE_GRID_MAX_DP || dp % whale_grid_ep(&g) == 0)
        return 0;
    char ok[256];
    whale_grid_ep_choices((int)dp, ok, sizeof ok);
    slurm_error(PLUGIN_NAME ": --whale-ep=%d must divide the data-parallel degree %s%ld: expert "
                "groups are carved out of the data-parallel ranks (allowed --whale-ep: %s)",
                o->ep, derived ? "DP = " : "--whale-dp=", dp, ok);
    return -1;
}

int whale_submit_check(const struct whale_submit *s, bool is_srun)
{
    const char *who = is_srun ? "the step has" : "the job's sruns have";
    const struct whale_opts *o = &whale_opts;
    if (o->given[OPT_DP] && !o->given[OPT_PLAN] && check_ep(o, o->dp, false))
        return -1;
    long tasks = s->ntasks;
    if (!tasks && s->nodes && s->per_node)
        tasks = s->nodes * s->per_node;
    if (!tasks || o->given[OPT_PLAN])
        return 0; /* unknown, or a plan file / auto plan decides (checked at srun) */
    long spare_tasks = 0;
    if (o->spares > 0) {
        if (!s->nodes || tasks % s->nodes)
            return 0; /* tasks per node unknown: the spares' share is too */
        spare_tasks = (long)o->spares * (tasks / s->nodes);
    }
    long working = tasks - spare_tasks;
    long tp = o->tp > 0 ? o->tp : 1, pp = o->pp > 0 ? o->pp : 1;
    long world = tp * pp * (o->given[OPT_DP] ? o->dp : 1);
    bool bad = o->given[OPT_DP] ? world != working : working % world != 0;
    if (!bad && working > 0 && !o->given[OPT_DP] && check_ep(o, working / world, true))
        return -1;
    if (!bad || working <= 0)
        return 0;
    /* the wording of the step's own check (map.c), so that srun says the
     * same whether it refuses now or once it has the step */
    const char *hint = is_srun ? "" : ", or put the --whale-* degrees on the srun lines inside "
                                      "the job";
    if (o->given[OPT_DP])
        slurm_error(PLUGIN_NAME ": TP*PP*DP = %ld*%ld*%d = %ld working ranks, but %s %ld working "
                    "tasks (%ld tasks - %ld on %d spare node(s)); give -n%ld%s", tp, pp, o->dp,
                    world, who, working, tasks, spare_tasks, o->spares > 0 ? o->spares : 0,
                    world + spare_tasks, hint);
    else
        slurm_error(PLUGIN_NAME ": %ld working tasks (%ld tasks - %ld on %d spare node(s)) are "
                    "not a multiple of TP*PP = %ld*%ld = %ld; give --whale-dp or change -n%s",
                    working, tasks, spare_tasks, o->spares > 0 ? o->spares : 0, tp, pp, world,
                    hint);
    return -1;
}
