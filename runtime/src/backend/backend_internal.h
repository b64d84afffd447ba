/* Backend internals: the operations table each implementation fills, and
 * the object the public whale_* calls of whale/backend.h dispatch through.
 *
 * backend.c checks arguments (dtypes, sizes, NULLs), keeps the per-kind
 * memory accounting and turns a NULL whale_stream into the compute stream;
 * an implementation sees only valid calls and native stream handles
 * (cudaStream_t on cuda, NULL on cpu). The table is plain C so the CUDA
 * implementation (C++ compiled by nvcc) fills it too. */
#ifndef BACKEND_INTERNAL_H
#define BACKEND_INTERNAL_H

#include <pthread.h>

#include "whale/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *bk_stream; /* native stream: cudaStream_t, NULL on cpu */

struct bk_ops {
    void (*close)(whale_backend *b);
    int (*mem_alloc)(whale_backend *b, size_t bytes, void **out);
    void (*mem_free)(whale_backend *b, void *p);
    int (*mem_info)(whale_backend *b, size_t *free_bytes, size_t *total_bytes);
    int (*host_alloc)(whale_backend *b, size_t bytes, void **out);
    void (*host_free)(whale_backend *b, void *p);
    int (*host_register)(whale_backend *b, void *p, size_t bytes);
    int (*host_unregister)(whale_backend *b, void *p);
    int (*memcpy_)(whale_backend *b, void *dst, const void *src, size_t bytes,
                   enum whale_copy_dir dir, bk_stream s);
    int (*memset_)(whale_backend *b, void *dst, int value, size_t bytes, bk_stream s);

    int (*stream_create)(whale_backend *b, bool high_priority, bk_stream *out);
    void (*stream_destroy)(whale_backend *b, bk_stream s);
    int (*stream_sync)(whale_backend *b, bk_stream s);
    int (*event_create)(whale_backend *b, void **out);
    void (*event_destroy)(whale_backend *b, void *e);
    int (*event_record)(whale_backend *b, void *e, bk_stream s);
    int (*stream_wait_event)(whale_backend *b, bk_stream s, void *e);
    int (*event_sync)(whale_backend *b, void *e);
    int (*event_query)(whale_backend *b, void *e, bool *done);
    int (*event_elapsed_ms)(whale_backend *b, void *e0, void *e1, float *ms);

    int (*gemm)(whale_backend *b, bk_stream s, bool ta, bool tb, int M, int N, int K, float alpha,
                const void *A, int lda, const void *B, int ldb, enum whale_dtype abt, float beta,
                void *C, int ldc, enum whale_dtype ct);
    int (*linear_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                      const void *inp, const void *w, const void *bias, int N, int IC, int OC);
    int (*linear_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                      float *db, const void *dout, const void *inp, const void *w, int N, int IC,
                      int OC, bool acc);
    /* optional (NULL: linear_fwd / linear_bwd and the gelu ops in turn) */
    int (*linear_gelu_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                           void *gl, const void *inp, const void *w, const void *bias, int N,
                           int IC, int OC);
    int (*linear_bwd_gelu)(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                           const void *pre, float *dw, float *db, const void *dout,
                           const void *inp, const void *w, int N, int IC, int OC);
    int (*layernorm_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                         float *mean, float *rstd, const void *inp, const void *w,
                         const void *bias, int N, int C);
    int (*layernorm_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                         float *dw, float *db, const void *dout, const void *inp, const void *w,
                         const float *mean, const float *rstd, int N, int C);
    size_t (*attention_saved_floats)(const whale_backend *b, int B, int T, int NH, int hd);
    int (*attention_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                         float *saved, const void *qkv, int B, int T, int NH, int hd);
    int (*attention_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *dqkv,
                         const void *dout, const void *qkv, const void *out, const float *saved,
                         int B, int T, int NH, int hd);
    int (*gelu_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *inp,
                    int64_t n);
    int (*gelu_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                    const void *inp, const void *dout, int64_t n);
    int (*add)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *x,
               const void *y, int64_t n);
    int (*acc)(whale_backend *b, bk_stream s, enum whale_dtype t, void *y, const void *x,
               int64_t n);
    /* v0 = 0, V = vocabulary and wpe_always for the non-TP forms */
    int (*embed_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                     const int32_t *tok, const void *wte, int v0, int V, const void *wpe, int B,
                     int T, int C, bool tp);
    int (*embed_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte, float *dwpe,
                     const void *dout, const int32_t *tok, int v0, int V, int B, int T, int C,
                     bool tp);
    int (*xent_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *losses,
                    const int32_t *targets, int N, int V);
    /* tp: targets outside [v0, v0+V) contribute no one-hot */
    int (*xent_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *probs,
                    const int32_t *targets, int v0, float dloss, int N, int V, bool tp);
    int (*rows_max)(whale_backend *b, bk_stream s, enum whale_dtype t, float *mx, const void *x,
                    int N, int V);
    int (*rows_exp_sum)(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *sum,
                        float *tl, const float *mx, const int32_t *targets, int v0, int N, int V);
    int (*rows_normalize)(whale_backend *b, bk_stream s, enum whale_dtype t, void *x,
                          float *losses, const float *sum, const float *tl, int N, int V);
    int (*cast)(whale_backend *b, bk_stream s, void *dst, enum whale_dtype dt, const void *src,
                enum whale_dtype st, int64_t n);
    int (*scale)(whale_backend *b, bk_stream s, float *x, float a, int64_t n);
    int (*sumsq)(whale_backend *b, bk_stream s, const float *g, int64_t n, double *out);
    int (*has_inf_nan)(whale_backend *b, bk_stream s, const float *g, int64_t n, bool *found);
    int (*adamw)(whale_backend *b, bk_stream s, const struct whale_adamw *o, int64_t t,
                 float grad_mul, const struct whale_adamw_piece *p, int np,
                 enum whale_dtype w16t);
    /* bias add and rounding to 16-bit values. Never reorder the entries: the cuda
     * backend fills this table by position */
    int (*bias_add)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                    const void *bias, int N, int OC);
    int (*round16)(whale_backend *b, bk_stream s, float *x, enum whale_dtype t, int64_t n);
    /* the Llama block (whale/backend.h) */
    int (*rmsnorm_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *rstd,
                       const void *inp, const void *w, int N, int C, float eps);
    int (*rmsnorm_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                       const void *dout, const void *inp, const void *w, const float *rstd,
                       int N, int C);
    int (*glu_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                   void *h, const void *gate, const void *up, int64_t n);
    int (*glu_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                   void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                   int64_t n);
    int (*rope)(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int ld, int B, int T,
                int nh, int hd, float theta, const struct whale_rope_scaling *sc, int sign);
    int (*attention_gqa_fwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                             int ldo, float *lse, const void *q, int ldq, const void *k, int ldk,
                             const void *v, int ldv, int B, int T,
                             const struct whale_attn_heads *m);
    int (*attention_gqa_bwd)(whale_backend *b, bk_stream s, enum whale_dtype t, void *dq,
                             void *dk, void *dv, const void *dout, int ldo, const void *out,
                             const float *lse, const void *q, int ldq, const void *k, int ldk,
                             const void *v, int ldv, int B, int T,
                             const struct whale_attn_heads *m);
    int (*colsum_acc)(whale_backend *b, bk_stream s, enum whale_dtype t, float *db,
                      const void *x, int ld, int N, int OC);
    int (*embed_bwd_rows)(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte,
                          const void *dout, const int32_t *tok, int v0, int V, int N, int C);
    /* strided bias of q/k/v column ranges */
    int (*bias_fill)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, int ldo,
                     const void *bias, int N, int OC);
    /* wait for all device work (whale_backend_host_access); NULL: nothing to wait for */
    int (*host_access)(whale_backend *b);
    /* plain attention with grouped KV heads where the kernels read host
     * memory: compact q|k|v <-> one key/value per query head (NULL: the
     * backend runs the grouped kernels instead) */
    int (*gqa_expand)(whale_backend *b, bk_stream s, float *dst, const float *qkv, int ld, int N,
                      const struct whale_attn_heads *m);
    int (*gqa_fold)(whale_backend *b, bk_stream s, float *dqkv, int ld, const float *dexp, int N,
                    const struct whale_attn_heads *m);
    /* generation with a KV cache: one token's rotary at its absolute
     * position, and its attention over the cache (NULL: the backend has
     * none; whale_k_* answers WHALE_ENOTSUP and generation recomputes) */
    int (*rope_at)(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int nh, int hd,
                   int pos, float theta, const struct whale_rope_scaling *sc);
    int (*attention_decode)(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                            const void *q, const void *k, const void *v, float *kc, float *vc,
                            int pos, int S, const struct whale_attn_heads *m);
    /* out[i] = the sumsq of g[i] (n[i] > 0) for np tensors in one call
     * (NULL: one sumsq call per tensor) */
    int (*sumsq_multi)(whale_backend *b, bk_stream s, const float *const *g, const int64_t *n,
                       int np, double *out);
};

struct bk_block {
    void *p;
    size_t bytes;
    enum whale_mem_kind kind;
};

struct whale_stream {
    whale_backend *b;
    bk_stream native;
};

struct whale_event {
    whale_backend *b;
    void *native;
};

struct whale_backend {
    const struct bk_ops *ops;
    enum whale_device device;
    char desc[160];
    bool host_addressable;
    void *impl;                 /* implementation state */
    struct whale_stream compute;
    enum whale_dtype gemm_math; /* arithmetic of fp32-stored GEMMs (whale_backend_set_fp32_gemm_math) */
    bool sync_calls;            /* every call waits for its stream (cuda host_coherent) */

    pthread_mutex_t lock;       /* accounting below (offload and ckpt threads allocate too) */
    struct bk_block *blocks;
    size_t nblocks, cap_blocks;
    size_t now[WHALE_MEM_KIND_COUNT_], peak[WHALE_MEM_KIND_COUNT_];
    size_t now_all, peak_all;
};

/* backend.c, for the public entry points in other files (backend_llama.c):
 * the native stream of s (NULL: the compute stream), and the host-coherent
 * rule (rc, or the stream's sync when every call must complete). */
bk_stream bk_native_of(whale_backend *b, whale_stream *s);
int bk_finish(whale_backend *b, whale_stream *s, int rc);
/* The dtype and size checks every kernel entry point makes (names fn). */
int bk_check(const char *fn, enum whale_dtype t, int64_t a, int64_t b, int64_t c);

/* Implementations: fill b->ops, desc, host_addressable, impl, compute.native. */
int bk_cpu_open(const struct whale_backend_opts *o, whale_backend *b);
#ifdef WHALE_HAVE_CUDA_BACKEND
int bk_cuda_open(const struct whale_backend_opts *o, whale_backend *b);
int bk_cuda_device_count(void);
/* Devices the CUDA runtime reports; on failure 0 and err gets its message
 * (err[0] == 0 when it answered). */
int bk_cuda_probe(char *err, size_t len);
#endif

#ifdef __cplusplus
}
#endif
#endif
