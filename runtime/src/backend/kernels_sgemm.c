/* The fp32 GEMM library (WHALE_FP32_GEMM): OpenBLAS sgemm split over
 * whale's OpenMP pool (kernels.c, the default), or oneDNN's sgemm, which
 * threads over the same OpenMP pool itself (Debian's libdnnl uses libgomp)
 * and shares its packed panels between the threads instead of each thread
 * packing the whole operand it does not split. On the GEMMs of a gpt-small
 * step it did 136 GFLOP per CPU-second against OpenBLAS's 120 (2 threads,
 * AVX-512, contrib/bench/gemm-step-shapes.py's shapes, 2026-12-08). Its
 * sums run in another order than OpenBLAS's: the results differ in the last
 * bits, so it is asked for, never the default. */
#include "kernels.h"

#include <pthread.h>
#include <string.h>

#include "whale/knobs.h"

#ifdef WHALE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

int k_fp32_gemm_mode(void)
{
    const char *v = whale_knob_getenv("WHALE_FP32_GEMM");
    if (!v || !*v || !strcmp(v, "openblas"))
        return K_FP32_GEMM_OPENBLAS;
    if (!strcmp(v, "onednn"))
        return K_FP32_GEMM_ONEDNN;
    return -1;
}

static int use_dnnl;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void decide(void)
{
#ifdef WHALE_HAVE_DNNL
    use_dnnl = k_fp32_gemm_mode() == K_FP32_GEMM_ONEDNN;
#endif
}

bool k_fp32_gemm_onednn(void)
{
    pthread_once(&once, decide);
    return use_dnnl;
}

int k_sgemm_onednn(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#ifdef WHALE_HAVE_DNNL
    /* row-major, like cblas_sgemm with CblasRowMajor */
    return dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                      beta, C, ldc) == dnnl_success
               ? 0
               : -1;
#else
    (void)transA, (void)transB, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
    return -1;
#endif
}
