/* --device for whale-train: which backend computes (whale/backend.h). The
 * decision and its reason come from whale_device_resolve; this file only
 * picks the value (flag over WHALE_DEVICE over auto) and reports. */
#include "train_device.h"

#include <stdlib.h>

#include "whale/backend.h"
#include "whale/knobs.h"
#include "whale/log.h"

void train_device_usage(FILE *f)
{
    fprintf(f,
"  --device cpu|cuda|auto  compute backend (default WHALE_DEVICE, else auto): auto takes\n"
"                       the GPU the plugin bound to the task (CUDA_VISIBLE_DEVICES) when\n"
"                       this build has the CUDA backend and the GPU answers, else cpu,\n"
"                       and says which and why; cuda that cannot run is an error\n");
}

int train_device_apply(const struct train_device *d, struct whale_engine_config *ec, int rank)
{
    const char *src = "--device";
    const char *v = d->arg;
    if (!v) {
        v = whale_knob_getenv("WHALE_DEVICE");
        src = "WHALE_DEVICE";
    }
    if (!v || !*v) {
        v = "auto";
        src = "default";
    }
    enum whale_device asked, got;
    if (whale_device_parse(v, &asked)) {
        fprintf(stderr, "whale-train: %s=%s: expected cpu, cuda or auto\n", src, v);
        return 2;
    }
    char why[320];
    if (whale_device_resolve(asked, &got, why, sizeof why)) {
        fprintf(stderr, "whale-train: rank %d: %s=%s cannot run here: %s\n", rank, src, v, why);
        return 2;
    }
    if (rank == 0)
        whale_info("device: %s (%s)", whale_device_name(got), why);
    ec->device = (int)got;
    return 0;
}
