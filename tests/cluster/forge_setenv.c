/* Test shim (LD_PRELOAD into srun): plays a user who controls srun's
 * process and replaces the plan the plugin exports with FORGE_PLAN. srun
 * runs with the user's rights, so this is exactly what a hostile user can
 * do; slurmstepd must refuse whatever arrives that breaks the site's
 * limits. Built by tests/cluster/hardening.bats with the system cc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

int setenv(const char *name, const char *value, int overwrite)
{
    int (*real)(const char *, const char *, int) =
        (int (*)(const char *, const char *, int))dlsym(RTLD_NEXT, "setenv");
    const char *forged = getenv("FORGE_PLAN");
    if (forged && !strcmp(name, "SLURM_WHALE_PLAN"))
        value = forged;
    /* FORGE_LAYOUT: srun "computed" another layout than the nodes will
     * (health.bats: a node whose whale.conf differs from the submit host's) */
    const char *layout = getenv("FORGE_LAYOUT");
    if (layout && !strcmp(name, "SLURM_WHALE_LAYOUT"))
        value = layout;
    return real(name, value, overwrite);
}
