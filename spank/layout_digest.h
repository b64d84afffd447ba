/* srun and every slurmstepd compute the step's layout from the same inputs
 * (site config, topology, the step's tasks). Where those differ (another
 * whale.conf or topology.conf on a node than on the submit host) the ranks
 * srun printed and the ranks the tasks get would differ silently; so srun
 * sends a digest of its layout and each slurmstepd compares its own. */
#ifndef SPANK_WHALE_LAYOUT_DIGEST_H
#define SPANK_WHALE_LAYOUT_DIGEST_H

#include "whale/map.h"

/* SLURM_*: srun keeps it in the launch environment even with --export=NONE. */
#define WHALE_SPANK_LAYOUT_ENV "SLURM_WHALE_LAYOUT"
#define WHALE_LAYOUT_DIGEST_LEN 17 /* 16 hex digits + NUL */

/* Digest of the degrees and of every task's logical rank (a spare: -1). */
void whale_layout_digest(const struct whale_layout *l, char out[WHALE_LAYOUT_DIGEST_LEN]);

#endif
