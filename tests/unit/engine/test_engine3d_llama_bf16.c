/* test_engine3d_llama.c in bf16 mixed precision: Llama-style blocks in
 * every layout against the single-rank bf16 run, within the 3e-4 of
 * test_engine3d_bf16.c (same reason: fp32 sums in another order move a
 * value across a bf16 rounding tie). */
#define T3D_PRECISION WHALE_PREC_BF16
#define T3D_TOL 3e-4
#include "test_engine3d_llama.c"
