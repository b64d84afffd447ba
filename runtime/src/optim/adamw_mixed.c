/* AdamW for mixed precision: fp32 master update, then the 16-bit cast. */
#include "whale/dtype.h"
#include "whale/optim.h"

void whale_adamw_update_mixed(const struct whale_adamw *o, int64_t t, float *master,
                              const float *g, float *m, float *v, uint16_t *param,
                              enum whale_dtype param_dtype, size_t n, float grad_mul, bool decay)
{
    /* In blocks so the cast reads master while it is still in cache. */
    enum { BLK = 1 << 17 }; /* > the 65536 where whale_adamw_update goes parallel */
    for (size_t i = 0; i < n; i += BLK) {
        size_t k = n - i < BLK ? n - i : BLK;
        whale_adamw_update(o, t, master + i, g + i, m + i, v + i, k, grad_mul, decay);
        if (!param)
            continue;
        if (param_dtype == WHALE_BFLOAT16)
            whale_f32_to_bf16(param + i, master + i, k);
        else if (param_dtype == WHALE_FLOAT16)
            whale_f32_to_fp16(param + i, master + i, k);
    }
}

/* whale_adamw_update_mixed_host (one pass, cast in registers) is in adamw_multi.c. */
