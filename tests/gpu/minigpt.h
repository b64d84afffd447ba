/* A GPT-2 (pre-LayerNorm blocks, tied head) written only against
 * whale/backend.h: the same program runs on the cpu and the cuda backend,
 * which makes it the CUDA-vs-CPU step-equivalence test and the throughput
 * benchmark of contrib/gpu-check.sh. It is a test harness, not the engine:
 * one rank, no parallelism, activations kept for backward.
 *
 * Parameters live in one flat fp32 buffer (the master copy AdamW updates);
 * in 16-bit mode the kernels read a 16-bit copy the fused AdamW refreshes.
 * Activations and their gradients use the mode's dtype; parameter
 * gradients are fp32. */
#ifndef TESTS_GPU_MINIGPT_H
#define TESTS_GPU_MINIGPT_H

#include <stdint.h>

#include "whale/backend.h"

struct mg_config {
    int L, C, NH, V, T, B;
    enum whale_dtype t;   /* WHALE_FLOAT32 or WHALE_BFLOAT16 / WHALE_FLOAT16 */
    uint64_t seed;
};

struct mg_model;

/* Allocates everything on b and initialises the weights from seed (same
 * values on every backend). */
int mg_create(whale_backend *b, const struct mg_config *c, struct mg_model **out);
void mg_free(struct mg_model *m);
size_t mg_num_params(const struct mg_model *m);

/* One training step on tokens/targets (B*T int32 each, host memory):
 * forward, backward, global-norm clip at 1.0, AdamW (lr). *loss = mean
 * token loss before the update. The caller times it; the step ends with the
 * stream synchronised. */
int mg_step(struct mg_model *m, const int32_t *tokens, const int32_t *targets, float lr,
            float *loss);
/* Forward only: mean loss. */
int mg_loss(struct mg_model *m, const int32_t *tokens, const int32_t *targets, float *loss);

/* Forward and backward without an update (gradient checks). */
int mg_grads(struct mg_model *m, const int32_t *tokens, const int32_t *targets, float *loss);

/* Floats of the flat parameter space (tensors padded to 64 elements). */
size_t mg_flat_size(const struct mg_model *m);
/* Copies of the fp32 master weights / last gradients to host (mg_flat_size
 * floats), and back. */
int mg_get_params(struct mg_model *m, float *host);
int mg_get_grads(struct mg_model *m, float *host);
int mg_set_params(struct mg_model *m, const float *host);

/* Model FLOPs per token for MFU: 6 N + 6 L C T (the llm.c convention, no
 * recompute counted). */
double mg_flops_per_token(const struct mg_model *m);

#endif
