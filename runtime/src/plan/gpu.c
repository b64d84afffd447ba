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

static const struct whale_plan_device plan_devices[] = {
    /* name          peak        mem          hbm        nvlink     nic        pcie      domain */
    { "V100-32GB",   125 * TF,   32 * GiB,    900 * GB,  150 * GB,  12.5 * GB, 12 * GB,  0 },
    { "A100-40GB",   312 * TF,   40 * GiB,   1555 * GB,  300 * GB,  25 * GB,   25 * GB,  0 },
    { "A100-80GB",   312 * TF,   80 * GiB,   2039 * GB,  300 * GB,  25 * GB,   25 * GB,  0 },
    { "H100-80GB",   989 * TF,   80 * GiB,   3350 * GB,  450 * GB,  50 * GB,   50 * GB,  0 },
    { "H200",        989 * TF,  141 * GB,    4800 * GB,  450 * GB,  50 * GB,   50 * GB,  0 },
    { "B200",       2250 * TF,  180 * GB,    8000 * GB,  900 * GB,  50 * GB,   50 * GB,  0 },
    { "GB200",      2500 * TF,  186 * GB,    8000 * GB,  900 * GB,  50 * GB,  450 * GB, 72 },
    /* One rank on a 2-core AVX-512 VM: ~0.2 TFLOP/s sgemm, shared-memory and
     * TCP "links" (see the machine baselines note). */
    { "cpu",         0.2 * TF,    4 * GiB,     20 * GB,    8 * GB,   2 * GB,   20 * GB,  0 },
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

