// cuBLASLt GEMMs (row-major interface of whale_gemm) and the linear layer.
//
// Row-major C (M,N) = op(A) op(B) is column-major C^T (N,M) = op(B)^T op(A)^T:
// cuBLASLt gets B as its "A", A as its "B", m = N, n = M, and every row-major
// matrix X (rows, cols, ld) is the column-major matrix (cols, rows, ld).
// Accumulation is fp32 (CUBLAS_COMPUTE_32F; _FAST_TF32 for fp32 inputs only
// when TF32 was allowed). The chosen algorithm is cached per shape, dtypes
// and pointer alignment (heuristics cost microseconds per call).
#include <cstring>
#include <new>

#include "backend/cuda/common.cuh"
#include "backend/cuda/lt_layout.h"

#define LT(call)                                                                              \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            whale_error("cublasLt: %s failed: %s (%d) at %s:%d", #call,                      \
                        cublasLtGetStatusName(s_), (int)s_, __FILE__, __LINE__);                \
            rc = WHALE_ENCCL;                                                                 \
            goto out;                                                                         \
        }                                                                                     \
    } while (0)

namespace {

struct gemm_key {
    int ta, tb, M, N, K, lda, ldb, ldc, abt, ct, beta0, align, comp;
    bool operator==(const gemm_key &o) const { return !memcmp(this, &o, sizeof o); }
};

struct algo_entry {
    gemm_key key;
    cublasLtMatmulAlgo_t algo;
    bool used;
};

} // namespace

struct bkg_algo_cache {
    enum { CAP = 256 };
    algo_entry e[CAP];
    int next;
};

static cudaDataType_t cuda_type(enum whale_dtype t)
{
    return t == WHALE_BFLOAT16 ? CUDA_R_16BF : t == WHALE_FLOAT16 ? CUDA_R_16F : CUDA_R_32F;
}

// Largest power of two (<= 256) dividing the address.
static int align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % al))
        al >>= 1;
    return al;
}

extern "C" int bkg_gemm_init(whale_backend *b)
{
    bkg_impl *g = IMPL(b);
    cublasStatus_t s = cublasLtCreate(&g->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        whale_error("cublasLt: cublasLtCreate failed: %s", cublasLtGetStatusName(s));
        return WHALE_ENCCL;
    }
    // 32 MiB: what NVIDIA recommends for Hopper's cuBLASLt kernels
    g->ws_bytes = 32u << 20;
    CU(cudaMalloc(&g->ws, g->ws_bytes));
    g->algos = new (std::nothrow) bkg_algo_cache();
    return g->algos ? 0 : WHALE_ENOMEM;
}

extern "C" void bkg_gemm_fini(whale_backend *b)
{
    bkg_impl *g = IMPL(b);
    if (g->ws)
        cudaFree(g->ws);
    if (g->lt)
        cublasLtDestroy(g->lt);
    delete g->algos;
    g->ws = nullptr;
    g->lt = nullptr;
    g->algos = nullptr;
}

extern "C" int bkg_gemm(whale_backend *b, bk_stream s, bool ta, bool tb, int M, int N, int K,
                        float alpha, const void *A, int lda, const void *B, int ldb,
                        enum whale_dtype abt, float beta, void *C, int ldc, enum whale_dtype ct)
{
    ON_DEVICE(b);
    bkg_impl *g = IMPL(b);
    int rc = 0;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    // fp32 operands: the backend's fp32 GEMM arithmetic (whale_backend_set_fp32_gemm_math):
    // bf16 / fp16 tensor cores on rounded operands (mixed precision with fp32
    // activations), TF32 when allowed, else exact fp32
    cublasComputeType_t comp = CUBLAS_COMPUTE_32F;
    if (abt == WHALE_FLOAT32) {
        if (b->gemm_math == WHALE_BFLOAT16)
            comp = CUBLAS_COMPUTE_32F_FAST_16BF;
        else if (b->gemm_math == WHALE_FLOAT16)
            comp = CUBLAS_COMPUTE_32F_FAST_16F;
        else if (g->tf32)
            comp = CUBLAS_COMPUTE_32F_FAST_TF32;
    }
    const struct lt_map mp = lt_map_rowmajor(ta, tb, M, N, K, lda, ldb, ldc);
    cublasOperation_t opA = mp.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's A is our B
    cublasOperation_t opB = mp.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    int al = align_of(A);
    if (align_of(B) < al)
        al = align_of(B);
    if (align_of(C) < al)
        al = align_of(C);
    gemm_key key;
    memset(&key, 0, sizeof key);
    key = gemm_key{ ta, tb, M, N, K, lda, ldb, ldc, (int)abt, (int)ct, beta == 0.0f, al, (int)comp };
    const cublasLtMatmulAlgo_t *algo = nullptr;
    bkg_algo_cache *cache = g->algos;
    for (int i = 0; i < bkg_algo_cache::CAP && cache->e[i].used; i++)
        if (cache->e[i].key == key) {
            algo = &cache->e[i].algo;
            break;
        }

    LT(cublasLtMatmulDescCreate(&op, comp, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB));
    // stored shapes, column-major (lt_layout.h; checked against cblas in the unit test)
    LT(cublasLtMatrixLayoutCreate(&la, cuda_type(abt), mp.a_rows, mp.a_cols, mp.a_ld));
    LT(cublasLtMatrixLayoutCreate(&lb, cuda_type(abt), mp.b_rows, mp.b_cols, mp.b_ld));
    LT(cublasLtMatrixLayoutCreate(&lc, cuda_type(ct), mp.c_rows, mp.c_cols, mp.c_ld));
    if (!algo) {
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        uint32_t al32 = (uint32_t)al;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &g->ws_bytes, sizeof g->ws_bytes));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &al32, sizeof al32));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &al32, sizeof al32));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &al32, sizeof al32));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &al32, sizeof al32));
        LT(cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, lc, lc, pref, 1, &res, &found));
        if (found < 1) {
            whale_error("cublasLt: no algorithm for C(%d,%d) = op(A) op(B), K %d, %s inputs, %s "
                        "output, alignment %d", M, N, K, whale_dtype_name(abt),
                        whale_dtype_name(ct), al);
            rc = WHALE_ENOTSUP;
            goto out;
        }
        algo_entry &slot = cache->e[cache->next];
        cache->next = (cache->next + 1) % bkg_algo_cache::CAP;
        slot.key = key;
        slot.algo = res.algo;
        slot.used = true;
        algo = &slot.algo;
    }
    LT(cublasLtMatmul(g->lt, op, &alpha, B, la, A, lb, &beta, C, lc, C, lc, algo, g->ws,
                      g->ws_bytes, STREAM(s)));
out:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (lc)
        cublasLtMatrixLayoutDestroy(lc);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (op)
        cublasLtMatmulDescDestroy(op);
    return rc;
}

// out (N,OC) rows = bias (OC)
template <typename T>
__global__ void __launch_bounds__(256) k_bias_rows(T *out, const T *bias, int N, int OC)
{
    int64_t n = (int64_t)N * OC;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

extern "C" int bkg_linear_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                              const void *inp, const void *w, const void *bias, int N, int IC,
                              int OC)
{
    ON_DEVICE(b);
    if (bias) {
        // same order as the cpu kernel: out = bias, then out += inp w^T
        DISPATCH(t, (k_bias_rows<T><<<grid_for((int64_t)N * OC, 256), 256, 0, STREAM(s)>>>(
                        (T *)out, (const T *)bias, N, OC)));
        LAUNCHED("k_bias_rows");
    }
    if (!N || !OC)
        return 0;
    return bkg_gemm(b, s, false, true, N, OC, IC, 1.0f, inp, IC, w, IC, t, bias ? 1.0f : 0.0f,
                    out, OC, t);
}

extern "C" int bkg_linear_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                              float *dw, float *db, const void *dout, const void *inp,
                              const void *w, int N, int IC, int OC, bool acc)
{
    int rc = 0;
    if (!N)
        return 0;
    // dinp (N,IC) = dout (N,OC) @ w (OC,IC)
    if (dinp && (rc = bkg_gemm(b, s, false, false, N, IC, OC, 1.0f, dout, OC, w, IC, t,
                               acc ? 1.0f : 0.0f, dinp, IC, t)))
        return rc;
    // dw (OC,IC) fp32 += dout^T (OC,N) @ inp (N,IC)
    if (dw && (rc = bkg_gemm(b, s, true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, t, 1.0f, dw,
                             IC, WHALE_FLOAT32)))
        return rc;
    if (db)
        rc = bkg_colsum_acc(b, s, t, db, dout, N, OC);
    return rc;
}
