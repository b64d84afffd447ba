/* sbatch / salloc (S_CTX_ALLOCATOR). Options given here reach the job's
 * sruns through SLURM_SPANK__SLURM_SPANK_OPTION_whale_* (an srun option
 * overrides them). What can be checked without the step is checked now,
 * so a bad option or config fails the submission, not the job hours later. */
#include "plugin.h"
#include "elastic.h"
#include "submit_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int whale_allocator_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    /* every job: an srun with spares inside it must know about --no-kill */
    if (whale_elastic_allocator(whale_opts.enabled, whale_opts.spares))
        return -1;
    if (!whale_opts.enabled)
        return 0;
    if (whale_site_load())
        return -1;
    if (whale_options_check_site(whale_site.conf))
        return -1;
    /* the job's task count, as far as it is known now (-n, -N, #SBATCH) */
    struct whale_submit sub;
    if (!whale_submit_from_self(&sub) && whale_submit_check(&sub, false))
        return -1;
    struct whale_plan p;
    int rc = whale_plan_from_options(whale_site.conf, NULL, NULL, "%j", &p);
    whale_plan_free(&p);
    return rc ? -1 : 0;
}
