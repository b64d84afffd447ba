/* sbatch/salloc: what the job's sruns will start is partly known at
 * submission (-n, -N, --ntasks-per-node on the command line or in #SBATCH
 * lines); degrees that cannot fit it are refused now, not when the job's
 * first srun fails hours later. */
#ifndef SPANK_WHALE_SUBMIT_CHECK_H
#define SPANK_WHALE_SUBMIT_CHECK_H

#include <stdbool.h>

/* What sbatch/salloc was asked for; 0 = not given (or not a plain number). */
struct whale_submit {
    long ntasks, nodes, per_node;
};

/* Reads argv (NULL-terminated, argv[0] the program) and, for sbatch, the
 * #SBATCH lines of the script it names; the command line wins. */
void whale_submit_parse(char *const *argv, struct whale_submit *out);
/* Read this process's argv (/proc/self/cmdline) into *out. */
int whale_submit_from_self(struct whale_submit *out);
/* 0, or -1 after slurm_error() naming the options and the numbers.
 * is_srun: the step itself (srun's own -n/-N), else the job's default srun. */
int whale_submit_check(const struct whale_submit *s, bool is_srun);

#endif
