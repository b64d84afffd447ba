/* Public entry points of the generation operations (whale/backend.h): the
 * argument checks once for every backend, then the implementation's, or
 * WHALE_ENOTSUP where it has none (the caller then recomputes). */
#include "backend/backend_internal.h"

#include "whale/error.h"
#include "whale/log.h"

bool whale_backend_has_decode(const whale_backend *b)
{
    return b && b->ops->rope_at && b->ops->attention_decode;
}

int whale_k_rope_at(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x, int nh,
                    int hd, int pos, float theta, const struct whale_rope_scaling *sc)
{
    if (!x || nh < 1 || hd < 2 || hd % 2 || pos < 0) {
        whale_error("whale_k_rope_at: needs a row, heads >= 1, an even head size and a "
                    "position >= 0 (got %d heads, head size %d, position %d)", nh, hd, pos);
        return WHALE_EINVAL;
    }
    if (!b || !b->ops->rope_at)
        return WHALE_ENOTSUP;
    return bk_finish(b, s, b->ops->rope_at(b, bk_native_of(b, s), t, x, nh, hd, pos, theta, sc));
}

int whale_k_attention_decode(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                             const void *q, const void *k, const void *v, float *kc, float *vc,
                             int pos, int S, const struct whale_attn_heads *m)
{
    if (!out || !q || !k || !v || !kc || !vc || !m || pos < 0 || pos >= S || m->NH < 1 ||
        m->KVl < 1 || m->hd < 1 || m->g < 1) {
        whale_error("whale_k_attention_decode: needs output, q, k, v, both caches, heads and "
                    "0 <= position < cache length (position %d, length %d)", pos, S);
        return WHALE_EINVAL;
    }
    if (!b || !b->ops->attention_decode)
        return WHALE_ENOTSUP;
    return bk_finish(b, s, b->ops->attention_decode(b, bk_native_of(b, s), t, out, q, k, v, kc,
                                                    vc, pos, S, m));
}
