/* test_engine3d_bf16 with the linear layers' GEMMs in oneDNN's bf16 matmul
 * (WHALE_BF16_GEMM=onednn): the default (auto) takes that path only on
 * CPUs with AMX-BF16, so without this run an AVX512_BF16 machine would
 * never check it. On a CPU without AVX512_BF16 it is the sgemm path again. */
#include <stdlib.h>

__attribute__((constructor)) static void bf16_gemm_onednn(void)
{
    setenv("WHALE_BF16_GEMM", "onednn", 1);
}

#include "test_engine3d_bf16.c"
