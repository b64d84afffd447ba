/* struct whale_par_comm without the comm module (single-rank builds). */
#include "whale/error.h"
#include "whale/log.h"
#include "whale/parallel.h"

static int none_allreduce(struct whale_par_comm *c, float *buf, size_t n, enum whale_op op)
{
    (void)c; (void)buf; (void)n; (void)op;
    return 0;
}

void whale_par_comm_from_group(struct whale_par_comm *c, whale_group *g)
{
    if (g)
        whale_warn("parallel: built without the comm module; a group is treated as one rank");
    *c = (struct whale_par_comm){ .rank = 0, .size = 1, .allreduce = none_allreduce };
}
