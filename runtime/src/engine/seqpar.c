/* Megatron sequence parallelism (Korthikanti et al. 2022) inside the TP
 * group: the residual stream keeps B*T/TP rows per rank; a column-parallel
 * GEMM reads the all-gathered rows, a row-parallel GEMM's partial sums are
 * reduce-scattered back to row shards. Both go through the TP group's
 * allreduce (whale_par_comm has no allgather / reduce-scatter): the gather
 * sums zero-padded shards (adding zeros is exact), the scatter is the
 * allreduce TP already does followed by taking this rank's rows. The values
 * are therefore exactly TP's; the activation memory of the norm / residual
 * regions and of the pipeline's boundaries drops by TP. */
#include "layer.h"

#include <string.h>

int eng_sp_gather(const struct eng_dims *d, struct whale_par_comm *tp, float *full,
                  const float *shard)
{
    const size_t C = (size_t)d->C, N = (size_t)d->B * d->T;
    memset(full, 0, sizeof(float) * N * C);
    memcpy(full + (size_t)d->r0 * C, shard, sizeof(float) * (size_t)d->Ns * C);
    return eng_tp_allreduce(tp, full, N * C);
}
