/* Stubs of the few Slurm functions the plugin's sources call, so that unit
 * tests run them outside Slurm: the last error message is kept, registered
 * options are recorded and can be given as srun or slurmstepd would. */
#ifndef TEST_SLURM_STUBS_H
#define TEST_SLURM_STUBS_H

#include "plugin.h"

extern char last_err[4096];         /* the last slurm_error() message */
extern struct spank_option reg[64]; /* what spank_option_register() got */
extern int nreg;

/* The plugin's options at their defaults, the log reset, every option
 * registered again. */
void stub_options_reset(void);

/* The callback of the registered option NAME on ARG: REMOTE 0 as in srun,
 * 1 as slurmstepd replays it. Fails the test when NAME is not registered. */
int stub_opt(const char *name, const char *arg, int remote);

#endif
