/* The vectorized CPU kernels (GELU, softmax rows, cross-entropy: spans
 * compiled for AVX-512 / AVX2 / SSE2 in backend/kernels.c; SwiGLU and GeGLU
 * in backend/kernels_llama.c) give the same
 * bits as the scalar loops they replaced, written out again here as the
 * reference, for 1 and 2 threads and on values that hit k_exp's clamps.
 * The bias gradient's column sums (k_linear_bwd's db, walked in contiguous
 * column ranges per thread) keep the row order of the scalar loop.
 * k_flush_denormals reaches the caller and every thread of the pool.
 * The MLP's fused calls (GELU applied in the product's parallel region)
 * give the bits of the separate linear and GELU calls, and k_linear_bwd's
 * one parallel region those of its three separate products. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "backend/kernels_llama.h"
#define TESTRAND_SEED 0x5eed5eed12345ULL
#include "testrand.h"

/* The scalar reference: kernels.c's k_exp and loops before vectorization. */
static float ref_exp(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shift = 12582912.0f;
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720))))));
    union { float f; int32_t i; } u = { .f = p };
    u.i += (int32_t)n * (1 << 23);
    return u.f;
}

#define K 0.7978845608028654f

static void ref_gelu_fwd(float *out, const float *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = K * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + ref_exp(-2.0f * u));
    }
}

static void ref_gelu_bwd(float *dinp, const float *inp, const float *dout, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = K * (x + 0.044715f * x * x * x);
        float s = 1.0f / (1.0f + ref_exp(-2.0f * u));
        float du = K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
    }
}

static void ref_xent_fwd(float *probs, float *losses, const int32_t *targets, int N, int V)
{
    for (int n = 0; n < N; n++) {
        float *r = probs + (size_t)n * V;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++)
            mx = r[i] > mx ? r[i] : mx;
        float sum = 0;
        for (int i = 0; i < V; i++) {
            float e = ref_exp(r[i] - mx);
            r[i] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++)
            r[i] *= inv;
        losses[n] = -logf(r[targets[n]] > 1e-30f ? r[targets[n]] : 1e-30f);
    }
}

/* n values spread over [-60, 60] plus ones past the clamps, zeros and an
 * odd length (a vector tail) */
static float *inputs(int64_t n)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = 60.0f * frand();
    const float edge[] = { 0.0f, -0.0f, 100.0f, -100.0f, 43.6f, -44.0f, 1e-20f, -1e-20f };
    for (size_t k = 0; k < sizeof edge / sizeof edge[0] && (int64_t)k < n; k++)
        x[k * 7 % n] = edge[k];
    return x;
}

static void test_gelu_bits(void **state)
{
    (void)state;
    const int64_t n = 100003;
    float *x = inputs(n), *dy = inputs(n);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    assert_non_null(a);
    assert_non_null(b);
    for (int th = 1; th <= 2; th++) {
        k_set_threads(th);
        k_gelu_fwd(a, x, n);
        ref_gelu_fwd(b, x, n);
        assert_memory_equal(a, b, sizeof(float) * n);
        k_gelu_bwd(a, x, dy, n);
        ref_gelu_bwd(b, x, dy, n);
        assert_memory_equal(a, b, sizeof(float) * n);
    }
    free(x);
    free(dy);
    free(a);
    free(b);
}

/* act(x), act'(x) of the gated MLP: SiLU, or tanh-GELU */
static void ref_glu_act(enum k_glu act, float x, float *a, float *da)
{
    if (act == K_GLU_SILU) {
        float s = 1.0f / (1.0f + ref_exp(-x));
        *a = x * s;
        *da = s * (1.0f + x * (1.0f - s));
    } else {
        float u = K * (x + 0.044715f * x * x * x);
        float s = 1.0f / (1.0f + ref_exp(-2.0f * u));
        float du = K * (1.0f + 3.0f * 0.044715f * x * x);
        *a = x * s;
        *da = s + 2.0f * x * s * (1.0f - s) * du;
    }
}

static void test_glu_bits(void **state)
{
    (void)state;
    const int64_t n = 100003;
    float *g = inputs(n), *up = inputs(n), *dh = inputs(n);
    float *h = malloc(sizeof(float) * n), *dg = malloc(sizeof(float) * n);
    float *du = malloc(sizeof(float) * n), *rh = malloc(sizeof(float) * n);
    float *rdg = malloc(sizeof(float) * n), *rdu = malloc(sizeof(float) * n);
    assert_true(h && dg && du && rh && rdg && rdu);
    for (int act = K_GLU_SILU; act <= K_GLU_GELU; act++)
        for (int th = 1; th <= 2; th++) {
            k_set_threads(th);
            for (int64_t i = 0; i < n; i++) {
                float a, da;
                ref_glu_act((enum k_glu)act, g[i], &a, &da);
                rh[i] = a * up[i];
                rdu[i] = dh[i] * a;
                rdg[i] = dh[i] * up[i] * da;
            }
            k_glu_fwd((enum k_glu)act, h, g, up, n);
            assert_memory_equal(h, rh, sizeof(float) * n);
            k_glu_bwd((enum k_glu)act, dg, du, dh, g, up, n);
            assert_memory_equal(dg, rdg, sizeof(float) * n);
            assert_memory_equal(du, rdu, sizeof(float) * n);
            /* dgate may alias dh */
            memcpy(dg, dh, sizeof(float) * n);
            k_glu_bwd((enum k_glu)act, dg, du, dg, g, up, n);
            assert_memory_equal(dg, rdg, sizeof(float) * n);
        }
    free(g);
    free(up);
    free(dh);
    free(h);
    free(dg);
    free(du);
    free(rh);
    free(rdg);
    free(rdu);
}

static void test_xent_bits(void **state)
{
    (void)state;
    const int N = 5, V = 50257; /* GPT-2's vocabulary: an odd row length */
    float *lg = inputs((int64_t)N * V);
    float *a = malloc(sizeof(float) * N * V), *b = malloc(sizeof(float) * N * V);
    float la[5], lb[5];
    int32_t tg[5] = { 0, 7, V - 1, 12345, 3 * 7 };
    assert_non_null(a);
    assert_non_null(b);
    for (int th = 1; th <= 2; th++) {
        k_set_threads(th);
        memcpy(a, lg, sizeof(float) * N * V);
        memcpy(b, lg, sizeof(float) * N * V);
        k_softmax_xent_fwd(a, la, tg, N, V);
        ref_xent_fwd(b, lb, tg, N, V);
        assert_memory_equal(a, b, sizeof(float) * N * V);
        assert_memory_equal(la, lb, sizeof la);
    }
    free(lg);
    free(a);
    free(b);
}

/* db (OC) += column sums of dout (N,OC): each column from row 0 in order */
static void ref_colsum(float *db, const float *dout, int N, int OC)
{
    for (int c = 0; c < OC; c++) {
        float acc = 0.0f;
        for (int n = 0; n < N; n++)
            acc += dout[(size_t)n * OC + c];
        db[c] += acc;
    }
}

static void test_colsum_bits(void **state)
{
    (void)state;
    /* a multiple of the sub-block, an odd width, GPT-2's vocabulary (many
     * sub-blocks, a ragged last one) */
    const int widths[] = { 3072, 1037, 50257 }, N = 37;
    for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
        const int OC = widths[k];
        float *dy = inputs((int64_t)N * OC), *a = inputs(OC);
        float *b = malloc(sizeof(float) * OC);
        assert_non_null(b);
        memcpy(b, a, sizeof(float) * OC);
        ref_colsum(b, dy, N, OC);
        float *start = malloc(sizeof(float) * OC);
        assert_non_null(start);
        memcpy(start, a, sizeof(float) * OC);
        for (int th = 1; th <= 3; th++) {
            k_set_threads(th);
            memcpy(a, start, sizeof(float) * OC);
            k_linear_bwd(WHALE_FLOAT32, NULL, NULL, a, dy, NULL, NULL, N, 1, OC, 0);
            assert_memory_equal(a, b, sizeof(float) * OC);
        }
        free(dy);
        free(a);
        free(b);
        free(start);
    }
}

/* k_linear_gelu_fwd == k_linear_fwd then k_gelu_fwd, and k_linear_bwd_gelu
 * == k_linear_bwd then k_gelu_bwd, bit for bit, at 1-3 threads: products
 * split by rows (ragged last block), by columns (GELU on row pieces) and
 * small enough to run unsplit; with and without a bias. */
static void test_linear_gelu_bits(void **state)
{
    (void)state;
    const int shapes[][3] = { { 301, 129, 67 }, { 67, 129, 301 }, { 5, 7, 9 }, { 64, 48, 1040 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int N = shapes[k][0], IC = shapes[k][1], OC = shapes[k][2];
        const size_t no = (size_t)N * OC, ni = (size_t)N * IC, nw = (size_t)OC * IC;
        float *x = inputs((int64_t)ni), *w = inputs((int64_t)nw), *b = inputs(OC);
        float *dy = inputs((int64_t)no), *pre = inputs((int64_t)ni);
        for (size_t i = 0; i < nw; i++)
            w[i] *= 1e-3f; /* keep the products in GELU's interesting range */
        float *o1 = malloc(sizeof(float) * no), *g1 = malloc(sizeof(float) * no);
        float *o2 = malloc(sizeof(float) * no), *g2 = malloc(sizeof(float) * no);
        float *d1 = malloc(sizeof(float) * ni), *d2 = malloc(sizeof(float) * ni);
        float *dw1 = calloc(nw, sizeof(float)), *dw2 = calloc(nw, sizeof(float));
        float *db1 = calloc(OC, sizeof(float)), *db2 = calloc(OC, sizeof(float));
        assert_true(o1 && g1 && o2 && g2 && d1 && d2 && dw1 && dw2 && db1 && db2);
        for (int th = 1; th <= 3; th++) {
            k_set_threads(th);
            for (int withb = 0; withb <= 1; withb++) {
                const float *bb = withb ? b : NULL;
                k_linear_fwd(WHALE_FLOAT32, o1, x, w, bb, N, IC, OC);
                k_gelu_fwd(g1, o1, (int64_t)no);
                k_linear_gelu_fwd(WHALE_FLOAT32, o2, g2, x, w, bb, N, IC, OC);
                assert_memory_equal(o1, o2, sizeof(float) * no);
                assert_memory_equal(g1, g2, sizeof(float) * no);
            }
            k_linear_bwd(WHALE_FLOAT32, d1, dw1, db1, dy, x, w, N, IC, OC, 0);
            k_gelu_bwd(d1, pre, d1, (int64_t)ni);
            k_linear_bwd_gelu(WHALE_FLOAT32, d2, pre, dw2, db2, dy, x, w, N, IC, OC, 0);
            assert_memory_equal(d1, d2, sizeof(float) * ni);
            assert_memory_equal(dw1, dw2, sizeof(float) * nw);
            assert_memory_equal(db1, db2, sizeof(float) * OC);
        }
        free(x), free(w), free(b), free(dy), free(pre);
        free(o1), free(g1), free(o2), free(g2), free(d1), free(d2);
        free(dw1), free(dw2), free(db1), free(db2);
    }
}

/* k_linear_bwd runs the input gradient, the weight gradient and the bias
 * gradient in one parallel region: the bits of the three separate calls
 * (k_gemm twice, the column sums in row order), at 1-3 threads, for
 * products split by rows, by columns and small enough to run unsplit, with
 * and without accumulation into dinp, and with each output left out. */
static void test_linear_bwd_one_region_bits(void **state)
{
    (void)state;
    const int shapes[][3] = { { 301, 129, 67 }, { 67, 129, 301 }, { 5, 7, 9 }, { 64, 48, 1040 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int N = shapes[k][0], IC = shapes[k][1], OC = shapes[k][2];
        const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC;
        float *x = inputs((int64_t)ni), *w = inputs((int64_t)nw), *dy = inputs((int64_t)N * OC);
        float *d0 = inputs((int64_t)ni), *dw0 = inputs((int64_t)nw), *db0 = inputs(OC);
        float *d1 = malloc(sizeof(float) * ni), *d2 = malloc(sizeof(float) * ni);
        float *dw1 = malloc(sizeof(float) * nw), *dw2 = malloc(sizeof(float) * nw);
        float *db1 = malloc(sizeof(float) * OC), *db2 = malloc(sizeof(float) * OC);
        assert_true(d1 && d2 && dw1 && dw2 && db1 && db2);
        for (int th = 1; th <= 3; th++) {
            k_set_threads(th);
            for (int v = 0; v < 8; v++) { /* bit 0: acc, bit 1: no dinp, bit 2: no dw/db */
                int acc = v & 1, nod = v & 2, now = v & 4;
                memcpy(d1, d0, sizeof(float) * ni), memcpy(d2, d0, sizeof(float) * ni);
                memcpy(dw1, dw0, sizeof(float) * nw), memcpy(dw2, dw0, sizeof(float) * nw);
                memcpy(db1, db0, sizeof(float) * OC), memcpy(db2, db0, sizeof(float) * OC);
                if (!nod)
                    k_gemm(0, 0, N, IC, OC, 1.0f, dy, OC, w, IC, acc ? 1.0f : 0.0f, d1, IC);
                if (!now) {
                    k_gemm(1, 0, OC, IC, N, 1.0f, dy, OC, x, IC, 1.0f, dw1, IC);
                    for (int c = 0; c < OC; c++) {
                        float s = 0.0f;
                        for (int n = 0; n < N; n++)
                            s += dy[(size_t)n * OC + c];
                        db1[c] += s;
                    }
                }
                k_linear_bwd(WHALE_FLOAT32, nod ? NULL : d2, now ? NULL : dw2, now ? NULL : db2,
                             dy, x, w, N, IC, OC, acc);
                assert_memory_equal(d1, d2, sizeof(float) * ni);
                assert_memory_equal(dw1, dw2, sizeof(float) * nw);
                assert_memory_equal(db1, db2, sizeof(float) * OC);
            }
        }
        free(x), free(w), free(dy), free(d0), free(dw0), free(db0);
        free(d1), free(d2), free(dw1), free(dw2), free(db1), free(db2);
    }
}

/* k_flush_denormals: with it on, a subnormal input reads as 0 (DAZ) in the
 * calling thread and in every thread of the pool (k_add splits its range
 * over them); off, IEEE subnormals come back. x86 only (MXCSR). */
static void test_flush_denormals(void **state)
{
    (void)state;
#if defined(__x86_64__) || defined(__i386__)
    enum { N = 4096 };
    float *a = malloc(sizeof(float) * N), *z = calloc(N, sizeof(float)),
          *out = malloc(sizeof(float) * N);
    assert_true(a && z && out);
    for (int i = 0; i < N; i++)
        a[i] = 1e-40f;                   /* subnormal: below FLT_MIN 1.18e-38 */
    assert_true(fpclassify(a[0]) == FP_SUBNORMAL);
    for (int th = 1; th <= 3; th++) {
        k_set_threads(th);
        k_flush_denormals(true);
        k_add(out, a, z, N);
        for (int i = 0; i < N; i++)
            assert_true(out[i] == 0.0f);
        volatile float tiny = 1e-30f, scale = 1e-10f;
        assert_true(tiny * scale == 0.0f); /* FTZ in this thread */
        k_flush_denormals(false);
        k_add(out, a, z, N);
        for (int i = 0; i < N; i++)
            assert_true(fpclassify(out[i]) == FP_SUBNORMAL);
    }
    free(a);
    free(z);
    free(out);
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu_bits),
        cmocka_unit_test(test_glu_bits),
        cmocka_unit_test(test_xent_bits),
        cmocka_unit_test(test_colsum_bits),
        cmocka_unit_test(test_linear_gelu_bits),
        cmocka_unit_test(test_linear_bwd_one_region_bits),
        cmocka_unit_test(test_flush_denormals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
