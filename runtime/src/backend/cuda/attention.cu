// Causal self-attention, flash-style (Dao et al.): scores are built tile by
// tile in shared memory with an online softmax; only the log-sum-exp of
// each score row (B,NH,T) is kept for backward, never a T x T matrix.
//
//   qkv (B,T,3,NH,hd): q at [b][t][0][h], k at [b][t][1][h], v at [b][t][2][h]
//   out (B,T,NH,hd), saved = lse (B,NH,T) fp32, scale = 1/sqrt(hd)
//
// Work split: one warp per query row (forward, dQ) or per key row (dK, dV);
// a block = ROWS warps sharing KT-row tiles of the other side in shared
// memory. In a tile, lane j scores key (or query) j of the tile; each lane
// owns head dimensions d = lane + 32 c (c < NCH) of the accumulators.
// Arithmetic is fp32 on CUDA cores: the exact fp32 forward and backward,
// and the backward where the tensor-core tiles do not fit the device's
// shared memory; 16-bit operands (or 16-bit GEMM arithmetic) run on tensor
// cores (attention_tc.cu forward, attention_tc_bwd.cu backward). No
// atomics: dQ and dK/dV are separate passes.
// hd up to 256 (NCH <= 8).
#include "backend/cuda/common.cuh"

namespace {

constexpr int ROWS = 8; // warps (rows) per block
constexpr int KT = 32;  // rows per shared tile (one per lane)

// Rows of qkv for (b, t, part, h): stride between t is 3*C.
__device__ __forceinline__ size_t qkv_at(int b, int t, int part, int h, int Tn, int NH, int hd)
{
    size_t C = (size_t)NH * hd;
    return ((size_t)b * Tn + t) * 3 * C + part * C + (size_t)h * hd;
}

__device__ __forceinline__ size_t o_at(int b, int t, int h, int Tn, int NH, int hd)
{
    return ((size_t)b * Tn + t) * NH * hd + (size_t)h * hd;
}

// Load rows [r0, r0 + KT) of one part into a padded tile (stride hd + 1);
// rows past T are zeros.
template <typename T>
__device__ void load_tile(float *tile, const T *src, int b, int r0, int part, int h, int Tn,
                          int NH, int hd, bool is_qkv)
{
    for (int e = threadIdx.x; e < KT * hd; e += blockDim.x) {
        int r = e / hd, d = e % hd, t = r0 + r;
        float v = 0;
        if (t < Tn)
            v = ldf(src, (is_qkv ? qkv_at(b, t, part, h, Tn, NH, hd) : o_at(b, t, h, Tn, NH, hd)) +
                             d);
        tile[r * (hd + 1) + d] = v;
    }
}

__device__ __forceinline__ float dot_row(const float *a, const float *bt, int hd)
{
    float s = 0;
    for (int d = 0; d < hd; d++)
        s += a[d] * bt[d];
    return s;
}

template <typename T, int NCH>
__global__ void __launch_bounds__(ROWS * 32) k_flash_fwd(T *out, float *lse, const T *qkv, int Tn,
                                                        int NH, int hd, float scale)
{
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + KT * (hd + 1), *Qs = Vs + KT * (hd + 1);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int row0 = blockIdx.x * ROWS, i = row0 + warp;
    bool valid = i < Tn;
    float *q = Qs + warp * hd;
    for (int d = lane; d < hd; d += 32)
        q[d] = valid ? ldf(qkv, qkv_at(b, i, 0, h, Tn, NH, hd) + d) * scale : 0.0f;
    float m = -INFINITY, l = 0, acc[NCH];
#pragma unroll
    for (int c = 0; c < NCH; c++)
        acc[c] = 0;
    int last = min(Tn - 1, row0 + ROWS - 1);
    for (int j0 = 0; j0 <= last; j0 += KT) {
        __syncthreads();
        load_tile(Ks, qkv, b, j0, 1, h, Tn, NH, hd, true);
        load_tile(Vs, qkv, b, j0, 2, h, Tn, NH, hd, true);
        __syncthreads();
        if (!valid || j0 > i)
            continue; // warp-uniform
        int j = j0 + lane;
        float s = j <= i ? dot_row(q, Ks + lane * (hd + 1), hd) : -INFINITY;
        float mn = fmaxf(m, warp_max(s));
        float p = j <= i ? expf(s - mn) : 0.0f;
        float corr = expf(m - mn); // m = -inf on the first tile: 0
        l = l * corr + warp_sum(p);
#pragma unroll
        for (int c = 0; c < NCH; c++)
            acc[c] *= corr;
        if (out) {
            int nj = min(KT, i - j0 + 1);
            for (int jj = 0; jj < nj; jj++) {
                float pj = __shfl_sync(0xffffffffu, p, jj);
                const float *vr = Vs + jj * (hd + 1);
#pragma unroll
                for (int c = 0; c < NCH; c++) {
                    int d = lane + 32 * c;
                    if (d < hd)
                        acc[c] += pj * vr[d];
                }
            }
        }
        m = mn;
    }
    if (!valid)
        return;
    if (out) {
        float inv = 1.0f / l;
#pragma unroll
        for (int c = 0; c < NCH; c++) {
            int d = lane + 32 * c;
            if (d < hd)
                stf(out, o_at(b, i, h, Tn, NH, hd) + d, acc[c] * inv);
        }
    }
    if (lane == 0)
        lse[(size_t)bh * Tn + i] = m + logf(l);
}

// D (B,NH,T) = rowsum(dout * out), one warp per row.
template <typename T>
__global__ void __launch_bounds__(256) k_flash_D(float *D, const T *dout, const T *out, int B,
                                                 int Tn, int NH, int hd)
{
    int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * Tn)
        return;
    int bh = row / Tn, i = row % Tn, b = bh / NH, h = bh % NH;
    size_t o = o_at(b, i, h, Tn, NH, hd);
    float s = 0;
    for (int d = lane; d < hd; d += 32)
        s += ldf(dout, o + d) * ldf(out, o + d);
    s = warp_sum(s);
    if (lane == 0)
        D[row] = s;
}

// dQ: one warp per query row i, over key tiles j <= i.
template <typename T, int NCH>
__global__ void __launch_bounds__(ROWS * 32) k_flash_dq(T *dqkv, const T *dout, const T *qkv,
                                                       const float *lse, const float *D, int Tn,
                                                       int NH, int hd, float scale)
{
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + KT * (hd + 1), *Qs = Vs + KT * (hd + 1), *Gs = Qs + ROWS * hd;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int row0 = blockIdx.x * ROWS, i = row0 + warp;
    bool valid = i < Tn;
    float *q = Qs + warp * hd, *g = Gs + warp * hd;
    for (int d = lane; d < hd; d += 32) {
        q[d] = valid ? ldf(qkv, qkv_at(b, i, 0, h, Tn, NH, hd) + d) * scale : 0.0f;
        g[d] = valid ? ldf(dout, o_at(b, i, h, Tn, NH, hd) + d) : 0.0f;
    }
    float L = valid ? lse[(size_t)bh * Tn + i] : 0.0f, Di = valid ? D[(size_t)bh * Tn + i] : 0.0f;
    float acc[NCH];
#pragma unroll
    for (int c = 0; c < NCH; c++)
        acc[c] = 0;
    int last = min(Tn - 1, row0 + ROWS - 1);
    for (int j0 = 0; j0 <= last; j0 += KT) {
        __syncthreads();
        load_tile(Ks, qkv, b, j0, 1, h, Tn, NH, hd, true);
        load_tile(Vs, qkv, b, j0, 2, h, Tn, NH, hd, true);
        __syncthreads();
        if (!valid || j0 > i)
            continue;
        int j = j0 + lane;
        float ds = 0;
        if (j <= i) {
            float p = expf(dot_row(q, Ks + lane * (hd + 1), hd) - L);
            float dp = dot_row(g, Vs + lane * (hd + 1), hd);
            ds = p * (dp - Di);
        }
        int nj = min(KT, i - j0 + 1);
        for (int jj = 0; jj < nj; jj++) {
            float dj = __shfl_sync(0xffffffffu, ds, jj);
            const float *kr = Ks + jj * (hd + 1);
#pragma unroll
            for (int c = 0; c < NCH; c++) {
                int d = lane + 32 * c;
                if (d < hd)
                    acc[c] += dj * kr[d];
            }
        }
    }
    if (!valid)
        return;
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        int d = lane + 32 * c;
        if (d < hd)
            stf(dqkv, qkv_at(b, i, 0, h, Tn, NH, hd) + d, acc[c] * scale);
    }
}

// dK, dV: one warp per key row j, over query tiles i >= j.
template <typename T, int NCH>
__global__ void __launch_bounds__(ROWS * 32) k_flash_dkv(T *dqkv, const T *dout, const T *qkv,
                                                        const float *lse, const float *D, int Tn,
                                                        int NH, int hd, float scale)
{
    extern __shared__ float sm[];
    float *Qs = sm, *Gs = Qs + KT * (hd + 1), *Ks = Gs + KT * (hd + 1), *Vs = Ks + ROWS * hd;
    float *Ls = Vs + ROWS * hd, *Ds = Ls + KT;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int col0 = blockIdx.x * ROWS, j = col0 + warp;
    bool valid = j < Tn;
    float *k = Ks + warp * hd, *v = Vs + warp * hd;
    for (int d = lane; d < hd; d += 32) {
        // k pre-scaled: s = (scale k) . q, as in the forward (scale q) . k
        k[d] = valid ? ldf(qkv, qkv_at(b, j, 1, h, Tn, NH, hd) + d) * scale : 0.0f;
        v[d] = valid ? ldf(qkv, qkv_at(b, j, 2, h, Tn, NH, hd) + d) : 0.0f;
    }
    float dk[NCH], dv[NCH];
#pragma unroll
    for (int c = 0; c < NCH; c++)
        dk[c] = dv[c] = 0;
    for (int i0 = (col0 / KT) * KT; i0 < Tn; i0 += KT) {
        __syncthreads();
        load_tile(Qs, qkv, b, i0, 0, h, Tn, NH, hd, true);
        load_tile(Gs, dout, b, i0, 0, h, Tn, NH, hd, false);
        if (threadIdx.x < KT) {
            int t = i0 + threadIdx.x;
            Ls[threadIdx.x] = t < Tn ? lse[(size_t)bh * Tn + t] : 0.0f;
            Ds[threadIdx.x] = t < Tn ? D[(size_t)bh * Tn + t] : 0.0f;
        }
        __syncthreads();
        if (!valid || i0 + KT - 1 < j)
            continue; // the whole tile is before this key: masked
        int i = i0 + lane;
        float p = 0, ds = 0;
        if (i >= j && i < Tn) {
            p = expf(dot_row(k, Qs + lane * (hd + 1), hd) - Ls[lane]);
            float dp = dot_row(v, Gs + lane * (hd + 1), hd);
            ds = p * (dp - Ds[lane]);
        }
        int i_lo = max(0, j - i0), i_hi = min(KT, Tn - i0);
        for (int ii = i_lo; ii < i_hi; ii++) {
            float pi = __shfl_sync(0xffffffffu, p, ii);
            float di = __shfl_sync(0xffffffffu, ds, ii);
            const float *qr = Qs + ii * (hd + 1), *gr = Gs + ii * (hd + 1);
#pragma unroll
            for (int c = 0; c < NCH; c++) {
                int d = lane + 32 * c;
                if (d < hd) {
                    dv[c] += pi * gr[d];
                    dk[c] += di * qr[d];
                }
            }
        }
    }
    if (!valid)
        return;
#pragma unroll
    for (int c = 0; c < NCH; c++) {
        int d = lane + 32 * c;
        if (d < hd) {
            stf(dqkv, qkv_at(b, j, 1, h, Tn, NH, hd) + d, dk[c] * scale);
            stf(dqkv, qkv_at(b, j, 2, h, Tn, NH, hd) + d, dv[c]);
        }
    }
}

// Dynamic shared memory above 48 KiB must be asked for per kernel.
template <typename K>
cudaError_t allow_smem(K kernel, size_t bytes)
{
    if (bytes <= 48 * 1024)
        return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <typename T, int NCH>
int run_fwd(bk_stream s, T *out, float *lse, const T *qkv, int B, int Tn, int NH, int hd)
{
    size_t smem = (2 * KT * (hd + 1) + ROWS * hd) * sizeof(float);
    CU(allow_smem(k_flash_fwd<T, NCH>, smem));
    dim3 grid((Tn + ROWS - 1) / ROWS, B * NH);
    k_flash_fwd<T, NCH><<<grid, ROWS * 32, smem, STREAM(s)>>>(out, lse, qkv, Tn, NH, hd,
                                                              1.0f / sqrtf((float)hd));
    LAUNCHED("k_flash_fwd");
    return 0;
}

template <typename T, int NCH>
int run_bwd(bk_stream s, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse,
            int B, int Tn, int NH, int hd)
{
    float *D = nullptr;
    size_t rows = (size_t)B * NH * Tn;
    CU(cudaMallocAsync((void **)&D, rows * sizeof(float), STREAM(s)));
    float scale = 1.0f / sqrtf((float)hd);
    size_t smem_q = (2 * KT * (hd + 1) + 2 * ROWS * hd) * sizeof(float);
    size_t smem_kv = (2 * KT * (hd + 1) + 2 * ROWS * hd + 2 * KT) * sizeof(float);
    dim3 grid((Tn + ROWS - 1) / ROWS, B * NH);
    cudaError_t e = allow_smem(k_flash_dq<T, NCH>, smem_q);
    if (e == cudaSuccess)
        e = allow_smem(k_flash_dkv<T, NCH>, smem_kv);
    if (e == cudaSuccess) {
        k_flash_D<T><<<(unsigned)((rows + 7) / 8), 256, 0, STREAM(s)>>>(D, dout, out, B, Tn, NH,
                                                                        hd);
        k_flash_dq<T, NCH><<<grid, ROWS * 32, smem_q, STREAM(s)>>>(dqkv, dout, qkv, lse, D, Tn,
                                                                   NH, hd, scale);
        k_flash_dkv<T, NCH><<<grid, ROWS * 32, smem_kv, STREAM(s)>>>(dqkv, dout, qkv, lse, D, Tn,
                                                                     NH, hd, scale);
        e = cudaGetLastError();
    }
    CU(cudaFreeAsync(D, STREAM(s)));
    if (e != cudaSuccess) {
        whale_error("cuda: flash attention backward (T %d, %d heads of %d) failed: %s", Tn, NH,
                    hd, cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

} // namespace

#define BY_NCH(nch, CALL)                                                                     \
    switch (nch) {                                                                            \
    case 1: { constexpr int N_ = 1; return CALL; }                                            \
    case 2: { constexpr int N_ = 2; return CALL; }                                            \
    case 3: { constexpr int N_ = 3; return CALL; }                                            \
    case 4: { constexpr int N_ = 4; return CALL; }                                            \
    default: { constexpr int N_ = 8; return CALL; }                                           \
    }

extern "C" size_t bkg_attention_saved_floats(const whale_backend *b, int B, int T, int NH, int hd)
{
    (void)b;
    (void)hd;
    return (size_t)B * NH * T; // log-sum-exp per score row
}

static int check_hd(int hd)
{
    if (hd > 256) {
        whale_error("cuda attention: head size %d > 256 is not supported", hd);
        return WHALE_ENOTSUP;
    }
    return 0;
}

extern "C" int bkg_attention_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                                 float *saved, const void *qkv, int B, int T_, int NH, int hd)
{
    ON_DEVICE(b);
    int rc = check_hd(hd);
    if (rc || !B || !T_)
        return rc;
    // 16-bit operands (or 16-bit arithmetic for fp32 ones): tensor cores
    if (bkg_attention_tc_takes(b, t, hd))
        return bkg_attention_fwd_tc(b, s, t, out, saved, qkv, B, T_, NH, hd);
    int nch = (hd + 31) / 32;
    DISPATCH(t, BY_NCH(nch, (run_fwd<T, N_>(s, (T *)out, saved, (const T *)qkv, B, T_, NH, hd))));
    return 0;
}

extern "C" int bkg_attention_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dqkv,
                                 const void *dout, const void *qkv, const void *out,
                                 const float *saved, int B, int T_, int NH, int hd)
{
    ON_DEVICE(b);
    int rc = check_hd(hd);
    if (rc || !B || !T_)
        return rc;
    if (!out) {
        whale_error("cuda attention backward needs the forward's output (flash backward)");
        return WHALE_EINVAL;
    }
    // where the forward ran on tensor cores and the tiles fit: the backward too
    if (bkg_attention_bwd_tc_takes(b, t, hd))
        return bkg_attention_bwd_tc(b, s, t, dqkv, dout, qkv, out, saved, B, T_, NH, hd);
    int nch = (hd + 31) / 32;
    DISPATCH(t, BY_NCH(nch, (run_bwd<T, N_>(s, (T *)dqkv, (const T *)dout, (const T *)qkv,
                                            (const T *)out, saved, B, T_, NH, hd))));
    return 0;
}
