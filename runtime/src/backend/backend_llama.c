/* Public entry points of the Llama-block kernels (whale/backend.h):
 * the same checks as backend.c's (dtype, sizes, NULLs, head layout) once for
 * both backends, then the implementation's operation. */
#include "backend/backend_internal.h"

#include "whale/error.h"
#include "whale/log.h"

#define CHECK(fn, t, a, b_, c)                                                               \
    do {                                                                                     \
        int rc_ = bk_check(fn, t, a, b_, c);                                                 \
        if (rc_)                                                                             \
            return rc_;                                                                      \
    } while (0)

#define RUN(b, s, call) bk_finish(b, s, b->ops->call)
#define NS(b, s) bk_native_of(b, s)

static int need(const char *fn, const char *what, const void *p)
{
    if (p)
        return 0;
    whale_error("%s: NULL %s", fn, what);
    return WHALE_EINVAL;
}

int whale_k_rmsnorm_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                        float *rstd, const void *inp, const void *w, int N, int C, float eps)
{
    CHECK("whale_k_rmsnorm_fwd", t, N, C, 0);
    if (!(eps > 0 && eps < 1)) {
        whale_error("whale_k_rmsnorm_fwd: epsilon %g is not in (0, 1)", (double)eps);
        return WHALE_EINVAL;
    }
    if (!N || !C)
        return 0;
    int rc;
    if ((rc = need("whale_k_rmsnorm_fwd", "output", out)) ||
        (rc = need("whale_k_rmsnorm_fwd", "rstd", rstd)) ||
        (rc = need("whale_k_rmsnorm_fwd", "input", inp)) ||
        (rc = need("whale_k_rmsnorm_fwd", "weight", w)))
        return rc;
    return RUN(b, s, rmsnorm_fwd(b, NS(b, s), t, out, rstd, inp, w, N, C, eps));
}

int whale_k_rmsnorm_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dinp,
                        float *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, int N, int C)
{
    CHECK("whale_k_rmsnorm_bwd", t, N, C, 0);
    if (!N || !C)
        return 0;
    int rc;
    if ((rc = need("whale_k_rmsnorm_bwd", "input gradient", dinp)) ||
        (rc = need("whale_k_rmsnorm_bwd", "weight gradient", dw)) ||
        (rc = need("whale_k_rmsnorm_bwd", "output gradient", dout)) ||
        (rc = need("whale_k_rmsnorm_bwd", "rstd", rstd)))
        return rc;
    return RUN(b, s, rmsnorm_bwd(b, NS(b, s), t, dinp, dw, dout, inp, w, rstd, N, C));
}

static int check_act(const char *fn, enum whale_glu_act act)
{
    if (act == WHALE_GLU_SILU || act == WHALE_GLU_GELU)
        return 0;
    whale_error("%s: activation %d is not one of SiLU (0), GELU (1)", fn, (int)act);
    return WHALE_EINVAL;
}

int whale_k_glu_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t,
                    enum whale_glu_act act, void *h, const void *gate, const void *up, int64_t n)
{
    CHECK("whale_k_glu_fwd", t, n, 0, 0);
    int rc = check_act("whale_k_glu_fwd", act);
    if (rc || !n)
        return rc;
    return RUN(b, s, glu_fwd(b, NS(b, s), t, act, h, gate, up, n));
}

int whale_k_glu_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t,
                    enum whale_glu_act act, void *dgate, void *dup, const void *dh,
                    const void *gate, const void *up, int64_t n)
{
    CHECK("whale_k_glu_bwd", t, n, 0, 0);
    int rc = check_act("whale_k_glu_bwd", act);
    if (rc || !n)
        return rc;
    if (dup == dh || dup == dgate) {
        whale_error("whale_k_glu_bwd: dup must not alias dh or dgate (only dgate may alias dh)");
        return WHALE_EINVAL;
    }
    return RUN(b, s, glu_bwd(b, NS(b, s), t, act, dgate, dup, dh, gate, up, n));
}

int whale_k_rope(whale_backend *b, whale_stream *s, enum whale_dtype t, void *x, int ld, int B,
                 int T, int nh, int hd, float theta, const struct whale_rope_scaling *sc,
                 int sign)
{
    CHECK("whale_k_rope", t, B, T, (int64_t)nh * hd);
    if (hd <= 0 || hd % 2 || ld < nh * hd || (sign != 1 && sign != -1) || !(theta > 0)) {
        whale_error("whale_k_rope: head size %d must be even and > 0, row stride %d >= %d "
                    "heads x %d, sign %d of +1/-1, theta %g > 0", hd, ld, nh, hd, sign,
                    (double)theta);
        return WHALE_EINVAL;
    }
    if (sc && sc->kind != WHALE_ROPE_NONE &&
        (!(sc->factor > 0) ||
         (sc->kind == WHALE_ROPE_LLAMA3 &&
          !(sc->low_freq > 0 && sc->high_freq > sc->low_freq && sc->orig_seq > 0)) ||
         (sc->kind != WHALE_ROPE_LINEAR && sc->kind != WHALE_ROPE_LLAMA3))) {
        whale_error("whale_k_rope: rope scaling kind %d needs factor %g > 0 (llama3: "
                    "0 < low_freq %g < high_freq %g, original length %d > 0)", (int)sc->kind,
                    (double)sc->factor, (double)sc->low_freq, (double)sc->high_freq,
                    sc->orig_seq);
        return WHALE_EINVAL;
    }
    if (!B || !T || !nh)
        return 0;
    return RUN(b, s, rope(b, NS(b, s), t, x, ld, B, T, nh, hd, theta, sc, sign));
}

/* The head map of GQA must name heads that exist: every local query head
 * reads a local KV head. */
static int check_heads(const char *fn, const struct whale_attn_heads *m, int ldo, int ldq,
                       int ldk, int ldv)
{
    if (!m || m->NH <= 0 || m->KVl <= 0 || m->hd <= 0 || m->g <= 0 || m->hq0 < 0 || m->k0 < 0) {
        whale_error("%s: head map missing or not positive (NH, KVl, hd, g > 0; hq0, k0 >= 0)",
                    fn);
        return WHALE_EINVAL;
    }
    for (int h = 0; h < m->NH; h++) {
        int kv = (m->hq0 + h) / m->g - m->k0;
        if (kv < 0 || kv >= m->KVl) {
            whale_error("%s: query head %d (global %d) maps to KV head %d, outside the %d "
                        "local KV heads (g %d, k0 %d)", fn, h, m->hq0 + h, kv, m->KVl, m->g,
                        m->k0);
            return WHALE_EINVAL;
        }
    }
    int qw = m->NH * m->hd, kw = m->KVl * m->hd;
    if (ldo < qw || ldq < qw || ldk < kw || ldv < kw) {
        whale_error("%s: row strides too small (out %d, q %d need >= %d; k %d, v %d need >= %d)",
                    fn, ldo, ldq, qw, ldk, ldv, kw);
        return WHALE_EINVAL;
    }
    return 0;
}

int whale_k_attention_gqa_fwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out,
                              int ldo, float *lse, const void *q, int ldq, const void *k,
                              int ldk, const void *v, int ldv, int B, int T,
                              const struct whale_attn_heads *m)
{
    CHECK("whale_k_attention_gqa_fwd", t, B, T, 0);
    int rc = check_heads("whale_k_attention_gqa_fwd", m, ldo, ldq, ldk, ldv);
    if (rc || !B || !T)
        return rc;
    if ((rc = need("whale_k_attention_gqa_fwd", "output", out)) ||
        (rc = need("whale_k_attention_gqa_fwd", "lse", lse)))
        return rc;
    return RUN(b, s, attention_gqa_fwd(b, NS(b, s), t, out, ldo, lse, q, ldq, k, ldk, v, ldv, B,
                                       T, m));
}

int whale_k_attention_gqa_bwd(whale_backend *b, whale_stream *s, enum whale_dtype t, void *dq,
                              void *dk, void *dv, const void *dout, int ldo, const void *out,
                              const float *lse, const void *q, int ldq, const void *k, int ldk,
                              const void *v, int ldv, int B, int T,
                              const struct whale_attn_heads *m)
{
    CHECK("whale_k_attention_gqa_bwd", t, B, T, 0);
    int rc = check_heads("whale_k_attention_gqa_bwd", m, ldo, ldq, ldk, ldv);
    if (rc || !B || !T)
        return rc;
    if ((rc = need("whale_k_attention_gqa_bwd", "forward output", out)) ||
        (rc = need("whale_k_attention_gqa_bwd", "lse", lse)))
        return rc;
    return RUN(b, s, attention_gqa_bwd(b, NS(b, s), t, dq, dk, dv, dout, ldo, out, lse, q, ldq,
                                       k, ldk, v, ldv, B, T, m));
}

int whale_k_colsum_acc(whale_backend *b, whale_stream *s, enum whale_dtype t, float *db,
                       const void *x, int ld, int N, int OC)
{
    CHECK("whale_k_colsum_acc", t, N, OC, 0);
    if (ld < OC) {
        whale_error("whale_k_colsum_acc: row stride %d < %d columns", ld, OC);
        return WHALE_EINVAL;
    }
    if (!N || !OC)
        return 0;
    return RUN(b, s, colsum_acc(b, NS(b, s), t, db, x, ld, N, OC));
}

int whale_k_embed_bwd_rows(whale_backend *b, whale_stream *s, enum whale_dtype t, float *dwte,
                           const void *dout, const int32_t *tok, int v0, int V, int N, int C)
{
    CHECK("whale_k_embed_bwd_rows", t, N, C, V);
    if (!N || !C || !V)
        return 0;
    return RUN(b, s, embed_bwd_rows(b, NS(b, s), t, dwte, dout, tok, v0, V, N, C));
}

int whale_k_bias_fill(whale_backend *b, whale_stream *s, enum whale_dtype t, void *out, int ldo,
                      const void *bias, int N, int OC)
{
    CHECK("whale_k_bias_fill", t, N, OC, 0);
    if (ldo < OC) {
        whale_error("whale_k_bias_fill: row stride %d < %d columns", ldo, OC);
        return WHALE_EINVAL;
    }
    if (!N || !OC)
        return 0;
    int rc;
    if ((rc = need("whale_k_bias_fill", "output", out)) ||
        (rc = need("whale_k_bias_fill", "bias", bias)))
        return rc;
    return RUN(b, s, bias_fill(b, NS(b, s), t, out, ldo, bias, N, OC));
}

/* ---- host-access points (stream-ordered execution) ---------------------------- */

bool whale_backend_stream_ordered(const whale_backend *b)
{
    return b && b->host_addressable && !b->sync_calls && b->ops->host_access;
}

int whale_backend_host_access(whale_backend *b)
{
    if (!whale_backend_stream_ordered(b))
        return 0; /* cpu, or every call has completed already */
    return b->ops->host_access(b);
}
