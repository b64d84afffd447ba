/* Built without the comm module: single rank only. */
#include "ecomm.h"
#include "engine_int.h"
#include "layer.h"

#include <string.h>

#include "whale/error.h"
#include "whale/log.h"

int eng_groups_from_ctx(whale_ctx *ctx, struct eng_groups *g)
{
    (void)ctx;
    memset(g, 0, sizeof *g);
    g->dp.size = 1;
    whale_par_comm_from_group(&g->tp, NULL);
    whale_par_comm_from_group(&g->pp, NULL);
    whale_par_comm_from_group(&g->emb, NULL);
    return 0;
}

void eng_groups_free(struct eng_groups *g)
{
    (void)g;
}
