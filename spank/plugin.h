/* Internal interface of spank_whale.so: one file per Slurm context
 * (local.c = srun, allocator.c = sbatch/salloc, remote.c = slurmstepd),
 * options.c holds the option table and the parsed option state. */
#ifndef SPANK_WHALE_PLUGIN_H
#define SPANK_WHALE_PLUGIN_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <slurm/spank.h>

#define PLUGIN_NAME "whale"

struct whale_opts {
    bool enabled;          /* any --whale* option given */
};

extern struct whale_opts whale_opts;

int whale_options_register(spank_t sp);

int whale_local_init_post_opt(spank_t sp, int ac, char **av);
int whale_allocator_init_post_opt(spank_t sp, int ac, char **av);
int whale_remote_task_init(spank_t sp, int ac, char **av);

#endif
