/* Blocked causal attention on the CPU (flash-attention style, Dao et al.
 * 2022): per (batch, head), blocks of BQ queries against blocks of BK keys
 * up to the diagonal, with a running row max and sum (online softmax). The
 * forward keeps out and lse only; backward recomputes each block's
 * probabilities from q, k and lse. Memory: O(T) per head instead of the
 * O(T^2) probabilities of kernels.c's attention.
 *
 * Work split: forward over (b, h, query block); backward over (b, kv head)
 * so the dk/dv rows of a key/value head have one writer, and the order of
 * every sum is fixed: results do not depend on the thread count. */
#include "attn_blocked.h"
#include "kernels_vec.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { BQ = K_FLASH_BLOCK, BK = K_FLASH_BLOCK };

/* The exp of every score as vectorized spans (kernels_vec.h: k_exp, same
 * bits at any vector width); the forward's row sum stays a scalar loop in
 * column order, so the result does not depend on the vector width. */
K_VEC_BEGIN

/* s (n) = exp(s - m) */
K_VEC static void span_exp_shift(float *restrict s, float m, int n)
{
#pragma omp simd
    for (int c = 0; c < n; c++)
        s[c] = k_exp(s[c] - m);
}

/* p (n) = exp(p - l) ; dp (n) = p * (dp - d): the probabilities and dS of
 * one row of a block */
K_VEC static void span_softmax_bwd(float *restrict p, float *restrict dp, float l, float d, int n)
{
#pragma omp simd
    for (int c = 0; c < n; c++) {
        p[c] = k_exp(p[c] - l);
        dp[c] = p[c] * (dp[c] - d);
    }
}

K_VEC_END

int k_flash_fwd(float *out, int ldo, float *lse, const float *q, int ldq, const float *k,
                int ldk, const float *v, int ldv, int B, int T, const struct k_attn_map *m)
{
    const int NH = m->NH, hd = m->hd, nqb = (T + BQ - 1) / BQ;
    const float scale = 1.0f / sqrtf((float)hd);
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        float *S = malloc(sizeof(float) * (BQ * BK + BQ * (size_t)hd + 2 * BQ));
        float *O = S + BQ * BK, *mx = O + BQ * (size_t)hd, *sum = mx + BQ;
        failed |= !S;
#pragma omp for schedule(dynamic)
        for (int u = 0; u < B * NH * nqb; u++) {
            if (!S)
                continue;
            const int b = u / (NH * nqb), h = (u / nqb) % NH, qb = u % nqb;
            const int kvh = k_attn_kv_of(m, h);
            const int i0 = qb * BQ, ni = T - i0 < BQ ? T - i0 : BQ;
            const float *Q = q + ((size_t)b * T + i0) * ldq + (size_t)h * hd;
            memset(O, 0, sizeof(float) * (size_t)ni * hd);
            for (int r = 0; r < ni; r++) {
                mx[r] = -INFINITY;
                sum[r] = 0;
            }
            for (int j0 = 0; j0 <= i0 + ni - 1; j0 += BK) {
                const int nj = i0 + ni - j0 < BK ? i0 + ni - j0 : BK;
                const float *K = k + ((size_t)b * T + j0) * ldk + (size_t)kvh * hd;
                const float *V = v + ((size_t)b * T + j0) * ldv + (size_t)kvh * hd;
                /* S (ni,nj) = scale * Q (ni,hd) @ K (nj,hd)^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, nj, hd, scale, Q, ldq,
                            K, ldk, 0.0f, S, BK);
                for (int r = 0; r < ni; r++) {
                    float *s = S + (size_t)r * BK;
                    const int lim = i0 + r - j0 + 1 < nj ? i0 + r - j0 + 1 : nj; /* causal */
                    float m1 = mx[r];
                    for (int c = 0; c < lim; c++)
                        m1 = s[c] > m1 ? s[c] : m1;
                    const float corr = mx[r] == -INFINITY ? 0.0f : expf(mx[r] - m1);
                    float add = 0;
                    span_exp_shift(s, m1, lim);
                    for (int c = 0; c < lim; c++)
                        add += s[c];
                    for (int c = lim; c < nj; c++)
                        s[c] = 0;
                    sum[r] = sum[r] * corr + add;
                    mx[r] = m1;
                    float *o = O + (size_t)r * hd;
                    for (int c = 0; c < hd; c++)
                        o[c] *= corr;
                }
                /* O (ni,hd) += P (ni,nj) @ V (nj,hd) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, hd, nj, 1.0f, S, BK, V,
                            ldv, 1.0f, O, hd);
            }
            float *L = lse + ((size_t)b * NH + h) * T + i0;
            for (int r = 0; r < ni; r++) {
                float *dst = out + ((size_t)b * T + i0 + r) * ldo + (size_t)h * hd;
                const float inv = 1.0f / sum[r];
                for (int c = 0; c < hd; c++)
                    dst[c] = O[(size_t)r * hd + c] * inv;
                L[r] = mx[r] + logf(sum[r]);
            }
        }
        free(S);
    }
    return failed ? -1 : 0;
}

int k_flash_bwd(float *dq, float *dk, float *dv, const float *dout, int ldo, const float *out,
                const float *lse, const float *q, int ldq, const float *k, int ldk,
                const float *v, int ldv, int B, int T, const struct k_attn_map *m)
{
    const int NH = m->NH, KVl = m->KVl, hd = m->hd;
    const float scale = 1.0f / sqrtf((float)hd);
    int failed = 0;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        memset(dq + (size_t)bt * ldq, 0, sizeof(float) * (size_t)NH * hd);
        memset(dk + (size_t)bt * ldk, 0, sizeof(float) * (size_t)KVl * hd);
        memset(dv + (size_t)bt * ldv, 0, sizeof(float) * (size_t)KVl * hd);
    }
#pragma omp parallel reduction(| : failed)
    {
        /* P, dP (BQ,BK) ; D (T) = rowsum(dout * out) of one head, the
         * softmax backward's row term */
        float *P = malloc(sizeof(float) * (2 * BQ * BK + (size_t)T));
        float *dP = P ? P + BQ * BK : NULL, *Dh = P ? dP + BQ * BK : NULL;
        failed |= !P;
#pragma omp for schedule(dynamic)
        for (int u = 0; u < B * KVl; u++) {
            if (!P)
                continue;
            const int b = u / KVl, kvh = u % KVl;
            for (int h = 0; h < NH; h++) {
                if (k_attn_kv_of(m, h) != kvh)
                    continue;
                for (int t = 0; t < T; t++) {
                    const float *o = out + ((size_t)b * T + t) * ldo + (size_t)h * hd;
                    const float *g = dout + ((size_t)b * T + t) * ldo + (size_t)h * hd;
                    float s = 0;
                    for (int c = 0; c < hd; c++)
                        s += o[c] * g[c];
                    Dh[t] = s;
                }
                const float *Lh = lse + ((size_t)b * NH + h) * T;
                for (int j0 = 0; j0 < T; j0 += BK) {
                    const int nj = T - j0 < BK ? T - j0 : BK;
                    const size_t kr = ((size_t)b * T + j0);
                    const float *K = k + kr * ldk + (size_t)kvh * hd;
                    const float *V = v + kr * ldv + (size_t)kvh * hd;
                    float *dK = dk + kr * ldk + (size_t)kvh * hd;
                    float *dV = dv + kr * ldv + (size_t)kvh * hd;
                    for (int i0 = j0 / BQ * BQ; i0 < T; i0 += BQ) {
                        const int ni = T - i0 < BQ ? T - i0 : BQ;
                        const size_t qr = ((size_t)b * T + i0);
                        const float *Q = q + qr * ldq + (size_t)h * hd;
                        const float *dO = dout + qr * ldo + (size_t)h * hd;
                        float *dQ = dq + qr * ldq + (size_t)h * hd;
                        /* P (ni,nj) = exp(scale Q K^T - lse), causal */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, nj, hd, scale,
                                    Q, ldq, K, ldk, 0.0f, P, BK);
                        /* dP (ni,nj) = dO (ni,hd) @ V (nj,hd)^T */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, nj, hd, 1.0f,
                                    dO, ldo, V, ldv, 0.0f, dP, BK);
                        for (int r = 0; r < ni; r++) {
                            float *p = P + (size_t)r * BK, *dp = dP + (size_t)r * BK;
                            int lim = i0 + r - j0 + 1;
                            lim = lim < 0 ? 0 : lim > nj ? nj : lim;
                            const float l = Lh[i0 + r], dd = Dh[i0 + r];
                            span_softmax_bwd(p, dp, l, dd, lim); /* P and dS */
                            for (int c = lim; c < nj; c++)
                                p[c] = dp[c] = 0;
                        }
                        /* dV (nj,hd) += P^T @ dO ; dK (nj,hd) += scale dS^T @ Q ;
                         * dQ (ni,hd) += scale dS @ K */
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nj, hd, ni, 1.0f, P,
                                    BK, dO, ldo, 1.0f, dV, ldv);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nj, hd, ni, scale,
                                    dP, BK, Q, ldq, 1.0f, dK, ldk);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, hd, nj, scale,
                                    dP, BK, K, ldk, 1.0f, dQ, ldq);
                    }
                }
            }
        }
        free(P);
    }
    return failed ? -1 : 0;
}

void k_gqa_expand(float *dst, const float *qkv, int ld, int N, const struct k_attn_map *m)
{
    const int NH = m->NH, hd = m->hd, Ct = NH * hd, KVc = m->KVl * hd;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *s = qkv + (size_t)n * ld;
        float *d = dst + (size_t)n * 3 * Ct;
        memcpy(d, s, sizeof(float) * Ct);
        for (int h = 0; h < NH; h++) {
            const int kv = k_attn_kv_of(m, h);
            memcpy(d + Ct + (size_t)h * hd, s + Ct + (size_t)kv * hd, sizeof(float) * hd);
            memcpy(d + 2 * Ct + (size_t)h * hd, s + Ct + KVc + (size_t)kv * hd,
                   sizeof(float) * hd);
        }
    }
}

void k_gqa_fold(float *dqkv, int ld, const float *dexp, int N, const struct k_attn_map *m)
{
    const int NH = m->NH, hd = m->hd, Ct = NH * hd, KVc = m->KVl * hd;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *d = dqkv + (size_t)n * ld;
        const float *s = dexp + (size_t)n * 3 * Ct;
        memcpy(d, s, sizeof(float) * Ct);
        memset(d + Ct, 0, sizeof(float) * 2 * KVc);
        for (int h = 0; h < NH; h++) {
            const int kv = k_attn_kv_of(m, h);
            for (int c = 0; c < hd; c++) {
                d[Ct + (size_t)kv * hd + c] += s[Ct + (size_t)h * hd + c];
                d[Ct + KVc + (size_t)kv * hd + c] += s[2 * Ct + (size_t)h * hd + c];
            }
        }
    }
}
