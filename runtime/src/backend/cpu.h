/* The cpu backend's kernel operations (cpu_kernels.c), wired into the
 * operations table by cpu.c. fp32 calls go straight to the engine's kernels
 * (src/backend/kernels.c) so results are bit-identical to calling them; 16-bit
 * calls widen to fp32, run the same kernels and round once on store: the
 * reference the cuda backend's 16-bit kernels are tested against. */
#ifndef BACKEND_CPU_H
#define BACKEND_CPU_H

#include "backend/backend_internal.h"

int bkc_gemm(whale_backend *b, bk_stream s, bool ta, bool tb, int M, int N, int K, float alpha,
             const void *A, int lda, const void *B, int ldb, enum whale_dtype abt, float beta,
             void *C, int ldc, enum whale_dtype ct);
int bkc_linear_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *inp,
                   const void *w, const void *bias, int N, int IC, int OC);
int bkc_linear_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                   float *db, const void *dout, const void *inp, const void *w, int N, int IC,
                   int OC, bool acc);
int bkc_linear_gelu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, void *gl,
                        const void *inp, const void *w, const void *bias, int N, int IC, int OC);
int bkc_linear_bwd_gelu(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                        const void *pre, float *dw, float *db, const void *dout, const void *inp,
                        const void *w, int N, int IC, int OC);
int bkc_layernorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *mean,
                      float *rstd, const void *inp, const void *w, const void *bias, int N, int C);
int bkc_layernorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                      float *db, const void *dout, const void *inp, const void *w,
                      const float *mean, const float *rstd, int N, int C);
size_t bkc_attention_saved_floats(const whale_backend *b, int B, int T, int NH, int hd);
int bkc_attention_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *saved,
                      const void *qkv, int B, int T, int NH, int hd);
int bkc_attention_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dqkv,
                      const void *dout, const void *qkv, const void *out, const float *saved,
                      int B, int T, int NH, int hd);
int bkc_gelu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *inp,
                 int64_t n);
int bkc_gelu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, const void *inp,
                 const void *dout, int64_t n);
int bkc_add(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *x,
            const void *y, int64_t n);
int bkc_acc(whale_backend *b, bk_stream s, enum whale_dtype t, void *y, const void *x, int64_t n);
int bkc_embed_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                  const int32_t *tok, const void *wte, int v0, int V, const void *wpe, int B,
                  int T, int C, bool tp);
int bkc_embed_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte, float *dwpe,
                  const void *dout, const int32_t *tok, int v0, int V, int B, int T, int C,
                  bool tp);
int bkc_xent_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *losses,
                 const int32_t *targets, int N, int V);
int bkc_xent_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *probs,
                 const int32_t *targets, int v0, float dloss, int N, int V, bool tp);
int bkc_rows_max(whale_backend *b, bk_stream s, enum whale_dtype t, float *mx, const void *x,
                 int N, int V);
int bkc_rows_exp_sum(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *sum,
                     float *tl, const float *mx, const int32_t *targets, int v0, int N, int V);
int bkc_rows_normalize(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *losses,
                       const float *sum, const float *tl, int N, int V);
int bkc_cast(whale_backend *b, bk_stream s, void *dst, enum whale_dtype dt, const void *src,
             enum whale_dtype st, int64_t n);
int bkc_scale(whale_backend *b, bk_stream s, float *x, float a, int64_t n);
int bkc_sumsq(whale_backend *b, bk_stream s, const float *g, int64_t n, double *out);
int bkc_sumsq_multi(whale_backend *b, bk_stream s, const float *const *g, const int64_t *n,
                    int np, double *out);
int bkc_has_inf_nan(whale_backend *b, bk_stream s, const float *g, int64_t n, bool *found);
int bkc_adamw(whale_backend *b, bk_stream s, const struct whale_adamw *o, int64_t t,
              float grad_mul, const struct whale_adamw_piece *p, int np, enum whale_dtype w16t);

/* bias add and rounding to 16-bit values (cpu_kernels.c) */
int bkc_bias_add(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *bias,
                 int N, int OC);
int bkc_round16(whale_backend *b, bk_stream s, float *x, enum whale_dtype t, int64_t n);

#endif
