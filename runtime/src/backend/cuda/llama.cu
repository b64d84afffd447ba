// cuda kernels of the Llama block besides attention (attention.cu):
// RMSNorm, the gated MLP activations (SwiGLU, GeGLU), rotary positions, the
// bias gradient of a strided linear and the positionless embedding
// gradient. Shapes: whale/backend.h; the cpu references are
// backend/kernels_llama.c. Arithmetic in fp32, 16-bit values rounded once on
// store; no floating-point atomics: every sum has one owner thread or a
// fixed tree, so results repeat bit for bit.
#include "backend/cuda/common.cuh"

namespace {

#define LL_GRID_STRIDE(i, n)                                                                 \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                \
         i += (int64_t)gridDim.x * blockDim.x)

constexpr float GELU_K = 0.7978845608028654f;

// ---- RMSNorm: one warp per row of C --------------------------------------------------
// out (N,C) = x * s * w, s = 1/sqrt(mean(x^2) + eps), rstd (N) = s
template <typename T>
__global__ void __launch_bounds__(256) k_rms_fwd(T *out, float *rstd, const T *inp, const T *w,
                                                 int N, int C, float eps)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C;
    float ss = 0;
    for (int i = lane; i < C; i += 32) {
        float v = ldf(x, i);
        ss += v * v;
    }
    float s = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    T *y = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32)
        stf(y, i, ldf(x, i) * s * ldf(w, i));
    if (lane == 0)
        rstd[row] = s;
}

// dinp (N,C) += s (dy w - xh m), xh = x s, m = mean(dy w xh); one warp per row
template <typename T>
__global__ void __launch_bounds__(256) k_rms_bwd_dx(T *dinp, const T *dout, const T *inp,
                                                    const T *w, const float *rstd, int N, int C)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    T *dx = dinp + (size_t)row * C;
    float s = rstd[row], m = 0;
    for (int i = lane; i < C; i += 32)
        m += ldf(dy, i) * ldf(w, i) * ldf(x, i) * s;
    m = warp_sum(m) / C;
    for (int i = lane; i < C; i += 32)
        stf(dx, i, ldf(dx, i) + s * (ldf(dy, i) * ldf(w, i) - ldf(x, i) * s * m));
}

// Column sums in two fixed stages over slabs of CS_ROWS rows (rows ld apart).
// MODE 0: sum of x (bias gradient); MODE 1: RMSNorm weight gradient
// dy * x * rstd. Stage 1 writes part[slab][c], stage 2 adds slabs in order.
constexpr int CS_ROWS = 256;

template <typename T, int MODE>
__global__ void __launch_bounds__(256) k_cs_part(float *part, const T *dy, int ld, const T *x,
                                                 const float *rstd, int N, int C)
{
    __shared__ float sh[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, slab = blockIdx.y;
    int r0 = slab * CS_ROWS, r1 = min(N, r0 + CS_ROWS);
    float a = 0;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float d = ldf(dy, (size_t)r * ld + c);
            a += MODE == 1 ? d * ldf(x, (size_t)r * C + c) * rstd[r] : d;
        }
    sh[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0;
        for (int k = 0; k < 8; k++)
            t += sh[k][threadIdx.x];
        part[(size_t)slab * C + c] = t;
    }
}

__global__ void __launch_bounds__(256) k_cs_final(float *dst, const float *part, int slabs, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float t = 0;
    for (int k = 0; k < slabs; k++)
        t += part[(size_t)k * C + c];
    dst[c] += t;
}

template <typename T, int MODE>
int colsum_ld(bk_stream s, float *dst, const T *dy, int ld, const T *x, const float *rstd, int N,
              int C)
{
    int slabs = (N + CS_ROWS - 1) / CS_ROWS;
    float *part = nullptr;
    CU(cudaMallocAsync((void **)&part, (size_t)slabs * C * sizeof(float), STREAM(s)));
    dim3 grid((C + 31) / 32, slabs), blk(32, 8);
    k_cs_part<T, MODE><<<grid, blk, 0, STREAM(s)>>>(part, dy, ld, x, rstd, N, C);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        k_cs_final<<<(C + 255) / 256, 256, 0, STREAM(s)>>>(dst, part, slabs, C);
        e = cudaGetLastError();
    }
    CU(cudaFreeAsync(part, STREAM(s)));
    if (e != cudaSuccess) {
        whale_error("cuda: column sums (%d x %d) failed: %s", N, C, cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

// ---- gated MLP ---------------------------------------------------------------------------
// act and act': SiLU x sig(x); tanh-GELU x sig(2u), u = K (x + 0.044715 x^3)
__device__ __forceinline__ void glu_act(int act, float x, float *a, float *da)
{
    if (act == WHALE_GLU_SILU) {
        float s = 1.0f / (1.0f + expf(-x));
        *a = x * s;
        *da = s * (1.0f + x * (1.0f - s));
    } else {
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        *a = x * s;
        *da = s + 2.0f * x * s * (1.0f - s) * du;
    }
}

// h (n) = act(gate) * up
template <typename T>
__global__ void __launch_bounds__(256) k_glu_fwd(T *h, const T *gate, const T *up, int64_t n,
                                                 int act)
{
    LL_GRID_STRIDE(i, n)
    {
        float a, da;
        glu_act(act, ldf(gate, i), &a, &da);
        stf(h, i, a * ldf(up, i));
    }
}

// dup (n) = dh act(gate), dgate (n) = dh up act'(gate); dgate may alias dh
// (each element is read before it is written, by the same thread)
template <typename T>
__global__ void __launch_bounds__(256) k_glu_bwd(T *dgate, T *dup, const T *dh, const T *gate,
                                                 const T *up, int64_t n, int act)
{
    LL_GRID_STRIDE(i, n)
    {
        float a, da, g = ldf(dh, i);
        glu_act(act, ldf(gate, i), &a, &da);
        float u = ldf(up, i);
        stf(dup, i, g * a);
        stf(dgate, i, g * u * da);
    }
}

// ---- rotary -------------------------------------------------------------------------------
// x (B,T,nh,hd), rows ld apart: one thread per (token, pair i, head). The
// angle t * theta^(-2i/hd) in double, as the cpu kernel computes it, so the
// cos/sin the two backends use agree to the last fp32 bit in almost all
// cases (libm and CUDA's double sin/cos are both correctly rounded to well
// under an fp32 ulp).
template <typename T>
__global__ void __launch_bounds__(256) k_rope(T *x, int ld, int64_t BT, int Tn, int nh, int hd,
                                              float theta, whale_rope_scaling sc, int sign)
{
    int half = hd / 2;
    LL_GRID_STRIDE(e, BT * half * nh)
    {
        int h = (int)(e % nh);
        int i = (int)((e / nh) % half);
        int64_t bt = e / ((int64_t)nh * half);
        int t = (int)(bt % Tn);
        double f = whale_rope_inv_freq(theta, &sc, i, hd), a = t * f;
        float c = (float)cos(a), sn = (float)sin(a) * (float)sign;
        size_t p = (size_t)bt * ld + (size_t)h * hd;
        float x1 = ldf(x, p + i), x2 = ldf(x, p + i + half);
        stf(x, p + i, x1 * c - x2 * sn);
        stf(x, p + i + half, x1 * sn + x2 * c);
    }
}

} // namespace

extern "C" int bkg_rmsnorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                               float *rstd, const void *inp, const void *w, int N, int C,
                               float eps)
{
    ON_DEVICE(b);
    DISPATCH(t, (k_rms_fwd<T><<<(N + 7) / 8, 256, 0, STREAM(s)>>>((T *)out, rstd, (const T *)inp,
                                                                  (const T *)w, N, C, eps)));
    LAUNCHED("k_rms_fwd");
    return 0;
}

extern "C" int bkg_rmsnorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                               float *dw, const void *dout, const void *inp, const void *w,
                               const float *rstd, int N, int C)
{
    ON_DEVICE(b);
    DISPATCH(t, {
        k_rms_bwd_dx<T><<<(N + 7) / 8, 256, 0, STREAM(s)>>>((T *)dinp, (const T *)dout,
                                                            (const T *)inp, (const T *)w, rstd, N,
                                                            C);
        LAUNCHED("k_rms_bwd_dx");
        return colsum_ld<T, 1>(s, dw, (const T *)dout, C, (const T *)inp, rstd, N, C);
    });
    return 0;
}

extern "C" int bkg_glu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t,
                           enum whale_glu_act act, void *h, const void *gate, const void *up,
                           int64_t n)
{
    ON_DEVICE(b);
    DISPATCH(t, (k_glu_fwd<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(
                    (T *)h, (const T *)gate, (const T *)up, n, (int)act)));
    LAUNCHED("k_glu_fwd");
    return 0;
}

extern "C" int bkg_glu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t,
                           enum whale_glu_act act, void *dgate, void *dup, const void *dh,
                           const void *gate, const void *up, int64_t n)
{
    ON_DEVICE(b);
    DISPATCH(t, (k_glu_bwd<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(
                    (T *)dgate, (T *)dup, (const T *)dh, (const T *)gate, (const T *)up, n,
                    (int)act)));
    LAUNCHED("k_glu_bwd");
    return 0;
}

extern "C" int bkg_rope(whale_backend *b, bk_stream s, enum whale_dtype t, void *x, int ld, int B,
                        int T_, int nh, int hd, float theta,
                        const struct whale_rope_scaling *sc, int sign)
{
    ON_DEVICE(b);
    whale_rope_scaling scv = {};
    if (sc)
        scv = *sc;
    int64_t BT = (int64_t)B * T_, n = BT * (hd / 2) * nh;
    DISPATCH(t, (k_rope<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>((T *)x, ld, BT, T_, nh, hd,
                                                                     theta, scv, sign)));
    LAUNCHED("k_rope");
    return 0;
}

extern "C" int bkg_colsum_acc_ld(whale_backend *b, bk_stream s, enum whale_dtype t, float *db,
                                 const void *x, int ld, int N, int OC)
{
    ON_DEVICE(b);
    DISPATCH(t, return colsum_ld<T, 0>(s, db, (const T *)x, ld, (const T *)nullptr, nullptr, N,
                                       OC));
    return 0;
}

extern "C" int bkg_embed_bwd_rows(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte,
                                  const void *dout, const int32_t *tok, int v0, int V, int N,
                                  int C)
{
    // the vocabulary-parallel embedding gradient over N tokens of one
    // sequence, without positions: same owner-per-row order as there
    return bkg_embed_bwd(b, s, t, dwte, nullptr, dout, tok, v0, V, 1, N, C, true);
}

// out rows ldo apart: columns [0, OC) of each of N rows = bias (OC), a copy
// (no arithmetic: the bits of the bias, as the cpu's memcpy per row)
template <typename T>
__global__ void __launch_bounds__(256) k_bias_fill(T *out, int ldo, const T *bias, int N, int OC)
{
    int64_t n = (int64_t)N * OC;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[(i / OC) * ldo + i % OC] = bias[i % OC];
}

extern "C" int bkg_bias_fill(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                             int ldo, const void *bias, int N, int OC)
{
    ON_DEVICE(b);
    int64_t n = (int64_t)N * OC;
    DISPATCH(t, (k_bias_fill<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>((T *)out, ldo,
                                                                         (const T *)bias, N,
                                                                         OC)));
    LAUNCHED("k_bias_fill");
    return 0;
}
