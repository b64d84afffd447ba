/* The cpu backend's Llama-block operations (whale/backend.h):
 * fp32 calls give exactly the bits of the kernels they wrap (RMSNorm,
 * SwiGLU/GeGLU, rotary, blocked GQA attention, strided column sums,
 * positionless embedding gradient), so routing the engine through them
 * changes no result; bf16 calls equal "widen, same fp32 kernel, round
 * once" and leave the columns between strided rows alone; bad calls (odd
 * head size, a head map naming a KV head that is not there, unknown
 * activation, aliasing) are refused with WHALE_EINVAL. Shapes next to
 * each call. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/attn_blocked.h"
#include "backend/kernels.h"
#include "backend/kernels_llama.h"
#include "whale/backend.h"
#include "whale/dtype.h"
#include "whale/error.h"

#define TESTRAND_SEED 0x9e3779b97f4a7c15ull
#include "testrand.h"

static void same_bits(const float *a, const float *b, size_t n)
{
    assert_memory_equal(a, b, n * sizeof(float));
}

static whale_backend *cpu(void)
{
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = WHALE_DEVICE_CPU;
    whale_backend *b = NULL;
    assert_int_equal(whale_backend_open(&o, &b), 0);
    return b;
}

static void test_rmsnorm_glu_bits(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    enum { N = 37, C = 96, F = 130 };
    /* RMSNorm: out (N,C), rstd (N) from inp (N,C), w (C) */
    float *x = rnd(N * C), *w = rnd(C), *dy = rnd(N * C);
    float *o1 = rnd(N * C), *o2 = dup(o1, N * C), r1[N], r2[N];
    k_rmsnorm_fwd(o1, r1, x, w, N, C, K_RMS_EPS);
    assert_int_equal(whale_k_rmsnorm_fwd(b, NULL, WHALE_FLOAT32, o2, r2, x, w, N, C, K_RMS_EPS), 0);
    same_bits(o1, o2, N * C);
    same_bits(r1, r2, N);
    /* backward: dinp (N,C) +=, dw (C) += */
    float *dx1 = rnd(N * C), *dx2 = dup(dx1, N * C), *dw1 = rnd(C), *dw2 = dup(dw1, C);
    k_rmsnorm_bwd(dx1, dw1, dy, x, w, r1, N, C);
    assert_int_equal(whale_k_rmsnorm_bwd(b, NULL, WHALE_FLOAT32, dx2, dw2, dy, x, w, r2, N, C), 0);
    same_bits(dx1, dx2, N * C);
    same_bits(dw1, dw2, C);
    /* gated MLP over (N,F): both activations, dgate aliasing dh */
    float *g = rnd(N * F), *u = rnd(N * F), *dh = rnd(N * F);
    for (int act = 0; act < 2; act++) {
        float *h1 = malloc(sizeof(float) * N * F), *h2 = malloc(sizeof(float) * N * F);
        k_glu_fwd(act ? K_GLU_GELU : K_GLU_SILU, h1, g, u, (int64_t)N * F);
        assert_int_equal(whale_k_glu_fwd(b, NULL, WHALE_FLOAT32, act ? WHALE_GLU_GELU
                                                                      : WHALE_GLU_SILU,
                                         h2, g, u, (int64_t)N * F), 0);
        same_bits(h1, h2, (size_t)N * F);
        float *d1 = dup(dh, (size_t)N * F), *d2 = dup(dh, (size_t)N * F);
        k_glu_bwd(act ? K_GLU_GELU : K_GLU_SILU, d1, h1, d1, g, u, (int64_t)N * F);
        assert_int_equal(whale_k_glu_bwd(b, NULL, WHALE_FLOAT32, act ? WHALE_GLU_GELU
                                                                      : WHALE_GLU_SILU,
                                         d2, h2, d2, g, u, (int64_t)N * F), 0);
        same_bits(d1, d2, (size_t)N * F);
        same_bits(h1, h2, (size_t)N * F);
        free(h1), free(h2), free(d1), free(d2);
    }
    free(x), free(w), free(dy), free(o1), free(o2), free(dx1), free(dx2), free(dw1), free(dw2);
    free(g), free(u), free(dh);
    whale_backend_close(b);
}

static void test_rope_attention_bits(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    /* q|k|v rows of W = (NH + 2 KVl) hd floats: NH 4 query heads, KVl 2 KV
     * heads (g 2), hd 16, B 2, T 70 (two query blocks, a partial one) */
    enum { B = 2, T = 70, NH = 4, KVl = 2, hd = 16, W = (NH + 2 * KVl) * hd, N = B * T };
    float *qkv1 = rnd((size_t)N * W), *qkv2 = dup(qkv1, (size_t)N * W);
    k_rope(qkv1, W, B, T, NH, hd, 10000.0f, NULL, 1);
    k_rope(qkv1 + NH * hd, W, B, T, KVl, hd, 10000.0f, NULL, 1);
    assert_int_equal(whale_k_rope(b, NULL, WHALE_FLOAT32, qkv2, W, B, T, NH, hd, 10000.0f, NULL, 1), 0);
    assert_int_equal(whale_k_rope(b, NULL, WHALE_FLOAT32, qkv2 + NH * hd, W, B, T, KVl, hd,
                                  10000.0f, NULL, 1), 0);
    same_bits(qkv1, qkv2, (size_t)N * W);

    const struct k_attn_map km = { .NH = NH, .KVl = KVl, .hd = hd, .hq0 = 0, .g = 2, .k0 = 0 };
    const struct whale_attn_heads m = { .NH = NH, .KVl = KVl, .hd = hd, .hq0 = 0, .g = 2, .k0 = 0 };
    const float *q = qkv1, *k = qkv1 + NH * hd, *v = qkv1 + (NH + KVl) * hd;
    /* out (N, NH hd), lse (B,NH,T) */
    float *o1 = calloc((size_t)N * NH * hd, sizeof(float)), *o2 = calloc((size_t)N * NH * hd, sizeof(float));
    float *l1 = malloc(sizeof(float) * B * NH * T), *l2 = malloc(sizeof(float) * B * NH * T);
    assert_int_equal(k_flash_fwd(o1, NH * hd, l1, q, W, k, W, v, W, B, T, &km), 0);
    assert_int_equal(whale_k_attention_gqa_fwd(b, NULL, WHALE_FLOAT32, o2, NH * hd, l2, q, W, k, W,
                                               v, W, B, T, &m), 0);
    same_bits(o1, o2, (size_t)N * NH * hd);
    same_bits(l1, l2, (size_t)B * NH * T);
    /* backward into one dq|dk|dv buffer (N,W) */
    float *dout = rnd((size_t)N * NH * hd);
    float *g1 = calloc((size_t)N * W, sizeof(float)), *g2 = calloc((size_t)N * W, sizeof(float));
    assert_int_equal(k_flash_bwd(g1, g1 + NH * hd, g1 + (NH + KVl) * hd, dout, NH * hd, o1, l1, q,
                                 W, k, W, v, W, B, T, &km), 0);
    assert_int_equal(whale_k_attention_gqa_bwd(b, NULL, WHALE_FLOAT32, g2, g2 + NH * hd,
                                               g2 + (NH + KVl) * hd, dout, NH * hd, o2, l2, q, W,
                                               k, W, v, W, B, T, &m), 0);
    same_bits(g1, g2, (size_t)N * W);

    /* bf16: widen, the same fp32 kernel, round once; rope on a strided
     * 16-bit buffer leaves the KV columns between the query rows alone */
    uint16_t *h16 = malloc(sizeof(uint16_t) * N * W), *keep = malloc(sizeof(uint16_t) * N * W);
    float *wide = malloc(sizeof(float) * N * W);
    whale_f32_to_bf16(h16, qkv2, (size_t)N * W);
    memcpy(keep, h16, sizeof(uint16_t) * N * W);
    whale_bf16_to_f32(wide, h16, (size_t)N * W);
    k_rope(wide, W, B, T, NH, hd, 500000.0f, NULL, -1);
    assert_int_equal(whale_k_rope(b, NULL, WHALE_BFLOAT16, h16, W, B, T, NH, hd, 500000.0f, NULL, -1), 0);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < W; c++) {
            size_t i = (size_t)r * W + c;
            if (c < NH * hd)
                assert_int_equal(h16[i], whale_float_to_bf16(wide[i]));
            else
                assert_int_equal(h16[i], keep[i]);
        }
    free(h16), free(keep), free(wide);
    free(qkv1), free(qkv2), free(o1), free(o2), free(l1), free(l2), free(dout), free(g1), free(g2);
    whale_backend_close(b);
}

static void test_colsum_embed_rows(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    /* db (OC) += column sums of x (N rows ld apart, OC columns) */
    enum { N = 300, ld = 50, OC = 33, V = 11, C = 8, v0 = 5 };
    float *x = rnd((size_t)N * ld), *db = rnd(OC), ref[OC];
    for (int c = 0; c < OC; c++) {
        float a = 0;
        for (int n = 0; n < N; n++)
            a += x[(size_t)n * ld + c];
        ref[c] = db[c] + a;
    }
    assert_int_equal(whale_k_colsum_acc(b, NULL, WHALE_FLOAT32, db, x, ld, N, OC), 0);
    same_bits(ref, db, OC);
    /* dwte (V,C) += rows of dout (N,C) of the tokens in [v0, v0+V) */
    int32_t tok[N];
    for (int n = 0; n < N; n++)
        tok[n] = (n * 7) % 23;
    float *d = rnd((size_t)N * C), *e1 = rnd((size_t)V * C), *e2 = dup(e1, (size_t)V * C);
    k_embed_bwd_rows(e1, d, tok, v0, V, N, C);
    assert_int_equal(whale_k_embed_bwd_rows(b, NULL, WHALE_FLOAT32, e2, d, tok, v0, V, N, C), 0);
    same_bits(e1, e2, (size_t)V * C);
    free(x), free(db), free(d), free(e1), free(e2);
    whale_backend_close(b);
}

/* whale_k_bias_fill: out rows ldo apart, columns [0,OC) = bias; the columns
 * between the rows keep their bytes (fp32 and bf16), and the engine's strided
 * linear (bias rows, then whale_gemm with beta 1) gives the bits of the
 * memcpy-and-GEMM it replaced. */
static void test_bias_fill(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    enum { N = 37, OC = 20, ld = 29, IC = 24 };
    float *o = rnd((size_t)N * ld), *ref = dup(o, (size_t)N * ld), *bias = rnd(OC);
    for (int n = 0; n < N; n++)
        memcpy(ref + (size_t)n * ld, bias, sizeof(float) * OC);
    assert_int_equal(whale_k_bias_fill(b, NULL, WHALE_FLOAT32, o, ld, bias, N, OC), 0);
    same_bits(ref, o, (size_t)N * ld);
    /* bf16: the same bytes, 2 per value */
    uint16_t o16[N * ld], b16[OC], r16[N * ld];
    for (int i = 0; i < N * ld; i++)
        o16[i] = r16[i] = (uint16_t)(i * 2654435761u >> 16);
    for (int c = 0; c < OC; c++)
        b16[c] = whale_float_to_bf16(bias[c]);
    for (int n = 0; n < N; n++)
        memcpy(r16 + n * ld, b16, sizeof b16);
    assert_int_equal(whale_k_bias_fill(b, NULL, WHALE_BFLOAT16, o16, ld, b16, N, OC), 0);
    assert_memory_equal(r16, o16, sizeof o16);
    /* strided linear: out (N,OC) rows ld apart = x (N,IC) @ w (OC,IC)^T + bias */
    float *x = rnd((size_t)N * IC), *w = rnd((size_t)OC * IC), *o2 = dup(o, (size_t)N * ld);
    for (int n = 0; n < N; n++)
        memcpy(o + (size_t)n * ld, bias, sizeof(float) * OC);
    k_gemm_mm(WHALE_FLOAT32, 0, 1, N, OC, IC, 1.0f, x, IC, w, IC, 1.0f, o, ld);
    assert_int_equal(whale_k_bias_fill(b, NULL, WHALE_FLOAT32, o2, ld, bias, N, OC), 0);
    assert_int_equal(whale_gemm(b, NULL, false, true, N, OC, IC, 1.0f, x, IC, w, IC,
                                WHALE_FLOAT32, 1.0f, o2, ld, WHALE_FLOAT32), 0);
    same_bits(o, o2, (size_t)N * ld);
    /* a row stride narrower than the columns */
    assert_int_equal(whale_k_bias_fill(b, NULL, WHALE_FLOAT32, o, 4, bias, N, OC), WHALE_EINVAL);
    free(o), free(ref), free(bias), free(x), free(w), free(o2);
    whale_backend_close(b);
}

/* whale_backend_host_access: the cpu backend completes every call, so it
 * is never stream-ordered and a host-access point is a no-op, whatever the
 * options say */
static void test_host_access_cpu(void **st)
{
    (void)st;
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    assert_false(o.stream_ordered);
    o.device = WHALE_DEVICE_CPU;
    o.host_coherent = o.stream_ordered = true;
    whale_backend *b = NULL;
    assert_int_equal(whale_backend_open(&o, &b), 0);
    assert_false(whale_backend_stream_ordered(b));
    assert_int_equal(whale_backend_host_access(b), 0);
    assert_false(whale_backend_stream_ordered(NULL));
    whale_backend_close(b);
}

static void test_refusals(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    float x[64] = { 0 }, l[8];
    /* odd head size, bad sign */
    assert_int_equal(whale_k_rope(b, NULL, WHALE_FLOAT32, x, 3, 1, 1, 1, 3, 1e4f, NULL, 1), WHALE_EINVAL);
    assert_int_equal(whale_k_rope(b, NULL, WHALE_FLOAT32, x, 4, 1, 1, 1, 4, 1e4f, NULL, 2), WHALE_EINVAL);
    /* query head 3 of g 2 maps to KV head 1, but only 1 KV head is local */
    struct whale_attn_heads m = { .NH = 4, .KVl = 1, .hd = 4, .hq0 = 0, .g = 2, .k0 = 0 };
    assert_int_equal(whale_k_attention_gqa_fwd(b, NULL, WHALE_FLOAT32, x, 16, l, x, 16, x, 4, x,
                                               4, 1, 2, &m), WHALE_EINVAL);
    /* strides narrower than the heads */
    m.KVl = 2;
    assert_int_equal(whale_k_attention_gqa_fwd(b, NULL, WHALE_FLOAT32, x, 16, l, x, 8, x, 8, x,
                                               8, 1, 2, &m), WHALE_EINVAL);
    assert_int_equal(whale_k_glu_fwd(b, NULL, WHALE_FLOAT32, (enum whale_glu_act)7, x, x, x, 4),
                     WHALE_EINVAL);
    assert_int_equal(whale_k_glu_bwd(b, NULL, WHALE_FLOAT32, WHALE_GLU_SILU, x, x, x, x, x, 4),
                     WHALE_EINVAL);
    assert_int_equal(whale_k_colsum_acc(b, NULL, WHALE_FLOAT32, l, x, 2, 2, 4), WHALE_EINVAL);
    assert_int_equal(whale_k_rmsnorm_fwd(b, NULL, WHALE_INT32, x, l, x, x, 2, 4, 1e-5f), WHALE_ENOTSUP);
    whale_backend_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_glu_bits),
        cmocka_unit_test(test_rope_attention_bits),
        cmocka_unit_test(test_colsum_embed_rows),
        cmocka_unit_test(test_bias_fill),
        cmocka_unit_test(test_host_access_cpu),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
