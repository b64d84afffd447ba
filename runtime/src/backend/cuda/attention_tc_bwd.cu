// Flash attention backward on tensor cores (WMMA, bf16 or fp16 operands,
// fp32 accumulation), the counterpart of attention_tc.cu's forward:
// probabilities are rebuilt tile by tile from q, k and the saved lse; every
// product (Q K^T, dO V^T, dS K, P^T dO, dS^T Q) is a 16x16x16 MMA and the
// element-wise part (exp, dS = P (dP - D)) runs in fp32 on CUDA cores.
//
//   qkv (B,T,3,NH,hd), dout and out (B,T,NH,hd), lse (B,NH,T) fp32,
//   dqkv (B,T,3,NH,hd) overwritten; scale 1/sqrt(hd);
//   D (B,NH,T) = rowsum(dout * out) first (one warp per row, fp32).
//
// Two kernels, so that every gradient element has one owner and a fixed
// order of additions (no atomics, the same bits run after run):
//   dQ:    a block of BR = 64 query rows (4 warps x 16) walks the key tiles
//          up to its diagonal: S = Q K^T, dP = dO V^T, dS, dQ += dS K.
//   dK/dV: a block of BC = 64 keys (4 warps x 16) walks the query tiles
//          from its diagonal on: S^T = K Q^T, dP^T = V dO^T,
//          dV += P^T dO, dK += dS^T Q.
// Operands are rounded to the MMA type once when they are staged in shared
// memory (P and dS too), like the forward. Used where the forward uses
// tensor cores (bkg_attention_tc_takes) and the tiles fit the device's
// shared memory; otherwise attention.cu's CUDA-core backward runs.
#include <mma.h>

#include "backend/cuda/common.cuh"

namespace {

using namespace nvcuda;

constexpr int BR = 64; // query rows per tile (dQ: per block)
constexpr int BC = 64; // keys per tile (dK/dV: per block)
constexpr int WARPS = 4;

__device__ __forceinline__ size_t bq_at(int b, int t, int part, int h, int Tn, int NH, int hd)
{
    size_t C = (size_t)NH * hd;
    return ((size_t)b * Tn + t) * 3 * C + part * C + (size_t)h * hd;
}

__device__ __forceinline__ size_t bo_at(int b, int t, int h, int Tn, int NH, int hd)
{
    return ((size_t)b * Tn + t) * NH * hd + (size_t)h * hd;
}

__device__ __forceinline__ void to_h(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void to_h(__half *p, float v) { *p = __float2half_rn(v); }

// Rows [r0, r0 + n) of one head (part 0..2 of qkv, or -1: a (B,T,NH,hd)
// tensor) into a row-major (n, HD) tile of H, times mul; rows past T: zeros.
template <typename T, typename H, int HD>
__device__ void stage(H *dst, const T *src, int b, int r0, int n, int part, int h, int Tn, int NH,
                      float mul)
{
    for (int e = threadIdx.x; e < n * HD; e += blockDim.x) {
        int r = e / HD, d = e % HD, t = r0 + r;
        float v = 0.0f;
        if (t < Tn)
            v = ldf(src, (part >= 0 ? bq_at(b, t, part, h, Tn, NH, HD) : bo_at(b, t, h, Tn, NH, HD)) +
                             d) * mul;
        to_h(&dst[e], v);
    }
}

// acc (16, 16 x NT) = A (16, KD) row-major (lda) x B^T, B stored row-major
// (16 x NT rows of KD, ldb): the "Q K^T" form, read col-major.
template <typename H, int KD, int NT>
__device__ void mma_abt(float *out, int ldo, const H *A, int lda, const H *B, int ldb)
{
    for (int n = 0; n < NT; n++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < KD / 16; k++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::col_major> fb;
            wmma::load_matrix_sync(fa, A + k * 16, lda);
            wmma::load_matrix_sync(fb, B + n * 16 * ldb + k * 16, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + n * 16, acc, ldo, wmma::mem_row_major);
    }
}

// acc (16, HD) fp32 += A (16, KD) row-major (lda) x B (KD, HD) row-major (ldb)
template <typename H, int KD, int HD>
__device__ void mma_ab_acc(float *acc_sm, const H *A, int lda, const H *B, int ldb)
{
    for (int dn = 0; dn < HD / 16; dn++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(acc, acc_sm + dn * 16, HD, wmma::mem_row_major);
        for (int k = 0; k < KD / 16; k++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::row_major> fb;
            wmma::load_matrix_sync(fa, A + k * 16, lda);
            wmma::load_matrix_sync(fb, B + k * 16 * ldb + dn * 16, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(acc_sm + dn * 16, acc, HD, wmma::mem_row_major);
    }
}

// Shared memory of the dQ kernel: Q, dO (BR,HD), K, V (BC,HD) in H; per warp
// S, dP (16,BC) fp32, dS (16,BC) H, dQ (16,HD) fp32.
template <typename H, int HD>
constexpr size_t dq_smem()
{
    return (size_t)(2 * BR + 2 * BC) * HD * sizeof(H) +
           (size_t)WARPS * 16 * (2 * BC * sizeof(float) + BC * sizeof(H) + HD * sizeof(float));
}

template <typename T, typename H, int HD>
__global__ void __launch_bounds__(WARPS * 32) k_dq_tc(T *dqkv, const T *dout, const T *qkv,
                                                     const float *lse, const float *D, int Tn,
                                                     int NH, float scale)
{
    extern __shared__ __align__(128) unsigned char smraw[];
    H *Qs = reinterpret_cast<H *>(smraw), *Gs = Qs + BR * HD, *Ks = Gs + BR * HD, *Vs = Ks + BC * HD;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Sw = reinterpret_cast<float *>(Vs + BC * HD) + warp * 16 * 2 * BC, *Pw = Sw + 16 * BC;
    H *dSw = reinterpret_cast<H *>(reinterpret_cast<float *>(Vs + BC * HD) + WARPS * 16 * 2 * BC) +
             warp * 16 * BC;
    float *Qacc = reinterpret_cast<float *>(reinterpret_cast<H *>(reinterpret_cast<float *>(
                      Vs + BC * HD) + WARPS * 16 * 2 * BC) + WARPS * 16 * BC) + warp * 16 * HD;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int row0 = blockIdx.x * BR, wrow0 = row0 + warp * 16;
    stage<T, H, HD>(Qs, qkv, b, row0, BR, 0, h, Tn, NH, scale);
    stage<T, H, HD>(Gs, dout, b, row0, BR, -1, h, Tn, NH, 1.0f);
    for (int e = lane; e < 16 * HD; e += 32)
        Qacc[e] = 0.0f;
    const int rr = lane % 16, half = lane / 16, i = wrow0 + rr;
    const float Li = i < Tn ? lse[(size_t)bh * Tn + i] : 0.0f;
    const float Di = i < Tn ? D[(size_t)bh * Tn + i] : 0.0f;
    const int last = min(Tn - 1, row0 + BR - 1);
    for (int j0 = 0; j0 <= last; j0 += BC) {
        __syncthreads();
        stage<T, H, HD>(Ks, qkv, b, j0, BC, 1, h, Tn, NH, 1.0f);
        stage<T, H, HD>(Vs, qkv, b, j0, BC, 2, h, Tn, NH, 1.0f);
        __syncthreads();
        if (j0 > wrow0 + 15 || wrow0 >= Tn)
            continue; // warp-uniform: the tile is after every row of the warp
        mma_abt<H, HD, BC / 16>(Sw, BC, Qs + warp * 16 * HD, HD, Ks, HD); // S (16,BC)
        mma_abt<H, HD, BC / 16>(Pw, BC, Gs + warp * 16 * HD, HD, Vs, HD); // dP (16,BC)
        __syncwarp();
        for (int c = half * (BC / 2); c < (half + 1) * (BC / 2); c++) {
            int j = j0 + c;
            float ds = 0.0f;
            if (j <= i && i < Tn) {
                float p = expf(Sw[rr * BC + c] - Li);
                ds = p * (Pw[rr * BC + c] - Di);
            }
            to_h(&dSw[rr * BC + c], ds);
        }
        __syncwarp();
        mma_ab_acc<H, BC, HD>(Qacc, dSw, BC, Ks, HD); // dQ (16,HD) += dS (16,BC) K (BC,HD)
        __syncwarp();
    }
    if (i >= Tn)
        return;
    size_t o = bq_at(b, i, 0, h, Tn, NH, HD);
    for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++)
        stf(dqkv, o + d, Qacc[rr * HD + d] * scale);
}

// Shared memory of the dK/dV kernel: K, V (BC,HD), Q, dO (BR,HD) in H; lse,
// D (BR) fp32; per warp S^T, dP^T (16,BR) fp32, P^T, dS^T (16,BR) H, dK, dV
// (16,HD) fp32.
template <typename H, int HD>
constexpr size_t dkv_smem()
{
    return (size_t)(2 * BR + 2 * BC) * HD * sizeof(H) + 2 * BR * sizeof(float) +
           (size_t)WARPS * 16 * (2 * BR * sizeof(float) + 2 * BR * sizeof(H) +
                                 2 * HD * sizeof(float));
}

template <typename T, typename H, int HD>
__global__ void __launch_bounds__(WARPS * 32) k_dkv_tc(T *dqkv, const T *dout, const T *qkv,
                                                      const float *lse, const float *D, int Tn,
                                                      int NH, float scale)
{
    extern __shared__ __align__(128) unsigned char smraw[];
    H *Ks = reinterpret_cast<H *>(smraw), *Vs = Ks + BC * HD, *Qs = Vs + BC * HD, *Gs = Qs + BR * HD;
    float *Ls = reinterpret_cast<float *>(Gs + BR * HD), *Ds = Ls + BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *St = Ds + BR + warp * 16 * 2 * BR, *dPt = St + 16 * BR;
    H *Pt = reinterpret_cast<H *>(Ds + BR + WARPS * 16 * 2 * BR) + warp * 16 * 2 * BR,
      *dSt = Pt + 16 * BR;
    float *Kacc = reinterpret_cast<float *>(reinterpret_cast<H *>(Ds + BR + WARPS * 16 * 2 * BR) +
                                            WARPS * 16 * 2 * BR) + warp * 16 * 2 * HD,
          *Vacc = Kacc + 16 * HD;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int col0 = blockIdx.x * BC, wcol0 = col0 + warp * 16;
    // k pre-scaled: s = (scale k) . q, as the forward's (scale q) . k
    stage<T, H, HD>(Ks, qkv, b, col0, BC, 1, h, Tn, NH, scale);
    stage<T, H, HD>(Vs, qkv, b, col0, BC, 2, h, Tn, NH, 1.0f);
    for (int e = lane; e < 2 * 16 * HD; e += 32)
        Kacc[e] = 0.0f; // Kacc and Vacc are adjacent
    const int rr = lane % 16, half = lane / 16, j = wcol0 + rr;
    for (int i0 = (col0 / BR) * BR; i0 < Tn; i0 += BR) {
        __syncthreads();
        stage<T, H, HD>(Qs, qkv, b, i0, BR, 0, h, Tn, NH, 1.0f);
        stage<T, H, HD>(Gs, dout, b, i0, BR, -1, h, Tn, NH, 1.0f);
        for (int e = threadIdx.x; e < BR; e += blockDim.x) {
            int t = i0 + e;
            Ls[e] = t < Tn ? lse[(size_t)bh * Tn + t] : 0.0f;
            Ds[e] = t < Tn ? D[(size_t)bh * Tn + t] : 0.0f;
        }
        __syncthreads();
        if (i0 + BR - 1 < wcol0 || wcol0 >= Tn)
            continue; // warp-uniform: every query of the tile is before the warp's keys
        mma_abt<H, HD, BR / 16>(St, BR, Ks + warp * 16 * HD, HD, Qs, HD);  // S^T (16,BR)
        mma_abt<H, HD, BR / 16>(dPt, BR, Vs + warp * 16 * HD, HD, Gs, HD); // dP^T (16,BR)
        __syncwarp();
        for (int c = half * (BR / 2); c < (half + 1) * (BR / 2); c++) {
            int i = i0 + c;
            float p = 0.0f, ds = 0.0f;
            if (i >= j && i < Tn && j < Tn) {
                p = expf(St[rr * BR + c] - Ls[c]);
                ds = p * (dPt[rr * BR + c] - Ds[c]);
            }
            to_h(&Pt[rr * BR + c], p);
            to_h(&dSt[rr * BR + c], ds);
        }
        __syncwarp();
        mma_ab_acc<H, BR, HD>(Vacc, Pt, BR, Gs, HD);  // dV (16,HD) += P^T (16,BR) dO (BR,HD)
        mma_ab_acc<H, BR, HD>(Kacc, dSt, BR, Qs, HD); // dK (16,HD) += dS^T (16,BR) Q (BR,HD)
        __syncwarp();
    }
    if (j >= Tn)
        return;
    size_t ok = bq_at(b, j, 1, h, Tn, NH, HD), ov = bq_at(b, j, 2, h, Tn, NH, HD);
    for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++) {
        stf(dqkv, ok + d, Kacc[rr * HD + d] * scale);
        stf(dqkv, ov + d, Vacc[rr * HD + d]);
    }
}

// D (B,NH,T) = rowsum(dout * out), one warp per row
template <typename T>
__global__ void __launch_bounds__(256) k_tc_D(float *D, const T *dout, const T *out, int rows,
                                              int Tn, int NH, int hd)
{
    int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int bh = row / Tn, i = row % Tn, b = bh / NH, h = bh % NH;
    size_t o = bo_at(b, i, h, Tn, NH, hd);
    float s = 0;
    for (int d = lane; d < hd; d += 32)
        s += ldf(dout, o + d) * ldf(out, o + d);
    s = warp_sum(s);
    if (lane == 0)
        D[row] = s;
}

template <typename H, int HD>
bool fits(const whale_backend *b)
{
    size_t most = IMPL(b)->prop.sharedMemPerBlockOptin;
    return dq_smem<H, HD>() <= most && dkv_smem<H, HD>() <= most;
}

template <typename T, typename H, int HD>
int run_bwd_tc(bk_stream s, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse,
               int B, int Tn, int NH)
{
    constexpr size_t sq = dq_smem<H, HD>(), skv = dkv_smem<H, HD>();
    CU(cudaFuncSetAttribute(k_dq_tc<T, H, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)sq));
    CU(cudaFuncSetAttribute(k_dkv_tc<T, H, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)skv));
    size_t rows = (size_t)B * NH * Tn;
    float *D = nullptr;
    CU(cudaMallocAsync((void **)&D, rows * sizeof(float), STREAM(s)));
    float scale = 1.0f / sqrtf((float)HD);
    k_tc_D<T><<<(unsigned)((rows + 7) / 8), 256, 0, STREAM(s)>>>(D, dout, out, (int)rows, Tn, NH,
                                                                 HD);
    k_dq_tc<T, H, HD><<<dim3((Tn + BR - 1) / BR, B * NH), WARPS * 32, sq, STREAM(s)>>>(
        dqkv, dout, qkv, lse, D, Tn, NH, scale);
    k_dkv_tc<T, H, HD><<<dim3((Tn + BC - 1) / BC, B * NH), WARPS * 32, skv, STREAM(s)>>>(
        dqkv, dout, qkv, lse, D, Tn, NH, scale);
    cudaError_t e = cudaGetLastError();
    CU(cudaFreeAsync(D, STREAM(s)));
    if (e != cudaSuccess) {
        whale_error("cuda: tensor-core attention backward (T %d, %d heads of %d) failed: %s", Tn,
                    NH, HD, cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

template <typename H>
bool fits_hd(const whale_backend *b, int hd)
{
    switch (hd) {
    case 32: return fits<H, 32>(b);
    case 64: return fits<H, 64>(b);
    case 80: return fits<H, 80>(b);
    case 96: return fits<H, 96>(b);
    case 128: return fits<H, 128>(b);
    }
    return false;
}

template <typename T, typename H>
int by_hd(bk_stream s, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse,
          int B, int Tn, int NH, int hd)
{
    switch (hd) {
    case 32: return run_bwd_tc<T, H, 32>(s, dqkv, dout, qkv, out, lse, B, Tn, NH);
    case 64: return run_bwd_tc<T, H, 64>(s, dqkv, dout, qkv, out, lse, B, Tn, NH);
    case 80: return run_bwd_tc<T, H, 80>(s, dqkv, dout, qkv, out, lse, B, Tn, NH);
    case 96: return run_bwd_tc<T, H, 96>(s, dqkv, dout, qkv, out, lse, B, Tn, NH);
    case 128: return run_bwd_tc<T, H, 128>(s, dqkv, dout, qkv, out, lse, B, Tn, NH);
    }
    return WHALE_ENOTSUP;
}

} // namespace

extern "C" bool bkg_attention_bwd_tc_takes(const whale_backend *b, enum whale_dtype t, int hd)
{
    if (!bkg_attention_tc_takes(b, t, hd))
        return false;
    enum whale_dtype mt = t != WHALE_FLOAT32 ? t : b->gemm_math;
    return mt == WHALE_FLOAT16 ? fits_hd<__half>(b, hd) : fits_hd<__nv_bfloat16>(b, hd);
}

extern "C" int bkg_attention_bwd_tc(whale_backend *b, bk_stream s, enum whale_dtype t, void *dqkv,
                                    const void *dout, const void *qkv, const void *out,
                                    const float *lse, int B, int Tn, int NH, int hd)
{
    ON_DEVICE(b);
    enum whale_dtype mt = t != WHALE_FLOAT32 ? t : b->gemm_math;
    switch (t) {
    case WHALE_FLOAT32:
        return mt == WHALE_FLOAT16
                   ? by_hd<float, __half>(s, (float *)dqkv, (const float *)dout,
                                          (const float *)qkv, (const float *)out, lse, B, Tn, NH, hd)
                   : by_hd<float, __nv_bfloat16>(s, (float *)dqkv, (const float *)dout,
                                                 (const float *)qkv, (const float *)out, lse, B,
                                                 Tn, NH, hd);
    case WHALE_BFLOAT16:
        return by_hd<__nv_bfloat16, __nv_bfloat16>(
            s, (__nv_bfloat16 *)dqkv, (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)qkv,
            (const __nv_bfloat16 *)out, lse, B, Tn, NH, hd);
    case WHALE_FLOAT16:
        return by_hd<__half, __half>(s, (__half *)dqkv, (const __half *)dout,
                                     (const __half *)qkv, (const __half *)out, lse, B, Tn, NH, hd);
    default:
        return WHALE_ENOTSUP;
    }
}
