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
#include "plugin.h"

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
        if (!strcmp(arg, "--"))
            break;
        if (arg[0] != '-') {
            /* the command starts here unless this is the value of "-N 4" or
             * "--nodes 4" */
            if (!prev_takes_value)
                break;
            prev_takes_value = false;
            continue;
        }
        if (!strncmp(arg, "--whale", 7)) {
            found = true;
            break;
        }
        prev_takes_value = (arg[1] != '-' && arg[2] == '\0') || (arg[1] == '-' && !strchr(arg, '='));
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

void whale_mpi_preset(void)
{
    if (getenv("SLURM_MPI_TYPE"))
        return;
    if (argv_has_whale() || env_has_whale())
        setenv("SLURM_MPI_TYPE", "pmix", 1);
}

int whale_mpi_check(void)
{
    const char *t = getenv("SLURM_MPI_TYPE");
    if (t && !strncasecmp(t, "pmix", 4))
        return 0;
    slurm_error(PLUGIN_NAME ": a Whale step needs PMIx but this step uses --mpi=%s; remove that "
                "--mpi option (or SLURM_MPI_TYPE) or use --mpi=pmix (site: MpiDefault=pmix in "
                "slurm.conf, and Slurm's mpi_pmix plugin installed)",
                t ? t : "none");
    return -1;
}
