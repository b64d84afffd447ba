/* Megatron sequence parallelism (Korthikanti et al. 2022) inside the TP
 * group: the residual stream, the norms and their inputs keep this rank's
 * Ns = B*T/TP rows [r0, r0 + Ns) (r0 = tp_rank * Ns). Entering a
 * column-parallel GEMM the norm output is all-gathered along the rows;
 * leaving a row-parallel GEMM the partial sums are reduce-scattered back to
 * row shards, where TP without SP would all-reduce them. Backward runs the
 * conjugates: the gradient of a gather is a reduce-scatter and vice versa.
 * Each moves (TP-1)/TP of the rows where an all-reduce moves twice that, so
 * SP costs no more communication than TP while the activations of the norm
 * and residual regions (and the pipeline's boundaries) drop by TP. */
#include "layer.h"

#include "whale/trace.h"

int eng_sp_gather(const struct eng_dims *d, struct whale_par_comm *tp, float *full,
                  const float *shard)
{
    /* full (N,C) = [shard of rank 0; shard of rank 1; ...], each (Ns,C) */
    uint64_t t0 = whale_trace_now();
    int rc = whale_par_allgather(tp, shard, full, (size_t)d->Ns * d->C);
    if (whale_trace_on())
        whale_trace_span("allgather", "sp allgather", t0, -1, -1);
    return rc;
}

int eng_sp_scatter(const struct eng_dims *d, struct whale_par_comm *tp, float *shard,
                   const float *full)
{
    /* shard (Ns,C) = rows [r0, r0 + Ns) of the sum over TP of full (N,C) */
    uint64_t t0 = whale_trace_now();
    int rc = whale_par_reduce_scatter(tp, full, shard, (size_t)d->Ns * d->C);
    if (whale_trace_on())
        whale_trace_span("reduce_scatter", "sp reduce-scatter", t0, -1, -1);
    return rc;
}
