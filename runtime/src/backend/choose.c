/* --device cpu|cuda|auto: what runs where, and why, in words a user can act
 * on. auto takes the GPU only when the plugin bound one to the task
 * (CUDA_VISIBLE_DEVICES, the env contract of DESIGN.md), this build has the
 * cuda backend and a device answers; otherwise cpu, with the reason. */
#include "backend/choose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_internal.h"
#include "whale/error.h"
#include "whale/log.h"

void bk_device_probe_now(struct bk_device_probe *p)
{
    memset(p, 0, sizeof *p);
    p->visible = getenv("CUDA_VISIBLE_DEVICES");
#ifdef WHALE_HAVE_CUDA_BACKEND
    static char err[160];
    p->built = true;
    p->count = bk_cuda_probe(err, sizeof err);
    p->error = err[0] ? err : NULL;
#endif
}

/* Slurm writes NoDevFiles when a job asked for a GRES without device files;
 * an empty value or -1 hides every GPU. */
static bool bound(const char *v)
{
    return v && *v && strcmp(v, "NoDevFiles") != 0 && strcmp(v, "-1") != 0;
}

/* Why cuda cannot run here, or NULL when it can. */
static const char *cuda_missing(const struct bk_device_probe *p, char *buf, size_t len)
{
    if (!p->built)
        return "this build of libwhale has no CUDA backend (rebuild with nvcc, cuBLASLt and "
               "NCCL present: meson setup -Dcuda=enabled)";
    if (p->error) {
        snprintf(buf, len, "the CUDA driver could not be used: %s", p->error);
        return buf;
    }
    if (p->count <= 0) {
        if (p->visible && !bound(p->visible))
            snprintf(buf, len, "no GPU is visible (CUDA_VISIBLE_DEVICES=%s)", p->visible);
        else
            snprintf(buf, len, "no GPU answered (the CUDA runtime reports 0 devices)");
        return buf;
    }
    return NULL;
}

int bk_device_decide(enum whale_device asked, const struct bk_device_probe *p,
                     enum whale_device *out, char *why, size_t len)
{
    char buf[256];
    const char *miss;
    switch (asked) {
    case WHALE_DEVICE_CPU:
        *out = WHALE_DEVICE_CPU;
        snprintf(why, len, "cpu asked for");
        return 0;
    case WHALE_DEVICE_CUDA:
        if ((miss = cuda_missing(p, buf, sizeof buf))) {
            snprintf(why, len, "%s", miss);
            return WHALE_ENOTSUP;
        }
        *out = WHALE_DEVICE_CUDA;
        snprintf(why, len, "cuda asked for; %d GPU%s visible", p->count, p->count == 1 ? "" : "s");
        return 0;
    case WHALE_DEVICE_AUTO:
        *out = WHALE_DEVICE_CPU;
        if ((miss = cuda_missing(p, buf, sizeof buf)))
            snprintf(why, len, "auto chose cpu: %s", miss);
        else if (!bound(p->visible))
            snprintf(why, len, "auto chose cpu: no GPU was bound to this task "
                     "(CUDA_VISIBLE_DEVICES %s; --device cuda uses the visible GPUs anyway)",
                     p->visible ? "is empty" : "is unset");
        else {
            *out = WHALE_DEVICE_CUDA;
            snprintf(why, len, "auto chose cuda: GPU(s) %s bound to this task", p->visible);
        }
        return 0;
    }
    snprintf(why, len, "device %d is not cpu, cuda or auto", (int)asked);
    return WHALE_EINVAL;
}

int whale_device_resolve(enum whale_device asked, enum whale_device *out, char *why, size_t len)
{
    struct bk_device_probe p;
    bk_device_probe_now(&p);
    return bk_device_decide(asked, &p, out, why, len);
}
