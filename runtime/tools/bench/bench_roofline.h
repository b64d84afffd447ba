/* Bounds for host AdamW: streaming traffic and arithmetic alone. */
#ifndef WHALE_BENCH_ROOFLINE_H
#define WHALE_BENCH_ROOFLINE_H
#include <stddef.h>

#include "whale/optim.h"

void bench_stream28(float *w, const float *g, float *m, float *v, size_t n);
int bench_adamw_in_l2(enum whale_simd s, const struct whale_adamw *o, size_t n);
#endif
