/* The cpu backend (whale/backend.h): fp32 calls give exactly the bits of
 * the engine's kernels they wrap; 16-bit calls equal "widen, same fp32
 * kernel, round once"; memory accounting per kind; refusals (bad dtype,
 * bad device name, cuda without a GPU) are errors, never a silent cpu run;
 * the fused AdamW equals whale_adamw_update and writes the 16-bit copy. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backend/cuda/lt_layout.h"
#include "backend/kernels.h"
#include "whale/backend.h"
#include "whale/dtype.h"
#include "whale/error.h"
#include "whale/optim.h"

#define TESTRAND_SEED 88172645463325252ull
#include "testrand.h"

static whale_backend *cpu(void)
{
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = WHALE_DEVICE_CPU;
    whale_backend *b = NULL;
    assert_int_equal(whale_backend_open(&o, &b), 0);
    assert_true(whale_backend_host_addressable(b));
    return b;
}

static void same_bits(const float *a, const float *b, size_t n)
{
    assert_memory_equal(a, b, n * sizeof(float));
}

/* Every fp32 kernel through the backend == the engine kernel it wraps. */
static void test_fp32_bit_identical(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    enum { B = 2, T = 8, NH = 2, HD = 4, C = NH * HD, N = B * T, V = 11, F = 4 * C };
    float *x = rnd(N * C), *w = rnd(F * C), *bias = rnd(F);

    /* linear forward / backward */
    float *o1 = rnd(N * F), *o2 = dup(o1, N * F);
    k_linear_fwd(WHALE_FLOAT32, o1, x, w, bias, N, C, F);
    assert_int_equal(whale_k_linear_fwd(b, NULL, WHALE_FLOAT32, o2, x, w, bias, N, C, F), 0);
    same_bits(o1, o2, N * F);
    float *dout = rnd(N * F), *dx1 = rnd(N * C), *dx2 = dup(dx1, N * C);
    float *dw1 = rnd(F * C), *dw2 = dup(dw1, F * C), *db1 = rnd(F), *db2 = dup(db1, F);
    k_linear_bwd(WHALE_FLOAT32, dx1, dw1, db1, dout, x, w, N, C, F, 1);
    assert_int_equal(whale_k_linear_bwd(b, NULL, WHALE_FLOAT32, dx2, dw2, db2, dout, x, w, N, C,
                                        F, true), 0);
    same_bits(dx1, dx2, N * C);
    same_bits(dw1, dw2, F * C);
    same_bits(db1, db2, F);

    /* LayerNorm */
    float *lw = rnd(C), *lb = rnd(C), m1[N], r1[N], m2[N], r2[N];
    k_layernorm_fwd(o1, m1, r1, x, lw, lb, N, C);
    assert_int_equal(whale_k_layernorm_fwd(b, NULL, WHALE_FLOAT32, o2, m2, r2, x, lw, lb, N, C), 0);
    same_bits(o1, o2, N * C);
    same_bits(m1, m2, N);
    k_layernorm_bwd(dx1, dw1, db1, dout, x, lw, m1, r1, N, C);
    assert_int_equal(whale_k_layernorm_bwd(b, NULL, WHALE_FLOAT32, dx2, dw2, db2, dout, x, lw, m2,
                                           r2, N, C), 0);
    same_bits(dx1, dx2, N * C);
    same_bits(dw1, dw2, C);
    same_bits(db1, db2, C);

    /* attention: saved = probabilities on cpu */
    assert_int_equal(whale_attention_saved_floats(b, B, T, NH, HD), (size_t)B * NH * T * T);
    float *qkv = rnd(N * 3 * C), *att1 = rnd(B * NH * T * T), *att2 = dup(att1, B * NH * T * T);
    k_attention_fwd(o1, att1, qkv, B, T, NH, HD);
    assert_int_equal(whale_k_attention_fwd(b, NULL, WHALE_FLOAT32, o2, att2, qkv, B, T, NH, HD), 0);
    same_bits(o1, o2, N * C);
    same_bits(att1, att2, B * NH * T * T);
    float *att3 = rnd(B * NH * T * T);
    assert_int_equal(whale_k_attention_fwd(b, NULL, WHALE_FLOAT32, NULL, att3, qkv, B, T, NH, HD),
                     0);
    same_bits(att1, att3, B * NH * T * T);
    float *dq1 = rnd(N * 3 * C), *dq2 = rnd(N * 3 * C);
    k_attention_bwd(dq1, dout, qkv, att1, B, T, NH, HD);
    assert_int_equal(whale_k_attention_bwd(b, NULL, WHALE_FLOAT32, dq2, dout, qkv, o2, att2, B, T,
                                           NH, HD), 0);
    same_bits(dq1, dq2, N * 3 * C);

    /* GELU, add, acc */
    k_gelu_fwd(o1, x, N * C);
    assert_int_equal(whale_k_gelu_fwd(b, NULL, WHALE_FLOAT32, o2, x, N * C), 0);
    same_bits(o1, o2, N * C);
    k_gelu_bwd(o1, x, dout, N * C);
    assert_int_equal(whale_k_gelu_bwd(b, NULL, WHALE_FLOAT32, o2, x, dout, N * C), 0);
    same_bits(o1, o2, N * C);
    k_acc(o1, x, N * C);
    assert_int_equal(whale_k_acc(b, NULL, WHALE_FLOAT32, o2, x, N * C), 0);
    same_bits(o1, o2, N * C);

    /* embedding, plain and vocabulary-parallel */
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (i * 7 + 3) % V;
    float *wte = rnd(V * C), *wpe = rnd(T * C);
    k_embed_fwd(o1, tok, wte, wpe, B, T, C);
    assert_int_equal(whale_k_embed_fwd(b, NULL, WHALE_FLOAT32, o2, tok, wte, wpe, B, T, C), 0);
    same_bits(o1, o2, N * C);
    k_embed_fwd_tp(o1, tok, wte, 4, 5, NULL, B, T, C);
    assert_int_equal(whale_k_embed_fwd_tp(b, NULL, WHALE_FLOAT32, o2, tok, wte, 4, 5, NULL, B, T,
                                          C), 0);
    same_bits(o1, o2, N * C);
    float *g1 = rnd(V * C), *g2 = dup(g1, V * C), *p1 = rnd(T * C), *p2 = dup(p1, T * C);
    k_embed_bwd(g1, p1, dout, tok, B, T, C);
    assert_int_equal(whale_k_embed_bwd(b, NULL, WHALE_FLOAT32, g2, p2, dout, tok, B, T, C), 0);
    same_bits(g1, g2, V * C);
    same_bits(p1, p2, T * C);

    /* cross-entropy: plain and the three vocabulary-parallel steps */
    float *lg1 = rnd(N * V), *lg2 = dup(lg1, N * V), l1[N], l2[N];
    k_softmax_xent_fwd(lg1, l1, tok, N, V);
    assert_int_equal(whale_k_softmax_xent_fwd(b, NULL, WHALE_FLOAT32, lg2, l2, tok, N, V), 0);
    same_bits(lg1, lg2, N * V);
    same_bits(l1, l2, N);
    k_softmax_xent_bwd(lg1, tok, 0.25f, N, V);
    assert_int_equal(whale_k_softmax_xent_bwd(b, NULL, WHALE_FLOAT32, lg2, tok, 0.25f, N, V), 0);
    same_bits(lg1, lg2, N * V);
    float mx1[N], mx2[N], s1[2 * N], s2[2 * N];
    k_rows_max(mx1, lg1, N, V);
    assert_int_equal(whale_k_rows_max(b, NULL, WHALE_FLOAT32, mx2, lg2, N, V), 0);
    same_bits(mx1, mx2, N);
    k_rows_exp_sum(lg1, s1, s1 + N, mx1, tok, 3, N, V);
    assert_int_equal(whale_k_rows_exp_sum(b, NULL, WHALE_FLOAT32, lg2, s2, s2 + N, mx2, tok, 3, N,
                                          V), 0);
    same_bits(s1, s2, 2 * N);
    k_rows_normalize(lg1, l1, s1, s1 + N, N, V);
    assert_int_equal(whale_k_rows_normalize(b, NULL, WHALE_FLOAT32, lg2, l2, s2, s2 + N, N, V), 0);
    same_bits(lg1, lg2, N * V);
    same_bits(l1, l2, N);
    k_softmax_xent_bwd_tp(lg1, tok, 3, 0.5f, N, V);
    assert_int_equal(whale_k_softmax_xent_bwd_tp(b, NULL, WHALE_FLOAT32, lg2, tok, 3, 0.5f, N, V),
                     0);
    same_bits(lg1, lg2, N * V);

    /* GEMM with strides: C(3,5) = A^T B, A stored (4,3) in rows of 6 */
    float *A = rnd(4 * 6), *Bm = rnd(4 * 5), *C1 = rnd(3 * 7), *C2 = dup(C1, 3 * 7);
    k_gemm(1, 0, 3, 5, 4, 0.5f, A, 6, Bm, 5, 1.0f, C1, 7);
    assert_int_equal(whale_gemm(b, NULL, true, false, 3, 5, 4, 0.5f, A, 6, Bm, 5, WHALE_FLOAT32,
                                1.0f, C2, 7, WHALE_FLOAT32), 0);
    same_bits(C1, C2, 3 * 7);

    void *ptrs[] = { x, w, bias, o1, o2, dout, dx1, dx2, dw1, dw2, db1, db2, lw, lb, qkv,
                     att1, att2, att3, dq1, dq2, wte, wpe, g1, g2, p1, p2, lg1, lg2, A, Bm, C1, C2 };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        free(ptrs[i]);
    whale_backend_close(b);
}

static uint16_t bf(float f) { return whale_float_to_bf16(f); }
static float fb(uint16_t h) { return whale_bf16_to_float(h); }

/* 16-bit: widen, same fp32 kernel, round once. */
static void test_bf16_reference(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    enum { N = 6, IC = 5, OC = 7 };
    float *x = rnd(N * IC), *w = rnd(OC * IC), *bias = rnd(OC);
    uint16_t xh[N * IC], wh[OC * IC], bh[OC], oh[N * OC];
    float xw[N * IC], ww[OC * IC], bw[OC], out[N * OC];
    for (int i = 0; i < N * IC; i++)
        xw[i] = fb(xh[i] = bf(x[i]));
    for (int i = 0; i < OC * IC; i++)
        ww[i] = fb(wh[i] = bf(w[i]));
    for (int i = 0; i < OC; i++)
        bw[i] = fb(bh[i] = bf(bias[i]));
    k_linear_fwd(WHALE_FLOAT32, out, xw, ww, bw, N, IC, OC);
    assert_int_equal(whale_k_linear_fwd(b, NULL, WHALE_BFLOAT16, oh, xh, wh, bh, N, IC, OC), 0);
    for (int i = 0; i < N * OC; i++)
        assert_int_equal(oh[i], bf(out[i]));

    /* weight gradient stays fp32 */
    float dw[OC * IC] = { 0 }, dwr[OC * IC] = { 0 };
    uint16_t dyh[N * OC];
    float dyw[N * OC];
    for (int i = 0; i < N * OC; i++)
        dyw[i] = fb(dyh[i] = bf(out[i] * 0.5f));
    k_linear_bwd(WHALE_FLOAT32, NULL, dwr, NULL, dyw, xw, ww, N, IC, OC, 0);
    assert_int_equal(whale_k_linear_bwd(b, NULL, WHALE_BFLOAT16, NULL, dw, NULL, dyh, xh, wh, N,
                                        IC, OC, false), 0);
    same_bits(dw, dwr, OC * IC);

    /* casts: fp32 -> bf16 -> fp32 rounds to nearest even; fp16 keeps 11 bits */
    float src[4] = { 1.0f, 1.00390625f /* 1 + 2^-8: tie, rounds to even 1.0 */,
                     1.01171875f /* 1 + 3*2^-8: tie, rounds up to 1 + 2^-6 */, -3.14159f };
    uint16_t h[4];
    float back[4];
    assert_int_equal(whale_k_cast(b, NULL, h, WHALE_BFLOAT16, src, WHALE_FLOAT32, 4), 0);
    assert_int_equal(whale_k_cast(b, NULL, back, WHALE_FLOAT32, h, WHALE_BFLOAT16, 4), 0);
    assert_true(back[0] == 1.0f && back[1] == 1.0f && back[2] == 1.015625f);
    assert_true(fabsf(back[3] + 3.14159f) <= 3.14159f * 0x1p-8f);
    assert_int_equal(whale_k_cast(b, NULL, h, WHALE_FLOAT16, src, WHALE_FLOAT32, 4), 0);
    assert_int_equal(whale_k_cast(b, NULL, back, WHALE_FLOAT32, h, WHALE_FLOAT16, 4), 0);
    assert_true(back[1] == 1.00390625f);
    free(x);
    free(w);
    free(bias);
    whale_backend_close(b);
}

static void test_adamw_fused(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    struct whale_adamw o = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f };
    enum { N1 = 1000, N2 = 37 };
    float *w1 = rnd(N1), *g1 = rnd(N1), *m1 = rnd(N1), *v1 = rnd(N1);
    float *w2 = rnd(N2), *g2 = rnd(N2), *m2 = rnd(N2), *v2 = rnd(N2);
    for (int i = 0; i < N1; i++)
        v1[i] = fabsf(v1[i]);
    for (int i = 0; i < N2; i++)
        v2[i] = fabsf(v2[i]);
    float *rw1 = dup(w1, N1), *rm1 = dup(m1, N1), *rv1 = dup(v1, N1);
    float *rw2 = dup(w2, N2), *rm2 = dup(m2, N2), *rv2 = dup(v2, N2);
    uint16_t h1[N1];
    struct whale_adamw_piece p[2] = {
        { .w = w1, .g = g1, .m = m1, .v = v1, .w16 = h1, .n = N1, .decay = true },
        { .w = w2, .g = g2, .m = m2, .v = v2, .w16 = NULL, .n = N2, .decay = false },
    };
    assert_int_equal(whale_k_adamw(b, NULL, &o, 3, 0.5f, p, 2, WHALE_BFLOAT16), 0);
    whale_adamw_update(&o, 3, rw1, g1, rm1, rv1, N1, 0.5f, true);
    whale_adamw_update(&o, 3, rw2, g2, rm2, rv2, N2, 0.5f, false);
    same_bits(w1, rw1, N1);
    same_bits(v1, rv1, N1);
    same_bits(w2, rw2, N2);
    same_bits(m2, rm2, N2);
    for (int i = 0; i < N1; i++)
        assert_int_equal(h1[i], bf(w1[i]));
    /* a 16-bit copy needs a 16-bit dtype */
    assert_int_equal(whale_k_adamw(b, NULL, &o, 3, 0.5f, p, 2, WHALE_FLOAT32), WHALE_EINVAL);
    assert_int_equal(whale_k_adamw(b, NULL, &o, 0, 0.5f, p, 2, WHALE_BFLOAT16), WHALE_EINVAL);

    double s = 0;
    assert_int_equal(whale_k_sumsq(b, NULL, g1, N1, &s), 0);
    assert_true(s == whale_sumsq(g1, N1));
    /* the multi-tensor form through the backend: the same bits per tensor */
    const float *gs[] = { g1, g2, g1 };
    const int64_t ns[] = { N1, N2, 0 };
    double ss[3] = { -1, -1, -1 };
    assert_int_equal(whale_k_sumsq_multi(b, NULL, gs, ns, 3, ss), 0);
    assert_true(ss[0] == whale_sumsq(g1, N1) && ss[1] == whale_sumsq(g2, N2) && ss[2] == 0);
    const int64_t bad[] = { -1 };
    assert_int_equal(whale_k_sumsq_multi(b, NULL, gs, bad, 1, ss), WHALE_EINVAL);
    bool found = true;
    assert_int_equal(whale_k_has_inf_nan(b, NULL, g1, N1, &found), 0);
    assert_false(found);
    g1[17] = NAN;
    assert_int_equal(whale_k_has_inf_nan(b, NULL, g1, N1, &found), 0);
    assert_true(found);
    void *ptrs[] = { w1, g1, m1, v1, w2, g2, m2, v2, rw1, rm1, rv1, rw2, rm2, rv2 };
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        free(ptrs[i]);
    whale_backend_close(b);
}

static void test_memory_streams(void **st)
{
    (void)st;
    whale_backend *b = cpu();
    void *a = NULL, *c = NULL, *z = (void *)1;
    assert_int_equal(whale_mem_alloc(b, WHALE_MEM_PARAMS, 1000, &a), 0);
    assert_int_equal(whale_mem_alloc(b, WHALE_MEM_ACTS, 5000, &c), 0);
    assert_int_equal(whale_mem_alloc(b, WHALE_MEM_ACTS, 0, &z), 0);
    assert_null(z);
    assert_int_equal((uintptr_t)a % 256, 0);
    size_t now, peak;
    whale_mem_usage(b, WHALE_MEM_ACTS, &now, &peak);
    assert_int_equal(now, 5000);
    whale_mem_free(b, c);
    whale_mem_usage(b, WHALE_MEM_ACTS, &now, &peak);
    assert_int_equal(now, 0);
    assert_int_equal(peak, 5000);
    whale_mem_usage(b, WHALE_MEM_KIND_COUNT_, &now, &peak);
    assert_int_equal(now, 1000);
    assert_int_equal(peak, 6000);
    assert_int_equal(whale_mem_alloc(b, (enum whale_mem_kind)42, 8, &c), WHALE_EINVAL);
    size_t fr = 0, tot = 0;
    assert_int_equal(whale_mem_info(b, &fr, &tot), 0);
    assert_true(tot > 0 && fr <= tot);

    /* copies, pinned host memory, streams and events */
    void *h = NULL;
    assert_int_equal(whale_host_alloc(b, 1000, &h), 0);
    assert_int_equal((uintptr_t)h % 4096, 0);
    memset(h, 7, 1000);
    whale_stream *s2 = NULL;
    whale_event *e0 = NULL, *e1 = NULL;
    assert_int_equal(whale_stream_create(b, true, &s2), 0);
    assert_null(whale_stream_native(s2));
    assert_int_equal(whale_event_create(b, &e0), 0);
    assert_int_equal(whale_event_create(b, &e1), 0);
    assert_int_equal(whale_event_record(e0, NULL), 0);
    assert_int_equal(whale_memcpy(b, a, h, 1000, WHALE_H2D, s2), 0);
    assert_int_equal(whale_event_record(e1, s2), 0);
    assert_int_equal(whale_stream_wait_event(NULL, e1), 0);
    assert_int_equal(whale_stream_sync(whale_stream_compute(b)), 0);
    bool done = false;
    assert_int_equal(whale_event_query(e1, &done), 0);
    assert_true(done);
    float ms = -1;
    assert_int_equal(whale_event_elapsed_ms(e0, e1, &ms), 0);
    assert_true(ms >= 0);
    assert_int_equal(((unsigned char *)a)[999], 7);
    assert_int_equal(whale_memset(b, a, 0, 1000, NULL), 0);
    assert_int_equal(((unsigned char *)a)[500], 0);
    assert_int_equal(whale_memcpy(b, a, NULL, 4, WHALE_D2D, NULL), WHALE_EINVAL);
    whale_event_destroy(e0);
    whale_event_destroy(e1);
    whale_stream_destroy(s2);
    whale_host_free(b, h);
    whale_mem_free(b, a);
    whale_backend_close(b);
}

/* Refusals: never a silent fallback. */
static void test_refusals(void **st)
{
    (void)st;
    enum whale_device d;
    assert_int_equal(whale_device_parse("gpu", &d), WHALE_EINVAL);
    assert_int_equal(whale_device_parse("cuda", &d), 0);
    assert_int_equal(d, WHALE_DEVICE_CUDA);
    assert_string_equal(whale_device_name(WHALE_DEVICE_AUTO), "auto");

    whale_backend *b = cpu();
    float x[4] = { 0 };
    assert_int_equal(whale_k_gelu_fwd(b, NULL, WHALE_INT32, x, x, 4), WHALE_ENOTSUP);
    assert_int_equal(whale_k_add(b, NULL, WHALE_FLOAT32, x, x, x, -1), WHALE_EINVAL);
    assert_int_equal(whale_gemm(b, NULL, false, false, 2, 2, 2, 1, x, 2, x, 2, WHALE_BFLOAT16, 0, x,
                                2, WHALE_FLOAT16), WHALE_ENOTSUP);
    assert_int_equal(whale_gemm(b, NULL, false, false, 2, 2, 2, 1, x, 1, x, 2, WHALE_FLOAT32, 0, x,
                                2, WHALE_FLOAT32), WHALE_EINVAL);
    assert_int_equal(whale_k_cast(b, NULL, x, WHALE_BFLOAT16, x, WHALE_FLOAT32, 2), WHALE_EINVAL);
    whale_backend_close(b);

    /* cuda where there is none: an error, not a cpu backend */
    if (!whale_device_available(WHALE_DEVICE_CUDA)) {
        struct whale_backend_opts o;
        whale_backend_opts_init(&o);
        o.device = WHALE_DEVICE_CUDA;
        b = (whale_backend *)1;
        assert_int_equal(whale_backend_open(&o, &b), WHALE_ENOTSUP);
        assert_null(b);
        o.device = WHALE_DEVICE_AUTO;
        assert_int_equal(whale_backend_open(&o, &b), 0);
        assert_int_equal(whale_backend_device(b), WHALE_DEVICE_CPU);
        whale_backend_close(b);
    }
}

/* The row-major -> column-major mapping gemm.cu hands to cuBLASLt, run by
 * a column-major cblas_sgemm here: it must give whale_gemm's result. */
static void test_cublaslt_mapping(void **st)
{
    (void)st;
    const int M = 13, N = 7, K = 5;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 4;
            float *A = rnd((size_t)(ta ? K : M) * lda), *B = rnd((size_t)(tb ? N : K) * ldb);
            float *C1 = rnd((size_t)M * ldc), *C2 = dup(C1, (size_t)M * ldc);
            k_gemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, C1, ldc);
            struct lt_map mp = lt_map_rowmajor(ta, tb, M, N, K, lda, ldb, ldc);
            /* what cuBLASLt requires of the layouts */
            assert_int_equal(mp.a_rows, mp.a_trans ? mp.k : mp.m);
            assert_int_equal(mp.a_cols, mp.a_trans ? mp.m : mp.k);
            assert_int_equal(mp.b_rows, mp.b_trans ? mp.n : mp.k);
            assert_int_equal(mp.b_cols, mp.b_trans ? mp.k : mp.n);
            assert_int_equal(mp.c_rows, mp.m);
            assert_int_equal(mp.c_cols, mp.n);
            assert_true(mp.a_ld >= mp.a_rows && mp.b_ld >= mp.b_rows && mp.c_ld >= mp.c_rows);
            cblas_sgemm(CblasColMajor, mp.a_trans ? CblasTrans : CblasNoTrans,
                        mp.b_trans ? CblasTrans : CblasNoTrans, mp.m, mp.n, mp.k, 0.5f, B,
                        mp.a_ld, A, mp.b_ld, 0.25f, C2, mp.c_ld);
            for (int i = 0; i < M * ldc; i++)
                assert_float_equal(C1[i], C2[i], 1e-5);
            free(A);
            free(B);
            free(C1);
            free(C2);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_bit_identical),
        cmocka_unit_test(test_bf16_reference),
        cmocka_unit_test(test_adamw_fused),
        cmocka_unit_test(test_memory_streams),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cublaslt_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
