/* fp32 CPU kernels (shapes in kernels.h beside each prototype).
 * Reductions over rows (bias, LayerNorm and embedding gradients) are split
 * by column so every element is summed by one thread in row order: the
 * result does not depend on the thread count. */
#include "kernels.h"
#include "kernels_vec.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* OpenBLAS extension (declared by its cblas.h, repeated for other BLAS). */
void openblas_set_num_threads(int num_threads);

/* ---- vectorized element-wise spans (options and k_exp: kernels_vec.h) ---- */
K_VEC_BEGIN

/* out (n) = gelu_tanh(inp (n)) = x * sigmoid(2u), u = K (x + 0.044715 x^3) */
K_VEC static void span_gelu_fwd(float *restrict out, const float *restrict inp, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + k_exp(-2.0f * u));
    }
}

/* dinp (n) = gelu'(inp) * dout: s + 2 x s (1 - s) u', s = sigmoid(2u),
 * u' = K (1 + 3 * 0.044715 x^2) */
K_VEC static void span_gelu_bwd(float *restrict dinp, const float *restrict inp,
                                const float *restrict dout, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        float s = 1.0f / (1.0f + k_exp(-2.0f * u));
        float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
    }
}

/* d (n) = gelu'(inp) * d: span_gelu_bwd in place (the same expression) */
K_VEC static void span_gelu_bwd_inplace(float *restrict d, const float *restrict inp, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        float s = 1.0f / (1.0f + k_exp(-2.0f * u));
        float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
        d[i] = (s + 2.0f * x * s * (1.0f - s) * du) * d[i];
    }
}

/* r (n) = exp(r - mx); the caller sums the row in order afterwards */
K_VEC static void span_exp_sub(float *restrict r, float mx, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++)
        r[i] = k_exp(r[i] - mx);
}

/* r (n) *= a */
K_VEC static void span_scale(float *restrict r, float a, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++)
        r[i] *= a;
}

K_VEC_END

/* Largest of r (n), -inf for n == 0 or all-NaN rows (NaNs are skipped, as the
 * scalar r > m ? r : m does). Eight running maxima instead of one break the
 * 4-cycle dependency chain; max is exact, so the value is the same (a +0 / -0
 * tie may pick the other zero, which no caller can tell apart: they only
 * subtract it). */
static float row_max(const float *r, int n)
{
    float m[8];
    for (int k = 0; k < 8; k++)
        m[k] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            m[k] = r[i + k] > m[k] ? r[i + k] : m[k];
    float mx = -INFINITY;
    for (int k = 0; k < 8; k++)
        mx = m[k] > mx ? m[k] : mx;
    for (; i < n; i++)
        mx = r[i] > mx ? r[i] : mx;
    return mx;
}

/* Sum of r (n) in index order (kept scalar: the order fixes the bits). */
static float row_sum(const float *r, int n)
{
    float s = 0;
    for (int i = 0; i < n; i++)
        s += r[i];
    return s;
}

static int k_nthreads = 1;

void k_set_threads(int n)
{
    if (n < 1)
        n = 1;
#ifdef _OPENMP
    omp_set_num_threads(n);
    k_nthreads = n;
    /* every product is split over our own pool instead */
    openblas_set_num_threads(1);
#else
    k_nthreads = 1;
    openblas_set_num_threads(n);
#endif
}

/* MXCSR's flush-to-zero (FTZ, bit 15) and denormals-are-zero (DAZ, bit 6). */
#define K_MXCSR_FTZ_DAZ 0x8040u

static void flush_this_thread(bool on)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? csr | K_MXCSR_FTZ_DAZ : csr & ~K_MXCSR_FTZ_DAZ);
#else
    (void)on;   /* other ISAs keep their default (IEEE subnormals) */
#endif
}

void k_flush_denormals(bool on)
{
    flush_this_thread(on);
#ifdef _OPENMP
    /* the pool's threads exist already once a kernel ran: set each one;
     * threads created later copy the FP state of the thread creating them */
#pragma omp parallel num_threads(k_nthreads)
    flush_this_thread(on);
#endif
}

int k_threads(void)
{
    return k_nthreads;
}

static inline int k_in_parallel(void)
{
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return 1;
#endif
}

/* What k_gemm_blocks does to each thread's block [r0,r1) x [c0,c1) of C
 * around its product: pre before it (fill C with the bias), post after it
 * (an element-wise activation while the block is still in cache). Both may
 * be NULL. One parallel region does all three instead of three. */
struct k_gemm_hooks {
    void (*pre)(const struct k_gemm_hooks *h, int r0, int r1, int c0, int c1);
    void (*post)(const struct k_gemm_hooks *h, int r0, int r1, int c0, int c1);
    float *c;            /* C as the hooks see it (row stride ld) */
    const float *x;      /* the hook's other operand: bias (pre), GELU input (post) */
    float *y;            /* the hook's output (post), row stride ld */
    int ld;
};

/* Whether k_gemm_blocks runs a product as one call on the calling thread:
 * one thread, already inside a parallel region, or too small to split. */
static int gemm_serial(int M, int N, int K)
{
    return k_nthreads <= 1 || k_in_parallel() || (double)M * N * K < 2e6;
}

/* The whole product as one single-threaded call, with its hooks. */
static void gemm_whole(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                       int lda, const float *B, int ldb, float beta, float *C, int ldc,
                       const struct k_gemm_hooks *h)
{
    if (h && h->pre)
        h->pre(h, 0, M, 0, N);
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (h && h->post)
        h->post(h, 0, M, 0, N);
}

/* Thread id's block (of nt) of the product: the larger output dimension
 * split into nt blocks (multiples of 16), each one single-threaded call. A
 * caller's parallel region may run several products' blocks in turn. */
static void gemm_part(int id, int nt, int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc, const struct k_gemm_hooks *h)
{
    const enum CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    int splitM = M >= N;
    int dim = splitM ? M : N;
    int chunk = ((dim + nt - 1) / nt + 15) / 16 * 16;
    int lo = id * chunk, hi = lo + chunk < dim ? lo + chunk : dim;
    if (lo >= hi)
        return;
    int r0 = splitM ? lo : 0, r1 = splitM ? hi : M;
    int c0 = splitM ? 0 : lo, c1 = splitM ? N : hi;
    if (h && h->pre)
        h->pre(h, r0, r1, c0, c1);
    if (splitM) {
        const float *Ab = transA ? A + lo : A + (size_t)lo * lda;
        cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, alpha, Ab, lda, B, ldb, beta,
                    C + (size_t)lo * ldc, ldc);
    } else {
        const float *Bb = transB ? B + (size_t)lo * ldb : B + lo;
        cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, alpha, A, lda, Bb, ldb, beta, C + lo,
                    ldc);
    }
    if (h && h->post)
        h->post(h, r0, r1, c0, c1);
}

static inline int k_team_size(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

static inline int k_team_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* One of a GEMM's hooks over all M rows of C, the rows split over the
 * OpenMP pool (par) in contiguous blocks. */
static void hook_rows(const struct k_gemm_hooks *h,
                      void (*fn)(const struct k_gemm_hooks *, int, int, int, int), int M, int N,
                      int par)
{
#pragma omp parallel num_threads(k_nthreads) if (par)
    {
        int nt = k_team_size(), id = k_team_id(), per = (M + nt - 1) / nt;
        int r0 = id * per < M ? id * per : M, r1 = r0 + per < M ? r0 + per : M;
        if (r0 < r1)
            fn(h, r0, r1, 0, N);
    }
}

/* The whole product as one oneDNN sgemm (WHALE_FP32_GEMM=onednn), which
 * splits it over the OpenMP pool itself; the hooks run before and after it,
 * rows split over the pool. Nonzero where oneDNN refused the call. */
static int gemm_onednn(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                       int lda, const float *B, int ldb, float beta, float *C, int ldc,
                       const struct k_gemm_hooks *h)
{
    int par = !gemm_serial(M, N, K);
    if (h && h->pre)
        hook_rows(h, h->pre, M, N, par);
    if (k_sgemm_onednn(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return -1;
    if (h && h->post)
        hook_rows(h, h->post, M, N, par);
    return 0;
}

static void k_gemm_blocks(int transA, int transB, int M, int N, int K, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta, float *C,
                          int ldc, const struct k_gemm_hooks *h)
{
    /* where oneDNN refuses the call, OpenBLAS does it: the pre hook (the
     * bias fill) then runs twice, writing the same values */
    if (k_fp32_gemm_onednn() && !k_in_parallel() &&
        !gemm_onednn(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, h))
        return;
    if (gemm_serial(M, N, K)) {
        gemm_whole(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, h);
        return;
    }
#pragma omp parallel num_threads(k_nthreads)
    gemm_part(k_team_id(), k_team_size(), transA, transB, M, N, K, alpha, A, lda, B, ldb, beta,
              C, ldc, h);
}

void k_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
            const float *B, int ldb, float beta, float *C, int ldc)
{
    k_gemm_blocks(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

/* pre: rows r0..r1 of C, columns c0..c1, = the bias */
static void hook_bias_fill(const struct k_gemm_hooks *h, int r0, int r1, int c0, int c1)
{
    for (int r = r0; r < r1; r++)
        memcpy(h->c + (size_t)r * h->ld + c0, h->x + c0, sizeof(float) * (size_t)(c1 - c0));
}

/* post: y = gelu(C) over the block; whole rows are one span (the spans give
 * the same bits at any length: kernels_vec.h) */
static void hook_gelu_fwd(const struct k_gemm_hooks *h, int r0, int r1, int c0, int c1)
{
    if (c0 == 0 && c1 == h->ld) {
        size_t o = (size_t)r0 * h->ld;
        span_gelu_fwd(h->y + o, h->c + o, (int64_t)(r1 - r0) * h->ld);
        return;
    }
    for (int r = r0; r < r1; r++) {
        size_t o = (size_t)r * h->ld + c0;
        span_gelu_fwd(h->y + o, h->c + o, c1 - c0);
    }
}

/* post: y (the input gradient C) = gelu'(x) * C over the block, in place */
static void hook_gelu_bwd(const struct k_gemm_hooks *h, int r0, int r1, int c0, int c1)
{
    if (c0 == 0 && c1 == h->ld) {
        size_t o = (size_t)r0 * h->ld;
        span_gelu_bwd_inplace(h->c + o, h->x + o, (int64_t)(r1 - r0) * h->ld);
        return;
    }
    for (int r = r0; r < r1; r++) {
        size_t o = (size_t)r * h->ld + c0;
        span_gelu_bwd_inplace(h->c + o, h->x + o, c1 - c0);
    }
}

/* out = inp @ w^T (+ b), and gl = gelu(out) when gl is not NULL. fp32
 * products fill the bias and apply GELU inside the product's own parallel
 * region, block by block (the same bits as the separate passes: each
 * element gets the same operations); other operand types take the
 * separate passes. */
static void linear_fwd_hooked(enum whale_dtype mm, float *out, float *gl, const float *inp,
                              const float *w, const float *b, int N, int IC, int OC)
{
    if (mm == WHALE_FLOAT32) {
        struct k_gemm_hooks h = { .pre = b ? hook_bias_fill : NULL,
                                  .post = gl ? hook_gelu_fwd : NULL,
                                  .c = out, .x = b, .y = gl, .ld = OC };
        k_gemm_blocks(0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, b ? 1.0f : 0.0f, out, OC, &h);
        return;
    }
    if (b) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * OC, b, sizeof(float) * OC);
    }
    k_gemm_mm(mm, 0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, b ? 1.0f : 0.0f, out, OC);
    if (gl)
        k_gelu_fwd(gl, out, (int64_t)N * OC);
}

void k_linear_fwd(enum whale_dtype mm, float *out, const float *inp, const float *w,
                  const float *b, int N, int IC, int OC)
{
    linear_fwd_hooked(mm, out, NULL, inp, w, b, N, IC, OC);
}

void k_linear_gelu_fwd(enum whale_dtype mm, float *out, float *gl, const float *inp,
                       const float *w, const float *b, int N, int IC, int OC)
{
    linear_fwd_hooked(mm, out, gl, inp, w, b, N, IC, OC);
}

/* db (OC) += column sums of dout (N,OC). Each thread owns one contiguous
 * range of columns (a multiple of 16 wide) and walks it in sub-blocks of up
 * to CB columns, reading every row's part of the sub-block as one
 * contiguous run: a few long streams instead of OC/64 passes that each
 * touch every row at a 256 B stride (one page per row: TLB-bound on the
 * MLP's (1024, 3072) gradient). Every column is still summed by one thread,
 * rows in order from 0, then added to db: the bits do not change. */
static void colsum_part(int id, int nt, float *db, const float *dout, int N, int OC)
{
    enum { CB = 1024 };
    int per = ((OC + nt - 1) / nt + 15) / 16 * 16;
    int lo = per * id < OC ? per * id : OC, hi = lo + per < OC ? lo + per : OC;
    float acc[CB];
    for (int c0 = lo; c0 < hi; c0 += CB) {
        int w = hi - c0 < CB ? hi - c0 : CB;
        for (int c = 0; c < w; c++)
            acc[c] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *r = dout + (size_t)n * OC + c0;
#pragma omp simd
            for (int c = 0; c < w; c++)
                acc[c] += r[c];
        }
        for (int c = 0; c < w; c++)
            db[c0 + c] += acc[c];
    }
}

static void k_colsum_acc(float *db, const float *dout, int N, int OC)
{
#pragma omp parallel
    colsum_part(k_team_id(), k_team_size(), db, dout, N, OC);
}

void k_linear_bwd(enum whale_dtype mm, float *dinp, float *dw, float *db, const float *dout,
                  const float *inp, const float *w, int N, int IC, int OC, int acc)
{
    k_linear_bwd_gelu(mm, dinp, NULL, dw, db, dout, inp, w, N, IC, OC, acc);
}

void k_linear_bwd_gelu(enum whale_dtype mm, float *dinp, const float *pre, float *dw, float *db,
                       const float *dout, const float *inp, const float *w, int N, int IC,
                       int OC, int acc)
{
    /* fp32 on several threads: the input gradient, the weight gradient and
     * the bias gradient in ONE parallel region instead of three (none reads
     * another's output, so no thread waits between them). Each thread runs
     * the same blocks with the same calls as the separate passes below: the
     * same bits. A GEMM too small to split runs whole on thread 0. The GELU
     * pass after an accumulated input gradient needs all of it: not here. */
    if (mm == WHALE_FLOAT32 && k_nthreads > 1 && !k_in_parallel() && !(pre && acc) &&
        !(dinp && dinp == inp) && !k_fp32_gemm_onednn()) {
        struct k_gemm_hooks h = { .post = hook_gelu_bwd, .c = dinp, .x = pre, .ld = IC };
        const struct k_gemm_hooks *hd = pre ? &h : NULL;
        int sd = dinp && gemm_serial(N, IC, OC), sw = dw && gemm_serial(OC, IC, N);
#pragma omp parallel num_threads(k_nthreads)
        {
            int id = k_team_id(), nt = k_team_size();
            if (dinp && !sd)
                gemm_part(id, nt, 0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, acc ? 1.0f : 0.0f, dinp,
                          IC, hd);
            else if (dinp && id == 0)
                gemm_whole(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, acc ? 1.0f : 0.0f, dinp, IC,
                           hd);
            if (dw && !sw)
                gemm_part(id, nt, 1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC, NULL);
            else if (dw && id == nt - 1)
                gemm_whole(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC, NULL);
            if (db)
                colsum_part(id, nt, db, dout, N, OC);
        }
        return;
    }
    if (dinp && pre && mm == WHALE_FLOAT32 && !acc) {
        struct k_gemm_hooks h = { .post = hook_gelu_bwd, .c = dinp, .x = pre, .ld = IC };
        k_gemm_blocks(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, 0.0f, dinp, IC, &h);
    } else if (dinp) {
        k_gemm_mm(mm, 0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, acc ? 1.0f : 0.0f, dinp, IC);
        if (pre)
            k_gelu_bwd(dinp, pre, dinp, (int64_t)N * IC);
    }
    if (dw)
        k_gemm_mm(mm, 1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (db)
        k_colsum_acc(db, dout, N, OC);
}

void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                     const float *b, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float m = 0;
        for (int i = 0; i < C; i++)
            m += x[i];
        m /= C;
        float v = 0;
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / sqrtf(v + 1e-5f);
#pragma omp simd
        for (int i = 0; i < C; i++)
            y[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* One parallel region for both loops: the input gradient by rows, then
 * (without waiting: it reads none of dinp) dw, db by column blocks. */
void k_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, const float *mean, const float *rstd, int N, int C)
{
    enum { CB = 64 };
    int nb = (C + CB - 1) / CB;
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            float mdn = 0, mdnx = 0;
            for (int i = 0; i < C; i++) {
                float xh = (x[i] - m) * s, dn = dy[i] * w[i];
                mdn += dn;
                mdnx += dn * xh;
            }
            mdn /= C;
            mdnx /= C;
#pragma omp simd
            for (int i = 0; i < C; i++) {
                float xh = (x[i] - m) * s, dn = dy[i] * w[i];
                dx[i] += s * (dn - mdn - xh * mdnx);
            }
        }
#pragma omp for schedule(static)
        for (int blk = 0; blk < nb; blk++) {
            int c0 = blk * CB, c1 = c0 + CB < C ? c0 + CB : C;
            float aw[CB] = { 0 }, ab[CB] = { 0 };
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
                float m = mean[n], s = rstd[n];
#pragma omp simd
                for (int c = c0; c < c1; c++) {
                    aw[c - c0] += dy[c] * (x[c] - m) * s;
                    ab[c - c0] += dy[c];
                }
            }
            for (int c = c0; c < c1; c++) {
                dw[c] += aw[c - c0];
                db[c] += ab[c - c0];
            }
        }
    }
}

/* Row t of a causal score matrix (T) -> probabilities over j <= t, 0 after. */
static inline void k_causal_softmax_row(float *r, int t, int T)
{
    float mx = row_max(r, t + 1);
    span_exp_sub(r, mx, t + 1);
    float sum = row_sum(r, t + 1);
    span_scale(r, 1.0f / sum, t + 1);
    for (int j = t + 1; j < T; j++)
        r[j] = 0;
}

void k_attention_probs(float *att, const float *qkv, int B, int T, int NH, int hd)
{
    const int C = NH * hd, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hd;
        const float *k = q + C;
        float *S = att + (size_t)bh * T * T;
        /* S (T,T) = scale * Q (T,hd) @ K (T,hd)^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q, C3, k, C3, 0.0f,
                    S, T);
        for (int t = 0; t < T; t++)
            k_causal_softmax_row(S + (size_t)t * T, t, T);
    }
}

void k_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int NH, int hd)
{
    const int C = NH * hd, C3 = 3 * C;
    k_attention_probs(att, qkv, B, T, NH, hd);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *v = qkv + (size_t)b * T * C3 + 2 * C + (size_t)h * hd;
        const float *P = att + (size_t)bh * T * T;
        /* out_bh (T,hd) = P (T,T) @ V (T,hd) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, P, T, v, C3, 0.0f,
                    out + (size_t)b * T * C + (size_t)h * hd, C);
    }
}

void k_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                     int T, int NH, int hd)
{
    const int C = NH * hd, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel
    {
        float *dP = malloc(sizeof(float) * (size_t)T * T);
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            size_t base = (size_t)b * T * C3 + (size_t)h * hd;
            const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * hd;
            const float *P = att + (size_t)bh * T * T;
            /* dP (T,T) = dO (T,hd) @ V^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, dO, C, v, C3,
                        0.0f, dP, T);
            /* dV (T,hd) = P^T @ dO */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, P, T, dO, C,
                        0.0f, dv, C3);
            /* dS = P * (dP - rowsum(P * dP)), stored in dP */
            for (int t = 0; t < T; t++) {
                float *r = dP + (size_t)t * T;
                const float *p = P + (size_t)t * T;
                float dot = 0;
                for (int j = 0; j <= t; j++)
                    dot += p[j] * r[j];
                for (int j = 0; j <= t; j++)
                    r[j] = p[j] * (r[j] - dot);
                for (int j = t + 1; j < T; j++)
                    r[j] = 0;
            }
            /* dQ (T,hd) = scale * dS @ K ; dK (T,hd) = scale * dS^T @ Q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, dP, T, k, C3,
                        0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, dP, T, q, C3,
                        0.0f, dk, C3);
        }
        free(dP);
    }
}

void k_gelu_fwd(float *out, const float *inp, int64_t n)
{
#ifdef _OPENMP
#pragma omp parallel
    {
        K_SPLIT(n, lo, hi);
        span_gelu_fwd(out + lo, inp + lo, hi - lo);
    }
#else
    span_gelu_fwd(out, inp, n);
#endif
}

void k_gelu_bwd(float *dinp, const float *inp, const float *dout, int64_t n)
{
#ifdef _OPENMP
#pragma omp parallel
    {
        K_SPLIT(n, lo, hi);
        span_gelu_bwd(dinp + lo, inp + lo, dout + lo, hi - lo);
    }
#else
    span_gelu_bwd(dinp, inp, dout, n);
#endif
}

void k_add(float *out, const float *a, const float *b, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void k_acc(float *y, const float *x, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

void k_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T,
                 int C)
{
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *e = wte + (size_t)tok[bt] * C, *p = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++)
            o[c] = e[c] + p[c];
    }
}

void k_embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T,
                 int C)
{
    /* Column blocks: repeated tokens never race, order is fixed. */
    enum { CB = 64 };
    int nb = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CB, c1 = c0 + CB < C ? c0 + CB : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            float *e = dwte + (size_t)tok[bt] * C, *p = dwpe + (size_t)(bt % T) * C;
            for (int c = c0; c < c1; c++) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
    }
}

void k_softmax_xent_fwd(float *probs, float *losses, const int32_t *targets, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *r = probs + (size_t)n * V;
        float mx = row_max(r, V);
        span_exp_sub(r, mx, V);
        float sum = row_sum(r, V);
        span_scale(r, 1.0f / sum, V);
        int t = targets[n]; /* < 0: an ignored target (masked loss) */
        losses[n] = t < 0 ? 0.0f : -logf(r[t] > 1e-30f ? r[t] : 1e-30f);
    }
}

void k_softmax_xent_bwd(float *probs, const int32_t *targets, float dloss, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *r = probs + (size_t)n * V;
        if (targets[n] < 0) { /* ignored target: no gradient */
            memset(r, 0, sizeof(float) * (size_t)V);
            continue;
        }
        span_scale(r, dloss, V);
        r[targets[n]] -= dloss;
    }
}

void k_embed_fwd_tp(float *out, const int32_t *tok, const float *wte, int v0, int V,
                    const float *wpe, int B, int T, int C)
{
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        float *o = out + (size_t)bt * C;
        int r = tok[bt] - v0;
        const float *p = wpe ? wpe + (size_t)(bt % T) * C : NULL;
        if (r >= 0 && r < V) {
            const float *e = wte + (size_t)r * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + (p ? p[c] : 0.0f);
        } else {
            for (int c = 0; c < C; c++)
                o[c] = p ? p[c] : 0.0f;
        }
    }
}

void k_embed_bwd_tp(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int v0,
                    int V, int B, int T, int C)
{
    enum { CB = 64 };
    int nb = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CB, c1 = c0 + CB < C ? c0 + CB : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            float *p = dwpe + (size_t)(bt % T) * C;
            int r = tok[bt] - v0;
            if (r >= 0 && r < V) {
                float *e = dwte + (size_t)r * C;
                for (int c = c0; c < c1; c++)
                    e[c] += d[c];
            }
            for (int c = c0; c < c1; c++)
                p[c] += d[c];
        }
    }
}

void k_rows_max(float *mx, const float *x, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        mx[n] = row_max(x + (size_t)n * V, V);
    }
}

void k_rows_exp_sum(float *x, float *sum, float *tl, const float *mx, const int32_t *targets,
                    int v0, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *r = x + (size_t)n * V;
        const float m = mx[n];
        int t = targets[n] - v0;
        tl[n] = t >= 0 && t < V ? r[t] - m : 0.0f;
        span_exp_sub(r, m, V);
        sum[n] = row_sum(r, V);
    }
}

void k_rows_normalize(float *x, float *losses, const float *sum, const float *tl, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *r = x + (size_t)n * V;
        span_scale(r, 1.0f / sum[n], V);
        losses[n] = logf(sum[n]) - tl[n];
    }
}

void k_softmax_xent_bwd_tp(float *probs, const int32_t *targets, int v0, float dloss, int N,
                           int V)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *r = probs + (size_t)n * V;
        if (targets[n] < 0) { /* ignored target: no gradient */
            memset(r, 0, sizeof(float) * (size_t)V);
            continue;
        }
        span_scale(r, dloss, V);
        int t = targets[n] - v0;
        if (t >= 0 && t < V)
            r[t] -= dloss;
    }
}
