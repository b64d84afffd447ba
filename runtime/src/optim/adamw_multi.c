/* Multi-tensor host AdamW: one parallel region for a whole optimizer step.
 *
 * Why: a step over gpt2-124m's 148 tensors with one parallel region per
 * tensor pays 148 fork/join barriers, and on a loaded machine each barrier
 * waits for the slowest (possibly descheduled) thread. Here all tensors are
 * cut into blocks of BLK elements (never across a tensor's end) and the
 * blocks are handed out dynamically, so a thread that was descheduled just
 * takes fewer blocks. BLK = 16 K elements: 4 fp32 streams of 64 KiB plus
 * the 16-bit copy stay in L2 (2 MiB per core here), so the mixed path's
 * scalar/AVX2 cast reads the new weights from cache.
 *
 * Every element's update is independent, so the result does not depend on
 * the thread count or on which thread ran a block (bit-identical to
 * whale_adamw_update / whale_adamw_update_mixed). */
#include "adamw_kern.h"
#include "whale/error.h"

#include <stdlib.h>

enum { BLK = 16384, STACK_T = 64 };

static enum opt_cast cast_of(enum whale_dtype d)
{
    return d == WHALE_BFLOAT16 ? OPT_CAST_BF16 : d == WHALE_FLOAT16 ? OPT_CAST_FP16
                                                                      : OPT_CAST_NONE;
}

/* the tensor holding block c: first (nt + 1) is the prefix of block counts */
static int tensor_of(const size_t *first, int nt, size_t c)
{
    int lo = 0, hi = nt - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int whale_adamw_multi_simd(enum whale_simd s, const struct whale_adamw *o, int64_t t,
                           const struct whale_adamw_tensor *ts, int nt,
                           enum whale_dtype param_dtype, float grad_mul)
{
    if (!o || nt < 0 || (nt > 0 && !ts) || t < 1)
        return WHALE_EINVAL;
    if (param_dtype != WHALE_FLOAT32 && param_dtype != WHALE_BFLOAT16 &&
        param_dtype != WHALE_FLOAT16)
        return WHALE_EINVAL;
    if (s > whale_adamw_best_simd())
        s = whale_adamw_best_simd();
    size_t stack[STACK_T + 1], *first = stack;
    if (nt > STACK_T && !(first = malloc(((size_t)nt + 1) * sizeof *first)))
        return WHALE_ENOMEM;
    first[0] = 0;
    for (int i = 0; i < nt; i++)
        first[i + 1] = first[i] + (ts[i].n + BLK - 1) / BLK;
    const size_t nblk = first[nt];
    /* decay or not: the only per-tensor difference in the coefficients */
    const struct opt_coef kc[2] = { opt_coef_of(o, t, grad_mul, false),
                                    opt_coef_of(o, t, grad_mul, true) };
    const enum opt_cast cast = cast_of(param_dtype);
    /* small calls (the engine's per-parameter slices) stay on this thread */
#pragma omp parallel for schedule(dynamic, 2) if (nblk > 4)
    for (size_t c = 0; c < nblk; c++) {
        const int k = tensor_of(first, nt, c);
        const struct whale_adamw_tensor *x = &ts[k];
        const size_t lo = (c - first[k]) * BLK, len = x->n - lo < BLK ? x->n - lo : BLK;
        opt_adamw_kernel(s, &kc[x->decay], x->w + lo, x->g + lo, x->m + lo, x->v + lo,
                         x->p16 ? x->p16 + lo : NULL, cast, len);
    }
    if (first != stack)
        free(first);
    return 0;
}

int whale_adamw_multi_host(const struct whale_adamw *o, int64_t t,
                           const struct whale_adamw_tensor *ts, int nt,
                           enum whale_dtype param_dtype, float grad_mul)
{
    return whale_adamw_multi_simd(whale_adamw_simd(), o, t, ts, nt, param_dtype, grad_mul);
}

void whale_adamw_update_host(const struct whale_adamw *o, int64_t t, float *w, const float *g,
                             float *m, float *v, size_t n, float grad_mul, bool decay)
{
    whale_adamw_update_simd(whale_adamw_simd(), o, t, w, g, m, v, n, grad_mul, decay);
}

void whale_adamw_update_simd(enum whale_simd s, const struct whale_adamw *o, int64_t t, float *w,
                             const float *g, float *m, float *v, size_t n, float grad_mul,
                             bool decay)
{
    const struct whale_adamw_tensor x = { w, g, m, v, NULL, n, decay };
    (void)whale_adamw_multi_simd(s, o, t, &x, 1, WHALE_FLOAT32, grad_mul); /* cannot fail */
}

/* Host offload at 16-bit precision: the cast in the same pass (see
 * adamw_host.c); bit-identical to whale_adamw_update_mixed. */
void whale_adamw_update_mixed_host(const struct whale_adamw *o, int64_t t, float *master,
                                   const float *g, float *m, float *v, uint16_t *param,
                                   enum whale_dtype param_dtype, size_t n, float grad_mul,
                                   bool decay)
{
    const struct whale_adamw_tensor x = { master, g, m, v, param, n, decay };
    if (param_dtype != WHALE_BFLOAT16 && param_dtype != WHALE_FLOAT16)
        param_dtype = WHALE_FLOAT32; /* as whale_adamw_update_mixed: no cast */
    (void)whale_adamw_multi_simd(whale_adamw_simd(), o, t, &x, 1, param_dtype, grad_mul);
}
