/* OpenBLAS kernel family check (whale/blascore.h). */
#include "whale/blascore.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend/kernels.h"
#include "whale/clock.h"
#include "whale/knobs.h"
#include "whale/log.h"

unsigned whale_cpu_features(void)
{
    unsigned f = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx"))
        f |= WHALE_CPU_AVX;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        f |= WHALE_CPU_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        f |= WHALE_CPU_AVX512;
    if (__builtin_cpu_supports("avx512bf16"))
        f |= WHALE_CPU_AVX512BF16;
    return f;
}

const char *whale_blas_corename(void)
{
    const char *n = openblas_get_corename();
    return n ? n : "";
}

const char *whale_blas_core_advice(const char *current, unsigned features)
{
    /* OpenBLAS families without AVX2 kernels: its fallbacks for unknown
     * models (Prescott, and for AMD Barcelona/Bulldozer-era names) and the
     * families of older CPUs that a new CPU can be mistaken for. */
    static const char *const weak[] = { "prescott", "core2", "penryn", "dunnington", "nehalem",
                                        "atom", "sandybridge", "katmai", "coppermine", "northwood",
                                        "opteron", "opteron_sse3", "barcelona", "bobcat",
                                        "bulldozer", "piledriver", "steamroller", "excavator",
                                        "nano", "generic", NULL };
    if (!current || !(features & WHALE_CPU_AVX2))
        return NULL;
    int is_weak = 0;
    for (int i = 0; weak[i]; i++)
        if (!strcasecmp(current, weak[i]))
            is_weak = 1;
    if (!is_weak)
        return NULL;
    /* Cooperlake = SkylakeX kernels + bf16 ones; Haswell = AVX2/FMA */
    if (features & WHALE_CPU_AVX512)
        return features & WHALE_CPU_AVX512BF16 ? "Cooperlake" : "SkylakeX";
    return "Haswell";
}

const char *whale_blas_core_wanted(void)
{
    const char *mode = whale_knob_getenv("WHALE_BLAS_CORE");
    if (getenv("OPENBLAS_CORETYPE") || (mode && !strcmp(mode, "off")))
        return NULL;
    const char *cur = whale_blas_corename();
    if (mode && *mode && strcmp(mode, "auto"))
        return strcasecmp(cur, mode) ? mode : NULL;
    return whale_blas_core_advice(cur, whale_cpu_features());
}

/* n x n floats, 64-byte aligned, zeroed */
static float *zalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n * sizeof(float) + 64))
        return NULL;
    memset(p, 0, n * sizeof(float));
    return p;
}

double whale_blas_sgemm_peak_gflops(void)
{
    const int n = 1536;
    float *a = zalloc((size_t)n * n), *b = zalloc((size_t)n * n), *c = zalloc((size_t)n * n);
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)n * n; i++) {
            a[i] = (float)(i % 7) * 0.1f;
            b[i] = (float)(i % 5) * 0.1f;
        }
        for (int r = 0; r < 5; r++) {
            double t0 = whale_now_s();
            k_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            double dt = whale_now_s() - t0;
            double g = 2.0 * n * n * (double)n / dt / 1e9;
            best = g > best ? g : best;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}
