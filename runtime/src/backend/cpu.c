/* cpu backend: device memory is host memory, every call completes before
 * it returns, streams are placeholders and events hold the time they were
 * recorded (so the engine's overlap accounting runs unchanged). */
#include "backend/cpu.h"
#include "backend/cpu_llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/kernels.h"
#include "whale/error.h"
#include "whale/log.h"

static void cpu_close(whale_backend *b) { (void)b; }

static int cpu_mem_alloc(whale_backend *b, size_t bytes, void **out)
{
    (void)b;
    size_t len = (bytes + 255) & ~(size_t)255;
    *out = aligned_alloc(256, len);
    return *out ? 0 : WHALE_ENOMEM;
}

static void cpu_mem_free(whale_backend *b, void *p)
{
    (void)b;
    free(p);
}

static int cpu_mem_info(whale_backend *b, size_t *free_bytes, size_t *total_bytes)
{
    (void)b;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return WHALE_EIO;
    char line[256];
    unsigned long long kb;
    *free_bytes = *total_bytes = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            *total_bytes = (size_t)kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            *free_bytes = (size_t)kb * 1024;
    }
    fclose(f);
    return *total_bytes ? 0 : WHALE_EIO;
}

static int cpu_host_alloc(whale_backend *b, size_t bytes, void **out)
{
    (void)b;
    size_t len = (bytes + 4095) & ~(size_t)4095;
    *out = aligned_alloc(4096, len);
    return *out ? 0 : WHALE_ENOMEM;
}

static void cpu_host_free(whale_backend *b, void *p)
{
    (void)b;
    free(p);
}

static int cpu_host_register(whale_backend *b, void *p, size_t bytes)
{
    (void)b;
    (void)p;
    (void)bytes;
    return 0;
}

static int cpu_host_unregister(whale_backend *b, void *p)
{
    (void)b;
    (void)p;
    return 0;
}

static int cpu_memcpy(whale_backend *b, void *dst, const void *src, size_t bytes,
                      enum whale_copy_dir dir, bk_stream s)
{
    (void)b;
    (void)dir;
    (void)s;
    memmove(dst, src, bytes);
    return 0;
}

static int cpu_memset(whale_backend *b, void *dst, int value, size_t bytes, bk_stream s)
{
    (void)b;
    (void)s;
    memset(dst, value, bytes);
    return 0;
}

/* A stream needs a distinct non-NULL identity only for whale_stream_native
 * callers that compare handles; the cpu backend documents NULL there. */
static int cpu_stream_create(whale_backend *b, bool hi, bk_stream *out)
{
    (void)b;
    (void)hi;
    *out = NULL;
    return 0;
}

static void cpu_stream_destroy(whale_backend *b, bk_stream s)
{
    (void)b;
    (void)s;
}

static int cpu_stream_sync(whale_backend *b, bk_stream s)
{
    (void)b;
    (void)s;
    return 0;
}

static int cpu_event_create(whale_backend *b, void **out)
{
    (void)b;
    *out = calloc(1, sizeof(struct timespec));
    return *out ? 0 : WHALE_ENOMEM;
}

static void cpu_event_destroy(whale_backend *b, void *e)
{
    (void)b;
    free(e);
}

static int cpu_event_record(whale_backend *b, void *e, bk_stream s)
{
    (void)b;
    (void)s;
    clock_gettime(CLOCK_MONOTONIC, e);
    return 0;
}

static int cpu_stream_wait_event(whale_backend *b, bk_stream s, void *e)
{
    (void)b;
    (void)s;
    (void)e;
    return 0;
}

static int cpu_event_sync(whale_backend *b, void *e)
{
    (void)b;
    (void)e;
    return 0;
}

static int cpu_event_query(whale_backend *b, void *e, bool *done)
{
    (void)b;
    (void)e;
    *done = true;
    return 0;
}

static int cpu_event_elapsed_ms(whale_backend *b, void *e0, void *e1, float *ms)
{
    (void)b;
    const struct timespec *a = e0, *c = e1;
    *ms = (float)((double)(c->tv_sec - a->tv_sec) * 1e3 + (double)(c->tv_nsec - a->tv_nsec) * 1e-6);
    return 0;
}

static const struct bk_ops cpu_ops = {
    .close = cpu_close,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_info = cpu_mem_info,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,
    .memcpy_ = cpu_memcpy,
    .memset_ = cpu_memset,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_sync = cpu_event_sync,
    .event_query = cpu_event_query,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .gemm = bkc_gemm,
    .linear_fwd = bkc_linear_fwd,
    .linear_bwd = bkc_linear_bwd,
    .linear_gelu_fwd = bkc_linear_gelu_fwd,
    .linear_bwd_gelu = bkc_linear_bwd_gelu,
    .layernorm_fwd = bkc_layernorm_fwd,
    .layernorm_bwd = bkc_layernorm_bwd,
    .attention_saved_floats = bkc_attention_saved_floats,
    .attention_fwd = bkc_attention_fwd,
    .attention_bwd = bkc_attention_bwd,
    .gelu_fwd = bkc_gelu_fwd,
    .gelu_bwd = bkc_gelu_bwd,
    .add = bkc_add,
    .acc = bkc_acc,
    .embed_fwd = bkc_embed_fwd,
    .embed_bwd = bkc_embed_bwd,
    .xent_fwd = bkc_xent_fwd,
    .xent_bwd = bkc_xent_bwd,
    .rows_max = bkc_rows_max,
    .rows_exp_sum = bkc_rows_exp_sum,
    .rows_normalize = bkc_rows_normalize,
    .cast = bkc_cast,
    .scale = bkc_scale,
    .sumsq = bkc_sumsq,
    .has_inf_nan = bkc_has_inf_nan,
    .adamw = bkc_adamw,
    .bias_add = bkc_bias_add,
    .round16 = bkc_round16,
    /* the Llama block (cpu_llama.c) */
    .rmsnorm_fwd = bkc_rmsnorm_fwd,
    .rmsnorm_bwd = bkc_rmsnorm_bwd,
    .glu_fwd = bkc_glu_fwd,
    .glu_bwd = bkc_glu_bwd,
    .rope = bkc_rope,
    .attention_gqa_fwd = bkc_attention_gqa_fwd,
    .attention_gqa_bwd = bkc_attention_gqa_bwd,
    .colsum_acc = bkc_colsum_acc,
    .embed_bwd_rows = bkc_embed_bwd_rows,
    /* strided bias of q/k/v column ranges (cpu_llama.c) */
    .bias_fill = bkc_bias_fill,
    /* plain attention's GQA expand / fold on the host (cpu_llama.c) */
    .gqa_expand = bkc_gqa_expand,
    .gqa_fold = bkc_gqa_fold,
    /* generation with a KV cache (cpu_decode.c) */
    .rope_at = bkc_rope_at,
    .attention_decode = bkc_attention_decode,
    .sumsq_multi = bkc_sumsq_multi,
};

int bk_cpu_open(const struct whale_backend_opts *o, whale_backend *b)
{
    if (o->threads > 0)
        k_set_threads(o->threads);
    b->ops = &cpu_ops;
    b->host_addressable = true;
    b->compute.native = NULL;
    snprintf(b->desc, sizeof b->desc, "cpu (%d thread%s)", k_threads(), k_threads() == 1 ? "" : "s");
    return 0;
}
