// cuda backend: device choice, memory, pinned host buffers, copies,
// streams and events, and the operations table. Kernels live in
// gemm.cu, kernels.cu, attention.cu, adamw.cu.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cuda/common.cuh"
#include "whale/knobs.h" // plain C with extern "C": the knob table is readable from .cu too

extern "C" int bk_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // no driver / no device: clear the sticky error, report none
        return 0;
    }
    return n;
}

extern "C" int bk_cuda_probe(char *err, size_t len)
{
    int n = 0;
    err[0] = '\0';
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice)
        return cudaGetLastError(), 0; // a driver, no GPU: not an error, just none
    if (e != cudaSuccess) {
        snprintf(err, len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        cudaGetLastError();
        return 0;
    }
    return n;
}

static void g_close(whale_backend *b)
{
    bkg_impl *g = IMPL(b);
    if (!g)
        return;
    cudaSetDevice(g->dev);
    cudaStreamSynchronize(g->compute);
    bkg_gemm_fini(b);
    if (g->red)
        cudaFreeHost(g->red);
    cudaStreamDestroy(g->compute);
    delete g;
    b->impl = nullptr;
}

static int g_mem_alloc(whale_backend *b, size_t bytes, void **out)
{
    ON_DEVICE(b);
    // host_coherent: managed memory, so the engine's host paths can touch it
    bkg_impl *g = IMPL(b);
    cudaError_t e = g->managed ? cudaMallocManaged(out, bytes, cudaMemAttachGlobal)
                               : cudaMalloc(out, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *out = nullptr;
        whale_error("cuda: %s(%zu) failed: %s", g->managed ? "cudaMallocManaged" : "cudaMalloc",
                    bytes, cudaGetErrorString(e));
        return WHALE_ENOMEM;
    }
    // Managed memory lives on the GPU: the preferred location is the device
    // (host touches map pages there or migrate them back after), and the
    // pages are populated there ahead of the first kernel, in stream order.
    // Only where the device can share managed memory with the host while
    // kernels run (concurrentManagedAccess); elsewhere the driver migrates
    // on demand as before. A refusal of the hint is not an error: logged.
    if (g->managed && g->prop.concurrentManagedAccess) {
        cudaMemLocation loc = {};
        loc.type = cudaMemLocationTypeDevice;
        loc.id = g->dev;
        if ((e = cudaMemAdvise(*out, bytes, cudaMemAdviseSetPreferredLocation, loc)) !=
                cudaSuccess ||
            (e = cudaMemPrefetchAsync(*out, bytes, loc, 0, g->compute)) != cudaSuccess) {
            cudaGetLastError();
            whale_warn("cuda: placing %zu bytes of managed memory on device %d: %s", bytes,
                       g->dev, cudaGetErrorString(e));
        }
    }
    return 0;
}

// A host-access point of stream-ordered execution: every stream of the
// device (compute, NCCL's, copies) is drained, so the host may touch
// managed memory; the first asynchronous error is reported by name.
static int g_host_access(whale_backend *b)
{
    ON_DEVICE(b);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        whale_error("cuda: device work before a host access failed: %s (%s)",
                    cudaGetErrorString(e), cudaGetErrorName(e));
        return WHALE_ENCCL;
    }
    return 0;
}

static void g_mem_free(whale_backend *b, void *p)
{
    cudaSetDevice(IMPL(b)->dev);
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess)
        whale_error("cuda: cudaFree(%p) failed: %s", p, cudaGetErrorString(e));
}

static int g_mem_info(whale_backend *b, size_t *free_bytes, size_t *total_bytes)
{
    ON_DEVICE(b);
    CU(cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

static int g_host_alloc(whale_backend *b, size_t bytes, void **out)
{
    ON_DEVICE(b);
    // cudaHostAlloc returns page-aligned memory (4 KiB at least), as promised.
    CU(cudaHostAlloc(out, bytes, cudaHostAllocPortable));
    return 0;
}

static void g_host_free(whale_backend *b, void *p)
{
    (void)b;
    cudaError_t e = cudaFreeHost(p);
    if (e != cudaSuccess)
        whale_error("cuda: cudaFreeHost(%p) failed: %s", p, cudaGetErrorString(e));
}

static int g_host_register(whale_backend *b, void *p, size_t bytes)
{
    ON_DEVICE(b);
    CU(cudaHostRegister(p, bytes, cudaHostRegisterPortable));
    return 0;
}

static int g_host_unregister(whale_backend *b, void *p)
{
    ON_DEVICE(b);
    CU(cudaHostUnregister(p));
    return 0;
}

static int g_memcpy(whale_backend *b, void *dst, const void *src, size_t bytes,
                    enum whale_copy_dir dir, bk_stream s)
{
    static const cudaMemcpyKind kinds[] = { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                            cudaMemcpyDeviceToDevice, cudaMemcpyHostToHost };
    ON_DEVICE(b);
    CU(cudaMemcpyAsync(dst, src, bytes, kinds[dir], STREAM(s)));
    return 0;
}

static int g_memset(whale_backend *b, void *dst, int value, size_t bytes, bk_stream s)
{
    ON_DEVICE(b);
    CU(cudaMemsetAsync(dst, value, bytes, STREAM(s)));
    return 0;
}

static int g_stream_create(whale_backend *b, bool hi, bk_stream *out)
{
    ON_DEVICE(b);
    int lo = 0, high = 0;
    CU(cudaDeviceGetStreamPriorityRange(&lo, &high));
    cudaStream_t st;
    // non-blocking: never serialised with the legacy default stream
    CU(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, hi ? high : lo));
    *out = st;
    return 0;
}

static void g_stream_destroy(whale_backend *b, bk_stream s)
{
    cudaSetDevice(IMPL(b)->dev);
    cudaStreamDestroy(STREAM(s));
}

static int g_stream_sync(whale_backend *b, bk_stream s)
{
    ON_DEVICE(b);
    cudaError_t e = cudaStreamSynchronize(STREAM(s));
    if (e != cudaSuccess) {
        whale_error("cuda: a kernel or copy on %s stream failed: %s (%s)",
                    s == IMPL(b)->compute ? "the compute" : "a side", cudaGetErrorName(e),
                    cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

static int g_event_create(whale_backend *b, void **out)
{
    ON_DEVICE(b);
    cudaEvent_t e;
    CU(cudaEventCreate(&e));
    *out = e;
    return 0;
}

static void g_event_destroy(whale_backend *b, void *e)
{
    cudaSetDevice(IMPL(b)->dev);
    cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

static int g_event_record(whale_backend *b, void *e, bk_stream s)
{
    ON_DEVICE(b);
    CU(cudaEventRecord(static_cast<cudaEvent_t>(e), STREAM(s)));
    return 0;
}

static int g_stream_wait_event(whale_backend *b, bk_stream s, void *e)
{
    ON_DEVICE(b);
    CU(cudaStreamWaitEvent(STREAM(s), static_cast<cudaEvent_t>(e), 0));
    return 0;
}

static int g_event_sync(whale_backend *b, void *e)
{
    ON_DEVICE(b);
    CU(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
    return 0;
}

static int g_event_query(whale_backend *b, void *e, bool *done)
{
    ON_DEVICE(b);
    cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (r == cudaErrorNotReady) {
        *done = false;
        return 0;
    }
    CU(r);
    *done = true;
    return 0;
}

static int g_event_elapsed_ms(whale_backend *b, void *e0, void *e1, float *ms)
{
    ON_DEVICE(b);
    CU(cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(e0), static_cast<cudaEvent_t>(e1)));
    return 0;
}

static const bk_ops cuda_ops = {
    g_close,
    g_mem_alloc,
    g_mem_free,
    g_mem_info,
    g_host_alloc,
    g_host_free,
    g_host_register,
    g_host_unregister,
    g_memcpy,
    g_memset,
    g_stream_create,
    g_stream_destroy,
    g_stream_sync,
    g_event_create,
    g_event_destroy,
    g_event_record,
    g_stream_wait_event,
    g_event_sync,
    g_event_query,
    g_event_elapsed_ms,
    bkg_gemm,
    bkg_linear_fwd,
    bkg_linear_bwd,
    NULL, /* linear_gelu_fwd: the separate linear and GELU kernels run */
    NULL, /* linear_bwd_gelu */
    bkg_layernorm_fwd,
    bkg_layernorm_bwd,
    bkg_attention_saved_floats,
    bkg_attention_fwd,
    bkg_attention_bwd,
    bkg_gelu_fwd,
    bkg_gelu_bwd,
    bkg_add,
    bkg_acc,
    bkg_embed_fwd,
    bkg_embed_bwd,
    bkg_xent_fwd,
    bkg_xent_bwd,
    bkg_rows_max,
    bkg_rows_exp_sum,
    bkg_rows_normalize,
    bkg_cast,
    bkg_scale,
    bkg_sumsq,
    bkg_has_inf_nan,
    bkg_adamw,
    bkg_bias_add,
    bkg_round16,
    // the Llama block (llama.cu, attention.cu)
    bkg_rmsnorm_fwd,
    bkg_rmsnorm_bwd,
    bkg_glu_fwd,
    bkg_glu_bwd,
    bkg_rope,
    bkg_attention_gqa_fwd,
    bkg_attention_gqa_bwd,
    bkg_colsum_acc_ld,
    bkg_embed_bwd_rows,
    // strided bias of q/k/v column ranges; host-access points
    bkg_bias_fill,
    g_host_access,
    // no host-side GQA expand / fold: plain GQA runs the grouped kernels
    nullptr,
    nullptr,
    // no one-token generation kernels yet: generation recomputes the window
    nullptr,
    nullptr,
    // no multi-tensor sumsq: the gradient norm calls sumsq once per tensor
    nullptr,
};

// The GPU of this task: the plugin binds each task's GPUs through
// CUDA_VISIBLE_DEVICES (then the first visible one is ours); without a
// binding, tasks of a node share out the visible GPUs by WHALE_LOCAL_RANK.
static int choose_ordinal(int asked, int count)
{
    if (asked >= 0)
        return asked;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && *vis)
        return 0;
    const char *lr = whale_knob_getenv("WHALE_LOCAL_RANK");
    int local = lr ? atoi(lr) : 0;
    return local >= 0 ? local % count : 0;
}

extern "C" int bk_cuda_open(const struct whale_backend_opts *o, whale_backend *b)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        whale_error("device cuda: no usable GPU (%s)",
                    e != cudaSuccess ? cudaGetErrorString(e) : "no device visible");
        return WHALE_ENOTSUP;
    }
    int dev = choose_ordinal(o->ordinal, count);
    if (dev >= count) {
        whale_error("device cuda: GPU ordinal %d out of range 0..%d (CUDA_VISIBLE_DEVICES=%s)",
                    dev, count - 1, getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES")
                                                                   : "(unset)");
        return WHALE_EINVAL;
    }
    bkg_impl *g = new (std::nothrow) bkg_impl();
    if (!g)
        return WHALE_ENOMEM;
    g->dev = dev;
    g->tf32 = o->allow_tf32;
    g->managed = o->host_coherent;
    b->impl = g;
    b->ops = &cuda_ops;
    // host_coherent: managed memory + every call synchronous (backend.h),
    // unless stream_ordered: then the caller syncs at its host-access points
    b->host_addressable = o->host_coherent;
    b->sync_calls = o->host_coherent && !o->stream_ordered;
    int rc = 0;
    do {
        cudaError_t r;
        if ((r = cudaSetDevice(dev)) != cudaSuccess ||
            (r = cudaGetDeviceProperties(&g->prop, dev)) != cudaSuccess ||
            (r = cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking)) != cudaSuccess ||
            (r = cudaHostAlloc((void **)&g->red, 64, cudaHostAllocPortable)) != cudaSuccess) {
            whale_error("device cuda:%d: initialisation failed: %s", dev, cudaGetErrorString(r));
            rc = WHALE_ENCCL;
            break;
        }
        if (g->managed && !g->prop.managedMemory) {
            whale_error("device cuda:%d: %s does not support managed memory, which the engine "
                        "needs to run on it (host_coherent)", dev, g->prop.name);
            rc = WHALE_ENOTSUP;
            break;
        }
        if (g->prop.major < 8) {
            whale_error("device cuda:%d: %s is compute capability %d.%d; the cuda backend needs "
                        "8.0 or newer (bf16)", dev, g->prop.name, g->prop.major, g->prop.minor);
            rc = WHALE_ENOTSUP;
            break;
        }
        // Kernels take short-lived scratch with cudaMallocAsync; keep freed
        // blocks in the pool instead of returning them to the driver at
        // every synchronisation (which would cost a real allocation each step).
        cudaMemPool_t pool;
        uint64_t keep = UINT64_MAX;
        if ((r = cudaDeviceGetDefaultMemPool(&pool, dev)) != cudaSuccess ||
            (r = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep)) !=
                cudaSuccess) {
            whale_error("device cuda:%d: stream-ordered memory pool unavailable: %s", dev,
                        cudaGetErrorString(r));
            rc = WHALE_ENOTSUP;
            break;
        }
        rc = bkg_gemm_init(b);
    } while (0);
    if (rc) {
        g_close(b);
        return rc;
    }
    b->compute.native = g->compute;
    snprintf(b->desc, sizeof b->desc, "cuda:%d %s (sm_%d%d, %.0f GiB)", dev, g->prop.name,
             g->prop.major, g->prop.minor, g->prop.totalGlobalMem / 1073741824.0);
    return 0;
}
