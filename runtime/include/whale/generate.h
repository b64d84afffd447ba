/* Inference entry points for text generation (whale-generate).
 *
 * No KV cache yet: every call runs the whole model forward over the
 * engine's sequence window (1 x T), so producing k tokens costs k full
 * forwards. Causal attention means positions after n-1 (padding) never
 * influence position n-1, so a short prompt needs no special shapes. */
#ifndef WHALE_GENERATE_H
#define WHALE_GENERATE_H

#include <stdint.h>

#include "whale/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* probs (model vocabulary floats) = softmax of the logits at position n-1
 * after a forward over tokens[0..n), 1 <= n <= the engine's seq.
 * The engine must be a single rank (TP = PP = DP = 1, no ctx), micro-batch
 * 1, grad_accum 1, fp32 compute, no offload; anything else is refused with
 * WHALE_EINVAL and a message. Tokens must be < the vocabulary. */
int whale_engine_next_probs(whale_engine *e, const int32_t *tokens, int n, float *probs);

/* The vocabulary size and sequence window of the engine. */
int whale_engine_vocab(const whale_engine *e);
int whale_engine_seq(const whale_engine *e);

#ifdef __cplusplus
}
#endif
#endif
