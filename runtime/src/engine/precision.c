/* Mixed precision: the engine's arithmetic stays fp32 (OpenBLAS sgemm,
 * fp32 LayerNorm/softmax/loss/norm), storage is 16-bit at the boundaries:
 *  - params: 16-bit copy used in compute, widened one bucket at a time
 *    right before a layer runs (step_weights.c eng_w_acquire); fp32 master weights and
 *    AdamW moments are what the optimizer updates;
 *  - activations kept for backward: stored in 16 bits per slot, widened into
 *    one layer's fp32 area for its backward;
 *  - layer outputs and the gradient stream between layers: rounded to the
 *    16-bit values a 16-bit tensor would hold (this is also where fp16
 *    overflows, which the loss scaler then sees);
 *  - gradients of parameters accumulate in fp32 (Megatron's main_grad).
 * This OpenBLAS build exports no cblas_sbgemm, so there is no bf16 GEMM on
 * the CPU path here; see docs/precision.md. Every cast runs through
 * the engine's backend (whale_k_cast / whale_k_round; AdamW with
 * the 16-bit cast in the same pass: step_optim.c eng_apply_adamw, whale_k_adamw). */
#include "engine_internal.h"

#include "whale/backend.h"

void eng_lp_store(const whale_engine *e, uint16_t *dst, const float *src, size_t n)
{
    if (e->lp != WHALE_FLOAT32)
        whale_k_cast(e->bk, NULL, dst, e->lp, src, WHALE_FLOAT32, (int64_t)n);
}

void eng_lp_load(const whale_engine *e, float *dst, const uint16_t *src, size_t n)
{
    if (e->lp != WHALE_FLOAT32)
        whale_k_cast(e->bk, NULL, dst, WHALE_FLOAT32, src, e->lp, (int64_t)n);
}

void eng_lp_round(const whale_engine *e, float *buf, size_t n)
{
    whale_k_round(e->bk, NULL, buf, e->lp, (int64_t)n);
}
