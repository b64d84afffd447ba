/* Helpers of the GPU tests: open both backends (or skip plainly, exit 77,
 * when there is no GPU), move arrays to the device and back, compare a
 * device result with the cpu backend's reference. */
#ifndef TESTS_GPU_UTIL_H
#define TESTS_GPU_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/backend.h"

#define GPU_SKIP 77

static int gu_failures;

/* Opens the cpu backend and the cuda one, or exits 77 saying why. */
static inline void gu_open(whale_backend **cpu, whale_backend **gpu, int ordinal)
{
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    if (!whale_device_available(WHALE_DEVICE_CUDA)) {
        printf("SKIP: no GPU visible (or this build has no CUDA backend): the CUDA path was not "
               "tested\n");
        exit(GPU_SKIP);
    }
    o.device = WHALE_DEVICE_CPU;
    if (whale_backend_open(&o, cpu)) {
        printf("FAIL: cannot open the cpu backend\n");
        exit(1);
    }
    o.device = WHALE_DEVICE_CUDA;
    o.ordinal = ordinal;
    if (whale_backend_open(&o, gpu)) {
        printf("FAIL: a GPU is visible but the cuda backend does not open\n");
        exit(1);
    }
    printf("cpu: %s\ngpu: %s\n", whale_backend_describe(*cpu), whale_backend_describe(*gpu));
}

static inline void gu_check(int rc, const char *what)
{
    if (rc) {
        printf("FAIL: %s returned %d\n", what, rc);
        exit(1);
    }
}

/* Device copy of `bytes` host bytes. */
static inline void *gu_up(whale_backend *g, const void *host, size_t bytes)
{
    void *d = NULL;
    gu_check(whale_mem_alloc(g, WHALE_MEM_WORKSPACE, bytes ? bytes : 1, &d), "whale_mem_alloc");
    if (bytes)
        gu_check(whale_memcpy(g, d, host, bytes, WHALE_H2D, NULL), "whale_memcpy H2D");
    gu_check(whale_stream_sync(whale_stream_compute(g)), "sync after upload");
    return d;
}

static inline void gu_down(whale_backend *g, void *host, const void *dev, size_t bytes)
{
    gu_check(whale_memcpy(g, host, dev, bytes, WHALE_D2H, NULL), "whale_memcpy D2H");
    gu_check(whale_stream_sync(whale_stream_compute(g)), "sync after download");
}

/* xorshift64 in [-1, 1) from *seed: each test keeps its own seed, so its
 * data stay what they were before this helper was shared. */
static inline float gu_frand(uint64_t *seed)
{
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    return (float)((*seed >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* Host array of n random values of dtype t, times scale, rounded by the
 * cpu backend's cast (caller frees). */
static inline void *gu_mk(whale_backend *cpu, uint64_t *seed, enum whale_dtype t, size_t n,
                          float scale)
{
    float *f = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        f[i] = gu_frand(seed) * scale;
    void *h = malloc(n * whale_dtype_size(t) + 4);
    gu_check(whale_k_cast(cpu, NULL, h, t, f, WHALE_FLOAT32, (int64_t)n), "cast");
    free(f);
    return h;
}

/* fp32 view of n host values of dtype t (caller frees). */
static inline float *gu_f32(whale_backend *cpu, const void *h, enum whale_dtype t, size_t n)
{
    float *f = malloc((n ? n : 1) * sizeof(float));
    gu_check(whale_k_cast(cpu, NULL, f, WHALE_FLOAT32, h, t, (int64_t)n), "cast to fp32");
    return f;
}

/* Compare the device array `dev` (n values of dtype t) with the host
 * reference `ref` (same dtype): |d - r| <= rtol * (|r| + max|r| * 1e-2)
 * per element, i.e. relative, with a floor of 1 % of the largest value for
 * elements near zero. Prints one line; counts failures. */
static inline double gu_compare(whale_backend *cpu, whale_backend *gpu, const char *name,
                                const void *ref, const void *dev, enum whale_dtype t, size_t n,
                                double rtol)
{
    size_t bytes = n * whale_dtype_size(t);
    void *h = malloc(bytes ? bytes : 1);
    gu_down(gpu, h, dev, bytes);
    float *a = gu_f32(cpu, h, t, n), *r = gu_f32(cpu, ref, t, n);
    double mx = 0, worst = 0, err_at = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(r[i]));
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - r[i]), lim = rtol * (fabs(r[i]) + mx * 1e-2);
        if (!(e <= lim) && ok) {
            ok = false;
            at = i;
            err_at = e;
        }
        double rel = e / (fabs(r[i]) + mx * 1e-2 + 1e-30);
        if (rel > worst || rel != rel)
            worst = rel;
    }
    printf("%-4s %-34s %-8s n=%-9zu max rel err %.2e (tol %.0e)", ok ? "ok" : "FAIL", name,
           whale_dtype_name(t), n, worst, rtol);
    if (!ok) {
        printf("  first bad [%zu]: gpu %.7g cpu %.7g (|err| %.3g)", at, a[at], r[at], err_at);
        gu_failures++;
    }
    printf("\n");
    free(h);
    free(a);
    free(r);
    return worst;
}

#endif
