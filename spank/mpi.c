/* PMIx for Whale steps without --mpi=pmix.
 *
 * srun picks its MPI plugin while it parses options, before any SPANK
 * option callback or init_post_opt runs; setting SLURM_MPI_TYPE later has
 * no effect on the step (verified on Slurm 22.05). So in slurm_spank_init
 * (srun only) we look for --whale* in srun's own command line or inherited
 * from sbatch (SLURM_SPANK__SLURM_SPANK_OPTION_whale_*), and when the user
 * chose no MPI type in the environment we set SLURM_MPI_TYPE=pmix, which
 * srun then reads like any user setting (MpiDefault stays the fallback;
 * an explicit --mpi=... on the command line still wins and is refused
 * later by whale_mpi_check with the exact fix). */
#define _GNU_SOURCE /* dladdr */
#include "plugin.h"
#include "srun_argv.h"

#include <dirent.h>
#include <dlfcn.h>
#include <slurm/slurm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

static bool argv_has_whale(void)
{
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (!f)
        return false;
    char arg[4096];
    size_t n = 0;
    int c, idx = 0;
    bool found = false, prev_takes_value = false;
    while (!found && (c = fgetc(f)) != EOF) {
        if (c) {
            if (n < sizeof arg - 1)
                arg[n++] = (char)c;
            continue;
        }
        arg[n] = '\0';
        n = 0;
        if (idx++ == 0)
            continue; /* argv[0] */
        enum srun_arg k = srun_arg_kind(arg, &prev_takes_value);
        if (k == SRUN_ARG_END)
            break;
        if (k == SRUN_ARG_OPTION && !strncmp(arg, "--whale", 7))
            found = true;
    }
    fclose(f);
    return found;
}

static bool env_has_whale(void)
{
    static const char pfx[] = "SLURM_SPANK__SLURM_SPANK_OPTION_whale_";
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, pfx, sizeof pfx - 1))
            return true;
    return false;
}

/* Slurm's plugin directories: PluginDir= of slurm.conf, else the
 * directory holding libslurmfull.so (Slurm installs it among its plugins). */
static void plugin_dirs(char *out, size_t n)
{
    out[0] = '\0';
    const char *conf = getenv("SLURM_CONF");
    FILE *f = fopen(conf && *conf ? conf : "/etc/slurm/slurm.conf", "r");
    if (f) {
        char line[4096];
        while (fgets(line, sizeof line, f)) {
            char *p = line;
            while (*p == ' ' || *p == '\t')
                p++;
            if (!strncasecmp(p, "PluginDir=", 10)) {
                p += 10;
                p[strcspn(p, " \t\r\n#")] = '\0';
                snprintf(out, n, "%s", p);
            }
        }
        fclose(f);
    }
    if (out[0])
        return;
    Dl_info info;
    if (dladdr((void *)slurm_hostlist_create, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash)
            snprintf(out, n, "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
    }
}

int whale_mpi_pmix_installed(const char *dirs)
{
    if (!dirs || !*dirs)
        return -1; /* unknown: let srun decide */
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dirs);
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        DIR *dir = opendir(d);
        if (!dir)
            continue;
        struct dirent *e;
        bool found = false;
        while (!found && (e = readdir(dir)))
            found = !strncmp(e->d_name, "mpi_pmix", 8) && strstr(e->d_name, ".so");
        closedir(dir);
        if (found)
            return 1;
    }
    return 0;
}

static int g_pmix_missing; /* whale wanted, but this Slurm has no mpi/pmix */
static char g_plugin_dirs[4096];

void whale_mpi_preset(void)
{
    if (getenv("SLURM_MPI_TYPE"))
        return;
    if (!argv_has_whale() && !env_has_whale())
        return;
    plugin_dirs(g_plugin_dirs, sizeof g_plugin_dirs);
    /* without the plugin srun would die on --mpi=pmix before Whale can say why */
    if (whale_mpi_pmix_installed(g_plugin_dirs) == 0) {
        g_pmix_missing = 1;
        return;
    }
    setenv("SLURM_MPI_TYPE", "pmix", 1);
}

int whale_mpi_check(void)
{
    if (g_pmix_missing) {
        slurm_error(PLUGIN_NAME ": a Whale step needs PMIx, but this Slurm has no mpi/pmix plugin "
                    "(no mpi_pmix*.so in %s): install Slurm's PMIx plugin (Debian: "
                    "slurm-wlm-basic-plugins with libpmix2) on every node and set "
                    "MpiDefault=pmix in slurm.conf", g_plugin_dirs);
        return -1;
    }
    const char *t = getenv("SLURM_MPI_TYPE");
    if (t && !strncasecmp(t, "pmix", 4))
        return 0;
    slurm_error(PLUGIN_NAME ": a Whale step needs PMIx but this step uses --mpi=%s; remove that "
                "--mpi option (or SLURM_MPI_TYPE) or use --mpi=pmix (site: MpiDefault=pmix in "
                "slurm.conf, and Slurm's mpi_pmix plugin installed)",
                t ? t : "none");
    return -1;
}
