/* The cpu backend's Llama-block operations (cpu_llama.c), wired into the
 * operations table by cpu.c. Shapes and semantics: whale/backend.h. */
#ifndef BACKEND_CPU_LLAMA_H
#define BACKEND_CPU_LLAMA_H

#include "backend/backend_internal.h"

int bkc_rmsnorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, float *rstd,
                    const void *inp, const void *w, int N, int C, float eps);
int bkc_rmsnorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp, float *dw,
                    const void *dout, const void *inp, const void *w, const float *rstd, int N,
                    int C);
int bkc_glu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                void *h, const void *gate, const void *up, int64_t n);
int bkc_glu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, enum whale_glu_act act,
                void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                int64_t n);
int bkc_rope(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int ld, int B, int T,
             int nh, int hd, float theta, const struct whale_rope_scaling *sc, int sign);
int bkc_attention_gqa_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, int ldo,
                          float *lse, const void *q, int ldq, const void *k, int ldk,
                          const void *v, int ldv, int B, int T, const struct whale_attn_heads *m);
int bkc_attention_gqa_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dq, void *dk,
                          void *dv, const void *dout, int ldo, const void *out, const float *lse,
                          const void *q, int ldq, const void *k, int ldk, const void *v, int ldv,
                          int B, int T, const struct whale_attn_heads *m);
int bkc_colsum_acc(whale_backend *b, bk_stream s, enum whale_dtype t, float *db, const void *x,
                   int ld, int N, int OC);
int bkc_embed_bwd_rows(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte,
                       const void *dout, const int32_t *tok, int v0, int V, int N, int C);
int bkc_gqa_expand(whale_backend *b, bk_stream s, float *dst, const float *qkv, int ld, int N,
                   const struct whale_attn_heads *m);
int bkc_gqa_fold(whale_backend *b, bk_stream s, float *dqkv, int ld, const float *dexp, int N,
                 const struct whale_attn_heads *m);
int bkc_bias_fill(whale_backend *b, bk_stream s, enum whale_dtype t, void *out, int ldo,
                  const void *bias, int N, int OC);

/* cpu_decode.c: generation with a KV cache */
int bkc_rope_at(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int nh, int hd,
                int pos, float theta, const struct whale_rope_scaling *sc);
int bkc_attention_decode(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                         const void *q, const void *k, const void *v, float *kc, float *vc,
                         int pos, int S, const struct whale_attn_heads *m);

#endif
