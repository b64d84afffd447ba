// Flash attention forward on tensor cores (WMMA, bf16 or fp16 operands,
// fp32 accumulation): QK^T and PV of each tile are 16x16x16 MMAs; the
// online softmax between them runs in fp32 on CUDA cores. No T x T matrix:
// a block holds one BR x BC score tile in shared memory at a time.
//
//   qkv (B,T,3,NH,hd), out (B,T,NH,hd), lse (B,NH,T) fp32, scale 1/sqrt(hd)
//
// Why WMMA inside the flash kernel rather than cuBLASLt batched GEMMs per
// block: a GEMM per tile would write each score tile to global memory and
// launch twice per tile, losing the fusion that keeps the softmax in shared
// memory; WMMA keeps both products and the softmax in one kernel.
//
// Used when the operands are 16-bit (t = bf16/fp16) or the backend's fp32
// GEMM arithmetic is bf16/fp16 (mixed precision with fp32 activations: q, k,
// v, p are rounded to that type, as the linear layers' operands are), and hd
// is a multiple of 16 up to 128. Exact fp32 keeps the CUDA-core kernel of
// attention.cu. The backward runs on tensor cores too (attention_tc_bwd.cu).
#include <mma.h>

#include "backend/cuda/common.cuh"

namespace {

using namespace nvcuda;

constexpr int BR = 64;  // query rows per block (4 warps x 16)
constexpr int BC = 64;  // keys per tile
constexpr int WARPS = BR / 16;

__device__ __forceinline__ size_t tq_at(int b, int t, int part, int h, int Tn, int NH, int hd)
{
    size_t C = (size_t)NH * hd;
    return ((size_t)b * Tn + t) * 3 * C + part * C + (size_t)h * hd;
}

__device__ __forceinline__ void to_h(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void to_h(__half *p, float v) { *p = __float2half_rn(v); }

// Rows [r0, r0 + n) of one part of qkv into a row-major (n, HD) tile of H,
// times mul; rows past T are zeros.
template <typename T, typename H, int HD>
__device__ void load_rows(H *dst, const T *qkv, int b, int r0, int n, int part, int h, int Tn,
                          int NH, float mul)
{
    for (int e = threadIdx.x; e < n * HD; e += blockDim.x) {
        int r = e / HD, d = e % HD, t = r0 + r;
        float v = t < Tn ? ldf(qkv, tq_at(b, t, part, h, Tn, NH, HD) + d) * mul : 0.0f;
        to_h(&dst[e], v);
    }
}

// Shared memory: Qs (BR,HD) Ks (BC,HD) Vs (BC,HD) in H; per warp: S (16,BC)
// fp32, P (16,BC) H, O (16,HD) fp32.
template <typename H, int HD>
constexpr size_t tc_smem()
{
    return (size_t)(BR + 2 * BC) * HD * sizeof(H) +
           (size_t)WARPS * 16 * (BC * sizeof(float) + BC * sizeof(H) + HD * sizeof(float));
}

template <typename T, typename H, int HD>
__global__ void __launch_bounds__(WARPS * 32) k_flash_fwd_tc(T *out, float *lse, const T *qkv,
                                                            int Tn, int NH, float scale)
{
    extern __shared__ __align__(128) unsigned char smraw[];
    H *Qs = reinterpret_cast<H *>(smraw);
    H *Ks = Qs + BR * HD, *Vs = Ks + BC * HD;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Sw = reinterpret_cast<float *>(Vs + BC * HD) + warp * 16 * BC;
    H *Pw = reinterpret_cast<H *>(reinterpret_cast<float *>(Vs + BC * HD) + WARPS * 16 * BC) +
            warp * 16 * BC;
    float *Ow = reinterpret_cast<float *>(reinterpret_cast<H *>(
                    reinterpret_cast<float *>(Vs + BC * HD) + WARPS * 16 * BC) +
                                          WARPS * 16 * BC) +
                warp * 16 * HD;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int row0 = blockIdx.x * BR, wrow0 = row0 + warp * 16;

    load_rows<T, H, HD>(Qs, qkv, b, row0, BR, 0, h, Tn, NH, scale);
    for (int e = lane; e < 16 * HD; e += 32)
        Ow[e] = 0.0f;
    // lane owns row rr of the warp's 16 and half `half` of each tile's columns
    const int rr = lane % 16, half = lane / 16, i = wrow0 + rr;
    float m = -INFINITY, l = 0.0f;
    const int last = min(Tn - 1, row0 + BR - 1);
    for (int j0 = 0; j0 <= last; j0 += BC) {
        __syncthreads();
        load_rows<T, H, HD>(Ks, qkv, b, j0, BC, 1, h, Tn, NH, 1.0f);
        load_rows<T, H, HD>(Vs, qkv, b, j0, BC, 2, h, Tn, NH, 1.0f);
        __syncthreads();
        if (j0 > wrow0 + 15 || wrow0 >= Tn)
            continue; // warp-uniform: this tile is after every row of the warp
        // S (16,BC) = Q_w (16,HD) K^T (HD,BC)
        for (int n = 0; n < BC / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int k = 0; k < HD / 16; k++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, Qs + warp * 16 * HD + k * 16, HD);
                wmma::load_matrix_sync(fb, Ks + n * 16 * HD + k * 16, HD); // K^T, col-major
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Sw + n * 16, acc, BC, wmma::mem_row_major);
        }
        __syncwarp();
        // online softmax of row rr over this tile (fp32)
        float tmax = -INFINITY;
        for (int c = half * (BC / 2); c < (half + 1) * (BC / 2); c++) {
            int j = j0 + c;
            float s = j <= i && i < Tn ? Sw[rr * BC + c] : -INFINITY;
            Sw[rr * BC + c] = s;
            tmax = fmaxf(tmax, s);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 16));
        float mn = fmaxf(m, tmax);
        float corr = mn == -INFINITY ? 1.0f : expf(m - mn);
        float sum = 0.0f;
        for (int c = half * (BC / 2); c < (half + 1) * (BC / 2); c++) {
            float s = Sw[rr * BC + c];
            float p = s == -INFINITY ? 0.0f : expf(s - mn);
            to_h(&Pw[rr * BC + c], p);
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 16);
        l = l * corr + sum;
        m = mn;
        for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++)
            Ow[rr * HD + d] *= corr;
        __syncwarp();
        // O_w (16,HD) += P_w (16,BC) V (BC,HD)
        for (int dn = 0; dn < HD / 16; dn++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, Ow + dn * 16, HD, wmma::mem_row_major);
            for (int k = 0; k < BC / 16; k++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, Pw + k * 16, BC);
                wmma::load_matrix_sync(fb, Vs + k * 16 * HD + dn * 16, HD);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Ow + dn * 16, acc, HD, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (i >= Tn)
        return;
    if (out) {
        float inv = 1.0f / l;
        size_t o = ((size_t)b * Tn + i) * NH * HD + (size_t)h * HD;
        for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++)
            stf(out, o + d, Ow[rr * HD + d] * inv);
    }
    if (half == 0)
        lse[(size_t)bh * Tn + i] = m + logf(l);
}

template <typename T, typename H, int HD>
int run_tc(bk_stream s, T *out, float *lse, const T *qkv, int B, int Tn, int NH)
{
    constexpr size_t smem = tc_smem<H, HD>();
    CU(cudaFuncSetAttribute(k_flash_fwd_tc<T, H, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smem));
    dim3 grid((Tn + BR - 1) / BR, B * NH);
    k_flash_fwd_tc<T, H, HD><<<grid, WARPS * 32, smem, STREAM(s)>>>(out, lse, qkv, Tn, NH,
                                                                    1.0f / sqrtf((float)HD));
    LAUNCHED("k_flash_fwd_tc");
    return 0;
}

template <typename T, typename H>
int by_hd(bk_stream s, T *out, float *lse, const T *qkv, int B, int Tn, int NH, int hd)
{
    switch (hd) {
    case 32: return run_tc<T, H, 32>(s, out, lse, qkv, B, Tn, NH);
    case 64: return run_tc<T, H, 64>(s, out, lse, qkv, B, Tn, NH);
    case 80: return run_tc<T, H, 80>(s, out, lse, qkv, B, Tn, NH);
    case 96: return run_tc<T, H, 96>(s, out, lse, qkv, B, Tn, NH);
    case 128: return run_tc<T, H, 128>(s, out, lse, qkv, B, Tn, NH);
    }
    return WHALE_ENOTSUP;
}

} // namespace

extern "C" bool bkg_attention_tc_takes(const whale_backend *b, enum whale_dtype t, int hd)
{
    bool sixteen = t != WHALE_FLOAT32 || b->gemm_math != WHALE_FLOAT32;
    return sixteen && (hd == 32 || hd == 64 || hd == 80 || hd == 96 || hd == 128);
}

extern "C" int bkg_attention_fwd_tc(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                                    float *lse, const void *qkv, int B, int Tn, int NH, int hd)
{
    ON_DEVICE(b);
    // the MMA type: the operands' own 16-bit type, or the fp32 GEMM arithmetic
    enum whale_dtype mt = t != WHALE_FLOAT32 ? t : b->gemm_math;
    switch (t) {
    case WHALE_FLOAT32:
        return mt == WHALE_FLOAT16
                   ? by_hd<float, __half>(s, (float *)out, lse, (const float *)qkv, B, Tn, NH, hd)
                   : by_hd<float, __nv_bfloat16>(s, (float *)out, lse, (const float *)qkv, B, Tn,
                                                 NH, hd);
    case WHALE_BFLOAT16:
        return by_hd<__nv_bfloat16, __nv_bfloat16>(s, (__nv_bfloat16 *)out, lse,
                                                   (const __nv_bfloat16 *)qkv, B, Tn, NH, hd);
    case WHALE_FLOAT16:
        return by_hd<__half, __half>(s, (__half *)out, lse, (const __half *)qkv, B, Tn, NH, hd);
    default:
        return WHALE_ENOTSUP;
    }
}
