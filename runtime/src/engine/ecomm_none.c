/* Built without the comm module: single rank only. */
#include "ecomm.h"
#include "layer.h"

#include "whale/error.h"
#include "whale/log.h"

int eng_comm_from_ctx(whale_ctx *ctx, struct eng_comm *c, bool *have)
{
    (void)ctx;
    (void)c;
    *have = false;
    return 0;
}

int eng_tp_allreduce(void *tp_group, float *buf, size_t n)
{
    (void)buf;
    (void)n;
    return tp_group ? WHALE_ENOTSUP : 0;
}
