/* The cuda backend's Llama-block kernels against the cpu backend on the
 * same inputs (whale/backend.h): RMSNorm forward/backward, SwiGLU
 * and GeGLU, rotary (forward and its inverse, on a strided q|k|v buffer),
 * grouped-query flash attention forward/backward (4 query heads on 2 KV
 * heads, multi-query, a TP rank's slice of the head map), strided bias
 * gradients, the positionless embedding gradient and the strided bias rows
 * of the q/k/v projections (whale_k_bias_fill, exact). fp32 within 1e-4
 * relative per element, bf16/fp16 within 1e-2 (output rounding is 2^-8
 * relative; the rest is summation order). Skips (exit 77) without a GPU.
 * Shapes are off the tile sizes (T = 77, C = 200, hd 32/64/96). */
#include <stdint.h>

#include "gpu_util.h"
#include "whale/error.h"

static whale_backend *C_, *G_;
static uint64_t seed = 0x2545f4914f6cdd1dull;

/* host array of n random values of dtype t, times scale (gpu_util.h) */
#define mk(t, n, scale) gu_mk(C_, &seed, t, n, scale)

#define SZ(t, n) ((size_t)(n) * whale_dtype_size(t))
#define UP(p, bytes) gu_up(G_, p, bytes)
#define RUN(x) gu_check((x), #x)
#define CMP(name, ref, dev, t, n, tol) gu_compare(C_, G_, name, ref, dev, t, n, tol)

static double tol_of(enum whale_dtype t) { return t == WHALE_FLOAT32 ? 1e-4 : 1e-2; }

static void rmsnorm_glu(enum whale_dtype t)
{
    const int N = 77, C = 200, F = 300;
    /* RMSNorm: out (N,C), rstd (N) ; backward dinp (N,C) +=, dw (C) fp32 += */
    void *x = mk(t, N * C, 1), *w = mk(t, C, 1), *dy = mk(t, N * C, 1), *dx = mk(t, N * C, 1);
    void *out = mk(t, N * C, 1);
    float *rstd = calloc(N, sizeof(float)), *dw = calloc(C, sizeof(float));
    void *gx = UP(x, SZ(t, N * C)), *gw = UP(w, SZ(t, C)), *gdy = UP(dy, SZ(t, N * C));
    void *gdx = UP(dx, SZ(t, N * C)), *gout = UP(out, SZ(t, N * C));
    float *grstd = UP(rstd, sizeof(float) * N), *gdw = UP(dw, sizeof(float) * C);
    RUN(whale_k_rmsnorm_fwd(C_, NULL, t, out, rstd, x, w, N, C, 1e-6f));
    RUN(whale_k_rmsnorm_fwd(G_, NULL, t, gout, grstd, gx, gw, N, C, 1e-6f));
    CMP("rmsnorm fwd out", out, gout, t, (size_t)N * C, tol_of(t));
    CMP("rmsnorm fwd rstd", rstd, grstd, WHALE_FLOAT32, N, 1e-4);
    RUN(whale_k_rmsnorm_bwd(C_, NULL, t, dx, dw, dy, x, w, rstd, N, C));
    RUN(whale_k_rmsnorm_bwd(G_, NULL, t, gdx, gdw, gdy, gx, gw, grstd, N, C));
    CMP("rmsnorm bwd dinp (+=)", dx, gdx, t, (size_t)N * C, tol_of(t));
    CMP("rmsnorm bwd dw", dw, gdw, WHALE_FLOAT32, C, t == WHALE_FLOAT32 ? 1e-4 : 1e-3);
    /* gated MLP over (N,F), both activations; dgate aliases dh */
    void *gate = mk(t, N * F, 2), *up = mk(t, N * F, 1), *dh = mk(t, N * F, 1);
    void *h = mk(t, N * F, 1), *dup = mk(t, N * F, 1);
    void *ggate = UP(gate, SZ(t, N * F)), *gup = UP(up, SZ(t, N * F));
    for (int act = 0; act < 2; act++) {
        enum whale_glu_act a = act ? WHALE_GLU_GELU : WHALE_GLU_SILU;
        void *gh = UP(h, SZ(t, N * F)), *gdh = UP(dh, SZ(t, N * F)), *gdup = UP(dup, SZ(t, N * F));
        void *dh2 = malloc(SZ(t, N * F));
        memcpy(dh2, dh, SZ(t, N * F));
        RUN(whale_k_glu_fwd(C_, NULL, t, a, h, gate, up, (int64_t)N * F));
        RUN(whale_k_glu_fwd(G_, NULL, t, a, gh, ggate, gup, (int64_t)N * F));
        CMP(act ? "geglu fwd" : "swiglu fwd", h, gh, t, (size_t)N * F, tol_of(t));
        RUN(whale_k_glu_bwd(C_, NULL, t, a, dh2, dup, dh2, gate, up, (int64_t)N * F));
        RUN(whale_k_glu_bwd(G_, NULL, t, a, gdh, gdup, gdh, ggate, gup, (int64_t)N * F));
        CMP(act ? "geglu bwd dgate" : "swiglu bwd dgate", dh2, gdh, t, (size_t)N * F, tol_of(t));
        CMP(act ? "geglu bwd dup" : "swiglu bwd dup", dup, gdup, t, (size_t)N * F, tol_of(t));
        whale_mem_free(G_, gh), whale_mem_free(G_, gdh), whale_mem_free(G_, gdup);
        free(dh2);
    }
    whale_mem_free(G_, gx), whale_mem_free(G_, gw), whale_mem_free(G_, gdy);
    whale_mem_free(G_, gdx), whale_mem_free(G_, gout), whale_mem_free(G_, grstd);
    whale_mem_free(G_, gdw), whale_mem_free(G_, ggate), whale_mem_free(G_, gup);
    free(x), free(w), free(dy), free(dx), free(out), free(rstd), free(dw);
    free(gate), free(up), free(dh), free(h), free(dup);
}

/* One GQA case: B x T, NH query heads on KVl local KV heads of size hd, the
 * head map of a rank (hq0, g, k0); q|k|v packed in rows of W, rotary on q
 * and k first (theta), then attention forward and backward, then the
 * inverse rotary on the gradients. */
static void gqa_case(enum whale_dtype t, int B, int T, int NH, int KVl, int hd, int hq0, int g,
                     int k0, float theta)
{
    const int W = (NH + 2 * KVl) * hd, N = B * T, Co = NH * hd;
    const struct whale_attn_heads m = { .NH = NH, .KVl = KVl, .hd = hd, .hq0 = hq0, .g = g,
                                        .k0 = k0 };
    char name[96];
    void *qkv = mk(t, (size_t)N * W, 1), *dout = mk(t, (size_t)N * Co, 1);
    void *out = calloc((size_t)N * Co + 2, whale_dtype_size(t) + 2);
    void *dqkv = calloc((size_t)N * W + 2, whale_dtype_size(t) + 2);
    float *lse = calloc((size_t)B * NH * T, sizeof(float));
    void *gqkv = UP(qkv, SZ(t, N * W)), *gdout = UP(dout, SZ(t, N * Co));
    void *gout = UP(out, SZ(t, N * Co)), *gdqkv = UP(dqkv, SZ(t, N * W));
    float *glse = UP(lse, sizeof(float) * B * NH * T);
    size_t es = whale_dtype_size(t);
#define COL(p, c) ((char *)(p) + (size_t)(c) * es)
    /* Llama 3.1's frequency scaling, with all three bands inside hd 16 */
    const struct whale_rope_scaling sc = {WHALE_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 64};
    for (int dev = 0; dev < 2; dev++) {
        whale_backend *bk = dev ? G_ : C_;
        void *x = dev ? gqkv : qkv, *o = dev ? gout : out, *dx = dev ? gdqkv : dqkv;
        void *go = dev ? gdout : dout;
        float *l = dev ? glse : lse;
        RUN(whale_k_rope(bk, NULL, t, x, W, B, T, NH, hd, theta, &sc, 1));
        RUN(whale_k_rope(bk, NULL, t, COL(x, Co), W, B, T, KVl, hd, theta, &sc, 1));
        RUN(whale_k_attention_gqa_fwd(bk, NULL, t, o, Co, l, x, W, COL(x, Co), W,
                                      COL(x, Co + KVl * hd), W, B, T, &m));
        RUN(whale_k_attention_gqa_bwd(bk, NULL, t, dx, COL(dx, Co), COL(dx, Co + KVl * hd), go,
                                      Co, o, l, x, W, COL(x, Co), W, COL(x, Co + KVl * hd), W, B,
                                      T, &m));
        RUN(whale_k_rope(bk, NULL, t, dx, W, B, T, NH, hd, theta, &sc, -1));
        RUN(whale_k_rope(bk, NULL, t, COL(dx, Co), W, B, T, KVl, hd, theta, &sc, -1));
    }
#undef COL
    snprintf(name, sizeof name, "rope q|k (%dx%d, %d+%d heads of %d)", B, T, NH, KVl, hd);
    CMP(name, qkv, gqkv, t, (size_t)N * W, tol_of(t));
    snprintf(name, sizeof name, "gqa fwd out (g %d, hq0 %d, k0 %d)", g, hq0, k0);
    CMP(name, out, gout, t, (size_t)N * Co, tol_of(t));
    CMP("gqa fwd lse", lse, glse, WHALE_FLOAT32, (size_t)B * NH * T, 1e-4);
    snprintf(name, sizeof name, "gqa bwd dq|dk|dv + rope^-1 (g %d)", g);
    /* backward sums over keys in another order than the cpu's blocks */
    CMP(name, dqkv, gdqkv, t, (size_t)N * W, t == WHALE_FLOAT32 ? 2e-4 : 2e-2);
    whale_mem_free(G_, gqkv), whale_mem_free(G_, gdout), whale_mem_free(G_, gout);
    whale_mem_free(G_, gdqkv), whale_mem_free(G_, glse);
    free(qkv), free(dout), free(out), free(dqkv), free(lse);
}

static void colsum_embed(enum whale_dtype t)
{
    /* db (OC) += column sums of x (N rows ld apart) ; dwte (V,C) += rows */
    const int N = 777, ld = 130, OC = 97, V = 50, Cc = 64, v0 = 10;
    void *x = mk(t, (size_t)N * ld, 1);
    float *db = calloc(OC, sizeof(float)), *dwte = calloc((size_t)V * Cc, sizeof(float));
    void *gx = UP(x, SZ(t, (size_t)N * ld));
    float *gdb = UP(db, sizeof(float) * OC), *gdwte = UP(dwte, sizeof(float) * V * Cc);
    RUN(whale_k_colsum_acc(C_, NULL, t, db, x, ld, N, OC));
    RUN(whale_k_colsum_acc(G_, NULL, t, gdb, gx, ld, N, OC));
    CMP("colsum (strided bias grad)", db, gdb, WHALE_FLOAT32, OC, 1e-4);
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++)
        tok[n] = (n * 13) % 80;
    void *d = mk(t, (size_t)N * Cc, 1);
    int32_t *gtok = UP(tok, sizeof(int32_t) * N);
    void *gd = UP(d, SZ(t, (size_t)N * Cc));
    RUN(whale_k_embed_bwd_rows(C_, NULL, t, dwte, d, tok, v0, V, N, Cc));
    RUN(whale_k_embed_bwd_rows(G_, NULL, t, gdwte, gd, gtok, v0, V, N, Cc));
    CMP("embed bwd rows", dwte, gdwte, WHALE_FLOAT32, (size_t)V * Cc, 1e-4);
    /* whale_k_bias_fill: out rows ld apart, columns [0,OC) = bias; the
     * columns between stay as they were (a copy: exact on both backends, tolerance 0) */
    void *bias = mk(t, OC, 1), *gb = UP(bias, SZ(t, OC));
    void *o = mk(t, (size_t)N * ld, 1), *go = UP(o, SZ(t, (size_t)N * ld));
    RUN(whale_k_bias_fill(C_, NULL, t, o, ld, bias, N, OC));
    RUN(whale_k_bias_fill(G_, NULL, t, go, ld, gb, N, OC));
    CMP("bias fill (strided rows)", o, go, t, (size_t)N * ld, 0);
    whale_mem_free(G_, gb), whale_mem_free(G_, go);
    free(bias), free(o);
    whale_mem_free(G_, gx), whale_mem_free(G_, gdb), whale_mem_free(G_, gdwte);
    whale_mem_free(G_, gtok), whale_mem_free(G_, gd);
    free(x), free(db), free(dwte), free(tok), free(d);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    gu_open(&C_, &G_, -1);
    enum whale_dtype ts[3] = { WHALE_FLOAT32, WHALE_BFLOAT16, WHALE_FLOAT16 };
    for (int i = 0; i < 3; i++) {
        enum whale_dtype t = ts[i];
        printf("--- %s\n", whale_dtype_name(t));
        rmsnorm_glu(t);
        gqa_case(t, 2, 77, 4, 2, 64, 0, 2, 0, 10000.0f);     /* GQA, g 2 */
        gqa_case(t, 1, 130, 8, 1, 32, 0, 8, 0, 500000.0f);   /* multi-query */
        gqa_case(t, 2, 45, 2, 1, 96, 2, 4, 0, 10000.0f);     /* TP rank 1 of 2: heads 2,3 on KV 0 */
        gqa_case(t, 1, 64, 4, 4, 64, 0, 1, 0, 10000.0f);     /* plain multi-head */
        colsum_embed(t);
    }
    size_t now, peak;
    whale_mem_usage(G_, WHALE_MEM_KIND_COUNT_, &now, &peak);
    printf("device memory still allocated by the test: %zu bytes (peak %zu)\n", now, peak);
    whale_backend_close(G_);
    whale_backend_close(C_);
    printf("%s: %d failure%s\n", gu_failures ? "FAIL" : "PASS", gu_failures,
           gu_failures == 1 ? "" : "s");
    return gu_failures ? 1 : 0;
}
