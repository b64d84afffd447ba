/* Expert parallelism of the MoE blocks (moe_ep.c): the token exchange over
 * the EP group that replaces moe.c's local dispatch and combine. */
#ifndef ENGINE_MOE_EP_H
#define ENGINE_MOE_EP_H

#include <stddef.h>
#include <stdint.h>

#include "layer.h"
#include "whale/arena.h"
#include "whale/engine.h"

/* Experts this rank computes: E / ep, the first one's global index. */
static inline int eng_moe_ep_local(const struct eng_dims *d)
{
    return d->ep > 1 ? d->moe.experts / d->ep : d->moe.experts;
}
static inline int eng_moe_ep_first(const struct eng_dims *d)
{
    return d->ep > 1 ? d->ep_rank * eng_moe_ep_local(d) : 0;
}

/* Rows the local experts can receive in one micro-batch: every rank of
 * the group sends each of its N tokens to at most min(TopK, E/ep) of them
 * (a token's TopK experts are distinct). Without EP: N * TopK. */
size_t eng_moe_ep_rows(const struct eng_dims *d);

/* The layout of one exchange: rc[s * El + el] rows source rank s sends to
 * local expert el, eoff[el] the first row of local expert el in the
 * expert-major layout (El + 1 entries), n the rows received. */
struct moe_ep_x {
    int32_t *rc, *eoff;
    int n;
};
/* Int32 words of scratch one exchange layout needs. */
size_t eng_moe_ep_layout_words(const struct eng_dims *d);

/* All-to-all of the routed counts: cnt (E) this rank's kept rows per global
 * expert; fills x (whose arrays point into the caller's scratch). */
int eng_moe_ep_counts(const struct eng_dims *d, const int32_t *cnt, struct moe_ep_x *x);

/* dst (x->n, C) expert-major (source rank, then the source's row order,
 * inside an expert) = the rows every rank of the group sends to this
 * rank's experts; src (R, C) this rank's rows, expert-major by global
 * expert with off (E + 1) its offsets; tmp (x->n, C) scratch. */
int eng_moe_ep_dispatch(const struct eng_dims *d, const struct moe_ep_x *x,
                        const int32_t *off, const float *src, float *dst, float *tmp);
/* The inverse: dst (R, C) in this rank's row layout = the rows src (x->n,
 * C) (expert-major as dispatch left them) that the experts computed for
 * them; tmp (x->n, C) scratch. With rows non-NULL the result may instead
 * be left in the receive window, *rows saying where (dst or the window),
 * valid until the next exchange. */
int eng_moe_ep_combine(const struct eng_dims *d, const struct moe_ep_x *x,
                       const int32_t *off, const float *src, float *dst, float *tmp,
                       const float **rows);

/* The receive window of d's EP group (d->ep_win) where the group is on one
 * node and WHALE_MOE_EP_WINDOW is not 0, counted in arena a (communication
 * category, against its budget); none (and 0) when it cannot be had or
 * does not fit the budget. Close frees it and gives its bytes back. */
int eng_moe_ep_win_open(struct eng_dims *d, whale_arena *a);
void eng_moe_ep_win_close(struct eng_dims *d, whale_arena *a);

/* v (n int64) = its sum over the EP group (the routing statistics). */
int eng_moe_ep_sum(const struct eng_dims *d, int64_t *v, int n);

/* Refuses an EP degree the MoE blocks cannot shard (logged). */
int eng_moe_ep_check(const struct whale_engine_config *c, int ep);

#endif
