/* Inference entry points for text generation (whale-generate).
 *
 * whale_engine_next_probs runs the whole model forward over the engine's
 * sequence window (1 x T) per call: producing k tokens costs k full
 * forwards. Causal attention means positions after n-1 (padding) never
 * influence position n-1, so a short prompt needs no special shapes.
 *
 * With a KV cache (whale_kv_cache_*) every token runs through the model
 * once, one position at a time, attending over the keys and values kept
 * for the earlier positions: the prompt is fed once (prefill), then each
 * new token costs one position. */
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

/* A KV cache for one sequence of up to the engine's window, with the same
 * requirements on the engine as whale_engine_next_probs. WHALE_ENOTSUP
 * (nothing said) when the engine's backend has no generation operations
 * (whale_backend_has_decode: cuda today): use whale_engine_next_probs. */
typedef struct whale_kv_cache whale_kv_cache;
int whale_kv_cache_create(whale_engine *e, whale_kv_cache **out);
void whale_kv_cache_destroy(whale_kv_cache *c);
/* Positions cached so far; reset forgets them (a new or slid context). */
int whale_kv_cache_len(const whale_kv_cache *c);
void whale_kv_cache_reset(whale_kv_cache *c);
/* probs (model vocabulary floats) at position n-1 of tokens[0..n): the
 * tokens from whale_kv_cache_len(c) on go through the model one position
 * each and join the cache; tokens[0..len) must be those cached (the caller
 * only appends). len < n <= the engine's seq. */
int whale_engine_kv_next_probs(whale_engine *e, whale_kv_cache *c, const int32_t *tokens, int n,
                               float *probs);

/* The vocabulary size and sequence window of the engine. */
int whale_engine_vocab(const whale_engine *e);
int whale_engine_seq(const whale_engine *e);

#ifdef __cplusplus
}
#endif
#endif
