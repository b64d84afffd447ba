/* fp32 CPU kernels of Llama-style blocks (kernels_llama.c): RMSNorm, gated
 * MLP activations (SwiGLU / GeGLU) and rotary position embeddings.
 * Row-major; N = B*T rows. Parameter gradients accumulate (+=), input
 * gradients follow the comment of each function. */
#ifndef BACKEND_KERNELS_LLAMA_H
#define BACKEND_KERNELS_LLAMA_H

#include <stdint.h>

#include "whale/rope.h"

/* RMSNorm epsilon when a description names none (Llama's rms_norm_eps = 1e-5). */
#define K_RMS_EPS 1e-5f

/* out (N,C) = inp * rstd * w ; rstd (N) = 1/sqrt(mean(inp^2) + eps) saved */
void k_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                   float eps);
/* dinp (N,C) += ... ; dw (C) += sum_rows dout * inp * rstd */
void k_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                   const float *rstd, int N, int C);

/* Gated MLP activation: h (n) = act(gate) * up, act = SiLU (SwiGLU) or
 * tanh-GELU (GeGLU). gate, up, h: (N,F) flattened to n. */
enum k_glu { K_GLU_SILU = 0, K_GLU_GELU = 1 };
void k_glu_fwd(enum k_glu act, float *h, const float *gate, const float *up, int64_t n);
/* dgate (n) = dh * up * act'(gate) ; dup (n) = dh * act(gate) (overwritten;
 * dgate may alias dh) */
void k_glu_bwd(enum k_glu act, float *dgate, float *dup, const float *dh, const float *gate,
               const float *up, int64_t n);

/* Rotary position embedding, in place, on x (B,T,nh,hd) whose rows (one per
 * token) are ld floats apart: each head's pair (i, i + hd/2) at position t
 * turns by t * theta^(-2i/hd) (the rotate-half layout of Llama/GPT-NeoX),
 * that frequency rescaled by `sc` (whale/rope.h; NULL: unscaled).
 * sign = +1 forward; sign = -1 turns back, which is the backward of the
 * forward (a rotation's transpose is its inverse). hd even. */
void k_rope(float *x, int ld, int B, int T, int nh, int hd, float theta,
            const struct whale_rope_scaling *sc, int sign);

/* Embedding gradient without positions (rotary): dwte (V,C) += rows of
 * dout (N,C) for the tokens (N) in [v0, v0+V) */
void k_embed_bwd_rows(float *dwte, const float *dout, const int32_t *tok, int v0, int V, int N,
                      int C);

#endif
