/* Device memory for checkpoints: pieces that live on the GPU are copied
 * into a pinned host buffer (cudaHostAlloc) with cudaMemcpyAsync on a
 * stream of the checkpoint's own, so the copy runs at full PCIe/NVLink-C2C
 * speed and does not serialize with the training streams; restore copies
 * back with cudaMemcpy. Without CUDA these return WHALE_ENOTSUP. */
#include "ckpt_internal.h"

#include "whale/error.h"
#include "whale/log.h"

#include <stdlib.h>

#ifdef WHALE_HAVE_CUDA
#include <cuda_runtime.h>

bool ckpt_dev_available(void) { return true; }

void *ckpt_host_alloc(size_t n, bool pinned, bool *is_pinned)
{
    *is_pinned = false;
    if (pinned) {
        void *p = NULL;
        if (cudaHostAlloc(&p, n, cudaHostAllocDefault) == cudaSuccess) {
            *is_pinned = true;
            return p;
        }
        whale_warn("checkpoint: cannot pin a %zu-byte snapshot buffer; using pageable memory", n);
    }
    /* page-aligned: bundles are written straight from it with O_DIRECT (writer.c) */
    return aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
}

void ckpt_host_free(void *p, bool pinned)
{
    if (pinned)
        cudaFreeHost(p);
    else
        free(p);
}

int ckpt_dev_to_host_async(void *dst, const void *src, size_t n, void **stream)
{
    if (!*stream) {
        cudaStream_t s;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
            whale_error("checkpoint: cudaStreamCreate failed");
            return WHALE_ENCCL;
        }
        *stream = s;
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, (cudaStream_t)*stream);
    if (e != cudaSuccess) {
        whale_error("checkpoint: device-to-host copy of %zu bytes: %s", n, cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

int ckpt_dev_sync(void *stream)
{
    if (!stream)
        return 0;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e != cudaSuccess) {
        whale_error("checkpoint: device copy failed: %s", cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

int ckpt_host_to_dev(void *dst, const void *src, size_t n)
{
    cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        whale_error("checkpoint: host-to-device copy of %zu bytes: %s", n, cudaGetErrorString(e));
        return WHALE_ENCCL;
    }
    return 0;
}

void ckpt_dev_stream_destroy(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

#else

bool ckpt_dev_available(void) { return false; }

void *ckpt_host_alloc(size_t n, bool pinned, bool *is_pinned)
{
    (void)pinned;
    *is_pinned = false;
    /* page-aligned: bundles are written straight from it with O_DIRECT (writer.c) */
    return aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
}

void ckpt_host_free(void *p, bool pinned)
{
    (void)pinned;
    free(p);
}

int ckpt_dev_to_host_async(void *dst, const void *src, size_t n, void **stream)
{
    (void)dst; (void)src; (void)n; (void)stream;
    return WHALE_ENOTSUP;
}

int ckpt_dev_sync(void *stream)
{
    (void)stream;
    return 0;
}

int ckpt_host_to_dev(void *dst, const void *src, size_t n)
{
    (void)dst; (void)src; (void)n;
    return WHALE_ENOTSUP;
}

void ckpt_dev_stream_destroy(void *stream) { (void)stream; }

#endif
