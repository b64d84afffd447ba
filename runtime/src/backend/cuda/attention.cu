// Causal self-attention, flash-style (Dao et al.), on CUDA cores in fp32:
// scores are built tile by tile in shared memory with an online softmax;
// only the log-sum-exp of each score row (B,NH,T) is kept for backward,
// never a T x T matrix. One kernel template serves both entry points:
//
//   grouped-query (whale_k_attention_gqa_*): q (B,T,NH,hd) rows ldq apart,
//     k and v (B,T,KVl,hd) rows ldk / ldv apart, out (B,T,NH,hd) rows ldo
//     apart (q, k, v may be column ranges of one q|k|v buffer); query head h
//     reads KV head kv(h) = (hq0 + h) / g - k0 (whale_attn_heads);
//   multi-head (whale_k_attention_*): qkv (B,T,3,NH,hd) is three column
//     ranges of rows 3C apart, out (B,T,NH,hd), and the head map is the
//     identity (KVl = NH, g = 1): lay_mha.
//   lse (B,NH,T) fp32, scale = 1/sqrt(hd).
//
// Work split: forward and dQ, one warp per query row of one (b, h), key /
// value tiles of kv(h) in shared memory (a block = ROWS warps sharing KT-row
// tiles; in a tile lane j scores key j, each lane owns head dimensions
// d = lane + 32 c, c < NCH, of the accumulators). dK, dV: one warp per key
// row of one (b, KV head), walking every query head of its group in head
// order (with the identity map: its own head), then the query tiles: each
// dK/dV element has one owner and a fixed order of additions (no atomics;
// results repeat bit for bit). 16-bit operands (or 16-bit GEMM arithmetic)
// of multi-head attention run on tensor cores instead where the tiles fit
// (attention_tc.cu forward, attention_tc_bwd.cu backward). hd up to 256
// (NCH <= 8).
#include "backend/cuda/common.cuh"

namespace {

constexpr int ROWS = 8; // warps (rows) per block
constexpr int KT = 32;  // rows per shared tile (one per lane)

struct Lay {            // strides and the head map, passed by value
    int ldq, ldk, ldv, ldo;
    int Tn, NH, KVl, hd, hq0, g, k0;
};

__device__ __forceinline__ int kv_of(const Lay &L, int h) { return (L.hq0 + h) / L.g - L.k0; }

__device__ __forceinline__ size_t row_at(int b, int t, int Tn, int ld, int head, int hd)
{
    return ((size_t)b * Tn + t) * ld + (size_t)head * hd;
}

// rows [r0, r0 + KT) of one head of src (rows ld apart) into a padded tile
// (stride hd + 1); rows past T are zeros
template <typename T>
__device__ void tile_in(float *tile, const T *src, int b, int r0, int head, int ld, int Tn, int hd)
{
    for (int e = threadIdx.x; e < KT * hd; e += blockDim.x) {
        int r = e / hd, d = e % hd, t = r0 + r;
        tile[r * (hd + 1) + d] = t < Tn ? ldf(src, row_at(b, t, Tn, ld, head, hd) + d) : 0.0f;
    }
}

__device__ __forceinline__ float dot(const float *a, const float *b, int hd)
{
    float s = 0;
    for (int d = 0; d < hd; d++)
        s += a[d] * b[d];
    return s;
}

template <typename T, int NCH>
__global__ void __launch_bounds__(ROWS * 32) k_gqa_fwd(T *out, float *lse, const T *q,
                                                      const T *k, const T *v, Lay L, float scale)
{
    extern __shared__ float sm[];
    const int hd = L.hd, Tn = L.Tn;
    float *Ks = sm, *Vs = Ks + KT * (hd + 1), *Qs = Vs + KT * (hd + 1);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / L.NH, h = bh % L.NH, kh = kv_of(L, h);
    int row0 = blockIdx.x * ROWS, i = row0 + warp;
    bool valid = i < Tn;
    float *qr = Qs + warp * hd;
    for (int d = lane; d < hd; d += 32)
        qr[d] = valid ? ldf(q, row_at(b, i, Tn, L.ldq, h, hd) + d) * scale : 0.0f;
    float m = -INFINITY, l = 0, acc[NCH];
#pragma unroll
    for (int c = 0; c < NCH; c++)
        acc[c] = 0;
    int last = min(Tn - 1, row0 + ROWS - 1);
    for (int j0 = 0; j0 <= last; j0 += KT) {
        __syncthreads();
        tile_in(Ks, k, b, j0, kh, L.ldk, Tn, hd);
        tile_in(Vs, v, b, j0, kh, L.ldv, Tn, hd);
        __syncthreads();
        if (!valid || j0 > i)
            continue; // warp-uniform
        int j = j0 + lane;
        float s = j <= i ? dot(qr, Ks + lane * (hd + 1), hd) : -INFINITY;
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
                stf(out, row_at(b, i, Tn, L.ldo, h, hd) + d, acc[c] * inv);
        }
    }
    if (lane == 0)
        lse[(size_t)bh * Tn + i] = m + logf(l);
}

// D (B,NH,T) = rowsum(dout * out), one warp per row
template <typename T>
__global__ void __launch_bounds__(256) k_gqa_D(float *D, const T *dout, const T *out, int B, Lay L)
{
    int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * L.NH * L.Tn)
        return;
    int bh = row / L.Tn, i = row % L.Tn, b = bh / L.NH, h = bh % L.NH;
    size_t o = row_at(b, i, L.Tn, L.ldo, h, L.hd);
    float s = 0;
    for (int d = lane; d < L.hd; d += 32)
        s += ldf(dout, o + d) * ldf(out, o + d);
    s = warp_sum(s);
    if (lane == 0)
        D[row] = s;
}

// dQ: one warp per query row i of (b, h), over key tiles j <= i of kv(h)
template <typename T, int NCH>
__global__ void __launch_bounds__(ROWS * 32) k_gqa_dq(T *dq, const T *dout, const T *q,
                                                     const T *k, const T *v, const float *lse,
                                                     const float *D, Lay L, float scale)
{
    extern __shared__ float sm[];
    const int hd = L.hd, Tn = L.Tn;
    float *Ks = sm, *Vs = Ks + KT * (hd + 1), *Qs = Vs + KT * (hd + 1), *Gs = Qs + ROWS * hd;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / L.NH, h = bh % L.NH, kh = kv_of(L, h);
    int row0 = blockIdx.x * ROWS, i = row0 + warp;
    bool valid = i < Tn;
    float *qr = Qs + warp * hd, *gr = Gs + warp * hd;
    for (int d = lane; d < hd; d += 32) {
        qr[d] = valid ? ldf(q, row_at(b, i, Tn, L.ldq, h, hd) + d) * scale : 0.0f;
        gr[d] = valid ? ldf(dout, row_at(b, i, Tn, L.ldo, h, hd) + d) : 0.0f;
    }
    float Li = valid ? lse[(size_t)bh * Tn + i] : 0.0f, Di = valid ? D[(size_t)bh * Tn + i] : 0.0f;
    float acc[NCH];
#pragma unroll
    for (int c = 0; c < NCH; c++)
        acc[c] = 0;
    int last = min(Tn - 1, row0 + ROWS - 1);
    for (int j0 = 0; j0 <= last; j0 += KT) {
        __syncthreads();
        tile_in(Ks, k, b, j0, kh, L.ldk, Tn, hd);
        tile_in(Vs, v, b, j0, kh, L.ldv, Tn, hd);
        __syncthreads();
        if (!valid || j0 > i)
            continue;
        int j = j0 + lane;
        float ds = 0;
        if (j <= i) {
            float p = expf(dot(qr, Ks + lane * (hd + 1), hd) - Li);
            ds = p * (dot(gr, Vs + lane * (hd + 1), hd) - Di);
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
            stf(dq, row_at(b, i, Tn, L.ldq, h, hd) + d, acc[c] * scale);
    }
}

// dK, dV: one warp per key row j of (b, KV head kh); the query heads of the
// group in head order, each over query tiles i >= j
template <typename T, int NCH>
__global__ void __launch_bounds__(ROWS * 32) k_gqa_dkv(T *dk, T *dv, const T *dout, const T *q,
                                                      const T *k, const T *v, const float *lse,
                                                      const float *D, Lay L, float scale)
{
    extern __shared__ float sm[];
    const int hd = L.hd, Tn = L.Tn;
    float *Qs = sm, *Gs = Qs + KT * (hd + 1), *Ks = Gs + KT * (hd + 1), *Vs = Ks + ROWS * hd;
    float *Ls = Vs + ROWS * hd, *Ds = Ls + KT;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bk = blockIdx.y, b = bk / L.KVl, kh = bk % L.KVl;
    int col0 = blockIdx.x * ROWS, j = col0 + warp;
    bool valid = j < Tn;
    float *kr = Ks + warp * hd, *vr = Vs + warp * hd;
    for (int d = lane; d < hd; d += 32) {
        // k pre-scaled: s = (scale k) . q, as the forward's (scale q) . k
        kr[d] = valid ? ldf(k, row_at(b, j, Tn, L.ldk, kh, hd) + d) * scale : 0.0f;
        vr[d] = valid ? ldf(v, row_at(b, j, Tn, L.ldv, kh, hd) + d) : 0.0f;
    }
    float gk[NCH], gv[NCH];
#pragma unroll
    for (int c = 0; c < NCH; c++)
        gk[c] = gv[c] = 0;
    for (int h = 0; h < L.NH; h++) {
        if (kv_of(L, h) != kh)
            continue; // block-uniform
        size_t bh = (size_t)b * L.NH + h;
        for (int i0 = (col0 / KT) * KT; i0 < Tn; i0 += KT) {
            __syncthreads();
            tile_in(Qs, q, b, i0, h, L.ldq, Tn, hd);
            tile_in(Gs, dout, b, i0, h, L.ldo, Tn, hd);
            if (threadIdx.x < KT) {
                int t = i0 + threadIdx.x;
                Ls[threadIdx.x] = t < Tn ? lse[bh * Tn + t] : 0.0f;
                Ds[threadIdx.x] = t < Tn ? D[bh * Tn + t] : 0.0f;
            }
            __syncthreads();
            if (!valid || i0 + KT - 1 < j)
                continue; // the whole tile is before this key: masked
            int i = i0 + lane;
            float p = 0, ds = 0;
            if (i >= j && i < Tn) {
                p = expf(dot(kr, Qs + lane * (hd + 1), hd) - Ls[lane]);
                ds = p * (dot(vr, Gs + lane * (hd + 1), hd) - Ds[lane]);
            }
            int i_lo = max(0, j - i0), i_hi = min(KT, Tn - i0);
            for (int ii = i_lo; ii < i_hi; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii);
                float di = __shfl_sync(0xffffffffu, ds, ii);
                const float *qq = Qs + ii * (hd + 1), *gg = Gs + ii * (hd + 1);
#pragma unroll
                for (int c = 0; c < NCH; c++) {
                    int d = lane + 32 * c;
                    if (d < hd) {
                        gv[c] += pi * gg[d];
                        gk[c] += di * qq[d];
                    }
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
            stf(dk, row_at(b, j, Tn, L.ldk, kh, hd) + d, gk[c] * scale);
            stf(dv, row_at(b, j, Tn, L.ldv, kh, hd) + d, gv[c]);
        }
    }
}

template <typename K>
cudaError_t allow_smem(K kernel, size_t bytes)
{
    if (bytes <= 48 * 1024)
        return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <typename T, int NCH>
int run_fwd(bk_stream s, T *out, float *lse, const T *q, const T *k, const T *v, int B, Lay L)
{
    size_t smem = (2 * KT * (L.hd + 1) + ROWS * L.hd) * sizeof(float);
    CU(allow_smem(k_gqa_fwd<T, NCH>, smem));
    dim3 grid((L.Tn + ROWS - 1) / ROWS, B * L.NH);
    k_gqa_fwd<T, NCH><<<grid, ROWS * 32, smem, STREAM(s)>>>(out, lse, q, k, v, L,
                                                            1.0f / sqrtf((float)L.hd));
    LAUNCHED("k_gqa_fwd");
    return 0;
}

template <typename T, int NCH>
int run_bwd(bk_stream s, T *dq, T *dk, T *dv, const T *dout, const T *out, const float *lse,
            const T *q, const T *k, const T *v, int B, Lay L)
{
    float *D = nullptr;
    size_t rows = (size_t)B * L.NH * L.Tn;
    CU(cudaMallocAsync((void **)&D, rows * sizeof(float), STREAM(s)));
    float scale = 1.0f / sqrtf((float)L.hd);
    size_t smem_q = (2 * KT * (L.hd + 1) + 2 * ROWS * L.hd) * sizeof(float);
    size_t smem_kv = (2 * KT * (L.hd + 1) + 2 * ROWS * L.hd + 2 * KT) * sizeof(float);
    cudaError_t e = allow_smem(k_gqa_dq<T, NCH>, smem_q);
    if (e == cudaSuccess)
        e = allow_smem(k_gqa_dkv<T, NCH>, smem_kv);
    if (e == cudaSuccess) {
        k_gqa_D<T><<<(unsigned)((rows + 7) / 8), 256, 0, STREAM(s)>>>(D, dout, out, B, L);
        dim3 gq((L.Tn + ROWS - 1) / ROWS, B * L.NH), gkv((L.Tn + ROWS - 1) / ROWS, B * L.KVl);
        k_gqa_dq<T, NCH><<<gq, ROWS * 32, smem_q, STREAM(s)>>>(dq, dout, q, k, v, lse, D, L,
                                                               scale);
        k_gqa_dkv<T, NCH><<<gkv, ROWS * 32, smem_kv, STREAM(s)>>>(dk, dv, dout, q, k, v, lse, D,
                                                                  L, scale);
        e = cudaGetLastError();
    }
    CU(cudaFreeAsync(D, STREAM(s)));
    if (e != cudaSuccess) {
        whale_error("cuda: flash attention backward (T %d, %d heads / %d KV heads of %d) failed: %s",
                    L.Tn, L.NH, L.KVl, L.hd, cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

Lay lay_of(const whale_attn_heads *m, int T_, int ldq, int ldk, int ldv, int ldo)
{
    return Lay{ ldq, ldk, ldv, ldo, T_, m->NH, m->KVl, m->hd, m->hq0, m->g, m->k0 };
}

// Multi-head attention over the packed qkv (B,T,3,NH,hd): q, k, v are the
// column ranges [0,C), [C,2C), [2C,3C) of rows 3C apart, out rows C apart,
// and the head map is the identity (KVl = NH, g = 1).
Lay lay_mha(int T_, int NH, int hd)
{
    int C = NH * hd;
    return Lay{ 3 * C, 3 * C, 3 * C, C, T_, NH, NH, hd, 0, 1, 0 };
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

// ---- multi-head: qkv (B,T,3,NH,hd) ---------------------------------------------------

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
    Lay L = lay_mha(T_, NH, hd);
    size_t C = (size_t)NH * hd;
    int nch = (hd + 31) / 32;
    DISPATCH(t, BY_NCH(nch, (run_fwd<T, N_>(s, (T *)out, saved, (const T *)qkv,
                                            (const T *)qkv + C, (const T *)qkv + 2 * C, B, L))));
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
    Lay L = lay_mha(T_, NH, hd);
    size_t C = (size_t)NH * hd;
    int nch = (hd + 31) / 32;
    DISPATCH(t, BY_NCH(nch, (run_bwd<T, N_>(s, (T *)dqkv, (T *)dqkv + C, (T *)dqkv + 2 * C,
                                            (const T *)dout, (const T *)out, saved,
                                            (const T *)qkv, (const T *)qkv + C,
                                            (const T *)qkv + 2 * C, B, L))));
    return 0;
}

// ---- grouped-query: q, k, v column ranges with a KV-head map ----------------------------

extern "C" int bkg_attention_gqa_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                                     int ldo, float *lse, const void *q, int ldq, const void *k,
                                     int ldk, const void *v, int ldv, int B, int T_,
                                     const struct whale_attn_heads *m)
{
    ON_DEVICE(b);
    int rc = check_hd(m->hd);
    if (rc)
        return rc;
    Lay L = lay_of(m, T_, ldq, ldk, ldv, ldo);
    int nch = (m->hd + 31) / 32;
    DISPATCH(t, BY_NCH(nch, (run_fwd<T, N_>(s, (T *)out, lse, (const T *)q, (const T *)k,
                                            (const T *)v, B, L))));
    return 0;
}

extern "C" int bkg_attention_gqa_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dq,
                                     void *dk, void *dv, const void *dout, int ldo,
                                     const void *out, const float *lse, const void *q, int ldq,
                                     const void *k, int ldk, const void *v, int ldv, int B,
                                     int T_, const struct whale_attn_heads *m)
{
    ON_DEVICE(b);
    int rc = check_hd(m->hd);
    if (rc)
        return rc;
    Lay L = lay_of(m, T_, ldq, ldk, ldv, ldo);
    int nch = (m->hd + 31) / 32;
    DISPATCH(t, BY_NCH(nch, (run_bwd<T, N_>(s, (T *)dq, (T *)dk, (T *)dv, (const T *)dout,
                                            (const T *)out, lse, (const T *)q, (const T *)k,
                                            (const T *)v, B, L))));
    return 0;
}
