/* How a row-major GEMM of whale_gemm becomes a column-major cuBLASLt call
 * (plain C, shared by gemm.cu and the cpu unit test that checks the mapping
 * with a column-major cblas_sgemm, since no GPU runs in CI).
 *
 * Row-major C (M,N) = op(A) op(B) is column-major C^T (N,M) =
 * op(B)^T op(A)^T, and a row-major matrix stored (rows, cols, ld) is the
 * column-major matrix (cols, rows, ld). So cuBLASLt's "A" is our B with our
 * transB, its "B" is our A with our transA, m = N, n = M, k = K. */
#ifndef BACKEND_CUDA_LT_LAYOUT_H
#define BACKEND_CUDA_LT_LAYOUT_H

#include <stdbool.h>

struct lt_map {
    bool a_trans, b_trans;      /* ops on cuBLASLt's A (= our B) and B (= our A) */
    int m, n, k;
    int a_rows, a_cols, a_ld;   /* column-major layouts as stored (before the op) */
    int b_rows, b_cols, b_ld;
    int c_rows, c_cols, c_ld;
};

static inline struct lt_map lt_map_rowmajor(bool ta, bool tb, int M, int N, int K, int lda,
                                            int ldb, int ldc)
{
    struct lt_map r;
    r.a_trans = tb;
    r.b_trans = ta;
    r.m = N;
    r.n = M;
    r.k = K;
    /* our B is stored (tb ? N x K : K x N) row-major */
    r.a_rows = tb ? K : N;
    r.a_cols = tb ? N : K;
    r.a_ld = ldb;
    /* our A is stored (ta ? K x M : M x K) row-major */
    r.b_rows = ta ? M : K;
    r.b_cols = ta ? K : M;
    r.b_ld = lda;
    r.c_rows = N;
    r.c_cols = M;
    r.c_ld = ldc;
    return r;
}

#endif
