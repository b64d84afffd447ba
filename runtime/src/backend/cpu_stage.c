/* cpu backend: fp32 staging of 16-bit operands (cpu_stage.h). The one copy
 * of the widen / compute / round wrapper that cpu_kernels.c and
 * cpu_llama.c each had; the conversions are the ones each used before
 * (bulk for whole arrays, one value at a time for strided rows), so the
 * bits are unchanged. */
#include "backend/cpu_stage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "whale/dtype.h"
#include "whale/error.h"
#include "whale/log.h"

void bkc_widen(float *dst, const void *src, enum whale_dtype t, size_t n)
{
    if (t == WHALE_BFLOAT16)
        whale_bf16_to_f32(dst, src, n);
    else if (t == WHALE_FLOAT16)
        whale_fp16_to_f32(dst, src, n);
    else
        memcpy(dst, src, n * sizeof(float));
}

void bkc_narrow(void *dst, const float *src, enum whale_dtype t, size_t n)
{
    if (t == WHALE_BFLOAT16)
        whale_f32_to_bf16(dst, src, n);
    else if (t == WHALE_FLOAT16)
        whale_f32_to_fp16(dst, src, n);
    else
        memcpy(dst, src, n * sizeof(float));
}

static float *take(struct bkc_stage *st, float *f, size_t n, const char *what)
{
    if (!f) {
        whale_error("cpu backend: no memory %s %zu values", what, n);
        st->err = WHALE_ENOMEM;
        return NULL;
    }
    if (st->n == (int)(sizeof st->buf / sizeof st->buf[0])) { /* a caller's bug, not input */
        whale_error("cpu backend: more than %d staging copies in one call",
                    (int)(sizeof st->buf / sizeof st->buf[0]));
        free(f);
        st->err = WHALE_EINVAL;
        return NULL;
    }
    st->buf[st->n++] = f;
    return f;
}

float *bkc_in32(struct bkc_stage *st, enum whale_dtype t, const void *p, size_t n)
{
    if (!p || t == WHALE_FLOAT32)
        return (float *)p;
    float *f = take(st, malloc((n ? n : 1) * sizeof(float)), n, "to widen 16-bit");
    if (f)
        bkc_widen(f, p, t, n);
    return f;
}

float *bkc_out32(struct bkc_stage *st, enum whale_dtype t, void *p, size_t n, bool read)
{
    if (!p || t == WHALE_FLOAT32)
        return p;
    if (read)
        return bkc_in32(st, t, p, n);
    return take(st, calloc(n ? n : 1, sizeof(float)), n, "for fp32 staging of");
}

void bkc_store(enum whale_dtype t, void *dst, const float *f, size_t n)
{
    if (dst && t != WHALE_FLOAT32)
        bkc_narrow(dst, f, t, n);
}

void bkc_store_rows(enum whale_dtype t, void *dst, const float *f, size_t rows, size_t cols,
                    size_t ld)
{
    if (!dst || t == WHALE_FLOAT32)
        return;
    uint16_t *d = dst;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            float v = f[r * ld + c];
            d[r * ld + c] = t == WHALE_BFLOAT16 ? whale_float_to_bf16(v) : whale_float_to_fp16(v);
        }
}

int bkc_done(struct bkc_stage *st)
{
    for (int i = 0; i < st->n; i++)
        free(st->buf[i]);
    return st->err;
}

size_t bkc_span(size_t rows, size_t cols, size_t ld)
{
    return rows && cols ? (rows - 1) * ld + cols : 0;
}
