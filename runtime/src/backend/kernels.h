/* fp32 CPU kernels of the GPT model. Row-major everywhere; N = B*T rows.
 * Parameter gradients accumulate (+=) so micro-batches and tied weights
 * add up; input gradients are overwritten unless the name says _acc.
 *
 * Threading: one pool (OpenMP). Matrix products split their largest
 * dimension over the pool and call single-threaded OpenBLAS in each
 * thread, so OpenMP's and OpenBLAS's threads never compete for cores. */
#ifndef BACKEND_KERNELS_H
#define BACKEND_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "whale/comm.h" /* enum whale_dtype */

/* Set the pool size (and OpenBLAS to 1 thread). */
void k_set_threads(int n);
int  k_threads(void);
/* Flush subnormal results and inputs to zero (on) in the calling thread and
 * the pool, or keep IEEE subnormals (off). Why on: a tanh-GELU or softmax
 * exp over values near zero makes subnormal intermediates, and every vector
 * holding one takes a microcode assist of ~100 cycles: on gpt-tiny,
 * span_gelu_fwd took 16.6 % of a step with subnormals, 3.2 % flushed, the
 * step 8-12 % less (perf, Xeon with AVX-512). fp32 training loses nothing
 * it can use (values below 1.2e-38; bf16 flushes them in hardware too), and
 * the fp16 conversions (F16C) ignore FTZ/DAZ: fp16 subnormals survive.
 * TensorFlow flushes in its CPU threads for the same reason. x86 only. */
void k_flush_denormals(bool on);

/* C(M,N) = alpha * op(A) op(B) + beta * C, row-major, threaded. */
void k_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
            const float *B, int ldb, float beta, float *C, int ldc);

/* kernels_lp.c: the same GEMM with operands of type mm: WHALE_FLOAT32 is
 * k_gemm; WHALE_BFLOAT16 rounds A and B to bf16 and multiplies in bf16 with
 * fp32 accumulation where k_bf16_gemm_available() (oneDNN, WHALE_BF16_GEMM),
 * else k_gemm on the same values. */
void k_gemm_mm(enum whale_dtype mm, int transA, int transB, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
bool k_bf16_gemm_available(void);
/* WHALE_BF16_GEMM: auto (oneDNN where the CPU has AMX-BF16), onednn (where
 * it has AVX512_BF16) or sgemm; -1 for any other value */
enum { K_BF16_GEMM_AUTO, K_BF16_GEMM_ONEDNN, K_BF16_GEMM_SGEMM };
int k_bf16_gemm_mode(void);

/* kernels_sgemm.c: WHALE_FP32_GEMM, the library of the fp32 GEMMs: openblas
 * (default) or onednn; -1 for any other value. k_fp32_gemm_onednn: whether
 * k_gemm takes oneDNN's sgemm (asked for and built with oneDNN).
 * k_sgemm_onednn: one row-major sgemm through oneDNN, threaded over the
 * OpenMP pool when called outside a parallel region; 0 or -1. */
enum { K_FP32_GEMM_OPENBLAS, K_FP32_GEMM_ONEDNN };
int k_fp32_gemm_mode(void);
bool k_fp32_gemm_onednn(void);
int k_sgemm_onednn(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The linear layers take the GEMM operand type mm (see k_gemm_mm). */
/* out (N,OC) = inp (N,IC) @ w (OC,IC)^T + b (OC) ; b may be NULL */
void k_linear_fwd(enum whale_dtype mm, float *out, const float *inp, const float *w,
                  const float *b, int N, int IC, int OC);
/* dinp (N,IC) = dout (N,OC) @ w (OC,IC)      (dinp may be NULL; += when acc)
 * dw (OC,IC) += dout^T @ inp ; db (OC) += sum_rows dout  (db may be NULL) */
void k_linear_bwd(enum whale_dtype mm, float *dinp, float *dw, float *db, const float *dout,
                  const float *inp, const float *w, int N, int IC, int OC, int acc);

/* k_linear_fwd, then gl (N,OC) = gelu_tanh(out): for fp32 GEMMs in the
 * product's parallel region, block by block (the bits of the two calls). */
void k_linear_gelu_fwd(enum whale_dtype mm, float *out, float *gl, const float *inp,
                       const float *w, const float *b, int N, int IC, int OC);
/* k_linear_bwd, then dinp = gelu'(pre) * dinp when pre (N,IC) is not NULL
 * (fused into the dinp product for fp32 without acc; the same bits). */
void k_linear_bwd_gelu(enum whale_dtype mm, float *dinp, const float *pre, float *dw, float *db,
                       const float *dout, const float *inp, const float *w, int N, int IC,
                       int OC, int acc);

/* out (N,C) = (inp - mean) * rstd * w + b ; mean, rstd (N) saved */
void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                     const float *b, int N, int C);
/* dinp (N,C) += ... ; dw, db (C) += ... */
void k_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, const float *mean, const float *rstd, int N, int C);

/* Causal multi-head attention over NH local heads of size hd.
 * qkv (B,T,3,NH,hd) -> out (B,T,NH,hd) ; att (B,NH,T,T) softmax probs saved */
void k_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int NH, int hd);
/* dqkv (B,T,3,NH,hd) = ... (overwritten), from dout (B,T,NH,hd) */
void k_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                     int T, int NH, int hd);
/* Probabilities only (selective recompute rebuilds them from qkv). */
void k_attention_probs(float *att, const float *qkv, int B, int T, int NH, int hd);

/* out (n) = gelu_tanh(inp) */
void k_gelu_fwd(float *out, const float *inp, int64_t n);
/* dinp (n) = gelu'(inp) * dout */
void k_gelu_bwd(float *dinp, const float *inp, const float *dout, int64_t n);

/* out (n) = a + b */
void k_add(float *out, const float *a, const float *b, int64_t n);
/* y (n) += x */
void k_acc(float *y, const float *x, int64_t n);

/* out (B,T,C) = wte[tok] (V,C) + wpe[t] (T,C) ; tokens (B,T) */
void k_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T,
                 int C);
/* dwte (V,C) += , dwpe (T,C) += , from dout (B,T,C) */
void k_embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T,
                 int C);

/* Vocabulary-parallel embedding: this rank holds rows [v0, v0+V) of wte.
 * out (B,T,C) = (tok in range ? wte[tok-v0] : 0) + (wpe ? wpe[t] : 0) */
void k_embed_fwd_tp(float *out, const int32_t *tok, const float *wte, int v0, int V,
                    const float *wpe, int B, int T, int C);
/* dwte (V,C) += rows of dout for tokens in range ; dwpe (T,C) += dout */
void k_embed_bwd_tp(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int v0,
                    int V, int B, int T, int C);

/* Vocabulary-parallel softmax / cross-entropy over local columns [v0, v0+V):
 * mx (N) = row max of x (N,V) */
void k_rows_max(float *mx, const float *x, int N, int V);
/* x (N,V) -> exp(x - mx) in place ; sum (N) = row sums ; tl (N) = x[target]
 * - mx when the target is local, else 0 (sum and tl contiguous for one
 * reduction) */
void k_rows_exp_sum(float *x, float *sum, float *tl, const float *mx, const int32_t *targets,
                    int v0, int N, int V);
/* x (N,V) /= sum ; losses (N) = log(sum) - tl */
void k_rows_normalize(float *x, float *losses, const float *sum, const float *tl, int N, int V);
/* In place: probs (N,V) -> (probs - onehot(target - v0)) * dloss */
void k_softmax_xent_bwd_tp(float *probs, const int32_t *targets, int v0, float dloss, int N,
                           int V);

/* In place: logits (N,V) -> probs ; losses (N) = -log p[target] ; returns
 * nothing; targets (N) */
void k_softmax_xent_fwd(float *probs, float *losses, const int32_t *targets, int N, int V);
/* In place: probs (N,V) -> dlogits = (probs - onehot(target)) * dloss */
void k_softmax_xent_bwd(float *probs, const int32_t *targets, float dloss, int N, int V);

#endif
