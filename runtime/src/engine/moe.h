/* Mixture-of-experts MLP of a block (moe.c): block_x.c calls it in place of
 * its dense MLP in the blocks the description makes MoE blocks. */
#ifndef ENGINE_MOE_H
#define ENGINE_MOE_H

#include <stdbool.h>
#include <stddef.h>

#include "layer.h"
#include "whale/engine.h"

/* Whether the block with global layer index `index` (1..L) is a MoE block. */
bool eng_moe_block(const struct eng_dims *d, int index);
/* Declares (p != NULL) the MoE block's MLP parameters of block `index`;
 * returns their count. */
int eng_moe_params(const struct eng_dims *d, int index, struct eng_param *p);
/* Floats the MoE MLP keeps from forward to backward / uses as scratch. */
size_t eng_moe_saved_floats(const struct eng_dims *d);
size_t eng_moe_scratch_floats(const struct eng_dims *d);
/* out (N,C) = MoE(ln (N,C)) summed over TP, biases included. p0: the index
 * of the first MoE parameter in the layer's table; saved, scratch: the
 * areas above. Adds the routing statistics and the auxiliary losses of this
 * micro-batch to io->moe (when not NULL). */
int eng_moe_fwd(const struct eng_layer *l, struct eng_io *io, int p0, float *saved,
                float *scratch, const float *ln, float *out);
/* dln (N,C) = this TP rank's part of d(MoE)/d(ln) given dout (N,C) (the
 * caller sums it over TP); parameter gradients +=; the auxiliary losses'
 * gradients with io->dloss. */
int eng_moe_bwd(const struct eng_layer *l, struct eng_io *io, int p0, float *saved,
                float *scratch, const float *ln, const float *dout, float *dln);
/* Forward / backward FLOPs of the MoE MLP of one micro-batch on this rank
 * (active experts: TopK routed and the shared ones, router). */
void eng_moe_flops(const struct eng_dims *d, double *fwd, double *bwd);
/* Refuses MoE layouts the engine does not run (logged). */
int eng_moe_check(const struct whale_engine_config *c, int tp);

#endif
