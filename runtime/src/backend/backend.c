/* Public entry points of whale/backend.h: argument checks, memory
 * accounting per kind, the NULL-stream rule, then the implementation's
 * operation (cpu.c or cuda/). Checks live here once so both backends refuse
 * the same bad calls with the same message. */
#include "backend/backend_internal.h"
#include "backend/kernels.h"

#include <stdlib.h>
#include <string.h>

#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"

/* ---- choosing ------------------------------------------------------------------ */

int whale_device_parse(const char *s, enum whale_device *out)
{
    static const char *names[] = { "cpu", "cuda", "auto" };
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (enum whale_device)i;
            return 0;
        }
    whale_error("device '%s': allowed values are cpu, cuda, auto", s ? s : "(null)");
    return WHALE_EINVAL;
}

const char *whale_device_name(enum whale_device d)
{
    switch (d) {
    case WHALE_DEVICE_CPU: return "cpu";
    case WHALE_DEVICE_CUDA: return "cuda";
    case WHALE_DEVICE_AUTO: return "auto";
    }
    return "?";
}

bool whale_device_available(enum whale_device d)
{
    switch (d) {
    case WHALE_DEVICE_CPU:
    case WHALE_DEVICE_AUTO:
        return true;
    case WHALE_DEVICE_CUDA:
#ifdef WHALE_HAVE_CUDA_BACKEND
        return bk_cuda_device_count() > 0;
#else
        return false;
#endif
    }
    return false;
}

int whale_device_count(enum whale_device d)
{
    if (d != WHALE_DEVICE_CUDA)
        return 1;
#ifdef WHALE_HAVE_CUDA_BACKEND
    return bk_cuda_device_count();
#else
    return 0;
#endif
}

void whale_backend_opts_init(struct whale_backend_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = WHALE_DEVICE_AUTO;
    o->ordinal = -1;
}

int whale_backend_open(const struct whale_backend_opts *o, whale_backend **out)
{
    struct whale_backend_opts def;
    if (!o) {
        whale_backend_opts_init(&def);
        o = &def;
    }
    *out = NULL;
    enum whale_device d = o->device;
    if (d == WHALE_DEVICE_AUTO)
        d = whale_device_available(WHALE_DEVICE_CUDA) ? WHALE_DEVICE_CUDA : WHALE_DEVICE_CPU;
    whale_backend *b = calloc(1, sizeof *b);
    if (!b)
        return WHALE_ENOMEM;
    pthread_mutex_init(&b->lock, NULL);
    b->device = d;
    b->compute.b = b;
    b->gemm_math = WHALE_FLOAT32;
    int rc;
    if (d == WHALE_DEVICE_CPU) {
        if (k_bf16_gemm_mode() < 0) {
            whale_error("WHALE_BF16_GEMM=%s: not a bf16 GEMM path (auto, onednn or sgemm)",
                        whale_knob_getenv("WHALE_BF16_GEMM"));
            pthread_mutex_destroy(&b->lock);
            free(b);
            return WHALE_EINVAL;
        }
        if (k_fp32_gemm_mode() < 0) {
            whale_error("WHALE_FP32_GEMM=%s: not an fp32 GEMM library (openblas or onednn)",
                        whale_knob_getenv("WHALE_FP32_GEMM"));
            pthread_mutex_destroy(&b->lock);
            free(b);
            return WHALE_EINVAL;
        }
        if (k_fp32_gemm_mode() == K_FP32_GEMM_ONEDNN && !k_fp32_gemm_onednn())
            whale_warn("WHALE_FP32_GEMM=onednn: this libwhale was built without oneDNN "
                       "(libdnnl-dev); the fp32 GEMMs use OpenBLAS");
        rc = bk_cpu_open(o, b);
    } else {
#ifdef WHALE_HAVE_CUDA_BACKEND
        rc = bk_cuda_open(o, b);
#else
        whale_error("device cuda: this build of libwhale has no CUDA backend "
                    "(rebuild with nvcc, cuBLASLt and NCCL present: meson setup -Dcuda=enabled)");
        rc = WHALE_ENOTSUP;
#endif
    }
    if (rc) {
        pthread_mutex_destroy(&b->lock);
        free(b);
        return rc;
    }
    whale_debug("backend: %s", b->desc);
    *out = b;
    return 0;
}

void whale_backend_close(whale_backend *b)
{
    if (!b)
        return;
    if (b->nblocks)
        whale_warn("backend %s closed with %zu device blocks (%zu bytes) still allocated",
                   b->desc, b->nblocks, b->now_all);
    b->ops->close(b);
    free(b->blocks);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

enum whale_device whale_backend_device(const whale_backend *b) { return b->device; }
const char *whale_backend_describe(const whale_backend *b) { return b->desc; }
bool whale_backend_host_addressable(const whale_backend *b) { return b->host_addressable; }

/* ---- memory ---------------------------------------------------------------------- */

const char *whale_mem_kind_name(enum whale_mem_kind k)
{
    static const char *n[WHALE_MEM_KIND_COUNT_] = { "params", "grads", "optim",
                                                    "acts",   "comm",  "workspace" };
    return (unsigned)k < WHALE_MEM_KIND_COUNT_ ? n[k] : "all";
}

static void log_usage(whale_backend *b)
{
    for (int k = 0; k < WHALE_MEM_KIND_COUNT_; k++)
        whale_error("  %-9s %10.1f MiB in use (peak %.1f MiB)", whale_mem_kind_name(k),
                    b->now[k] / 1048576.0, b->peak[k] / 1048576.0);
}

int whale_mem_alloc(whale_backend *b, enum whale_mem_kind k, size_t bytes, void **out)
{
    *out = NULL;
    if ((unsigned)k >= WHALE_MEM_KIND_COUNT_) {
        whale_error("whale_mem_alloc: memory kind %d out of range 0..%d", (int)k,
                    WHALE_MEM_KIND_COUNT_ - 1);
        return WHALE_EINVAL;
    }
    if (!bytes)
        return 0;
    void *p = NULL;
    int rc = b->ops->mem_alloc(b, bytes, &p);
    pthread_mutex_lock(&b->lock);
    if (rc) {
        whale_error("%s: out of memory allocating %zu bytes of %s; in use:", b->desc, bytes,
                    whale_mem_kind_name(k));
        log_usage(b);
        pthread_mutex_unlock(&b->lock);
        return rc;
    }
    if (b->nblocks == b->cap_blocks) {
        size_t cap = b->cap_blocks ? 2 * b->cap_blocks : 64;
        struct bk_block *nb = realloc(b->blocks, cap * sizeof *nb);
        if (!nb) {
            pthread_mutex_unlock(&b->lock);
            b->ops->mem_free(b, p);
            return WHALE_ENOMEM;
        }
        b->blocks = nb;
        b->cap_blocks = cap;
    }
    b->blocks[b->nblocks++] = (struct bk_block){ p, bytes, k };
    b->now[k] += bytes;
    if (b->now[k] > b->peak[k])
        b->peak[k] = b->now[k];
    b->now_all += bytes;
    if (b->now_all > b->peak_all)
        b->peak_all = b->now_all;
    pthread_mutex_unlock(&b->lock);
    *out = p;
    return 0;
}

void whale_mem_free(whale_backend *b, void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&b->lock);
    size_t i = b->nblocks;
    /* newest first: activations and scratch are freed soon after allocation */
    while (i > 0 && b->blocks[i - 1].p != p)
        i--;
    if (i == 0) {
        pthread_mutex_unlock(&b->lock);
        whale_error("whale_mem_free: %p was not allocated by backend %s (left alone)", p, b->desc);
        return;
    }
    struct bk_block blk = b->blocks[i - 1];
    b->blocks[i - 1] = b->blocks[--b->nblocks];
    b->now[blk.kind] -= blk.bytes;
    b->now_all -= blk.bytes;
    pthread_mutex_unlock(&b->lock);
    b->ops->mem_free(b, p);
}

void whale_mem_usage(const whale_backend *b, enum whale_mem_kind k, size_t *now, size_t *peak)
{
    whale_backend *m = (whale_backend *)b; /* the lock only */
    pthread_mutex_lock(&m->lock);
    bool all = (unsigned)k >= WHALE_MEM_KIND_COUNT_;
    if (now)
        *now = all ? b->now_all : b->now[k];
    if (peak)
        *peak = all ? b->peak_all : b->peak[k];
    pthread_mutex_unlock(&m->lock);
}

int whale_mem_info(whale_backend *b, size_t *free_bytes, size_t *total_bytes)
{
    return b->ops->mem_info(b, free_bytes, total_bytes);
}

int whale_host_alloc(whale_backend *b, size_t bytes, void **out)
{
    *out = NULL;
    if (!bytes)
        return 0;
    int rc = b->ops->host_alloc(b, bytes, out);
    if (rc)
        whale_error("%s: cannot allocate %zu bytes of pinned host memory", b->desc, bytes);
    return rc;
}

void whale_host_free(whale_backend *b, void *p)
{
    if (p)
        b->ops->host_free(b, p);
}

int whale_host_register(whale_backend *b, void *p, size_t bytes)
{
    if (!p || !bytes)
        return WHALE_EINVAL;
    return b->ops->host_register(b, p, bytes);
}

int whale_host_unregister(whale_backend *b, void *p)
{
    return p ? b->ops->host_unregister(b, p) : WHALE_EINVAL;
}

static bk_stream native_of(whale_backend *b, whale_stream *s)
{
    return s ? s->native : b->compute.native;
}

bk_stream bk_native_of(whale_backend *b, whale_stream *s) { return native_of(b, s); }

/* host_coherent cuda: every call completes before it returns (backend.h). */
static int fin(whale_backend *b, whale_stream *s, int rc)
{
    if (rc || !b->sync_calls)
        return rc;
    return b->ops->stream_sync(b, native_of(b, s));
}

int bk_finish(whale_backend *b, whale_stream *s, int rc) { return fin(b, s, rc); }

int whale_memcpy(whale_backend *b, void *dst, const void *src, size_t bytes,
                 enum whale_copy_dir dir, whale_stream *s)
{
    if (!bytes)
        return 0;
    if (!dst || !src || (unsigned)dir > WHALE_H2H) {
        whale_error("whale_memcpy: %s (dst %p, src %p, direction %d of 0..3)",
                    !dst || !src ? "NULL buffer" : "bad direction", dst, src, (int)dir);
        return WHALE_EINVAL;
    }
    return fin(b, s, b->ops->memcpy_(b, dst, src, bytes, dir, native_of(b, s)));
}

int whale_memset(whale_backend *b, void *dst, int value, size_t bytes, whale_stream *s)
{
    if (!bytes)
        return 0;
    if (!dst) {
        whale_error("whale_memset: NULL buffer");
        return WHALE_EINVAL;
    }
    return fin(b, s, b->ops->memset_(b, dst, value, bytes, native_of(b, s)));
}

/* ---- streams and events --------------------------------------------------------- */

whale_stream *whale_stream_compute(whale_backend *b) { return &b->compute; }

int whale_stream_create(whale_backend *b, bool high_priority, whale_stream **out)
{
    whale_stream *s = calloc(1, sizeof *s);
    if (!s)
        return WHALE_ENOMEM;
    s->b = b;
    int rc = b->ops->stream_create(b, high_priority, &s->native);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void whale_stream_destroy(whale_stream *s)
{
    if (!s || s == &s->b->compute)
        return;
    s->b->ops->stream_destroy(s->b, s->native);
    free(s);
}

void *whale_stream_native(whale_stream *s) { return s ? s->native : NULL; }

int whale_stream_sync(whale_stream *s)
{
    return s->b->ops->stream_sync(s->b, s->native);
}

int whale_event_create(whale_backend *b, whale_event **out)
{
    whale_event *e = calloc(1, sizeof *e);
    if (!e)
        return WHALE_ENOMEM;
    e->b = b;
    int rc = b->ops->event_create(b, &e->native);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void whale_event_destroy(whale_event *e)
{
    if (!e)
        return;
    e->b->ops->event_destroy(e->b, e->native);
    free(e);
}

int whale_event_record(whale_event *e, whale_stream *s)
{
    return e->b->ops->event_record(e->b, e->native, native_of(e->b, s));
}

int whale_stream_wait_event(whale_stream *s, whale_event *e)
{
    return e->b->ops->stream_wait_event(e->b, native_of(e->b, s), e->native);
}

int whale_event_sync(whale_event *e) { return e->b->ops->event_sync(e->b, e->native); }

int whale_event_query(whale_event *e, bool *done)
{
    return e->b->ops->event_query(e->b, e->native, done);
}

int whale_event_elapsed_ms(whale_event *start, whale_event *end, float *ms)
{
    if (start->b != end->b)
        return WHALE_EINVAL;
    return start->b->ops->event_elapsed_ms(start->b, start->native, end->native, ms);
}

/* ---- compute ----------------------------------------------------------------------- */

static bool is_float_type(enum whale_dtype t)
{
    return t == WHALE_FLOAT32 || t == WHALE_BFLOAT16 || t == WHALE_FLOAT16;
}

/* A kernel's dtype and sizes: refuse with the kernel named. */
static int check(const char *fn, enum whale_dtype t, int64_t a, int64_t b, int64_t c)
{
    if (!is_float_type(t)) {
        whale_error("%s: dtype %s not supported (float32, bfloat16, float16)", fn,
                    whale_dtype_name(t));
        return WHALE_ENOTSUP;
    }
    if (a < 0 || b < 0 || c < 0) {
        whale_error("%s: negative size (%lld, %lld, %lld)", fn, (long long)a, (long long)b,
                    (long long)c);
        return WHALE_EINVAL;
    }
    return 0;
}

int bk_check(const char *fn, enum whale_dtype t, int64_t a, int64_t b, int64_t c)
{
    return check(fn, t, a, b, c);
}

#define CHECK(fn, t, a, b_, c)                         \
    do {                                               \
        int rc_ = check(fn, t, a, b_, c);              \
        if (rc_)                                       \
            return rc_;                                \
    } while (0)

int whale_gemm(whale_backend *b, whale_stream *s, bool transA, bool transB, int M, int N, int K,
               float alpha, const void *A, int lda, const void *B, int ldb,
               enum whale_dtype ab_type, float beta, void *C, int ldc, enum whale_dtype c_type)
{
    CHECK("whale_gemm", ab_type, M, N, K);
    if (c_type != WHALE_FLOAT32 && c_type != ab_type) {
        whale_error("whale_gemm: C must be float32 or %s like A and B, not %s",
                    whale_dtype_name(ab_type), whale_dtype_name(c_type));
        return WHALE_ENOTSUP;
    }
    int arows = transA ? K : M, acols = transA ? M : K;
    int brows = transB ? N : K, bcols = transB ? K : N;
    (void)arows;
    (void)brows;
    if (lda < (acols ? acols : 1) || ldb < (bcols ? bcols : 1) || ldc < (N ? N : 1)) {
        whale_error("whale_gemm: leading dimension too small (lda %d < %d, ldb %d < %d or ldc "
                    "%d < %d)", lda, acols, ldb, bcols, ldc, N);
        return WHALE_EINVAL;
    }
    if (!M || !N)
        return 0;
    return fin(b, s, b->ops->gemm(b, native_of(b, s), transA, transB, M, N, K, alpha, A, lda, B, ldb,
                        ab_type, beta, C, ldc, c_type));
}

int whale_k_linear_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                       const void *inp, const void *w, const void *bias, int N, int IC, int OC)
{
    CHECK("whale_k_linear_fwd", t, N, IC, OC);
    return fin(b, s, b->ops->linear_fwd(b, native_of(b, s), t, out, inp, w, bias, N, IC, OC));
}

int whale_k_linear_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                       float *dw, float *db, const void *dout, const void *inp, const void *w,
                       int N, int IC, int OC, bool acc)
{
    CHECK("whale_k_linear_bwd", t, N, IC, OC);
    return fin(b, s, b->ops->linear_bwd(b, native_of(b, s), t, dinp, dw, db, dout, inp, w, N, IC, OC, acc));
}

int whale_k_linear_gelu_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                            void *gl, const void *inp, const void *w, const void *bias, int N,
                            int IC, int OC)
{
    CHECK("whale_k_linear_gelu_fwd", t, N, IC, OC);
    bk_stream ns = native_of(b, s);
    if (b->ops->linear_gelu_fwd)
        return fin(b, s, b->ops->linear_gelu_fwd(b, ns, t, out, gl, inp, w, bias, N, IC, OC));
    int rc = b->ops->linear_fwd(b, ns, t, out, inp, w, bias, N, IC, OC);
    return fin(b, s, rc ? rc : b->ops->gelu_fwd(b, ns, t, gl, out, (int64_t)N * OC));
}

int whale_k_linear_bwd_gelu(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                            const void *pre, float *dw, float *db, const void *dout,
                            const void *inp, const void *w, int N, int IC, int OC)
{
    CHECK("whale_k_linear_bwd_gelu", t, N, IC, OC);
    bk_stream ns = native_of(b, s);
    if (b->ops->linear_bwd_gelu)
        return fin(b, s, b->ops->linear_bwd_gelu(b, ns, t, dinp, pre, dw, db, dout, inp, w, N, IC,
                                                 OC));
    int rc = b->ops->linear_bwd(b, ns, t, dinp, dw, db, dout, inp, w, N, IC, OC, false);
    return fin(b, s, rc ? rc : b->ops->gelu_bwd(b, ns, t, dinp, pre, dinp, (int64_t)N * IC));
}

int whale_k_layernorm_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                          float *mean, float *rstd, const void *inp, const void *w,
                          const void *bias, int N, int C)
{
    CHECK("whale_k_layernorm_fwd", t, N, C, 0);
    return fin(b, s, b->ops->layernorm_fwd(b, native_of(b, s), t, out, mean, rstd, inp, w, bias, N, C));
}

int whale_k_layernorm_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                          float *dw, float *db, const void *dout, const void *inp, const void *w,
                          const float *mean, const float *rstd, int N, int C)
{
    CHECK("whale_k_layernorm_bwd", t, N, C, 0);
    return fin(b, s, b->ops->layernorm_bwd(b, native_of(b, s), t, dinp, dw, db, dout, inp, w, mean, rstd,
                                 N, C));
}

size_t whale_attention_saved_floats(const whale_backend *b, int B, int T, int NH, int hd)
{
    if (!b) /* sizing without a backend (memory model): the cpu layout */
        return (size_t)B * (size_t)NH * (size_t)T * (size_t)T;
    return b->ops->attention_saved_floats(b, B, T, NH, hd);
}

int whale_k_attention_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                          float *saved, const void *qkv, int B, int T, int NH, int hd)
{
    CHECK("whale_k_attention_fwd", t, B, T, (int64_t)NH * hd);
    if (NH <= 0 || hd <= 0) {
        whale_error("whale_k_attention_fwd: %d heads of size %d", NH, hd);
        return WHALE_EINVAL;
    }
    return fin(b, s, b->ops->attention_fwd(b, native_of(b, s), t, out, saved, qkv, B, T, NH, hd));
}

int whale_k_attention_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dqkv,
                          const void *dout, const void *qkv, const void *out, const float *saved,
                          int B, int T, int NH, int hd)
{
    CHECK("whale_k_attention_bwd", t, B, T, (int64_t)NH * hd);
    if (NH <= 0 || hd <= 0) {
        whale_error("whale_k_attention_bwd: %d heads of size %d", NH, hd);
        return WHALE_EINVAL;
    }
    return fin(b, s, b->ops->attention_bwd(b, native_of(b, s), t, dqkv, dout, qkv, out, saved, B, T, NH,
                                 hd));
}

int whale_k_gelu_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                     const void *inp, int64_t n)
{
    CHECK("whale_k_gelu_fwd", t, n, 0, 0);
    return fin(b, s, b->ops->gelu_fwd(b, native_of(b, s), t, out, inp, n));
}

int whale_k_gelu_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                     const void *inp, const void *dout, int64_t n)
{
    CHECK("whale_k_gelu_bwd", t, n, 0, 0);
    return fin(b, s, b->ops->gelu_bwd(b, native_of(b, s), t, dinp, inp, dout, n));
}

int whale_k_add(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out, const void *x,
                const void *y, int64_t n)
{
    CHECK("whale_k_add", t, n, 0, 0);
    return fin(b, s, b->ops->add(b, native_of(b, s), t, out, x, y, n));
}

int whale_k_acc(whale_backend *b, whale_stream *s, enum whale_dtype t, void *y, const void *x,
                int64_t n)
{
    CHECK("whale_k_acc", t, n, 0, 0);
    return fin(b, s, b->ops->acc(b, native_of(b, s), t, y, x, n));
}

int whale_k_embed_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                      const int32_t *tok, const void *wte, const void *wpe, int B, int T, int C)
{
    CHECK("whale_k_embed_fwd", t, B, T, C);
    return fin(b, s, b->ops->embed_fwd(b, native_of(b, s), t, out, tok, wte, 0, 0, wpe, B, T, C, false));
}

int whale_k_embed_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, float *dwte,
                      float *dwpe, const void *dout, const int32_t *tok, int B, int T, int C)
{
    CHECK("whale_k_embed_bwd", t, B, T, C);
    return fin(b, s, b->ops->embed_bwd(b, native_of(b, s), t, dwte, dwpe, dout, tok, 0, 0, B, T, C, false));
}

int whale_k_embed_fwd_tp(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                         const int32_t *tok, const void *wte, int v0, int V, const void *wpe,
                         int B, int T, int C)
{
    CHECK("whale_k_embed_fwd_tp", t, B, T, C);
    return fin(b, s, b->ops->embed_fwd(b, native_of(b, s), t, out, tok, wte, v0, V, wpe, B, T, C, true));
}

int whale_k_embed_bwd_tp(whale_backend *b, whale_stream *s, enum whale_dtype t, float *dwte,
                         float *dwpe, const void *dout, const int32_t *tok, int v0, int V, int B,
                         int T, int C)
{
    CHECK("whale_k_embed_bwd_tp", t, B, T, C);
    return fin(b, s, b->ops->embed_bwd(b, native_of(b, s), t, dwte, dwpe, dout, tok, v0, V, B, T, C, true));
}

int whale_k_softmax_xent_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x,
                             float *losses, const int32_t *targets, int N, int V)
{
    CHECK("whale_k_softmax_xent_fwd", t, N, V, 0);
    return fin(b, s, b->ops->xent_fwd(b, native_of(b, s), t, x, losses, targets, N, V));
}

int whale_k_softmax_xent_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *probs,
                             const int32_t *targets, float dloss, int N, int V)
{
    CHECK("whale_k_softmax_xent_bwd", t, N, V, 0);
    return fin(b, s, b->ops->xent_bwd(b, native_of(b, s), t, probs, targets, 0, dloss, N, V, false));
}

int whale_k_rows_max(whale_backend *b, whale_stream *s, enum whale_dtype t, float *mx,
                     const void *x, int N, int V)
{
    CHECK("whale_k_rows_max", t, N, V, 0);
    return fin(b, s, b->ops->rows_max(b, native_of(b, s), t, mx, x, N, V));
}

int whale_k_rows_exp_sum(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x,
                         float *sum, float *tl, const float *mx, const int32_t *targets, int v0,
                         int N, int V)
{
    CHECK("whale_k_rows_exp_sum", t, N, V, 0);
    return fin(b, s, b->ops->rows_exp_sum(b, native_of(b, s), t, x, sum, tl, mx, targets, v0, N, V));
}

int whale_k_rows_normalize(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x,
                           float *losses, const float *sum, const float *tl, int N, int V)
{
    CHECK("whale_k_rows_normalize", t, N, V, 0);
    return fin(b, s, b->ops->rows_normalize(b, native_of(b, s), t, x, losses, sum, tl, N, V));
}

int whale_k_softmax_xent_bwd_tp(whale_backend *b, whale_stream *s, enum whale_dtype t,
                                void *probs, const int32_t *targets, int v0, float dloss, int N,
                                int V)
{
    CHECK("whale_k_softmax_xent_bwd_tp", t, N, V, 0);
    return fin(b, s, b->ops->xent_bwd(b, native_of(b, s), t, probs, targets, v0, dloss, N, V, true));
}

int whale_k_cast(whale_backend *b, whale_stream *s, void *dst, enum whale_dtype dt,
                 const void *src, enum whale_dtype st, int64_t n)
{
    CHECK("whale_k_cast (destination)", dt, n, 0, 0);
    CHECK("whale_k_cast (source)", st, n, 0, 0);
    if (dst == src && whale_dtype_size(dt) != whale_dtype_size(st)) {
        whale_error("whale_k_cast: in place only between dtypes of one size (%s -> %s)",
                    whale_dtype_name(st), whale_dtype_name(dt));
        return WHALE_EINVAL;
    }
    if (!n)
        return 0;
    return fin(b, s, b->ops->cast(b, native_of(b, s), dst, dt, src, st, n));
}

int whale_k_scale(whale_backend *b, whale_stream *s, float *x, float a, int64_t n)
{
    CHECK("whale_k_scale", WHALE_FLOAT32, n, 0, 0);
    return n ? fin(b, s, b->ops->scale(b, native_of(b, s), x, a, n)) : 0;
}

int whale_k_sumsq(whale_backend *b, whale_stream *s, const float *g, int64_t n, double *sumsq)
{
    CHECK("whale_k_sumsq", WHALE_FLOAT32, n, 0, 0);
    *sumsq = 0;
    return n ? fin(b, s, b->ops->sumsq(b, native_of(b, s), g, n, sumsq)) : 0;
}

int whale_k_sumsq_multi(whale_backend *b, whale_stream *s, const float *const *g,
                        const int64_t *n, int np, double *sumsq)
{
    for (int i = 0; i < np; i++) {
        CHECK("whale_k_sumsq_multi", WHALE_FLOAT32, n[i], 0, 0);
        sumsq[i] = 0;
    }
    if (np > 0 && b->ops->sumsq_multi)
        return fin(b, s, b->ops->sumsq_multi(b, native_of(b, s), g, n, np, sumsq));
    for (int i = 0; i < np; i++) {
        int rc = n[i] ? fin(b, s, b->ops->sumsq(b, native_of(b, s), g[i], n[i], &sumsq[i])) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

int whale_k_has_inf_nan(whale_backend *b, whale_stream *s, const float *g, int64_t n,
                        bool *found)
{
    CHECK("whale_k_has_inf_nan", WHALE_FLOAT32, n, 0, 0);
    *found = false;
    return n ? fin(b, s, b->ops->has_inf_nan(b, native_of(b, s), g, n, found)) : 0;
}

int whale_k_adamw(whale_backend *b, whale_stream *s, const struct whale_adamw *o, int64_t t,
                  float grad_mul, const struct whale_adamw_piece *pieces, int np,
                  enum whale_dtype w16_type)
{
    if (np < 0 || t < 1) {
        whale_error("whale_k_adamw: %d pieces at step %lld (need >= 0 pieces, step >= 1)", np,
                    (long long)t);
        return WHALE_EINVAL;
    }
    for (int i = 0; i < np; i++)
        if (pieces[i].w16 && w16_type != WHALE_BFLOAT16 && w16_type != WHALE_FLOAT16) {
            whale_error("whale_k_adamw: piece %d has a 16-bit copy but the dtype is %s "
                        "(bfloat16 or float16)", i, whale_dtype_name(w16_type));
            return WHALE_EINVAL;
        }
    return np ? fin(b, s, b->ops->adamw(b, native_of(b, s), o, t, grad_mul, pieces, np, w16_type)) : 0;
}

/* ---- GEMM math of fp32 operands, host reads, bias add, rounding ------------------- */

int whale_backend_set_fp32_gemm_math(whale_backend *b, enum whale_dtype mm)
{
    if (mm != WHALE_FLOAT32 && mm != WHALE_BFLOAT16 && mm != WHALE_FLOAT16) {
        whale_error("whale_backend_set_fp32_gemm_math: %s is not a GEMM arithmetic "
                    "(float32, bfloat16, float16)", whale_dtype_name(mm));
        return WHALE_EINVAL;
    }
    b->gemm_math = mm;
    return 0;
}

enum whale_dtype whale_backend_fp32_gemm_math(const whale_backend *b) { return b->gemm_math; }

bool whale_backend_has_gemm_math(const whale_backend *b, enum whale_dtype mm)
{
    if (b->device != WHALE_DEVICE_CPU)
        return mm == WHALE_FLOAT32 || mm == WHALE_BFLOAT16 || mm == WHALE_FLOAT16;
    return mm == WHALE_FLOAT32 || (mm == WHALE_BFLOAT16 && k_bf16_gemm_available());
}

void whale_host_set_threads(int n) { k_set_threads(n); }
int whale_host_threads(void) { return k_threads(); }
void whale_host_flush_denormals(bool on) { k_flush_denormals(on); }

bool whale_backend_reads_host(const whale_backend *b) { return !b || b->device == WHALE_DEVICE_CPU; }

int whale_k_bias_add(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                     const void *bias, int N, int OC)
{
    CHECK("whale_k_bias_add", t, N, OC, 0);
    if (!N || !OC)
        return 0;
    if (!out || !bias) {
        whale_error("whale_k_bias_add: NULL %s", out ? "bias" : "output");
        return WHALE_EINVAL;
    }
    return fin(b, s, b->ops->bias_add(b, native_of(b, s), t, out, bias, N, OC));
}

int whale_k_round(whale_backend *b, whale_stream *s, float *x, enum whale_dtype t, int64_t n)
{
    CHECK("whale_k_round", t, n, 0, 0);
    if (t == WHALE_FLOAT32 || !n)
        return 0;
    return fin(b, s, b->ops->round16(b, native_of(b, s), x, t, n));
}
