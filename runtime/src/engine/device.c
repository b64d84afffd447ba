/* The engine's compute backend (whale/backend.h): which one, what it
 * refuses, and the memory the arena takes from it.
 *
 * cpu: the backend wraps the engine's own kernels, so every result is the
 * bits the engine computed before it went through the backend.
 *
 * cuda: the backend is opened host_coherent: engine memory is CUDA managed
 * memory and every backend call waits for its stream. That lets the parts of
 * the engine that still touch engine memory from the host (parameter init,
 * checkpoints, the host collectives of DP/TP/PP, ZeRO bucket bookkeeping)
 * run unchanged while every kernel, cast and the optimizer run on the GPU.
 *
 * Stream-ordered execution (WHALE_CUDA_STREAM_ORDERED=1, not yet the
 * default: it has not run on a GPU): the same managed memory, preferring the
 * device and prefetched there, but calls return as soon as they are
 * enqueued; the engine drains the device only where the host touches engine
 * memory, through eng_dev_host_access (whale_backend_host_access; a no-op on
 * cpu and in the default mode). The host-access points made explicit:
 *   - layers.c head_fwd: the token losses summed on the host (also every
 *     later host read of the logits in whale-generate: nothing is enqueued
 *     in between);
 *   - whale_engine_step (step.c), before the injected-overflow write and
 *     before the host memset of the gradients at the end of the step: after
 *     it everything of the step has finished, so what runs between steps
 *     (checkpoint snapshots, metrics, elastic recovery, evaluation set-up)
 *     reads finished memory;
 *   - reductions with host results (whale_k_sumsq, whale_k_has_inf_nan)
 *     wait for their stream themselves.
 * Not covered, so stream ordering is turned off (one sync per call, logged)
 * where they occur: pipeline sends and receives over the host group (PP >
 * 1: pipe.c hands engine buffers to the host group), and ZeRO 1-3 (the step
 * copies shards, gathered weights and reduced gradients with host memcpy
 * inside the step). The deferred
 * checkpoint snapshot copies weights and moments on a host thread while the
 * next step's forward and backward run: those only read them, and the
 * optimizer phase waits for the copy before AdamW is enqueued, so it is
 * covered by the end-of-step point (concurrent reads; with
 * concurrentManagedAccess, page migration costs time, not correctness).
 * Possibly missing (say so before trusting a figure): error paths that
 * return mid-step (a recovery then reads engine memory without a drain),
 * and any host read of engine memory inside a step not named here.
 * Token ids come from the data loader's host memory, which a kernel may not
 * read: they are staged into backend memory each step (eng_dev_tokens).
 * Data-parallel collectives and the tensor-parallel sums go over NCCL on
 * streams of their own (ecomm_dev.c); pipeline sends and receives still use
 * the host group on managed memory. */
#include "device.h"

#include <stdio.h>
#include <string.h>

#include "ecomm_dev.h"
#include "engine_internal.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/log.h"

/* The features of a model or configuration the cuda backend has no kernel
 * or path for: refused at set-up with the feature named, never a silent cpu
 * fallback. The cpu engine refuses what it lacks itself (cfg_check).
 * The Llama-style block (RMSNorm, gated MLPs, rotary, GQA, Bias=no,
 * Attention=flash: engine/block_x.c) runs through the backend ops like the
 * GPT block, so those models are not refused; on cuda both Attention=plain
 * and Attention=flash run flash-style kernels (plain GQA takes the grouped
 * kernel, block_x.c). An untied head is not refused either: the head's
 * GEMMs go through the backend with lm_head.w as they do with the tied wte.
 * What is left runs host loops over engine memory that are not written for
 * a device: */
static int cuda_refusals(const struct whale_engine_config *c)
{
    const struct whale_model_desc *m = &c->model;
    const char *why = NULL;
    char buf[160];
    if (c->seqpar && c->tp > 1)
        why = "--seqpar (sequence parallelism runs on the CPU backend only)";
    else if (c->offload != WHALE_OFFLOAD_NONE)
        snprintf(buf, sizeof buf, "--offload %s (the offload mover copies with host threads; "
                 "its pinned-buffer path through whale_memcpy is not written yet)",
                 whale_offload_name(c->offload)), why = buf;
    if (!why)
        return 0;
    whale_error("--device cuda: model %s needs %s; run it with --device cpu", m->name, why);
    return WHALE_ENOTSUP;
}

/* WHALE_CUDA_STREAM_ORDERED: stream-ordered cuda where every host access
 * of the configuration is an explicit host-access point (top of file). */
static int stream_ordered(const whale_engine *e, const struct whale_engine_config *c, bool *on)
{
    int rc = whale_env_bool("WHALE_CUDA_STREAM_ORDERED", false, on);
    if (rc)
        return rc; /* the message names the knob and what it takes */
    const char *why = NULL;
    if (*on && e->grp.pp.size > 1)
        why = "pipeline parallelism sends engine memory over the host group";
    else if (*on && c->zero_stage > 0)
        why = "ZeRO copies shards of engine memory with host memcpy inside the step (step_*.c)";
    if (why) {
        whale_warn("WHALE_CUDA_STREAM_ORDERED=1: %s, which has no host-access points yet: one "
                   "stream sync per call instead", why);
        *on = false;
    }
    return 0;
}

int eng_dev_open(whale_engine *e, const struct whale_engine_config *c)
{
    enum whale_device dev = (enum whale_device)c->device;
    if (dev != WHALE_DEVICE_CPU && dev != WHALE_DEVICE_CUDA) {
        /* auto is resolved by the caller (whale_device_resolve), which says
         * what it chose and why */
        whale_error("engine: device %s: resolve auto before creating the engine (cpu or cuda)",
                    whale_device_name(dev));
        return WHALE_EINVAL;
    }
    int rc;
    if (dev == WHALE_DEVICE_CUDA && (rc = cuda_refusals(c)))
        return rc;
    struct whale_backend_opts o;
    whale_backend_opts_init(&o);
    o.device = dev;
    o.host_coherent = true; /* see the top of this file */
    if (dev == WHALE_DEVICE_CUDA && (rc = stream_ordered(e, c, &o.stream_ordered)))
        return rc;
    if ((rc = whale_backend_open(&o, &e->bk)))
        return rc;
    /* GEMM arithmetic of mixed precision with fp32 activations: the cpu
     * multiplies in bf16 only where the CPU has AVX512_BF16 (kernels_lp.c);
     * a GPU's tensor cores take the 16-bit dtype of the params */
    if (dev == WHALE_DEVICE_CPU)
        e->mm = e->lp == WHALE_BFLOAT16 && whale_backend_has_gemm_math(e->bk, WHALE_BFLOAT16)
                    ? WHALE_BFLOAT16
                    : WHALE_FLOAT32;
    else
        e->mm = e->lp;
    if ((rc = whale_backend_set_fp32_gemm_math(e->bk, e->mm)))
        return rc;
    e->d.bk = e->bk;
    /* cuda: data-parallel collectives over NCCL on a stream of their own
     * (ecomm_dev.c); the engine owns that table and frees it in eng_dev_close */
    if (dev == WHALE_DEVICE_CUDA && e->grp.dp_group && e->dp.size > 1) {
        if ((rc = eng_dev_comm_dp(&e->dp)))
            return rc;
        eng_dev_comm_bind(&e->dp, e->bk);
    }
    /* cuda: the tensor-parallel sums over NCCL too (ecomm_dev.c) */
    if (dev == WHALE_DEVICE_CUDA && e->ctx && e->grp.tp.size > 1 &&
        (rc = eng_dev_comm_tp(&e->grp.tp, whale_tp_group(e->ctx), e->bk)))
        return rc;
    if (dev != WHALE_DEVICE_CPU)
        whale_info("engine: computing on %s (%s)", whale_backend_describe(e->bk),
                   whale_backend_stream_ordered(e->bk)
                       ? "stream-ordered: syncs at the engine's host-access points"
                       : "host-coherent: one stream sync per call");
    return 0;
}

void eng_dev_close(whale_engine *e)
{
    if (!e->bk)
        return;
    whale_mem_free(e->bk, e->tok_dev);
    e->tok_dev = NULL;
    eng_dev_comm_free(&e->dp); /* back to the group table (e->grp.dp never changed) */
    eng_dev_comm_tp_free(&e->grp.tp);

    whale_backend_close(e->bk);
    e->bk = NULL;
}

/* Arena memory from the backend: the arena keeps the per-category budget
 * and peaks, the backend knows where the bytes live (host on cpu, managed
 * GPU memory on cuda). */
static void *arena_alloc(void *user, size_t n)
{
    void *p = NULL;
    return whale_mem_alloc(user, WHALE_MEM_WORKSPACE, n, &p) ? NULL : p;
}

static void arena_free(void *user, void *p, size_t n)
{
    (void)n;
    whale_mem_free(user, p);
}

void eng_dev_arena_backend(whale_engine *e, struct whale_arena_backend *out)
{
    *out = (struct whale_arena_backend){ arena_alloc, arena_free, e->bk };
}

int eng_dev_host_access(whale_engine *e)
{
    return e->bk ? whale_backend_host_access(e->bk) : 0;
}

int eng_dev_tokens(whale_engine *e, const int32_t **in, const int32_t **tg)
{
    if (whale_backend_reads_host(e->bk))
        return 0;
    size_t n = (size_t)e->d.B * e->d.T * e->cfg.grad_accum;
    int rc;
    if (!e->tok_dev &&
        (rc = whale_mem_alloc(e->bk, WHALE_MEM_ACTS, 2 * n * sizeof(int32_t), (void **)&e->tok_dev)))
        return rc;
    if ((rc = whale_memcpy(e->bk, e->tok_dev, *in, n * sizeof(int32_t), WHALE_H2D, NULL)) ||
        (rc = whale_memcpy(e->bk, e->tok_dev + n, *tg, n * sizeof(int32_t), WHALE_H2D, NULL)))
        return rc;
    *in = e->tok_dev;
    *tg = e->tok_dev + n;
    return 0;
}
