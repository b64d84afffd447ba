/* Who holds whose in-memory copy: a pure function of the layout and the
 * nodes, so every task computes the same table without talking. */
#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/redundancy.h"

int whale_red_holders(const struct whale_red_layout *l, int *holder)
{
    if (l->tp < 1 || l->pp < 1 || l->dp < 1 || l->nspares < 0 || !l->rank_node ||
        (l->nspares && !l->spare_node) || l->zero < 0 || l->zero > 3) {
        whale_error("redundancy holders: bad layout (tp %d pp %d dp %d zero %d spares %d)", l->tp,
                    l->pp, l->dp, l->zero, l->nspares);
        return WHALE_EINVAL;
    }
    const int world = whale_grid_world(&l->grid);
    if (l->zero == 0 && l->dp > 1 && whale_grid_ep(&l->grid) <= 1) {
        /* every DP replica holds the weights, moments and scalars (with EP
         * not the experts of the other EP ranks: those need a copy) */
        for (int r = 0; r < world; r++)
            holder[r] = WHALE_RED_NO_HOLDER;
        return 0;
    }
    int next_spare = 0;
    for (int r = 0; r < world; r++) {
        const int node = l->rank_node[r];
        if (l->nspares > 0) {
            /* round-robin, skipping spares on r's own node when another exists */
            int pick = -1;
            for (int k = 0; k < l->nspares && pick < 0; k++) {
                int s = (next_spare + k) % l->nspares;
                if (l->spare_node[s] != node)
                    pick = s;
            }
            if (pick < 0)
                pick = next_spare % l->nspares;
            next_spare = pick + 1;
            holder[r] = -(1 + pick);
            continue;
        }
        struct whale_coords co; /* same (tp, pp) in the next DP replica */
        whale_grid_coords(&l->grid, r, &co);
        co.dp = (co.dp + 1) % l->dp;
        int cand = whale_grid_rank(&l->grid, &co);
        if (cand == r || l->rank_node[cand] == node) {
            cand = -1;
            for (int k = 1; k < world && cand < 0; k++)
                if (l->rank_node[(r + k) % world] != node)
                    cand = (r + k) % world;
            if (cand < 0) /* one node: another rank still survives a crashed process */
                cand = world > 1 ? (r + 1) % world : WHALE_RED_NO_HOLDER;
        }
        holder[r] = cand;
    }
    return 0;
}

int whale_red_owned_by(const struct whale_red_layout *l, int me, int *owners, int max)
{
    const int world = whale_grid_world(&l->grid);
    int *h = malloc((size_t)world * sizeof *h);
    if (!h)
        return WHALE_ENOMEM;
    int rc = whale_red_holders(l, h);
    int n = 0;
    for (int r = 0; r < world && !rc; r++)
        if (h[r] == me && h[r] != WHALE_RED_NO_HOLDER) {
            if (n < max)
                owners[n] = r;
            n++;
        }
    free(h);
    return rc ? rc : n;
}
