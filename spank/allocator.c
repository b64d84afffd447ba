/* sbatch / salloc (S_CTX_ALLOCATOR). Options given here reach the job's
 * sruns through SLURM_SPANK__SLURM_SPANK_OPTION_whale_* in the environment. */
#include "plugin.h"

int whale_allocator_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    return 0;
}
