/* Bounds for host AdamW (whale-bench offload adamw): what the memory
 * traffic and what the arithmetic alone allow, measured on this machine in
 * the same run as the kernels they bound. */
#include "bench_roofline.h"

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "whale/optim.h"

enum { BLK = 16384 }; /* the multi-tensor AdamW's block */

/* AdamW's traffic without its arithmetic: reads w, g, m, v, writes w, m, v
 * (28 B per parameter) in the same blocks, handed out to the same threads
 * the same way. Shapes: w, g, m, v (n). */
void bench_stream28(float *w, const float *g, float *m, float *v, size_t n)
{
    const size_t nblk = (n + BLK - 1) / BLK;
#pragma omp parallel for schedule(dynamic, 2)
    for (size_t b = 0; b < nblk; b++) {
        const size_t lo = b * BLK, hi = lo + BLK < n ? lo + BLK : n;
#pragma omp simd
        for (size_t i = lo; i < hi; i++) {
            const float gi = g[i];
            w[i] += 1e-7f * gi;
            m[i] += 1e-7f * gi;
            v[i] += 1e-7f * gi;
        }
    }
}

/* AdamW's arithmetic without the memory traffic: the same kernel over n
 * elements, but each thread updates its own L2-resident block again and
 * again. Returns 0 or -1 (out of memory). */
int bench_adamw_in_l2(enum whale_simd s, const struct whale_adamw *o, size_t n)
{
    int nth = 1;
#ifdef _OPENMP
    nth = omp_get_max_threads();
#endif
    float *buf = malloc((size_t)nth * 4 * BLK * sizeof(float));
    if (!buf)
        return -1;
    for (size_t i = 0; i < (size_t)nth * 4 * BLK; i++)
        buf[i] = (float)((i * 2654435761u) % 1000) * 1e-4f;
    const size_t nblk = (n + BLK - 1) / BLK;
#pragma omp parallel for schedule(dynamic, 2)
    for (size_t b = 0; b < nblk; b++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float *x = buf + (size_t)me * 4 * BLK;
        /* one block: one thread, no nested region */
        whale_adamw_update_simd(s, o, 1, x, x + BLK, x + 2 * BLK, x + 3 * BLK, BLK, 1.0f,
                                true);
    }
    free(buf);
    return 0;
}
