// Shared by the cuda backend's .cu files: error checking that names the
// failing call (the log prefix names the rank), the implementation state,
// 16-bit loads/stores and dtype dispatch.
#ifndef BACKEND_CUDA_COMMON_CUH
#define BACKEND_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "whale/error.h"
#include "whale/log.h"

struct bkg_algo_cache;

struct bkg_impl {
    int dev;
    cudaDeviceProp prop;
    cudaStream_t compute;
    bool tf32;
    bool managed;      // host_coherent: cudaMallocManaged for device memory
    cublasLtHandle_t lt;
    void *ws;          // cuBLASLt workspace (one per backend: GEMMs of one backend are
    size_t ws_bytes;   // serialised on its streams by the caller's events)
    bkg_algo_cache *algos;
    double *red;       // pinned host slot for scalar results (sumsq, inf/nan flag)
};

static inline bkg_impl *IMPL(whale_backend *b) { return static_cast<bkg_impl *>(b->impl); }
static inline const bkg_impl *IMPL(const whale_backend *b)
{
    return static_cast<const bkg_impl *>(b->impl);
}

// Every CUDA runtime call: the call text, the error and where.
#define CU(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            whale_error("cuda: %s failed: %s (%s) at %s:%d", #call, cudaGetErrorName(e_),    \
                        cudaGetErrorString(e_), __FILE__, __LINE__);                          \
            return WHALE_ENCCL;                                                               \
        }                                                                                     \
    } while (0)

// After every kernel launch: configuration errors show at once.
#define LAUNCHED(name)                                                                        \
    do {                                                                                      \
        cudaError_t e_ = cudaGetLastError();                                                  \
        if (e_ != cudaSuccess) {                                                              \
            whale_error("cuda: launch of %s failed: %s (%s)", name, cudaGetErrorName(e_),    \
                        cudaGetErrorString(e_));                                              \
            return WHALE_ENCCL;                                                               \
        }                                                                                     \
    } while (0)

// Kernels run on the backend's device even when called from another host
// thread (checkpoint and offload threads share the backend).
#define ON_DEVICE(b) CU(cudaSetDevice(IMPL(b)->dev))

#define STREAM(s) (static_cast<cudaStream_t>(s))

__device__ __forceinline__ float ldf(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p, size_t i)
{
    return __bfloat162float(p[i]);
}
__device__ __forceinline__ float ldf(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void stf(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void stf(__nv_bfloat16 *p, size_t i, float v)
{
    p[i] = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void stf(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }

// Runs the body (variadic: template commas need no parentheses) with T bound to the element type of dtype t.
#define DISPATCH(t, ...)                                                                     \
    switch (t) {                                                                              \
    case WHALE_FLOAT32: {                                                                     \
        typedef float T;                                                                      \
        __VA_ARGS__;                                                                          \
    } break;                                                                                  \
    case WHALE_BFLOAT16: {                                                                    \
        typedef __nv_bfloat16 T;                                                              \
        __VA_ARGS__;                                                                          \
    } break;                                                                                  \
    case WHALE_FLOAT16: {                                                                     \
        typedef __half T;                                                                     \
        __VA_ARGS__;                                                                          \
    } break;                                                                                  \
    default:                                                                                  \
        whale_error("cuda backend: dtype %s not supported here", whale_dtype_name(t));       \
        return WHALE_ENOTSUP;                                                                 \
    }

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Blocks for a grid-stride loop over n elements (capped: each thread loops).
static inline unsigned grid_for(int64_t n, int threads)
{
    int64_t g = (n + threads - 1) / threads;
    return (unsigned)(g < 1 ? 1 : g > 65535 * 8 ? 65535 * 8 : g);
}

#endif
