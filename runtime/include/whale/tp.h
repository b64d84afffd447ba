/* Tensor parallelism (Megatron) over a TP group's whale_par_comm: the
 * conjugate pair f/g and the even split of a dimension. The layers that use
 * them (column-/row-parallel linear, vocabulary-parallel embedding and
 * cross-entropy, sequence parallelism) are the engine's (engine/tp_ops.c). */
#ifndef WHALE_TP_H
#define WHALE_TP_H

#include <stddef.h>
#include <stdint.h>

#include "whale/par_comm.h"
#include "whale/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* f: identity forward, allreduce backward (before a column-parallel layer);
 * g: allreduce forward, identity backward (after a row-parallel layer).
 * buf (n) in place; dir = WHALE_PP_FORWARD or WHALE_PP_BACKWARD. */
int whale_tp_f(struct whale_par_comm *tp, enum whale_pp_kind dir, float *buf, size_t n);
int whale_tp_g(struct whale_par_comm *tp, enum whale_pp_kind dir, float *buf, size_t n);

/* This rank's [*off, *off + *len) of n items split over tp ranks; n must be a
 * multiple of size. */
int whale_tp_range(int64_t n, int size, int rank, int64_t *off, int64_t *len);

#ifdef __cplusplus
}
#endif
#endif
