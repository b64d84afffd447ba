/* test_engine3d_moe.c in bf16 mixed precision, against the single-rank bf16
 * run over 20 steps, within 1e-3 relative. Dense bf16 layouts differ by up
 * to 3e-4 (test_engine3d_bf16.c: one bf16 ulp where TP / DP reorder a sum
 * and a value sits near a rounding tie); routing adds a discontinuity: that
 * ulp in a block's normed input can move a router logit across another
 * expert's or a token across an expert's capacity. Measured (2026-12-07,
 * fp32 GEMM arithmetic): worst 3.8e-4 (GPT, capacity 1.0, TP 2),
 * Llama dropless 1.8e-4; full and selective recompute exact. */
#define T3D_MOE_PRECISION WHALE_PREC_BF16
#define T3D_TOL 1e-3
#include "test_engine3d_moe.c"
