/* Causal attention of Llama-style blocks (attn_blocked.c): blocked
 * ("flash") attention with an online softmax that keeps no T x T matrix,
 * and the mapping of query heads onto grouped key/value heads (GQA).
 *
 * Layouts: q (B,T,NH,hd), k and v (B,T,KVl,hd), out (B,T,NH,hd); one row per
 * token, rows ld floats apart (q, k, v are column ranges of one qkv buffer).
 * lse (B,NH,T): per query row max + log(sum exp) of the scaled scores, the
 * only thing kept for backward besides q, k, v and out. */
#ifndef BACKEND_ATTN_BLOCKED_H
#define BACKEND_ATTN_BLOCKED_H

/* Local query head h uses local key/value head (hq0 + h) / g - k0:
 * hq0 = first global query head of this rank, g = Heads / KVHeads,
 * k0 = first global key/value head this rank holds. */
struct k_attn_map {
    int NH, KVl, hd;
    int hq0, g, k0;
};

static inline int k_attn_kv_of(const struct k_attn_map *m, int h)
{
    return (m->hq0 + h) / m->g - m->k0;
}

/* Query and key block edge of the blocked kernels. */
#define K_FLASH_BLOCK 64

/* out, lse = causal softmax(q k^T / sqrt(hd)) v, in blocks of
 * K_FLASH_BLOCK queries x K_FLASH_BLOCK keys. Both return 0, or -1 when a
 * thread's block buffers (a few KiB) could not be allocated. */
int k_flash_fwd(float *out, int ldo, float *lse, const float *q, int ldq, const float *k,
                int ldk, const float *v, int ldv, int B, int T, const struct k_attn_map *m);
/* dq (like q), dk, dv (like k, v): overwritten, from dout (like out); the
 * probabilities are rebuilt block by block from q, k and lse */
int k_flash_bwd(float *dq, float *dk, float *dv, const float *dout, int ldo, const float *out,
                const float *lse, const float *q, int ldq, const float *k, int ldk,
                const float *v, int ldv, int B, int T, const struct k_attn_map *m);

/* Plain attention with GQA goes through the multi-head kernels of
 * kernels.c: expand (N, ld) compact q|k|v -> (N,3,NH,hd) with each query
 * head's key/value copied beside it, and fold the gradient back
 * (N,3,NH,hd) -> compact (N, ld), summing the heads of each group. */
void k_gqa_expand(float *dst, const float *qkv, int ld, int N, const struct k_attn_map *m);
void k_gqa_fold(float *dqkv, int ld, const float *dexp, int N, const struct k_attn_map *m);

#endif
