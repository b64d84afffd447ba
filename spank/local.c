/* srun (S_CTX_LOCAL). */
#include "plugin.h"

int whale_local_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (whale_opts.enabled)
        slurm_verbose(PLUGIN_NAME ": enabled for this step");
    return 0;
}
