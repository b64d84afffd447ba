/* Host AdamW kernels (adamw_host.c) and their multi-tensor driver
 * (adamw_multi.c): module-internal, prefix opt_. */
#ifndef WHALE_OPTIM_ADAMW_KERN_H
#define WHALE_OPTIM_ADAMW_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "whale/optim.h"

struct opt_coef {
    float b1, b2, omb1, omb2, lr, eps, wd, c1, c2, gm;
};

/* what the kernel writes beside the fp32 weights: nothing, or round(w) as
 * bf16 / fp16 in the same pass (mixed precision) */
enum opt_cast { OPT_CAST_NONE = 0, OPT_CAST_BF16, OPT_CAST_FP16 };

struct opt_coef opt_coef_of(const struct whale_adamw *o, int64_t t, float grad_mul, bool decay);

/* w, g, m, v: (n) fp32; p16: (n) 16-bit or NULL when cast is NONE.
 * Bit-identical across paths: the scalar order of adamw.c, then the cast
 * of util/dtype.c. */
void opt_adamw_kernel(enum whale_simd s, const struct opt_coef *k, float *w, const float *g,
                      float *m, float *v, uint16_t *p16, enum opt_cast cast, size_t n);

#endif
