/* Catalogue of accelerator types and the names of the planner's enums.
 *
 * Figures are vendor data sheets (dense bf16/fp16 tensor FLOP/s, HBM size
 * and bandwidth, NVLink per-direction bandwidth per GPU) and the usual
 * scale-out of each generation's reference system (one NIC rail per GPU:
 * HDR 200 Gb/s on DGX A100, NDR 400 Gb/s on DGX H100/H200/B200). "cpu"
 * describes one rank of a CPU-only node (the minicluster): a measured
 * calibration profile should replace its numbers. */
#include "whale/plan.h"
#include "whale/error.h"
#include "whale/log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define GB 1e9
#define GiB 1073741824.0
#define TF 1e12

/* Kernel efficiencies, measured in public:
 *  gemm: best-shape fraction of the dense bf16 peak at the clock a GPU
 *    holds under sustained GEMM load ("maximum achievable matmul FLOPS",
 *    MAMF, power-saturated: S. Bekman, ml-engineering,
 *    compute/accelerator/README.md and benchmarks/README.md, mamf-finder.py).
 *    H100/H200 (one GH100 die at 700 W) 703/989 = 0.71 with all 8 GPUs busy
 *    (792 = 0.80 burst); B200 1439/2250 = 0.64 (1746 burst); GB200 runs the
 *    B200 die at 1200 W instead of 1000 W: 0.70; A100 SXM 267.9/312 = 0.86
 *    burst on a 400 W part that holds its clock: 0.82 sustained; V100 cuBLAS
 *    fp16 ~100/125 burst: 0.78. Training runs at the sustained clock. What a
 *    training stack reaches of it (kernels other than cuBLAS's best, launch
 *    gaps) is the fitted gemm_scale of struct whale_eff_model, one constant
 *    for every generation.
 *  sms, tile: streaming multiprocessors and the output tile of the large
 *    bf16 GEMM kernels (cuBLAS/CUTLASS: 128x128 on Volta, 128x256 on Ampere
 *    and Hopper, 256x256 2-CTA tiles on Blackwell). A GEMM of T tiles fills
 *    the SMs like T / (T + sms / 2): its last wave is partial, which costs
 *    skinny and small GEMMs (small models, thin TP shards) most.
 *  half: depth K at which the K loop's prologue and epilogue halve the
 *    efficiency, K / (K + half): deeper pipelines on newer parts need more
 *    K steps (the MAMF best shapes grow: A100 K 1536, H100 K 2816).
 *  flash: fused attention, forward + backward, on the FLOPs it executes at
 *    head dim 128 (FlashAttention-2 on A100: 50-60 %, Dao 2023, arXiv
 *    2307.08691 fig. 4; FlashAttention-3 / cuDNN on H100: 500-650 TFLOP/s
 *    forward, ~450 backward of 989, Shah et al. 2024, arXiv 2407.08608 fig.
 *    5/6, FA2 on H100 ~35 %: 0.45 between the kernels in use; B200 cuDNN
 *    assumed like H100). Head dim 64 runs ~10 % slower (same sources).
 *    Causal masking skips half the score blocks, backward is 2.5x forward.
 *  fp32: TF32 tensor-core peak / bf16 peak (data sheets: 156/312, 495/989,
 *    1125/2250); CPU ranks measure fp32 directly. */
static const struct whale_plan_device plan_devices[] = {
    /* name          peak        mem          hbm        nvlink     nic        pcie      domain gemm  half flash fp32  cache spill sms tile_m tile_n */
    { "V100-32GB",   125 * TF,   32 * GiB,    900 * GB,  150 * GB,  12.5 * GB, 12 * GB,  0,  0.78, 32, 0.30, 0.125, 0, 0,  80, 128, 128 },
    { "A100-40GB",   312 * TF,   40 * GiB,   1555 * GB,  300 * GB,  25 * GB,   25 * GB,  0,  0.82, 40, 0.55, 0.5, 0, 0, 108, 128, 256 },
    { "A100-80GB",   312 * TF,   80 * GiB,   2039 * GB,  300 * GB,  25 * GB,   25 * GB,  0,  0.82, 40, 0.55, 0.5, 0, 0, 108, 128, 256 },
    { "H100-80GB",   989 * TF,   80 * GiB,   3350 * GB,  450 * GB,  50 * GB,   50 * GB,  0,  0.71, 64, 0.45, 0.5, 0, 0, 132, 128, 256 },
    { "H200",        989 * TF,  141 * GB,    4800 * GB,  450 * GB,  50 * GB,   50 * GB,  0,  0.71, 64, 0.45, 0.5, 0, 0, 132, 128, 256 },
    { "B200",       2250 * TF,  180 * GB,    8000 * GB,  900 * GB,  50 * GB,   50 * GB,  0,  0.64, 96, 0.45, 0.5, 0, 0, 148, 256, 256 },
    { "GB200",      2500 * TF,  186 * GB,    8000 * GB,  900 * GB,  50 * GB,  450 * GB, 72,  0.70, 96, 0.45, 0.5, 0, 0, 148, 256, 256 },
    /* One rank on a 2-core AVX-512 VM: ~0.2 TFLOP/s sgemm, shared-memory and
     * TCP "links" (see the machine baselines note); the GEMM figures are the
     * wave-1 defaults a whale-bench profile replaces. */
    { "cpu",         0.2 * TF,    4 * GiB,     20 * GB,    8 * GB,   2 * GB,   20 * GB,  0,  0.74, 40, 0,    1, 0, 0,   0, 0, 0 },
};

const struct whale_plan_device *whale_plan_devices(int *n)
{
    *n = (int)(sizeof plan_devices / sizeof plan_devices[0]);
    return plan_devices;
}

int whale_plan_device_find(const char *name, struct whale_plan_device *out)
{
    int n;
    const struct whale_plan_device *t = whale_plan_devices(&n);
    for (int i = 0; i < n; i++)
        if (name && !strcasecmp(name, t[i].name)) {
            *out = t[i];
            return 0;
        }
    char known[256] = "";
    for (int i = 0; i < n; i++) {
        size_t l = strlen(known);
        snprintf(known + l, sizeof known - l, "%s%s", i ? ", " : "", t[i].name);
    }
    whale_error("unknown GPU type '%s' (known: %s)", name ? name : "(null)", known);
    return WHALE_ENOENT;
}

const char *whale_plan_link_name(int cls)
{
    static const char *n[] = { "nvlink", "leaf", "spine" };
    return cls >= 0 && cls < WHALE_PLAN_NLINK ? n[cls] : "?";
}

