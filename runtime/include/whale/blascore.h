/* Which OpenBLAS kernels this CPU should run.
 *
 * OpenBLAS (DYNAMIC_ARCH builds, as Debian ships) picks its kernel family
 * once, when the library loads, from the CPU's vendor/family/model. A model
 * it does not know -- OpenBLAS 0.3.21 on Emerald Rapids (family 6, model
 * 207) or Zen 5 -- falls back to Prescott (SSE3) kernels, a fraction of what
 * the AVX-512 or AVX2 kernels of the same library do on that CPU. The
 * environment variable OPENBLAS_CORETYPE overrides the choice, but only
 * before the library loads: tools (whale-train, whale-bench) ask
 * whale_blas_core_wanted() first thing in main and re-execute themselves
 * with it set. Decided from the CPU's instruction-set flags, never from its
 * model number, so a CPU that lacks AVX-512 never gets AVX-512 kernels. */
#ifndef WHALE_BLASCORE_H
#define WHALE_BLASCORE_H

#ifdef __cplusplus
extern "C" {
#endif

enum whale_cpu_feature {
    WHALE_CPU_AVX = 1,
    WHALE_CPU_AVX2 = 2,        /* AVX2 and FMA together */
    WHALE_CPU_AVX512 = 4,      /* AVX-512 F, BW, VL and DQ together */
    WHALE_CPU_AVX512BF16 = 8,
};

/* WHALE_CPU_* flags of this CPU (run-time detection). */
unsigned whale_cpu_features(void);

/* The kernel family the loaded OpenBLAS uses ("SkylakeX", "Prescott", ...),
 * "" when unknown. */
const char *whale_blas_corename(void);

/* The host's fp32 GEMM rate in GFLOP/s: the best of 5 products of
 * 1536 x 1536 matrices through the cpu kernels (OpenBLAS sgemm on the host
 * compute pool), the peak a step's MFU is measured against on cpu. */
double whale_blas_sgemm_peak_gflops(void);

/* Pure: the OPENBLAS_CORETYPE for a CPU with `features` when OpenBLAS chose
 * `current`, or NULL when `current` is already as good (or the CPU has no
 * AVX2). Only generic/pre-AVX2 families count as a wrong choice. */
const char *whale_blas_core_advice(const char *current, unsigned features);

/* What a tool should put into OPENBLAS_CORETYPE before re-executing, or
 * NULL for nothing: WHALE_BLAS_CORE=off, OPENBLAS_CORETYPE already set, or
 * OpenBLAS chose well. WHALE_BLAS_CORE=NAME forces NAME when OpenBLAS
 * chose something else. */
const char *whale_blas_core_wanted(void);

#ifdef __cplusplus
}
#endif
#endif
