/* Test values and their exact expected reductions, shared by the schedule
 * simulator and the multi-process check. Values are small integers, so every
 * dtype (bf16/fp16 included) represents inputs and sums exactly and the
 * expected result does not depend on the reduction order. */
#ifndef WHALE_TEST_CHECK_VALUES_H
#define WHALE_TEST_CHECK_VALUES_H

#include <stddef.h>
#include <stdint.h>

#include "comm/collectives/sched.h"

static inline double cv_val(int rank, size_t i, int op)
{
    double v = (double)((rank * 3 + (int)(i % 11)) % 5);
    if (op == WHALE_MAX || op == WHALE_MIN)
        v += (double)((rank * 7 + (int)(i % 13)) % 9);
    return v;
}

static inline void cv_put(void *buf, size_t i, enum whale_dtype t, double v)
{
    switch (t) {
    case WHALE_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case WHALE_BFLOAT16: ((uint16_t *)buf)[i] = comm_f32_to_bf16((float)v); break;
    case WHALE_FLOAT16: ((uint16_t *)buf)[i] = comm_f32_to_f16((float)v); break;
    case WHALE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case WHALE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case WHALE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: break;
    }
}

static inline double cv_get(const void *buf, size_t i, enum whale_dtype t)
{
    switch (t) {
    case WHALE_FLOAT32: return ((const float *)buf)[i];
    case WHALE_BFLOAT16: return comm_bf16_to_f32(((const uint16_t *)buf)[i]);
    case WHALE_FLOAT16: return comm_f16_to_f32(((const uint16_t *)buf)[i]);
    case WHALE_INT32: return ((const int32_t *)buf)[i];
    case WHALE_INT64: return (double)((const int64_t *)buf)[i];
    case WHALE_UINT8: return ((const uint8_t *)buf)[i];
    default: return 0;
    }
}

/* Expected reduction of element i over the ranks given (or 0..p-1). */
static inline double cv_expect_ranks(const int *ranks, int p, size_t i, enum whale_dtype t, int op)
{
    double acc = cv_val(ranks ? ranks[0] : 0, i, op);
    for (int k = 1; k < p; k++) {
        double v = cv_val(ranks ? ranks[k] : k, i, op);
        acc = op == WHALE_MAX ? (v > acc ? v : acc) : op == WHALE_MIN ? (v < acc ? v : acc) : acc + v;
    }
    if (op == WHALE_AVG) {
        switch (t) {
        case WHALE_FLOAT32: return (float)((float)acc / (float)p);
        case WHALE_BFLOAT16: return comm_bf16_to_f32(comm_f32_to_bf16((float)acc / (float)p));
        case WHALE_FLOAT16: return comm_f16_to_f32(comm_f32_to_f16((float)acc / (float)p));
        case WHALE_UINT8: return (double)(((long long)acc & 0xff) / p);
        default: return (double)((long long)acc / p);
        }
    }
    if (t == WHALE_UINT8 && op == WHALE_SUM)
        acc = (double)((long long)acc & 0xff);
    return acc;
}

#endif
