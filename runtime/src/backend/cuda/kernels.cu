// cuda kernels of a GPT block besides GEMM and attention: LayerNorm, GELU,
// add/accumulate, embedding, softmax cross-entropy (plain and
// vocabulary-parallel), casts, scaling and the reductions of the optimizer.
// Shapes: whale/backend.h. Arithmetic in fp32, 16-bit values rounded once on
// store. No floating-point atomics anywhere: every sum has one owner thread
// or a fixed tree, so results repeat bit for bit.
#include <cstring>

#include "backend/cuda/common.cuh"

// ---- LayerNorm --------------------------------------------------------------------
// One warp per row (N rows of C): mean, then the mean squared deviation from
// it (two passes, like the cpu kernel), then the normalised row. bias may be
// NULL (Bias=no models: LayerNorm without a shift, as the cpu kernel).
template <typename T>
__global__ void __launch_bounds__(256) k_ln_fwd(T *out, float *mean, float *rstd, const T *inp,
                                                const T *w, const T *bias, int N, int C)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C;
    float m = 0;
    for (int i = lane; i < C; i += 32)
        m += ldf(x, i);
    m = warp_sum(m) / C;
    float v = 0;
    for (int i = lane; i < C; i += 32) {
        float d = ldf(x, i) - m;
        v += d * d;
    }
    v = warp_sum(v) / C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    T *y = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32)
        stf(y, i, (ldf(x, i) - m) * s * ldf(w, i) + (bias ? ldf(bias, i) : 0.0f));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// dinp (N,C) += per row, one warp per row.
template <typename T>
__global__ void __launch_bounds__(256) k_ln_bwd_dx(T *dinp, const T *dout, const T *inp,
                                                   const T *w, const float *mean,
                                                   const float *rstd, int N, int C)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    T *dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row], mdn = 0, mdnx = 0;
    for (int i = lane; i < C; i += 32) {
        float xh = (ldf(x, i) - m) * s, dn = ldf(dy, i) * ldf(w, i);
        mdn += dn;
        mdnx += dn * xh;
    }
    mdn = warp_sum(mdn) / C;
    mdnx = warp_sum(mdnx) / C;
    for (int i = lane; i < C; i += 32) {
        float xh = (ldf(x, i) - m) * s, dn = ldf(dy, i) * ldf(w, i);
        stf(dx, i, ldf(dx, i) + s * (dn - mdn - xh * mdnx));
    }
}

// Column sums in two fixed stages. Stage 1: block (32 columns x 8 row
// lanes) over a slab of ROWS rows writes part[slab][c]; stage 2 adds the
// slabs in order into the destination. MODE 0: sum of x; MODE 1: LayerNorm
// weight gradient (dy * xhat) into part, dy into part2.
enum { CS_ROWS = 256 };

template <typename T, int MODE>
__global__ void __launch_bounds__(256) k_colsum_part(float *part, float *part2, const T *dy,
                                                     const T *x, const float *mean,
                                                     const float *rstd, int N, int C)
{
    __shared__ float sh[8][33], sh2[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, slab = blockIdx.y;
    int r0 = slab * CS_ROWS, r1 = min(N, r0 + CS_ROWS);
    float a = 0, a2 = 0;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float d = ldf(dy, (size_t)r * C + c);
            if (MODE == 1) {
                a += d * (ldf(x, (size_t)r * C + c) - mean[r]) * rstd[r];
                a2 += d;
            } else {
                a += d;
            }
        }
    sh[threadIdx.y][threadIdx.x] = a;
    sh2[threadIdx.y][threadIdx.x] = a2;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0, t2 = 0;
        for (int k = 0; k < 8; k++) {
            t += sh[k][threadIdx.x];
            t2 += sh2[k][threadIdx.x];
        }
        part[(size_t)slab * C + c] = t;
        if (MODE == 1)
            part2[(size_t)slab * C + c] = t2;
    }
}

__global__ void __launch_bounds__(256) k_colsum_final(float *dst, const float *part, int slabs,
                                                      int C)
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
static int colsum(whale_backend *b, bk_stream s, float *d1, float *d2, const T *dy, const T *x,
                  const float *mean, const float *rstd, int N, int C)
{
    if (!N || !C)
        return 0;
    int slabs = (N + CS_ROWS - 1) / CS_ROWS;
    float *part = nullptr;
    size_t bytes = (size_t)slabs * C * sizeof(float) * (MODE == 1 ? 2 : 1);
    CU(cudaMallocAsync((void **)&part, bytes, STREAM(s)));
    float *part2 = MODE == 1 ? part + (size_t)slabs * C : nullptr;
    dim3 grid((C + 31) / 32, slabs), blk(32, 8);
    k_colsum_part<T, MODE><<<grid, blk, 0, STREAM(s)>>>(part, part2, dy, x, mean, rstd, N, C);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        k_colsum_final<<<(C + 255) / 256, 256, 0, STREAM(s)>>>(d1, part, slabs, C);
        if (MODE == 1 && d2) // d2 (the LayerNorm bias gradient) is NULL for Bias=no
            k_colsum_final<<<(C + 255) / 256, 256, 0, STREAM(s)>>>(d2, part2, slabs, C);
        e = cudaGetLastError();
    }
    CU(cudaFreeAsync(part, STREAM(s)));
    if (e != cudaSuccess) {
        whale_error("cuda: launch of the column-sum kernels failed: %s", cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

extern "C" int bkg_colsum_acc(whale_backend *b, bk_stream s, enum whale_dtype t, float *db,
                              const void *x, int N, int C)
{
    ON_DEVICE(b);
    DISPATCH(t, return colsum<T, 0>(b, s, db, nullptr, (const T *)x, (const T *)nullptr, nullptr,
                                    nullptr, N, C));
    return 0;
}

extern "C" int bkg_layernorm_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                                 float *mean, float *rstd, const void *inp, const void *w,
                                 const void *bias, int N, int C)
{
    ON_DEVICE(b);
    if (!N)
        return 0;
    DISPATCH(t, (k_ln_fwd<T><<<(N + 7) / 8, 256, 0, STREAM(s)>>>(
                    (T *)out, mean, rstd, (const T *)inp, (const T *)w, (const T *)bias, N, C)));
    LAUNCHED("k_ln_fwd");
    return 0;
}

extern "C" int bkg_layernorm_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                                 float *dw, float *db, const void *dout, const void *inp,
                                 const void *w, const float *mean, const float *rstd, int N,
                                 int C)
{
    ON_DEVICE(b);
    if (!N)
        return 0;
    DISPATCH(t, {
        k_ln_bwd_dx<T><<<(N + 7) / 8, 256, 0, STREAM(s)>>>((T *)dinp, (const T *)dout,
                                                           (const T *)inp, (const T *)w, mean,
                                                           rstd, N, C);
        LAUNCHED("k_ln_bwd_dx");
        return colsum<T, 1>(b, s, dw, db, (const T *)dout, (const T *)inp, mean, rstd, N, C);
    });
    return 0;
}

// ---- element-wise ----------------------------------------------------------------------
#define GRID_STRIDE(i, n)                                                                     \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                \
         i += (int64_t)gridDim.x * blockDim.x)

#define GELU_K 0.7978845608028654f

template <typename T>
__global__ void __launch_bounds__(256) k_gelu_fwd(T *out, const T *inp, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = ldf(inp, i), u = GELU_K * (x + 0.044715f * x * x * x);
        stf(out, i, x / (1.0f + expf(-2.0f * u)));
    }
}

template <typename T>
__global__ void __launch_bounds__(256) k_gelu_bwd(T *dinp, const T *inp, const T *dout, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = ldf(inp, i), u = GELU_K * (x + 0.044715f * x * x * x);
        float sg = 1.0f / (1.0f + expf(-2.0f * u));
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        stf(dinp, i, (sg + 2.0f * x * sg * (1.0f - sg) * du) * ldf(dout, i));
    }
}

template <typename T>
__global__ void __launch_bounds__(256) k_add(T *out, const T *x, const T *y, int64_t n)
{
    GRID_STRIDE(i, n) stf(out, i, ldf(x, i) + ldf(y, i));
}

template <typename T>
__global__ void __launch_bounds__(256) k_acc(T *y, const T *x, int64_t n)
{
    GRID_STRIDE(i, n) stf(y, i, ldf(y, i) + ldf(x, i));
}

extern "C" int bkg_gelu_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                            const void *inp, int64_t n)
{
    ON_DEVICE(b);
    if (!n)
        return 0;
    DISPATCH(t, (k_gelu_fwd<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>((T *)out, (const T *)inp,
                                                                         n)));
    LAUNCHED("k_gelu_fwd");
    return 0;
}

extern "C" int bkg_gelu_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *dinp,
                            const void *inp, const void *dout, int64_t n)
{
    ON_DEVICE(b);
    if (!n)
        return 0;
    DISPATCH(t, (k_gelu_bwd<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(
                    (T *)dinp, (const T *)inp, (const T *)dout, n)));
    LAUNCHED("k_gelu_bwd");
    return 0;
}

extern "C" int bkg_add(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                       const void *x, const void *y, int64_t n)
{
    ON_DEVICE(b);
    if (!n)
        return 0;
    DISPATCH(t, (k_add<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>((T *)out, (const T *)x,
                                                                    (const T *)y, n)));
    LAUNCHED("k_add");
    return 0;
}

extern "C" int bkg_acc(whale_backend *b, bk_stream s, enum whale_dtype t, void *y, const void *x,
                       int64_t n)
{
    ON_DEVICE(b);
    if (!n)
        return 0;
    DISPATCH(t, (k_acc<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>((T *)y, (const T *)x, n)));
    LAUNCHED("k_acc");
    return 0;
}

// ---- embedding --------------------------------------------------------------------------
// out (B,T,C): one thread per element. tp: rows outside [v0, v0+V) give 0.
template <typename T>
__global__ void __launch_bounds__(256) k_embed_fwd(T *out, const int32_t *tok, const T *wte,
                                                   int v0, int V, const T *wpe, int B, int Tn,
                                                   int C, bool tp)
{
    GRID_STRIDE(i, (int64_t)B * Tn * C)
    {
        int64_t bt = i / C;
        int c = (int)(i % C);
        int r = tok[bt] - v0;
        bool in = !tp || (r >= 0 && r < V);
        float e = in ? ldf(wte, (size_t)r * C + c) : 0.0f;
        float p = wpe ? ldf(wpe, (size_t)(bt % Tn) * C + c) : 0.0f;
        stf(out, i, e + p);
    }
}

// dwte: thread (c, vocab class y) owns the rows v with v % gridDim.y == y and
// walks the tokens in order, so every element is summed by one thread in the
// cpu kernel's order (no atomics; repeated tokens cannot race).
template <typename T>
__global__ void __launch_bounds__(128) k_embed_bwd_wte(float *dwte, const T *dout,
                                                       const int32_t *tok, int v0, int V, int BT,
                                                       int C, bool tp)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, cls = blockIdx.y, ncls = gridDim.y;
    if (c >= C)
        return;
    for (int bt = 0; bt < BT; bt++) {
        int r = tok[bt] - v0;
        if (tp && (r < 0 || r >= V))
            continue;
        if (r % ncls != cls)
            continue;
        float *e = dwte + (size_t)r * C + c;
        *e += ldf(dout, (size_t)bt * C + c);
    }
}

// dwpe (T,C) += sum over b of dout (B,T,C): one thread per (t, c), b in order.
template <typename T>
__global__ void __launch_bounds__(256) k_embed_bwd_wpe(float *dwpe, const T *dout, int B, int Tn,
                                                       int C)
{
    GRID_STRIDE(i, (int64_t)Tn * C)
    {
        float a = dwpe[i];
        for (int bb = 0; bb < B; bb++)
            a += ldf(dout, (size_t)bb * Tn * C + i);
        dwpe[i] = a;
    }
}

extern "C" int bkg_embed_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                             const int32_t *tok, const void *wte, int v0, int V, const void *wpe,
                             int B, int T_, int C, bool tp)
{
    ON_DEVICE(b);
    int64_t n = (int64_t)B * T_ * C;
    if (!n)
        return 0;
    DISPATCH(t, (k_embed_fwd<T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(
                    (T *)out, tok, (const T *)wte, v0, V, (const T *)wpe, B, T_, C, tp)));
    LAUNCHED("k_embed_fwd");
    return 0;
}

extern "C" int bkg_embed_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, float *dwte,
                             float *dwpe, const void *dout, const int32_t *tok, int v0, int V,
                             int B, int T_, int C, bool tp)
{
    ON_DEVICE(b);
    if (!B || !T_ || !C)
        return 0;
    DISPATCH(t, {
        if (dwte) {
            dim3 grid((C + 127) / 128, 64);
            k_embed_bwd_wte<T><<<grid, 128, 0, STREAM(s)>>>(dwte, (const T *)dout, tok, v0, V,
                                                            B * T_, C, tp);
            LAUNCHED("k_embed_bwd_wte");
        }
        if (dwpe) {
            k_embed_bwd_wpe<T><<<grid_for((int64_t)T_ * C, 256), 256, 0, STREAM(s)>>>(
                dwpe, (const T *)dout, B, T_, C);
            LAUNCHED("k_embed_bwd_wpe");
        }
    });
    return 0;
}

// ---- softmax cross-entropy ---------------------------------------------------------------
// One block (256 threads) per row of V logits; block reductions in a fixed tree.
__device__ float block_reduce(float v, bool is_max)
{
    __shared__ float sh[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads(); // sh may still be read by a previous reduction
    if (lane == 0)
        sh[wid] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    r = is_max ? warp_max(r) : warp_sum(r);
    return r; // every warp computed the same value
}

template <typename T>
__global__ void __launch_bounds__(256) k_xent_fwd(T *x, float *losses, const int32_t *targets,
                                                  int V)
{
    T *r = x + (size_t)blockIdx.x * V;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        mx = fmaxf(mx, ldf(r, i));
    mx = block_reduce(mx, true);
    float sum = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        sum += expf(ldf(r, i) - mx);
    sum = block_reduce(sum, false);
    float inv = 1.0f / sum;
    int tg = targets[blockIdx.x];
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float p = expf(ldf(r, i) - mx) * inv;
        if (i == tg)
            losses[blockIdx.x] = -logf(p > 1e-30f ? p : 1e-30f);
        else if (tg < 0 && i == 0) /* an ignored target (masked loss) */
            losses[blockIdx.x] = 0.0f;
        stf(r, i, p);
    }
}

template <typename T>
__global__ void __launch_bounds__(256) k_xent_bwd(T *probs, const int32_t *targets, int v0,
                                                  float dloss, int N, int V)
{
    GRID_STRIDE(i, (int64_t)N * V)
    {
        int64_t n = i / V;
        int c = (int)(i % V);
        /* an ignored target (< 0, masked loss): no gradient */
        float g = targets[n] < 0 ? 0.0f : ldf(probs, i) * dloss;
        if (targets[n] >= 0 && c == targets[n] - v0)
            g -= dloss;
        stf(probs, i, g);
    }
}

template <typename T>
__global__ void __launch_bounds__(256) k_rows_max(float *mx, const T *x, int V)
{
    const T *r = x + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        m = fmaxf(m, ldf(r, i));
    m = block_reduce(m, true);
    if (threadIdx.x == 0)
        mx[blockIdx.x] = m;
}

template <typename T>
__global__ void __launch_bounds__(256) k_rows_exp_sum(T *x, float *sum, float *tl, const float *mx,
                                                      const int32_t *targets, int v0, int V)
{
    T *r = x + (size_t)blockIdx.x * V;
    float m = mx[blockIdx.x], s = 0;
    int t = targets[blockIdx.x] - v0;
    if (threadIdx.x == 0)
        tl[blockIdx.x] = t >= 0 && t < V ? ldf(r, t) - m : 0.0f;
    __syncthreads(); // tl read r[t] before it is overwritten
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(ldf(r, i) - m);
        stf(r, i, e);
        s += e;
    }
    s = block_reduce(s, false);
    if (threadIdx.x == 0)
        sum[blockIdx.x] = s;
}

template <typename T>
__global__ void __launch_bounds__(256) k_rows_normalize(T *x, float *losses, const float *sum,
                                                        const float *tl, int V)
{
    T *r = x + (size_t)blockIdx.x * V;
    float inv = 1.0f / sum[blockIdx.x];
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        stf(r, i, ldf(r, i) * inv);
    if (threadIdx.x == 0)
        losses[blockIdx.x] = logf(sum[blockIdx.x]) - tl[blockIdx.x];
}

extern "C" int bkg_xent_fwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *x,
                            float *losses, const int32_t *targets, int N, int V)
{
    ON_DEVICE(b);
    if (!N)
        return 0;
    DISPATCH(t, (k_xent_fwd<T><<<N, 256, 0, STREAM(s)>>>((T *)x, losses, targets, V)));
    LAUNCHED("k_xent_fwd");
    return 0;
}

extern "C" int bkg_xent_bwd(whale_backend *b, bk_stream s, enum whale_dtype t, void *probs,
                            const int32_t *targets, int v0, float dloss, int N, int V, bool tp)
{
    ON_DEVICE(b);
    (void)tp; // a target outside [v0, v0+V) never equals a local column
    if (!N || !V)
        return 0;
    DISPATCH(t, (k_xent_bwd<T><<<grid_for((int64_t)N * V, 256), 256, 0, STREAM(s)>>>(
                    (T *)probs, targets, v0, dloss, N, V)));
    LAUNCHED("k_xent_bwd");
    return 0;
}

extern "C" int bkg_rows_max(whale_backend *b, bk_stream s, enum whale_dtype t, float *mx,
                            const void *x, int N, int V)
{
    ON_DEVICE(b);
    if (!N)
        return 0;
    DISPATCH(t, (k_rows_max<T><<<N, 256, 0, STREAM(s)>>>(mx, (const T *)x, V)));
    LAUNCHED("k_rows_max");
    return 0;
}

extern "C" int bkg_rows_exp_sum(whale_backend *b, bk_stream s, enum whale_dtype t, void *x,
                                float *sum, float *tl, const float *mx, const int32_t *targets,
                                int v0, int N, int V)
{
    ON_DEVICE(b);
    if (!N)
        return 0;
    DISPATCH(t, (k_rows_exp_sum<T><<<N, 256, 0, STREAM(s)>>>((T *)x, sum, tl, mx, targets, v0,
                                                             V)));
    LAUNCHED("k_rows_exp_sum");
    return 0;
}

extern "C" int bkg_rows_normalize(whale_backend *b, bk_stream s, enum whale_dtype t, void *x,
                                  float *losses, const float *sum, const float *tl, int N, int V)
{
    ON_DEVICE(b);
    if (!N)
        return 0;
    DISPATCH(t, (k_rows_normalize<T><<<N, 256, 0, STREAM(s)>>>((T *)x, losses, sum, tl, V)));
    LAUNCHED("k_rows_normalize");
    return 0;
}

// ---- casts, scaling, reductions -------------------------------------------------------------
template <typename D, typename S>
__global__ void __launch_bounds__(256) k_cast(D *dst, const S *src, int64_t n)
{
    GRID_STRIDE(i, n) stf(dst, i, ldf(src, i));
}

extern "C" int bkg_cast(whale_backend *b, bk_stream s, void *dst, enum whale_dtype dt,
                        const void *src, enum whale_dtype st, int64_t n)
{
    ON_DEVICE(b);
    if (dt == st) {
        if (dst != src)
            CU(cudaMemcpyAsync(dst, src, (size_t)n * whale_dtype_size(dt),
                               cudaMemcpyDeviceToDevice, STREAM(s)));
        return 0;
    }
    // nested dispatch: D from dt, S from st
    switch (dt) {
    case WHALE_FLOAT32:
        DISPATCH(st, (k_cast<float, T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(
                         (float *)dst, (const T *)src, n)));
        break;
    case WHALE_BFLOAT16:
        DISPATCH(st, (k_cast<__nv_bfloat16, T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(
                         (__nv_bfloat16 *)dst, (const T *)src, n)));
        break;
    case WHALE_FLOAT16:
        DISPATCH(st, (k_cast<__half, T><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(
                         (__half *)dst, (const T *)src, n)));
        break;
    default:
        return WHALE_ENOTSUP;
    }
    LAUNCHED("k_cast");
    return 0;
}

__global__ void __launch_bounds__(256) k_scale(float *x, float a, int64_t n)
{
    GRID_STRIDE(i, n) x[i] *= a;
}

extern "C" int bkg_scale(whale_backend *b, bk_stream s, float *x, float a, int64_t n)
{
    ON_DEVICE(b);
    k_scale<<<grid_for(n, 256), 256, 0, STREAM(s)>>>(x, a, n);
    LAUNCHED("k_scale");
    return 0;
}

// Sum of squares in double: SUMSQ_BLOCKS fixed blocks, each a fixed
// grid-stride share and a fixed tree, then one block adds the partials in
// order. The grid does not depend on the device, so neither do the bits.
enum { SUMSQ_BLOCKS = 1024 };

__global__ void __launch_bounds__(256) k_sumsq_part(double *part, const float *g, int64_t n)
{
    __shared__ double sh[256];
    double a = 0;
    GRID_STRIDE(i, n)
    {
        double v = g[i];
        a += v * v;
    }
    sh[threadIdx.x] = a;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w)
            sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        part[blockIdx.x] = sh[0];
}

__global__ void k_sumsq_final(double *out, const double *part, int n)
{
    double a = 0;
    for (int i = 0; i < n; i++)
        a += part[i];
    *out = a;
}

__global__ void __launch_bounds__(256) k_inf_nan(int *flag, const float *g, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        if (!isfinite(g[i]))
            *flag = 1; // every writer stores the same value: no race on the result
    }
}

extern "C" int bkg_sumsq(whale_backend *b, bk_stream s, const float *g, int64_t n, double *out)
{
    ON_DEVICE(b);
    bkg_impl *im = IMPL(b);
    double *part = nullptr;
    CU(cudaMallocAsync((void **)&part, (SUMSQ_BLOCKS + 1) * sizeof(double), STREAM(s)));
    k_sumsq_part<<<SUMSQ_BLOCKS, 256, 0, STREAM(s)>>>(part, g, n);
    k_sumsq_final<<<1, 1, 0, STREAM(s)>>>(part + SUMSQ_BLOCKS, part, SUMSQ_BLOCKS);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(im->red, part + SUMSQ_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost,
                            STREAM(s));
    cudaError_t ef = cudaFreeAsync(part, STREAM(s));
    if (e == cudaSuccess)
        e = ef;
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(STREAM(s));
    if (e != cudaSuccess) {
        whale_error("cuda: sum of squares of %lld values failed: %s", (long long)n,
                    cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    *out = im->red[0];
    return 0;
}

extern "C" int bkg_has_inf_nan(whale_backend *b, bk_stream s, const float *g, int64_t n,
                               bool *found)
{
    ON_DEVICE(b);
    bkg_impl *im = IMPL(b);
    int *flag = nullptr;
    CU(cudaMallocAsync((void **)&flag, sizeof(int), STREAM(s)));
    cudaError_t e = cudaMemsetAsync(flag, 0, sizeof(int), STREAM(s));
    if (e == cudaSuccess) {
        k_inf_nan<<<grid_for(n, 256), 256, 0, STREAM(s)>>>(flag, g, n);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(im->red, flag, sizeof(int), cudaMemcpyDeviceToHost, STREAM(s));
    cudaError_t ef = cudaFreeAsync(flag, STREAM(s));
    if (e == cudaSuccess)
        e = ef;
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(STREAM(s));
    if (e != cudaSuccess) {
        whale_error("cuda: inf/NaN check of %lld values failed: %s", (long long)n,
                    cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    int v;
    memcpy(&v, im->red, sizeof v);
    *found = v != 0;
    return 0;
}

// ---- bias add and rounding to 16-bit values -------------------------------------------

// out (N,OC) += bias (OC) on every row; fp32 arithmetic, one rounding on store
template <typename T>
__global__ void __launch_bounds__(256) k_bias_add(T *out, const T *bias, int N, int OC)
{
    int64_t n = (int64_t)N * OC;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        stf(out, i, ldf(out, i) + ldf(bias, i % OC));
}

extern "C" int bkg_bias_add(whale_backend *b, bk_stream s, enum whale_dtype t, void *out,
                            const void *bias, int N, int OC)
{
    ON_DEVICE(b);
    DISPATCH(t, (k_bias_add<T><<<grid_for((int64_t)N * OC, 256), 256, 0, STREAM(s)>>>(
                    (T *)out, (const T *)bias, N, OC)));
    LAUNCHED("k_bias_add");
    return 0;
}

// x (n) fp32 = widen(round_to_T(x)): what a 16-bit tensor would hold
template <typename T>
__global__ void __launch_bounds__(256) k_round16(float *x, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T v;
        stf(&v, 0, x[i]);
        x[i] = ldf(&v, 0);
    }
}

extern "C" int bkg_round16(whale_backend *b, bk_stream s, float *x, enum whale_dtype t, int64_t n)
{
    ON_DEVICE(b);
    switch (t) {
    case WHALE_BFLOAT16:
        k_round16<__nv_bfloat16><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(x, n);
        break;
    case WHALE_FLOAT16:
        k_round16<__half><<<grid_for(n, 256), 256, 0, STREAM(s)>>>(x, n);
        break;
    default:
        return 0; // fp32: nothing to round
    }
    LAUNCHED("k_round16");
    return 0;
}
