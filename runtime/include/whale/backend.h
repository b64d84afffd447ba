/* The compute backend under the engine: memory, copies, streams and events,
 * GEMM, the kernels of a GPT block and the optimizer. Two implementations:
 *
 *   cpu   today's OpenBLAS/OpenMP kernels (src/backend/kernels.c, wrapped:
 *         fp32 results are bit-identical to calling them directly);
 *   cuda  cuBLASLt GEMMs, CUDA kernels (flash-style attention, fused
 *         multi-tensor AdamW), one compute stream per backend plus any
 *         number of extra streams (NCCL collectives run on their own).
 *
 * Everything above it (schedules, ZeRO, pipeline, checkpoints, elastic,
 * offload) stays backend-neutral: it allocates through whale_mem_alloc,
 * moves bytes with whale_memcpy, and calls the kernels below.
 *
 * Sections: choosing and opening a backend (with host access and execution
 * order), memory, streams and events, GEMM, the kernels of a GPT block,
 * casts / reductions / the optimizer, the kernels of a Llama-style block.
 *
 * ---- Conventions shared by every call --------------------------------------
 * - Return 0 or a negative WHALE_E* code; the failing call (CUDA / cuBLASLt
 *   name and error string) and the rank are logged where it failed. A kernel
 *   never falls back silently to another implementation or dtype: a dtype a
 *   kernel does not take is WHALE_ENOTSUP with its name.
 * - Pointers named as device memory come from whale_mem_alloc (or point
 *   inside such a block). On the cpu backend device memory IS host memory
 *   (whale_backend_host_addressable() is true), so host code may read it
 *   directly; on cuda it may not: stage through whale_memcpy into a pinned
 *   buffer (whale_host_alloc). Token ids (int32) are device memory too.
 * - Streams: every kernel and copy takes a whale_stream; NULL means the
 *   backend's compute stream (whale_stream_compute). Work on one stream runs
 *   in issue order; across streams order only through events. Calls enqueue
 *   and return: results are visible to the host after whale_stream_sync (or
 *   an event sync). On cpu every call completes before it returns (streams
 *   and events exist so the same engine code runs on both).
 * - Layout: row-major, contiguous unless a leading dimension is given.
 *   N = B*T rows of activations. Shapes are written next to each call.
 * - dtypes (enum whale_dtype, whale/comm.h): in one kernel call, weights and
 *   activations share the dtype `t` (WHALE_FLOAT32, WHALE_BFLOAT16 or
 *   WHALE_FLOAT16: the 16-bit PARAM copies and 16-bit activations of mixed
 *   precision). Parameter GRADIENTS are always fp32 and accumulated (+=), so
 *   micro-batches and tied weights add up. Statistics (LayerNorm mean/rstd,
 *   attention saved area, softmax max/sum, token losses) are always fp32.
 *   Arithmetic inside every kernel is fp32; 16-bit results are rounded to
 *   nearest even once, on store.
 * - Input gradients are overwritten unless the name or a flag says +=.
 * - Deterministic: for fixed inputs, shapes and thread count / device, every
 *   kernel gives the same bits run after run (no floating-point atomics).
 * - fp32 tolerance between backends: the cpu backend is the reference; cuda
 *   matches it within 1e-4 relative per element (TF32 off), bf16/fp16 within
 *   the tolerances stated in tests/gpu.
 */
#ifndef WHALE_BACKEND_H
#define WHALE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/comm.h"  /* enum whale_dtype */
#include "whale/optim.h" /* struct whale_adamw */
#include "whale/rope.h"  /* struct whale_rope_scaling */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct whale_backend whale_backend;
typedef struct whale_stream whale_stream;
typedef struct whale_event whale_event;

/* ---- choosing and opening a backend ----------------------------------------- */

enum whale_device {
    WHALE_DEVICE_CPU = 0,
    WHALE_DEVICE_CUDA,
    WHALE_DEVICE_AUTO, /* cuda when this build has it and a GPU is visible, else cpu */
};
/* "cpu" | "cuda" | "auto" -> *out; WHALE_EINVAL (message names the allowed values). */
int whale_device_parse(const char *s, enum whale_device *out);
const char *whale_device_name(enum whale_device d);
/* True when this build has the backend and (cuda) at least one GPU is visible. */
bool whale_device_available(enum whale_device d);
/* Devices of that kind this process sees (cuda: after CUDA_VISIBLE_DEVICES;
 * cpu and auto: 1). */
int whale_device_count(enum whale_device d);

/* Resolves what a run asks for (--device, WHALE_DEVICE) against this build
 * and what the process sees: *out is cpu or cuda and why (len bytes) says
 * in words why that one. auto: cuda when a GPU was bound to the task
 * (CUDA_VISIBLE_DEVICES, set by the plugin), the build has the cuda backend
 * and a device answers; else cpu. cuda asked for but unusable: WHALE_ENOTSUP
 * and why names the reason (not built with CUDA, no device, driver error).
 * Logs nothing: the caller says what it chose. */
int whale_device_resolve(enum whale_device asked, enum whale_device *out, char *why,
                         size_t len);

struct whale_backend_opts {
    enum whale_device device;
    /* cuda: device ordinal among the visible ones; -1 chooses: the plugin
     * binds each task's GPUs through CUDA_VISIBLE_DEVICES, so a task that
     * sees exactly its own GPU(s) takes ordinal 0; a task that sees more
     * (no binding) takes WHALE_LOCAL_RANK modulo the count. cpu: unused. */
    int ordinal;
    int threads;       /* cpu: size of the kernel thread pool (<= 0: leave as is) */
    bool allow_tf32;   /* cuda: fp32 GEMMs may use TF32 tensor cores (default off) */
    /* cuda: device memory is CUDA managed memory and every call waits for
     * its stream before it returns, so host code may read and write it as
     * on cpu (whale_backend_host_addressable() is then true). This is how
     * the engine runs on a GPU while its host paths (data, checkpoints,
     * host collectives) still touch engine memory directly. cpu: unused. */
    bool host_coherent;
    /* cuda with host_coherent: calls do NOT wait for their stream
     * (stream-ordered execution; managed memory prefers the device and is
     * prefetched there); the caller makes every point where host code
     * touches backend memory explicit with whale_backend_host_access.
     * Default false (one sync per call). */
    bool stream_ordered;
};
/* Fills the defaults: device AUTO, ordinal -1, threads 0, no TF32. */
void whale_backend_opts_init(struct whale_backend_opts *o);

/* Opens a backend. Asking for cuda in a build without it, or with no GPU
 * visible, is WHALE_ENOTSUP with the reason (never a silent cpu). */
int  whale_backend_open(const struct whale_backend_opts *o, whale_backend **out);
/* Frees the backend's own streams, events and workspaces. Memory from
 * whale_mem_alloc / whale_host_alloc must have been freed before. */
void whale_backend_close(whale_backend *b);
enum whale_device whale_backend_device(const whale_backend *b);
/* e.g. "cpu (2 threads)", "cuda:0 NVIDIA H200 (sm_90, 140 GiB)" */
const char *whale_backend_describe(const whale_backend *b);
/* True when device memory can be read and written by host code (cpu). */
bool whale_backend_host_addressable(const whale_backend *b);

/* Host access and execution order. */
/* True when kernels may read host memory that did not come from the backend
 * (cpu). False on cuda even with host_coherent: inputs such as token ids
 * must be copied into backend memory first. NULL (no backend): true. */
bool whale_backend_reads_host(const whale_backend *b);
/* A host-access point of stream-ordered execution: waits until every call
 * enqueued on the backend's device (all its streams, NCCL's included) has
 * finished, so host code may then read or write backend memory; reports the
 * first asynchronous error. A no-op (0) on cpu and on a backend whose calls
 * already complete before they return (host_coherent without
 * stream_ordered). */
int whale_backend_host_access(whale_backend *b);
/* True when calls return before their work is done (cuda stream_ordered):
 * host code must then call whale_backend_host_access first. */
bool whale_backend_stream_ordered(const whale_backend *b);

/* ---- memory ------------------------------------------------------------------ */

/* What a block holds: the backend counts bytes per kind (now and peak) so
 * metrics and the offload arena can say where memory goes. The names are
 * plural so this header and whale/arena.h (WHALE_MEM_OPTIM, WHALE_MEM_COMM:
 * the arena's categories, in the same order) can be included together. */
enum whale_mem_kind {
    WHALE_MEM_PARAMS = 0,  /* weights (and 16-bit copies) */
    WHALE_MEM_GRADS,       /* parameter gradients, reduction buckets */
    WHALE_MEM_OPTIMS,      /* AdamW moments, fp32 master weights */
    WHALE_MEM_ACTS,        /* activations kept for backward, pipeline slots */
    WHALE_MEM_COMMS,       /* ZeRO gather / scatter buffers, p2p staging */
    WHALE_MEM_WORKSPACE,   /* scratch of kernels and GEMMs */
    WHALE_MEM_KIND_COUNT_
};
const char *whale_mem_kind_name(enum whale_mem_kind k);

/* Device memory, aligned to 256 bytes, contents undefined. bytes == 0 gives
 * *out = NULL and 0. Out of memory: WHALE_ENOMEM, logged with the kind, the
 * size asked and what is in use per kind. */
int  whale_mem_alloc(whale_backend *b, enum whale_mem_kind k, size_t bytes, void **out);
/* NULL is a no-op. Waits for nothing: the caller orders the free after the
 * last stream that uses the block (e.g. whale_stream_sync). */
void whale_mem_free(whale_backend *b, void *p);
/* Bytes in use now and at the peak for one kind (WHALE_MEM_KIND_COUNT_: all). */
void whale_mem_usage(const whale_backend *b, enum whale_mem_kind k, size_t *now, size_t *peak);
/* Device memory free / total as the device reports it (cpu: MemAvailable /
 * MemTotal of the node). */
int  whale_mem_info(whale_backend *b, size_t *free_bytes, size_t *total_bytes);

/* Page-locked host memory (cudaHostAlloc; cpu: aligned malloc), for
 * checkpoint snapshots, offloaded optimizer state and copy staging: copies
 * from and to it run asynchronously at full link speed. Aligned to 4 KiB
 * (O_DIRECT writes can use it directly). */
int  whale_host_alloc(whale_backend *b, size_t bytes, void **out);
void whale_host_free(whale_backend *b, void *p);
/* Pin an existing host range (cudaHostRegister; cpu: no-op) / undo it. */
int  whale_host_register(whale_backend *b, void *p, size_t bytes);
int  whale_host_unregister(whale_backend *b, void *p);

enum whale_copy_dir { WHALE_H2D = 0, WHALE_D2H, WHALE_D2D, WHALE_H2H };
/* Enqueue a copy of `bytes` on s. A pageable (not pinned) host side makes
 * the call wait until the copy is done (CUDA's rule); pinned host memory
 * keeps it asynchronous. */
int whale_memcpy(whale_backend *b, void *dst, const void *src, size_t bytes,
                 enum whale_copy_dir dir, whale_stream *s);
/* dst (bytes) = byte value, on s. */
int whale_memset(whale_backend *b, void *dst, int value, size_t bytes, whale_stream *s);

/* ---- streams and events ------------------------------------------------------ */

/* The compute stream of the backend (never NULL, owned by the backend). */
whale_stream *whale_stream_compute(whale_backend *b);
/* An extra stream (communication, copies, prefetch). high_priority lets
 * communication kernels overtake compute on cuda. */
int  whale_stream_create(whale_backend *b, bool high_priority, whale_stream **out);
void whale_stream_destroy(whale_stream *s);
/* The native handle: a cudaStream_t to pass as `stream` to whale_dev_*
 * (whale/comm.h); NULL on cpu. */
void *whale_stream_native(whale_stream *s);
/* Wait on the host until everything enqueued on s has finished; reports the
 * first asynchronous error of the stream (kernel fault) with its name. */
int  whale_stream_sync(whale_stream *s);

int  whale_event_create(whale_backend *b, whale_event **out);
void whale_event_destroy(whale_event *e);
/* Mark the current end of s. */
int  whale_event_record(whale_event *e, whale_stream *s);
/* Make later work on s wait for e (no host wait). */
int  whale_stream_wait_event(whale_stream *s, whale_event *e);
int  whale_event_sync(whale_event *e);
/* *done = whether e has completed; never blocks. */
int  whale_event_query(whale_event *e, bool *done);
/* Milliseconds between two recorded, completed events. */
int  whale_event_elapsed_ms(whale_event *start, whale_event *end, float *ms);

/* ---- GEMM ---------------------------------------------------------------------
 * C (M,N) = alpha * op(A) op(B) + beta * C, row-major; op(A) is (M,K),
 * op(B) (K,N); lda/ldb/ldc are row strides of A, B, C as stored.
 * A and B share one dtype (f32, bf16, f16); C is fp32 or that dtype.
 * Accumulation is fp32 always; fp32 inputs use TF32 only with allow_tf32.
 * cuda: cuBLASLt on stream s, with one workspace per backend: GEMMs of one
 * backend must not run on two streams at once (issue them on the compute
 * stream, or order the streams with events). */
int whale_gemm(whale_backend *b, whale_stream *s, bool transA, bool transB, int M, int N, int K,
               float alpha, const void *A, int lda, const void *B, int ldb,
               enum whale_dtype ab_type, float beta, void *C, int ldc, enum whale_dtype c_type);

/* Arithmetic of GEMMs whose operands are STORED in fp32 (whale_gemm with
 * ab_type float32, linear kernels with t = float32). WHALE_FLOAT32: exact
 * fp32 (TF32 only with allow_tf32); WHALE_BFLOAT16 / WHALE_FLOAT16: the
 * operands are rounded to that type and the products summed in fp32 (the
 * engine's mixed precision keeps fp32 activations and multiplies in 16
 * bits). cpu: k_gemm_mm of backend/kernels_lp.c (bf16 where the CPU has
 * AVX512_BF16, else exact fp32: the engine asks only for what it can get);
 * cuda: CUBLAS_COMPUTE_32F_FAST_16BF / _FAST_16F. Default WHALE_FLOAT32. */
int whale_backend_set_fp32_gemm_math(whale_backend *b, enum whale_dtype mm);
enum whale_dtype whale_backend_fp32_gemm_math(const whale_backend *b);
/* Does b multiply fp32-stored operands in mm natively (what the engine asks
 * for before setting it)? cpu: WHALE_FLOAT32, and WHALE_BFLOAT16 where the
 * CPU has AVX512_BF16 and the build has oneDNN; cuda: all three. */
bool whale_backend_has_gemm_math(const whale_backend *b, enum whale_dtype mm);

/* The host's compute pool: the OpenMP threads of the cpu kernels and of
 * host-side work on any backend (host AdamW of offload, casts). set_threads
 * sizes it (at least 1; OpenBLAS then runs single-threaded inside it);
 * flush_denormals flushes subnormals to zero in the calling thread and the
 * pool (x86; why: backend/kernels.h) or keeps IEEE subnormals. */
void whale_host_set_threads(int n);
int  whale_host_threads(void);
void whale_host_flush_denormals(bool on);

/* ---- kernels of a GPT block (t: dtype of weights and activations) ----------- */

/* out (N,OC) = inp (N,IC) @ w (OC,IC)^T + bias (OC) ; bias may be NULL. */
int whale_k_linear_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                       const void *inp, const void *w, const void *bias, int N, int IC, int OC);
/* dinp (N,IC) = dout (N,OC) @ w (OC,IC)   (dinp may be NULL; += when acc)
 * dw (OC,IC) fp32 += dout^T @ inp ; db (OC) fp32 += column sums of dout
 * (dw, db may be NULL). */
int whale_k_linear_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                       float *dw, float *db, const void *dout, const void *inp, const void *w,
                       int N, int IC, int OC, bool acc);
/* The MLP's fc with its GELU: whale_k_linear_fwd into out, then
 * whale_k_gelu_fwd (gl, out). And the MLP's proj backward with GELU's:
 * whale_k_linear_bwd (acc false), then whale_k_gelu_bwd (dinp, pre, dinp).
 * The same results as those calls; the cpu backend applies GELU to each
 * thread's block of the product while it is in cache (one parallel region
 * instead of two, one pass over memory less). */
int whale_k_linear_gelu_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                            void *gl, const void *inp, const void *w, const void *bias, int N,
                            int IC, int OC);
int whale_k_linear_bwd_gelu(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                            const void *pre, float *dw, float *db, const void *dout,
                            const void *inp, const void *w, int N, int IC, int OC);

/* out (N,C) = (inp - mean) * rstd * w (C) + bias (C), eps 1e-5 ;
 * mean, rstd (N) fp32 saved for backward. */
int whale_k_layernorm_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                          float *mean, float *rstd, const void *inp, const void *w,
                          const void *bias, int N, int C);
/* dinp (N,C) += ... (accumulates into the residual stream) ;
 * dw, db (C) fp32 += ... */
int whale_k_layernorm_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                          float *dw, float *db, const void *dout, const void *inp, const void *w,
                          const float *mean, const float *rstd, int N, int C);

/* Causal multi-head self-attention, NH local heads of size hd, scale
 * 1/sqrt(hd). qkv (B,T,3,NH,hd), out (B,T,NH,hd).
 * `saved` is what backward needs besides qkv and out; its size in floats
 * depends on the backend: cpu keeps the probabilities (B,NH,T,T); cuda is
 * flash-style and keeps only the log-sum-exp of each score row (B,NH,T):
 * no T x T matrix exists in device memory at any time. b NULL: the cpu
 * size (sizing without a backend, as the memory model does). */
size_t whale_attention_saved_floats(const whale_backend *b, int B, int T, int NH, int hd);
/* out may be NULL: only `saved` is (re)built (selective recompute). */
int whale_k_attention_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                          float *saved, const void *qkv, int B, int T, int NH, int hd);
/* dqkv (B,T,3,NH,hd) = ... (overwritten) from dout (B,T,NH,hd); out is the
 * forward's output (flash backward needs rowsum(dout * out)). */
int whale_k_attention_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dqkv,
                          const void *dout, const void *qkv, const void *out, const float *saved,
                          int B, int T, int NH, int hd);

/* out (n) = gelu_tanh(inp) ; dinp (n) = gelu'(inp) * dout (dinp may alias dout). */
int whale_k_gelu_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                     const void *inp, int64_t n);
int whale_k_gelu_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                     const void *inp, const void *dout, int64_t n);

/* out (n) = x + y ; acc: y (n) += x. */
int whale_k_add(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out, const void *x,
                const void *y, int64_t n);
int whale_k_acc(whale_backend *b, whale_stream *s, enum whale_dtype t, void *y, const void *x,
                int64_t n);

/* Embedding. tok (B,T) int32 in [0, V) (checked by the data loader).
 * out (B,T,C) = wte[tok] (V,C) + wpe[t] (T,C) */
int whale_k_embed_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                      const int32_t *tok, const void *wte, const void *wpe, int B, int T, int C);
/* dwte (V,C) fp32 += , dwpe (T,C) fp32 += , from dout (B,T,C) */
int whale_k_embed_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, float *dwte,
                      float *dwpe, const void *dout, const int32_t *tok, int B, int T, int C);
/* Vocabulary-parallel: this rank holds rows [v0, v0+V) of wte; wpe may be
 * NULL (added on one rank only).
 * out (B,T,C) = (tok in range ? wte[tok-v0] : 0) + (wpe ? wpe[t] : 0) */
int whale_k_embed_fwd_tp(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                         const int32_t *tok, const void *wte, int v0, int V, const void *wpe,
                         int B, int T, int C);
/* dwte (V,C) fp32 += rows of dout for tokens in range ; dwpe (T,C) fp32 += dout */
int whale_k_embed_bwd_tp(whale_backend *b, whale_stream *s, enum whale_dtype t, float *dwte,
                         float *dwpe, const void *dout, const int32_t *tok, int v0, int V, int B,
                         int T, int C);

/* Softmax cross-entropy over logits x (N,V) in dtype t, targets (N) int32.
 * In place: x -> probabilities ; losses (N) fp32 = -log p[target]. */
int whale_k_softmax_xent_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x,
                             float *losses, const int32_t *targets, int N, int V);
/* In place: probs (N,V) -> dlogits = (probs - onehot(target)) * dloss */
int whale_k_softmax_xent_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *probs,
                             const int32_t *targets, float dloss, int N, int V);
/* Vocabulary-parallel variant over local columns [v0, v0+V), in three steps
 * with TP all-reduces between them (max of mx; sum of the 2N floats sum|tl):
 *   mx (N) = row max of x (N,V) */
int whale_k_rows_max(whale_backend *b, whale_stream *s, enum whale_dtype t, float *mx,
                     const void *x, int N, int V);
/* x (N,V) -> exp(x - mx) in place ; sum (N) = row sums ; tl (N) = x[target] -
 * mx where the target is local, else 0. Pass tl = sum + N to reduce both at once. */
int whale_k_rows_exp_sum(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x,
                         float *sum, float *tl, const float *mx, const int32_t *targets, int v0,
                         int N, int V);
/* x (N,V) /= sum ; losses (N) = log(sum) - tl */
int whale_k_rows_normalize(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x,
                           float *losses, const float *sum, const float *tl, int N, int V);
/* In place: probs (N,V) -> (probs - onehot(target - v0)) * dloss */
int whale_k_softmax_xent_bwd_tp(whale_backend *b, whale_stream *s, enum whale_dtype t,
                                void *probs, const int32_t *targets, int v0, float dloss, int N,
                                int V);

/* Biases of linears whose bias is not fused into the GEMM (row-parallel
 * outputs, strided q/k/v column ranges). */

/* out (N,OC) += bias (OC) on every row (the bias of a row-parallel linear,
 * added once after the tensor-parallel sum). */
int whale_k_bias_add(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                     const void *bias, int N, int OC);
/* out rows ldo elements apart, columns [0, OC) of each of N rows = bias (OC):
 * the first half of a strided linear (out = bias, then whale_gemm with
 * beta 1 adds inp @ w^T), so the bias is summed in the order the cpu
 * kernels sum it. */
int whale_k_bias_fill(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out, int ldo,
                      const void *bias, int N, int OC);
/* db (OC) fp32 += column sums of x (N rows ld elements apart, OC columns):
 * the bias gradient of a linear whose output is a column range. */
int whale_k_colsum_acc(whale_backend *b, whale_stream *s, enum whale_dtype t, float *db,
                       const void *x, int ld, int N, int OC);

/* Embedding gradient without positions (rotary): dwte (V,C) fp32 += rows of
 * dout (N,C) for the tokens (N, int32) in [v0, v0+V) */
int whale_k_embed_bwd_rows(whale_backend *b, whale_stream *s, enum whale_dtype t, float *dwte,
                           const void *dout, const int32_t *tok, int v0, int V, int N, int C);

/* ---- casts, reductions, optimizer ------------------------------------------- */

/* dst (n) in dt = src (n) in st; f32 <-> bf16 <-> f16, round to nearest
 * even, NaN stays NaN, overflow to fp16 gives inf. dst may equal src only
 * when both dtypes have the same size. */
int whale_k_cast(whale_backend *b, whale_stream *s, void *dst, enum whale_dtype dt,
                 const void *src, enum whale_dtype st, int64_t n);
/* x (n) fp32, in place: each value rounded to dtype t (bf16 / fp16, nearest
 * even) and widened back: an fp32 buffer holding what a 16-bit tensor would. */
int whale_k_round(whale_backend *b, whale_stream *s, float *x, enum whale_dtype t, int64_t n);
/* x (n) fp32 *= a (gradient unscaling, clipping). */
int whale_k_scale(whale_backend *b, whale_stream *s, float *x, float a, int64_t n);
/* Host results: these wait for s. *sumsq = sum of g[i]^2 in double, in a
 * fixed order (same bits on every run); *found = any inf/NaN in g. */
int whale_k_sumsq(whale_backend *b, whale_stream *s, const float *g, int64_t n, double *sumsq);
/* sumsq[i] = whale_k_sumsq of g[i] (n[i] values) for np tensors, the same
 * bits, in one call (on cpu one parallel region instead of one per tensor). */
int whale_k_sumsq_multi(whale_backend *b, whale_stream *s, const float *const *g,
                        const int64_t *n, int np, double *sumsq);
int whale_k_has_inf_nan(whale_backend *b, whale_stream *s, const float *g, int64_t n,
                        bool *found);

/* One tensor (or ZeRO shard of one) for the fused AdamW: all device memory.
 * w, m, v fp32 (n) updated in place, g fp32 (n) read; w16, when not NULL,
 * receives the updated w rounded to the 16-bit dtype of the call (the PARAM
 * copy of mixed precision, written in the same pass). */
struct whale_adamw_piece {
    float *w;
    const float *g;
    float *m, *v;
    void *w16;
    size_t n;
    bool decay;        /* weight decay applies (matrices, not biases / LayerNorm) */
};
/* One AdamW step (whale_adamw_update's arithmetic, whale/optim.h) over
 * np pieces at optimizer step t (1-based) with gradient multiplier grad_mul
 * (unscale x clip). The pieces array itself is host memory. cuda: one
 * launch per 32 pieces (multi-tensor, descriptors passed by value). w16_type: WHALE_BFLOAT16 or
 * WHALE_FLOAT16 (ignored when no piece has w16). */
int whale_k_adamw(whale_backend *b, whale_stream *s, const struct whale_adamw *o, int64_t t,
                  float grad_mul, const struct whale_adamw_piece *pieces, int np,
                  enum whale_dtype w16_type);

/* ---- kernels of a Llama-style block (RMSNorm, gated MLP, rotary, GQA) ------
 * The kernels engine/block_x.c needs besides the GPT ones above, so a
 * Llama-style block can run on either backend. cpu: backend/kernels_llama.c
 * and backend/attn_blocked.c called unchanged for fp32 (same bits as calling
 * them directly); 16-bit operands are widened, computed in fp32 and rounded
 * once on store, like the kernels above. */

/* out (N,C) = inp * rstd * w (C), rstd (N) fp32 = 1/sqrt(mean(inp^2) + eps), eps > 0
 * (the model's rms_norm_eps; Llama: 1e-5, Qwen2: 1e-6) */
int whale_k_rmsnorm_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                        float *rstd, const void *inp, const void *w, int N, int C, float eps);
/* dinp (N,C) += ... (the residual stream) ; dw (C) fp32 += sum over rows of
 * dout * inp * rstd */
int whale_k_rmsnorm_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                        float *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, int N, int C);

/* Gated MLP activation: SiLU (SwiGLU) or tanh-GELU (GeGLU). */
enum whale_glu_act { WHALE_GLU_SILU = 0, WHALE_GLU_GELU = 1 };
/* h (n) = act(gate) * up ; gate, up, h: (N,F) flattened to n */
int whale_k_glu_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t,
                    enum whale_glu_act act, void *h, const void *gate, const void *up, int64_t n);
/* dgate (n) = dh * up * act'(gate) ; dup (n) = dh * act(gate) (overwritten;
 * dgate may alias dh) */
int whale_k_glu_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t,
                    enum whale_glu_act act, void *dgate, void *dup, const void *dh,
                    const void *gate, const void *up, int64_t n);

/* Rotary position embedding in place on x (B,T,nh,hd), token rows ld
 * elements apart: each head's pair (i, i + hd/2) at position t turns by
 * t * whale_rope_inv_freq(theta, sc, i, hd) (whale/rope.h: theta^(-2i/hd),
 * rescaled by sc's context extension; sc NULL: unscaled) in the rotate-half
 * layout of Llama / GPT-NeoX. sign +1 forward, -1 the backward (the inverse
 * rotation). hd even. */
int whale_k_rope(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x, int ld, int B,
                 int T, int nh, int hd, float theta, const struct whale_rope_scaling *sc,
                 int sign);

/* Which key/value head each query head reads (grouped-query attention):
 * local query head h uses local KV head (hq0 + h) / g - k0, where hq0 is
 * the first global query head of this rank, g = Heads / KVHeads and k0 the
 * first global KV head this rank holds. NH local query heads, KVl local KV
 * heads, head size hd. KVl == NH, g == 1, hq0 == k0 == 0: plain multi-head. */
struct whale_attn_heads {
    int NH, KVl, hd;
    int hq0, g, k0;
};
/* Causal attention, scale 1/sqrt(hd), without a T x T matrix (flash-style):
 * q (B,T,NH,hd), k and v (B,T,KVl,hd), out (B,T,NH,hd), each with one row
 * per token, rows ldq / ldk / ldv / ldo elements apart (q, k, v may be
 * column ranges of one q|k|v buffer). lse (B,NH,T) fp32: log-sum-exp of
 * every scaled score row, all that backward needs besides q, k, v, out. */
int whale_k_attention_gqa_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                              int ldo, float *lse, const void *q, int ldq, const void *k,
                              int ldk, const void *v, int ldv, int B, int T,
                              const struct whale_attn_heads *m);
/* dq (like q), dk, dv (like k, v): overwritten, from dout (like out); every
 * query head of a group adds into its KV head's dk, dv in a fixed order. */
int whale_k_attention_gqa_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dq,
                              void *dk, void *dv, const void *dout, int ldo, const void *out,
                              const float *lse, const void *q, int ldq, const void *k, int ldk,
                              const void *v, int ldv, int B, int T,
                              const struct whale_attn_heads *m);

/* Generation with a KV cache, one token at a time (fp32 only).
 * rope_at: whale_k_rope's rotation of one token row x (nh,hd) at the
 * absolute position pos (the same angles, so a cached run matches a full
 * one). attention_decode: stores the token's k and v (KVl,hd) at position
 * pos of the caches kc, vc (KVl,S,hd: S positions per KV head), then
 * out (NH,hd) = softmax(q k^T / sqrt(hd)) v of q (NH,hd) over positions
 * 0..pos, query head h reading KV head as m says. 0 <= pos < S.
 * WHALE_ENOTSUP on a backend without them (cuda): generation then runs the
 * whole window again per token. */
int whale_k_rope_at(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x, int nh,
                    int hd, int pos, float theta, const struct whale_rope_scaling *sc);
int whale_k_attention_decode(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                             const void *q, const void *k, const void *v, float *kc, float *vc,
                             int pos, int S, const struct whale_attn_heads *m);
/* Whether the backend has the two above (false: generation recomputes). */
bool whale_backend_has_decode(const whale_backend *b);

/* Plain (non-flash) attention with grouped KV heads where the kernels read
 * host memory (cpu): expand compact q|k|v (N rows, ld elements apart) to
 * (N,3,NH,hd) with each query head's key and value beside it, for the
 * multi-head kernels; fold that layout's gradient back into compact dqkv,
 * summing the query heads of each group. WHALE_ENOTSUP on a backend that
 * runs the grouped kernels instead (cuda: whale_k_attention_gqa_*). */
int whale_k_gqa_expand(whale_backend *b, whale_stream *s, float *dst, const float *qkv, int ld,
                       int N, const struct whale_attn_heads *m);
int whale_k_gqa_fold(whale_backend *b, whale_stream *s, float *dqkv, int ld, const float *dexp,
                     int N, const struct whale_attn_heads *m);

#ifdef __cplusplus
}
#endif
#endif
