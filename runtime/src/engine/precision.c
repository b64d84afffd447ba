/* Mixed precision: the engine's arithmetic stays fp32 (OpenBLAS sgemm,
 * fp32 LayerNorm/softmax/loss/norm), storage is 16-bit at the boundaries:
 *  - params: 16-bit copy used in compute, widened one bucket at a time
 *    right before a layer runs (step.c w_acquire); fp32 master weights and
 *    AdamW moments are what the optimizer updates;
 *  - activations kept for backward: stored in 16 bits per slot, widened into
 *    one layer's fp32 area for its backward;
 *  - layer outputs and the gradient stream between layers: rounded to the
 *    16-bit values a 16-bit tensor would hold (this is also where fp16
 *    overflows, which the loss scaler then sees);
 *  - gradients of parameters accumulate in fp32 (Megatron's main_grad).
 * This OpenBLAS build exports no cblas_sbgemm, so there is no bf16 GEMM on
 * the CPU path here; see README "Mixed precision". */
#include "engine_int.h"

#include "whale/dtype.h"

void eng_lp_store(const whale_engine *e, uint16_t *dst, const float *src, size_t n)
{
    if (e->lp == WHALE_BFLOAT16)
        whale_f32_to_bf16(dst, src, n);
    else if (e->lp == WHALE_FLOAT16)
        whale_f32_to_fp16(dst, src, n);
}

void eng_lp_load(const whale_engine *e, float *dst, const uint16_t *src, size_t n)
{
    if (e->lp == WHALE_BFLOAT16)
        whale_bf16_to_f32(dst, src, n);
    else if (e->lp == WHALE_FLOAT16)
        whale_fp16_to_f32(dst, src, n);
}

void eng_lp_round(const whale_engine *e, float *buf, size_t n)
{
    if (e->lp == WHALE_BFLOAT16)
        whale_round_f32_bf16(buf, n);
    else if (e->lp == WHALE_FLOAT16)
        whale_round_f32_fp16(buf, n);
}

void eng_lp_adamw(const whale_engine *e, float *master, const float *g, float *m, float *v,
                  uint16_t *param, size_t n, float grad_mul, bool decay)
{
    whale_adamw_update_mixed(&e->adam, e->adam_t, master, g, m, v, param, e->lp, n, grad_mul,
                             decay);
}
