/* Megatron's conjugate pair over a TP group. The layers built on them
 * (column-/row-parallel linear, vocabulary-parallel embedding and
 * cross-entropy, sequence parallelism) are the engine's: engine/tp_ops.c. */
#include "whale/error.h"
#include "whale/log.h"
#include "whale/tp.h"
#include "whale/trace.h"

static int reduce(struct whale_par_comm *tp, float *buf, size_t n, enum whale_op op)
{
    if (!tp || tp->size <= 1 || n == 0)
        return 0;
    uint64_t t0 = whale_trace_now();
    int rc = tp->allreduce(tp, buf, n, op);
    if (whale_trace_on())
        whale_trace_span("allreduce", "tp allreduce", t0, -1, -1);
    return rc;
}

int whale_tp_f(struct whale_par_comm *tp, enum whale_pp_kind dir, float *buf, size_t n)
{
    return dir == WHALE_PP_FORWARD ? 0 : reduce(tp, buf, n, WHALE_SUM);
}

int whale_tp_g(struct whale_par_comm *tp, enum whale_pp_kind dir, float *buf, size_t n)
{
    return dir == WHALE_PP_FORWARD ? reduce(tp, buf, n, WHALE_SUM) : 0;
}

int whale_tp_range(int64_t n, int size, int rank, int64_t *off, int64_t *len)
{
    if (size < 1 || rank < 0 || rank >= size || n % size) {
        whale_error("tensor parallelism: %lld items do not split evenly over %d ranks",
                    (long long)n, size);
        return WHALE_EINVAL;
    }
    *len = n / size;
    *off = *len * rank;
    return 0;
}
