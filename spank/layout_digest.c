/* The layout digest (layout_digest.h): xxh64 over the degrees and each
 * task's logical rank, as fixed-width little-endian integers, so that srun
 * and slurmstepd (same plugin build) agree bit for bit. */
#include "layout_digest.h"

#include <stdint.h>
#include <stdio.h>

#define XXH_INLINE_ALL /* header only: the plugin links no libxxhash */
#include <xxhash.h>

static void put(XXH64_state_t *st, int v)
{
    uint32_t u = (uint32_t)v;
    unsigned char b[4] = { (unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                           (unsigned char)(u >> 24) };
    XXH64_update(st, b, sizeof b);
}

void whale_layout_digest(const struct whale_layout *l, char out[WHALE_LAYOUT_DIGEST_LEN])
{
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    put(&st, l->tp);
    put(&st, l->pp);
    put(&st, l->dp);
    put(&st, l->world);
    put(&st, l->ntasks);
    for (int t = 0; t < l->ntasks; t++)
        put(&st, l->rank_of_task ? l->rank_of_task[t] : -2);
    snprintf(out, WHALE_LAYOUT_DIGEST_LEN, "%016llx", (unsigned long long)XXH64_digest(&st));
}
