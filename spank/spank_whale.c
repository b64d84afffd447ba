/* Entry points of spank_whale.so: a dispatcher per callback that routes to
 * the file of the current Slurm context. Only slurm_spank_* symbols are
 * exported (spank_whale.map). */
#include "plugin.h"

SPANK_PLUGIN(whale, 1);

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    /* Inside slurmd itself there is nothing to do; options are registered
     * in every other context (static tables are not seen by sbatch). */
    if (spank_context() == S_CTX_SLURMD || spank_context() == S_CTX_JOB_SCRIPT)
        return 0;
    return whale_options_register(sp);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    switch (spank_context()) {
    case S_CTX_LOCAL:
        return whale_local_init_post_opt(sp, ac, av);
    case S_CTX_ALLOCATOR:
        return whale_allocator_init_post_opt(sp, ac, av);
    default:
        return 0;
    }
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    if (spank_context() != S_CTX_REMOTE)
        return 0;
    return whale_remote_task_init(sp, ac, av);
}
