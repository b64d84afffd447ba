/* Every cuda backend kernel against the cpu backend on the same inputs:
 * fp32 within 1e-4 relative per element (TF32 off), bf16 within 1e-2
 * (output rounding is 2^-8 relative; the rest is summation order), fp16
 * spot checks; the tensor-core attention forward and backward (bf16 math)
 * against exact fp32 within 2e-2 / 3e-2. Skips (exit 77) without a GPU. Shapes are chosen off the
 * tile sizes (T = 77, C = 1600, hd = 32/64/96/128) so edge handling runs. */
#include <stdint.h>

#include "gpu_util.h"
#include "whale/error.h"
#include "whale/optim.h"

static whale_backend *C_, *G_;
static uint64_t seed = 0x9e3779b97f4a7c15ull;

/* host array of n random values of dtype t, times scale (gpu_util.h) */
#define mk(t, n, scale) gu_mk(C_, &seed, t, n, scale)

#define SZ(t, n) ((size_t)(n) * whale_dtype_size(t))
#define UP(p, bytes) gu_up(G_, p, bytes)
#define RUN(x) gu_check((x), #x)
#define CMP(name, ref, dev, t, n, tol) gu_compare(C_, G_, name, ref, dev, t, n, tol)

static double tol_of(enum whale_dtype t) { return t == WHALE_FLOAT32 ? 1e-4 : 1e-2; }

static void gemms(enum whale_dtype t)
{
    const int M = 96, N = 80, K = 72;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int c32 = 0; c32 < 2; c32++) {
                enum whale_dtype ct = c32 ? WHALE_FLOAT32 : t;
                int lda = (ta ? M : K) + 8, ldb = (tb ? K : N) + 8, ldc = N + 8;
                size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
                       nc = (size_t)M * ldc;
                void *A = mk(t, na, 1), *B = mk(t, nb, 1), *Cr = mk(ct, nc, 1);
                void *dA = UP(A, SZ(t, na)), *dB = UP(B, SZ(t, nb)), *dC = UP(Cr, SZ(ct, nc));
                RUN(whale_gemm(C_, NULL, ta, tb, M, N, K, 0.75f, A, lda, B, ldb, t, 0.5f, Cr, ldc,
                               ct));
                RUN(whale_gemm(G_, NULL, ta, tb, M, N, K, 0.75f, dA, lda, dB, ldb, t, 0.5f, dC,
                               ldc, ct));
                char name[64];
                snprintf(name, sizeof name, "gemm %c%c -> %s", ta ? 'T' : 'N', tb ? 'T' : 'N',
                         whale_dtype_name(ct));
                CMP(name, Cr, dC, ct, nc, ct == WHALE_FLOAT32 && t != WHALE_FLOAT32 ? 1e-4
                                                                                    : tol_of(t));
                whale_mem_free(G_, dA);
                whale_mem_free(G_, dB);
                whale_mem_free(G_, dC);
                free(A);
                free(B);
                free(Cr);
            }
}

static void linear_ln(enum whale_dtype t)
{
    const int N = 64, IC = 96, OC = 160;
    void *x = mk(t, N * IC, 1), *w = mk(t, OC * IC, 0.2f), *bias = mk(t, OC, 1);
    void *out = mk(t, N * OC, 1);
    void *dx = UP(x, SZ(t, N * IC)), *dw = UP(w, SZ(t, OC * IC)), *db = UP(bias, SZ(t, OC)),
         *dout = UP(out, SZ(t, N * OC));
    RUN(whale_k_linear_fwd(C_, NULL, t, out, x, w, bias, N, IC, OC));
    RUN(whale_k_linear_fwd(G_, NULL, t, dout, dx, dw, db, N, IC, OC));
    CMP("linear_fwd (bias)", out, dout, t, N * OC, tol_of(t));

    void *gy = mk(t, N * OC, 1), *gx = mk(t, N * IC, 1);
    float *gw = mk(WHALE_FLOAT32, OC * IC, 1), *gb = mk(WHALE_FLOAT32, OC, 1);
    void *dgy = UP(gy, SZ(t, N * OC)), *dgx = UP(gx, SZ(t, N * IC));
    float *dgw = UP(gw, OC * IC * 4), *dgb = UP(gb, OC * 4);
    RUN(whale_k_linear_bwd(C_, NULL, t, gx, gw, gb, gy, x, w, N, IC, OC, true));
    RUN(whale_k_linear_bwd(G_, NULL, t, dgx, dgw, dgb, dgy, dx, dw, N, IC, OC, true));
    CMP("linear_bwd dinp (+=)", gx, dgx, t, N * IC, tol_of(t));
    CMP("linear_bwd dw (fp32 +=)", gw, dgw, WHALE_FLOAT32, OC * IC, 1e-4);
    CMP("linear_bwd db (fp32 +=)", gb, dgb, WHALE_FLOAT32, OC, 1e-4);

    /* LayerNorm: a narrow and a wide row (C > 32 per lane) */
    int shapes[2][2] = { { 64, 96 }, { 37, 1600 } };
    for (int s = 0; s < 2; s++) {
        int n = shapes[s][0], c = shapes[s][1];
        void *in = mk(t, n * c, 2), *lw = mk(t, c, 1), *lb = mk(t, c, 1), *o = mk(t, n * c, 1);
        float m[64], r[64];
        void *din = UP(in, SZ(t, n * c)), *dlw = UP(lw, SZ(t, c)), *dlb = UP(lb, SZ(t, c)),
             *dO = UP(o, SZ(t, n * c));
        float *dm = UP(m, n * 4), *dr = UP(r, n * 4);
        RUN(whale_k_layernorm_fwd(C_, NULL, t, o, m, r, in, lw, lb, n, c));
        RUN(whale_k_layernorm_fwd(G_, NULL, t, dO, dm, dr, din, dlw, dlb, n, c));
        CMP(s ? "layernorm_fwd (C 1600)" : "layernorm_fwd", o, dO, t, (size_t)n * c, tol_of(t));
        CMP("layernorm_fwd rstd", r, dr, WHALE_FLOAT32, n, 1e-4);
        void *dy = mk(t, n * c, 1), *dxr = mk(t, n * c, 1);
        float *dwr = mk(WHALE_FLOAT32, c, 1), *dbr = mk(WHALE_FLOAT32, c, 1);
        void *ddy = UP(dy, SZ(t, n * c)), *ddx = UP(dxr, SZ(t, n * c));
        float *ddw = UP(dwr, c * 4), *ddb = UP(dbr, c * 4);
        RUN(whale_k_layernorm_bwd(C_, NULL, t, dxr, dwr, dbr, dy, in, lw, m, r, n, c));
        RUN(whale_k_layernorm_bwd(G_, NULL, t, ddx, ddw, ddb, ddy, din, dlw, dm, dr, n, c));
        CMP("layernorm_bwd dinp (+=)", dxr, ddx, t, (size_t)n * c, tol_of(t));
        CMP("layernorm_bwd dw", dwr, ddw, WHALE_FLOAT32, c, 1e-4);
        CMP("layernorm_bwd db", dbr, ddb, WHALE_FLOAT32, c, 1e-4);
        void *f[] = { in, lw, lb, o, dy, dxr, dwr, dbr };
        for (size_t i = 0; i < 8; i++)
            free(f[i]);
        void *d[] = { din, dlw, dlb, dO, dm, dr, ddy, ddx, ddw, ddb };
        for (size_t i = 0; i < 10; i++)
            whale_mem_free(G_, d[i]);
    }
    void *f[] = { x, w, bias, out, gy, gx, gw, gb };
    for (size_t i = 0; i < 8; i++)
        free(f[i]);
    void *d[] = { dx, dw, db, dout, dgy, dgx, dgw, dgb };
    for (size_t i = 0; i < 8; i++)
        whale_mem_free(G_, d[i]);
}

static void attention(enum whale_dtype t)
{
    int shapes[][4] = { { 2, 77, 3, 64 }, { 1, 128, 2, 96 }, { 1, 40, 2, 32 }, { 1, 33, 1, 128 } };
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        int B = shapes[k][0], T = shapes[k][1], NH = shapes[k][2], hd = shapes[k][3];
        size_t nq = (size_t)B * T * 3 * NH * hd, no = (size_t)B * T * NH * hd;
        size_t sc = whale_attention_saved_floats(C_, B, T, NH, hd);
        size_t sg = whale_attention_saved_floats(G_, B, T, NH, hd);
        if (sg != (size_t)B * NH * T) {
            printf("FAIL attention saved area on the GPU is %zu floats, not B*NH*T = %d\n", sg,
                   B * NH * T);
            gu_failures++;
        }
        void *qkv = mk(t, nq, 1.5f), *out = mk(t, no, 1), *dout = mk(t, no, 1);
        float *att = malloc(sc * 4);
        void *dq = mk(t, nq, 1);
        void *gq = UP(qkv, SZ(t, nq)), *go = UP(out, SZ(t, no)), *gdo = UP(dout, SZ(t, no)),
             *gdq = UP(dq, SZ(t, nq));
        float *gl = NULL;
        RUN(whale_mem_alloc(G_, WHALE_MEM_ACTS, sg * 4, (void **)&gl));
        RUN(whale_k_attention_fwd(C_, NULL, t, out, att, qkv, B, T, NH, hd));
        RUN(whale_k_attention_fwd(G_, NULL, t, go, gl, gq, B, T, NH, hd));
        char name[80];
        snprintf(name, sizeof name, "attention_fwd B%d T%d NH%d hd%d", B, T, NH, hd);
        CMP(name, out, go, t, no, tol_of(t));
        if (t == WHALE_FLOAT32) {
            /* mixed precision with fp32 activations: the forward on tensor
             * cores with bf16 operands (attention_tc.cu) against exact fp32 */
            RUN(whale_backend_set_fp32_gemm_math(G_, WHALE_BFLOAT16));
            RUN(whale_k_attention_fwd(G_, NULL, t, go, gl, gq, B, T, NH, hd));
            snprintf(name, sizeof name, "attention_fwd tensor cores (bf16 math) B%d T%d NH%d hd%d",
                     B, T, NH, hd);
            CMP(name, out, go, t, no, 2e-2);
            RUN(whale_backend_set_fp32_gemm_math(G_, WHALE_FLOAT32));
            RUN(whale_k_attention_fwd(G_, NULL, t, go, gl, gq, B, T, NH, hd));
        }
        RUN(whale_k_attention_bwd(C_, NULL, t, dq, dout, qkv, out, att, B, T, NH, hd));
        RUN(whale_k_attention_bwd(G_, NULL, t, gdq, gdo, gq, go, gl, B, T, NH, hd));
        snprintf(name, sizeof name, "attention_bwd B%d T%d NH%d hd%d", B, T, NH, hd);
        CMP(name, dq, gdq, t, nq, t == WHALE_FLOAT32 ? 1e-4 : 2e-2);
        if (t == WHALE_FLOAT32) {
            /* the backward on tensor cores (attention_tc_bwd.cu: q, k, v,
             * dout, P and dS rounded to bf16) against exact fp32 */
            RUN(whale_backend_set_fp32_gemm_math(G_, WHALE_BFLOAT16));
            RUN(whale_k_attention_bwd(G_, NULL, t, gdq, gdo, gq, go, gl, B, T, NH, hd));
            snprintf(name, sizeof name, "attention_bwd tensor cores (bf16 math) B%d T%d NH%d hd%d",
                     B, T, NH, hd);
            CMP(name, dq, gdq, t, nq, 3e-2);
            RUN(whale_backend_set_fp32_gemm_math(G_, WHALE_FLOAT32));
        }
        /* lse only (selective recompute path) gives the same saved area */
        float *gl2 = NULL;
        RUN(whale_mem_alloc(G_, WHALE_MEM_ACTS, sg * 4, (void **)&gl2));
        RUN(whale_k_attention_fwd(G_, NULL, t, NULL, gl2, gq, B, T, NH, hd));
        float *h1 = malloc(sg * 4);
        gu_down(G_, h1, gl, sg * 4);
        CMP("attention lse without out", h1, gl2, WHALE_FLOAT32, sg, 1e-6);
        free(h1);
        whale_mem_free(G_, gl2);
        whale_mem_free(G_, gl);
        void *d[] = { gq, go, gdo, gdq };
        for (size_t i = 0; i < 4; i++)
            whale_mem_free(G_, d[i]);
        free(qkv);
        free(out);
        free(dout);
        free(att);
        free(dq);
    }
}

static void elementwise_embed_xent(enum whale_dtype t)
{
    const int64_t n = 10007;
    void *x = mk(t, n, 4), *y = mk(t, n, 1), *o = mk(t, n, 1);
    void *gx = UP(x, SZ(t, n)), *gy = UP(y, SZ(t, n)), *go = UP(o, SZ(t, n));
    RUN(whale_k_gelu_fwd(C_, NULL, t, o, x, n));
    RUN(whale_k_gelu_fwd(G_, NULL, t, go, gx, n));
    CMP("gelu_fwd", o, go, t, n, tol_of(t));
    RUN(whale_k_gelu_bwd(C_, NULL, t, o, x, y, n));
    RUN(whale_k_gelu_bwd(G_, NULL, t, go, gx, gy, n));
    CMP("gelu_bwd", o, go, t, n, tol_of(t));
    RUN(whale_k_add(C_, NULL, t, o, x, y, n));
    RUN(whale_k_add(G_, NULL, t, go, gx, gy, n));
    CMP("add", o, go, t, n, tol_of(t));
    RUN(whale_k_acc(C_, NULL, t, o, x, n));
    RUN(whale_k_acc(G_, NULL, t, go, gx, n));
    CMP("acc", o, go, t, n, tol_of(t));

    /* embedding, plain and vocabulary-parallel (wpe on one rank only) */
    const int B = 2, T = 37, C = 96, V = 1000, N = B * T;
    int32_t tok[2 * 37];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 379 + 11) % V);
    tok[5] = tok[9] = tok[40]; /* repeated tokens */
    void *wte = mk(t, V * C, 1), *wpe = mk(t, T * C, 1), *eo = mk(t, N * C, 1);
    int32_t *gt = UP(tok, sizeof tok);
    void *gwte = UP(wte, SZ(t, V * C)), *gwpe = UP(wpe, SZ(t, T * C)), *geo = UP(eo, SZ(t, N * C));
    RUN(whale_k_embed_fwd(C_, NULL, t, eo, tok, wte, wpe, B, T, C));
    RUN(whale_k_embed_fwd(G_, NULL, t, geo, gt, gwte, gwpe, B, T, C));
    CMP("embed_fwd", eo, geo, t, N * C, tol_of(t));
    RUN(whale_k_embed_fwd_tp(C_, NULL, t, eo, tok, wte, 300, 400, NULL, B, T, C));
    RUN(whale_k_embed_fwd_tp(G_, NULL, t, geo, gt, gwte, 300, 400, NULL, B, T, C));
    CMP("embed_fwd_tp (no wpe)", eo, geo, t, N * C, tol_of(t));
    float *dwte = mk(WHALE_FLOAT32, V * C, 1), *dwpe = mk(WHALE_FLOAT32, T * C, 1);
    float *gdwte = UP(dwte, V * C * 4), *gdwpe = UP(dwpe, T * C * 4);
    RUN(whale_k_embed_bwd(C_, NULL, t, dwte, dwpe, eo, tok, B, T, C));
    RUN(whale_k_embed_bwd(G_, NULL, t, gdwte, gdwpe, geo, gt, B, T, C));
    CMP("embed_bwd dwte", dwte, gdwte, WHALE_FLOAT32, V * C, 1e-5);
    CMP("embed_bwd dwpe", dwpe, gdwpe, WHALE_FLOAT32, T * C, 1e-5);
    RUN(whale_k_embed_bwd_tp(C_, NULL, t, dwte, dwpe, eo, tok, 300, 400, B, T, C));
    RUN(whale_k_embed_bwd_tp(G_, NULL, t, gdwte, gdwpe, geo, gt, 300, 400, B, T, C));
    CMP("embed_bwd_tp dwte", dwte, gdwte, WHALE_FLOAT32, V * C, 1e-5);

    /* cross-entropy, plain and the vocabulary-parallel steps */
    const int NV = 5003;
    void *lg = mk(t, (size_t)N * NV, 6);
    void *glg = UP(lg, SZ(t, (size_t)N * NV));
    float loss[74], *gloss = NULL;
    RUN(whale_mem_alloc(G_, WHALE_MEM_ACTS, N * 4 * 3, (void **)&gloss));
    int32_t tg[74];
    for (int i = 0; i < N; i++)
        tg[i] = (int32_t)((i * 977) % NV);
    int32_t *gtg = UP(tg, sizeof tg);
    RUN(whale_k_softmax_xent_fwd(C_, NULL, t, lg, loss, tg, N, NV));
    RUN(whale_k_softmax_xent_fwd(G_, NULL, t, glg, gloss, gtg, N, NV));
    CMP("softmax_xent_fwd probs", lg, glg, t, (size_t)N * NV, tol_of(t));
    CMP("softmax_xent_fwd losses", loss, gloss, WHALE_FLOAT32, N, t == WHALE_FLOAT32 ? 1e-4 : 1e-2);
    RUN(whale_k_softmax_xent_bwd(C_, NULL, t, lg, tg, 0.125f, N, NV));
    RUN(whale_k_softmax_xent_bwd(G_, NULL, t, glg, gtg, 0.125f, N, NV));
    CMP("softmax_xent_bwd", lg, glg, t, (size_t)N * NV, tol_of(t));

    void *lt = mk(t, (size_t)N * 777, 6);
    void *glt = UP(lt, SZ(t, (size_t)N * 777));
    float mx[74], st[148];
    RUN(whale_k_rows_max(C_, NULL, t, mx, lt, N, 777));
    RUN(whale_k_rows_max(G_, NULL, t, gloss, glt, N, 777));
    CMP("rows_max", mx, gloss, WHALE_FLOAT32, N, 0);
    RUN(whale_k_rows_exp_sum(C_, NULL, t, lt, st, st + N, mx, tg, 100, N, 777));
    RUN(whale_k_rows_exp_sum(G_, NULL, t, glt, gloss + N, gloss + 2 * N, gloss, gtg, 100, N, 777));
    CMP("rows_exp_sum sum|tl", st, gloss + N, WHALE_FLOAT32, 2 * N, 1e-4);
    RUN(whale_k_rows_normalize(C_, NULL, t, lt, loss, st, st + N, N, 777));
    RUN(whale_k_rows_normalize(G_, NULL, t, glt, gloss, gloss + N, gloss + 2 * N, N, 777));
    CMP("rows_normalize probs", lt, glt, t, (size_t)N * 777, tol_of(t));
    CMP("rows_normalize losses", loss, gloss, WHALE_FLOAT32, N, 1e-4);
    RUN(whale_k_softmax_xent_bwd_tp(C_, NULL, t, lt, tg, 100, 0.5f, N, 777));
    RUN(whale_k_softmax_xent_bwd_tp(G_, NULL, t, glt, gtg, 100, 0.5f, N, 777));
    CMP("softmax_xent_bwd_tp", lt, glt, t, (size_t)N * 777, tol_of(t));

    void *f[] = { x, y, o, wte, wpe, eo, dwte, dwpe, lg, lt };
    for (size_t i = 0; i < 10; i++)
        free(f[i]);
    void *d[] = { gx, gy, go, gt, gwte, gwpe, geo, gdwte, gdwpe, glg, gloss, gtg, glt };
    for (size_t i = 0; i < 13; i++)
        whale_mem_free(G_, d[i]);
}

static void casts_optim(void)
{
    const int64_t n = 100003;
    enum whale_dtype ts[3] = { WHALE_FLOAT32, WHALE_BFLOAT16, WHALE_FLOAT16 };
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            if (a == b)
                continue;
            void *src = mk(ts[a], n, 100), *dst = malloc(SZ(ts[b], n));
            void *gs = UP(src, SZ(ts[a], n)), *gd = UP(dst, SZ(ts[b], n));
            RUN(whale_k_cast(C_, NULL, dst, ts[b], src, ts[a], n));
            RUN(whale_k_cast(G_, NULL, gd, ts[b], gs, ts[a], n));
            char name[64];
            snprintf(name, sizeof name, "cast %s ->", whale_dtype_name(ts[a]));
            CMP(name, dst, gd, ts[b], n, 0); /* round to nearest even: exact */
            free(src);
            free(dst);
            whale_mem_free(G_, gs);
            whale_mem_free(G_, gd);
        }
    float *g = mk(WHALE_FLOAT32, n, 3);
    float *gg = UP(g, n * 4);
    double s1, s2;
    RUN(whale_k_sumsq(C_, NULL, g, n, &s1));
    RUN(whale_k_sumsq(G_, NULL, gg, n, &s2));
    bool ok = fabs(s1 - s2) <= 1e-12 * s1;
    printf("%-4s %-34s cpu %.15g gpu %.15g\n", ok ? "ok" : "FAIL", "sumsq (double)", s1, s2);
    gu_failures += !ok;
    bool f1, f2;
    RUN(whale_k_has_inf_nan(G_, NULL, gg, n, &f2));
    g[n - 1] = INFINITY;
    float inf = INFINITY;
    RUN(whale_memcpy(G_, gg + n - 1, &inf, 4, WHALE_H2D, NULL));
    RUN(whale_k_has_inf_nan(G_, NULL, gg, n, &f1));
    ok = !f2 && f1;
    printf("%-4s %-34s\n", ok ? "ok" : "FAIL", "has_inf_nan");
    gu_failures += !ok;
    RUN(whale_k_scale(C_, NULL, g, 0.5f, n - 1));
    RUN(whale_k_scale(G_, NULL, gg, 0.5f, n - 1));
    CMP("scale", g, gg, WHALE_FLOAT32, n - 1, 0);

    /* fused AdamW over pieces of odd sizes, with and without a bf16 copy */
    struct whale_adamw o = { .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f };
    size_t sizes[3] = { 70001, 5, 4096 };
    struct whale_adamw_piece hp[3], dp[3];
    void *keep[3][5], *dkeep[3][5];
    for (int i = 0; i < 3; i++) {
        size_t m = sizes[i];
        float *w = mk(WHALE_FLOAT32, m, 1), *gr = mk(WHALE_FLOAT32, m, 1),
              *mo = mk(WHALE_FLOAT32, m, 0.1f), *v = mk(WHALE_FLOAT32, m, 0.01f);
        for (size_t j = 0; j < m; j++)
            v[j] = fabsf(v[j]);
        uint16_t *w16 = calloc(m, 2);
        hp[i] = (struct whale_adamw_piece){ w, gr, mo, v, i == 1 ? NULL : w16, m, i != 1 };
        dp[i] = (struct whale_adamw_piece){ UP(w, m * 4), UP(gr, m * 4), UP(mo, m * 4),
                                            UP(v, m * 4), i == 1 ? NULL : UP(w16, m * 2), m,
                                            i != 1 };
        void *k1[5] = { w, gr, mo, v, w16 };
        void *k2[5] = { dp[i].w, (void *)dp[i].g, dp[i].m, dp[i].v, dp[i].w16 };
        memcpy(keep[i], k1, sizeof k1);
        memcpy(dkeep[i], k2, sizeof k2);
    }
    for (int step = 1; step <= 3; step++) {
        RUN(whale_k_adamw(C_, NULL, &o, step, 0.7f, hp, 3, WHALE_BFLOAT16));
        RUN(whale_k_adamw(G_, NULL, &o, step, 0.7f, dp, 3, WHALE_BFLOAT16));
    }
    for (int i = 0; i < 3; i++) {
        CMP("adamw w (3 steps)", hp[i].w, dp[i].w, WHALE_FLOAT32, sizes[i], 1e-5);
        CMP("adamw v", hp[i].v, dp[i].v, WHALE_FLOAT32, sizes[i], 1e-5);
        if (hp[i].w16)
            CMP("adamw bf16 copy", hp[i].w16, dp[i].w16, WHALE_BFLOAT16, sizes[i], 1e-2);
        for (int j = 0; j < 5; j++) {
            free(keep[i][j]);
            whale_mem_free(G_, dkeep[i][j]);
        }
    }
    free(g);
    whale_mem_free(G_, gg);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    gu_open(&C_, &G_, -1);
    enum whale_dtype ts[3] = { WHALE_FLOAT32, WHALE_BFLOAT16, WHALE_FLOAT16 };
    for (int i = 0; i < 3; i++) {
        printf("--- %s\n", whale_dtype_name(ts[i]));
        gemms(ts[i]);
        linear_ln(ts[i]);
        attention(ts[i]);
        elementwise_embed_xent(ts[i]);
    }
    printf("--- casts, reductions, optimizer\n");
    casts_optim();
    size_t now, peak;
    whale_mem_usage(G_, WHALE_MEM_KIND_COUNT_, &now, &peak);
    printf("device memory still allocated by the test: %zu bytes (peak %zu)\n", now, peak);
    whale_backend_close(G_);
    whale_backend_close(C_);
    printf("%s: %d failure%s\n", gu_failures ? "FAIL" : "PASS", gu_failures,
           gu_failures == 1 ? "" : "s");
    return gu_failures ? 1 : 0;
}
