/* Entry points of spank_whale.so: a dispatcher per callback that routes to
 * the file of the current Slurm context. Only slurm_spank_* symbols are
 * exported (spank_whale.map). Without any --whale* option every callback
 * returns at once: the plugin does nothing for other jobs. */
#include "plugin.h"
#include "elastic.h"

#include <slurm/slurm.h>

#include <stdio.h>
#include <stdlib.h>

SPANK_PLUGIN(whale, 1);

/* The batch script, extern and interactive steps run no Whale tasks even
 * when sbatch/salloc got --whale-* options (those are for the job's sruns). */
static bool special_step(spank_t sp)
{
    uint32_t stepid = 0;
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
        return false;
    return stepid == SLURM_BATCH_SCRIPT || stepid == SLURM_EXTERN_CONT ||
           stepid == SLURM_INTERACTIVE_STEP || stepid == SLURM_PENDING_STEP;
}

/* srun/sbatch/salloc before any allocation: our message is the whole
 * refusal (plugin.h). Nothing of Slurm's needs releasing yet. */
static void exit_after_refusal(void)
{
    fflush(stdout);
    fflush(stderr);
    exit(1);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    /* Inside slurmd itself and the prolog/epilog there is nothing to do. */
    if (ctx == S_CTX_SLURMD || ctx == S_CTX_JOB_SCRIPT)
        return 0;
    whale_plugin_log_init();
    if (whale_site_parse_args(ac, av))
        return -1;
    if (ctx == S_CTX_LOCAL)
        whale_mpi_preset();
    /* before srun/sbatch/salloc read their options (elastic.c) */
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR) {
        whale_elastic_preset();
        whale_refuse_early = exit_after_refusal;
    }
    /* options in every context: a static table is not seen by sbatch */
    return whale_options_register(sp);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    int rc = 0;
    switch (spank_context()) {
    case S_CTX_LOCAL:
        rc = whale_local_init_post_opt(sp, ac, av);
        break;
    case S_CTX_ALLOCATOR:
        rc = whale_allocator_init_post_opt(sp, ac, av);
        break;
    default:
        return 0;
    }
    if (rc && whale_refuse_early)
        whale_refuse_early();
    return rc;
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    if (spank_context() != S_CTX_LOCAL)
        return 0;
    return whale_local_user_init(sp, ac, av);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    if (spank_context() != S_CTX_REMOTE || special_step(sp))
        return 0;
    return whale_remote_user_init(sp, ac, av);
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    if (spank_context() != S_CTX_REMOTE || special_step(sp))
        return 0;
    return whale_remote_task_init(sp, ac, av);
}

int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
    if (spank_context() != S_CTX_REMOTE || special_step(sp))
        return 0;
    return whale_remote_task_post_fork(sp, ac, av);
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    if (spank_context() != S_CTX_REMOTE || special_step(sp))
        return 0;
    return whale_remote_task_exit(sp, ac, av);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    if (spank_context() == S_CTX_REMOTE)
        return whale_remote_exit(sp, ac, av);
    if (spank_context() == S_CTX_LOCAL)
        whale_result_exit();
    if (spank_context() == S_CTX_LOCAL || spank_context() == S_CTX_ALLOCATOR)
        whale_site_free();
    return 0;
}
