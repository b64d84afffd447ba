/* The cuda backend's operations, one per kernel family file (C linkage, so
 * the operations table in cuda_backend.cu and the C side agree). Shapes and
 * semantics: whale/backend.h. All of them enqueue on the native stream `s`
 * (a cudaStream_t) and check the launch; asynchronous faults surface at the
 * next whale_stream_sync / whale_event_sync with the stream named. */
#ifndef BACKEND_CUDA_BACKEND_H
#define BACKEND_CUDA_BACKEND_H

#include "backend/backend_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gemm.cu */
int bkg_gemm(whale_backend *b, bk_stream s, bool ta, bool tb, int M, int N, int K, float alpha,
             const void *A, int lda, const void *B, int ldb, enum whale_dtype abt, float beta,
             void *C, int ldc, enum whale_dtype ct);
int bkg_linear_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *inp,
                   const void *w, const void *bias, int N, int IC, int OC);
int bkg_linear_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                   float *db, const void *dout, const void *inp, const void *w, int N, int IC,
                   int OC, bool acc);
int bkg_gemm_init(whale_backend *b);
void bkg_gemm_fini(whale_backend *b);

/* kernels.cu */
int bkg_layernorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *mean,
                      float *rstd, const void *inp, const void *w, const void *bias, int N, int C);
int bkg_layernorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                      float *db, const void *dout, const void *inp, const void *w,
                      const float *mean, const float *rstd, int N, int C);
int bkg_gelu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *inp,
                 int64_t n);
int bkg_gelu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, const void *inp,
                 const void *dout, int64_t n);
int bkg_add(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *x,
            const void *y, int64_t n);
int bkg_acc(whale_backend *b, bk_stream s, enum whale_dtype t, void *y, const void *x, int64_t n);
int bkg_embed_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                  const int32_t *tok, const void *wte, int v0, int V, const void *wpe, int B,
                  int T, int C, bool tp);
int bkg_embed_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte, float *dwpe,
                  const void *dout, const int32_t *tok, int v0, int V, int B, int T, int C,
                  bool tp);
int bkg_xent_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *losses,
                 const int32_t *targets, int N, int V);
int bkg_xent_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *probs,
                 const int32_t *targets, int v0, float dloss, int N, int V, bool tp);
int bkg_rows_max(whale_backend *b, bk_stream s, enum whale_dtype t, float *mx, const void *x,
                 int N, int V);
int bkg_rows_exp_sum(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *sum,
                     float *tl, const float *mx, const int32_t *targets, int v0, int N, int V);
int bkg_rows_normalize(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, float *losses,
                       const float *sum, const float *tl, int N, int V);
int bkg_cast(whale_backend *b, bk_stream s, void *dst, enum whale_dtype dt, const void *src,
             enum whale_dtype st, int64_t n);
int bkg_scale(whale_backend *b, bk_stream s, float *x, float a, int64_t n);
int bkg_sumsq(whale_backend *b, bk_stream s, const float *g, int64_t n, double *out);
int bkg_has_inf_nan(whale_backend *b, bk_stream s, const float *g, int64_t n, bool *found);
/* db (C) fp32 += column sums of x (N,C) in dtype t (bias gradients). */
int bkg_colsum_acc(whale_backend *b, bk_stream s, enum whale_dtype t, float *db, const void *x,
                   int N, int C);

/* attention.cu */
size_t bkg_attention_saved_floats(const whale_backend *b, int B, int T, int NH, int hd);
int bkg_attention_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *saved,
                      const void *qkv, int B, int T, int NH, int hd);
int bkg_attention_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dqkv,
                      const void *dout, const void *qkv, const void *out, const float *saved,
                      int B, int T, int NH, int hd);

/* adamw.cu */
int bkg_adamw(whale_backend *b, bk_stream s, const struct whale_adamw *o, int64_t t,
              float grad_mul, const struct whale_adamw_piece *p, int np, enum whale_dtype w16t);

/* attention_tc.cu: the forward on tensor cores (16-bit operands or 16-bit
 * fp32-GEMM arithmetic, hd in {32, 64, 80, 96, 128}) */
bool bkg_attention_tc_takes(const whale_backend *b, enum whale_dtype t, int hd);
int bkg_attention_fwd_tc(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                         float *lse, const void *qkv, int B, int Tn, int NH, int hd);

/* kernels.cu: bias add and rounding to 16-bit values */
int bkg_bias_add(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, const void *bias,
                 int N, int OC);
int bkg_round16(whale_backend *b, bk_stream s, float *x, enum whale_dtype t, int64_t n);

/* attention_tc_bwd.cu: the backward on tensor cores where the forward runs
 * there (bkg_attention_tc_takes) and its tiles fit the device's shared memory */
bool bkg_attention_bwd_tc_takes(const whale_backend *b, enum whale_dtype t, int hd);
int bkg_attention_bwd_tc(whale_backend *b, bk_stream s, enum whale_dtype t, void *dqkv,
                         const void *dout, const void *qkv, const void *out, const float *lse,
                         int B, int Tn, int NH, int hd);

/* llama.cu and attention.cu: the Llama block */
int bkg_rmsnorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *rstd,
                    const void *inp, const void *w, int N, int C, float eps);
int bkg_rmsnorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                    const void *dout, const void *inp, const void *w, const float *rstd, int N,
                    int C);
int bkg_glu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                void *h, const void *gate, const void *up, int64_t n);
int bkg_glu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                int64_t n);
int bkg_rope(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int ld, int B, int T,
             int nh, int hd, float theta, const struct whale_rope_scaling *sc, int sign);
int bkg_attention_gqa_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, int ldo,
                          float *lse, const void *q, int ldq, const void *k, int ldk,
                          const void *v, int ldv, int B, int T, const struct whale_attn_heads *m);
int bkg_attention_gqa_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dq, void *dk,
                          void *dv, const void *dout, int ldo, const void *out, const float *lse,
                          const void *q, int ldq, const void *k, int ldk, const void *v, int ldv,
                          int B, int T, const struct whale_attn_heads *m);
/* db (OC) fp32 += column sums of x (N rows ld apart) */
int bkg_colsum_acc_ld(whale_backend *b, bk_stream s, enum whale_dtype t, float *db,
                      const void *x, int ld, int N, int OC);
int bkg_embed_bwd_rows(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte,
                       const void *dout, const int32_t *tok, int v0, int V, int N, int C);
/* llama.cu: out rows ldo apart, columns [0,OC) = bias (OC) */
int bkg_bias_fill(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, int ldo,
                  const void *bias, int N, int OC);

#ifdef __cplusplus
}
#endif
#endif
