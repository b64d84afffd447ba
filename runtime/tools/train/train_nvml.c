/* GPU utilization and memory through NVML, loaded with dlopen at run time
 * so that whale-train neither links nor needs the NVIDIA driver: on a
 * machine without libnvidia-ml.so.1 or without a GPU, train_nvml_open
 * returns NULL and the metrics leave the GPU fields out. The few NVML
 * entry points and structs are declared here from NVML's public ABI
 * (nvml.h, stable since the _v2 names). */
#define _GNU_SOURCE
#include "train_sysmon.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef void *nvml_dev;
struct nvml_util { unsigned int gpu, memory; };
struct nvml_mem { unsigned long long total, free, used; };

struct train_nvml {
    void *lib;
    nvml_dev dev;
    int (*util)(nvml_dev, struct nvml_util *);
    int (*mem)(nvml_dev, struct nvml_mem *);
    int (*shutdown)(void);
};

/* The GPU this rank uses: the first of CUDA_VISIBLE_DEVICES when it is a
 * plain index (the plugin sets one per task), else device 0. */
static unsigned gpu_index(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v || !*v)
        return 0;
    char *end;
    unsigned long i = strtoul(v, &end, 10);
    return end != v && (*end == '\0' || *end == ',') && i < 1024 ? (unsigned)i : 0;
}

struct train_nvml *train_nvml_open(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return NULL;
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(lib, "nvmlDeviceGetCount_v2");
    int (*byidx)(unsigned, nvml_dev *) =
        (int (*)(unsigned, nvml_dev *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    struct train_nvml *n = calloc(1, sizeof *n);
    unsigned cnt = 0, idx = gpu_index();
    if (!n || !init || !count || !byidx || init() != 0) {
        free(n);
        dlclose(lib);
        return NULL;
    }
    n->lib = lib;
    n->util = (int (*)(nvml_dev, struct nvml_util *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
    n->mem = (int (*)(nvml_dev, struct nvml_mem *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
    n->shutdown = (int (*)(void))dlsym(lib, "nvmlShutdown");
    if (count(&cnt) != 0 || cnt == 0 || idx >= cnt || byidx(idx, &n->dev) != 0 || !n->util ||
        !n->mem) {
        train_nvml_close(n);
        return NULL;
    }
    return n;
}

int train_nvml_sample(struct train_nvml *n, double *util, double *mem_mb)
{
    struct nvml_util u;
    struct nvml_mem m;
    if (!n || n->util(n->dev, &u) != 0 || n->mem(n->dev, &m) != 0)
        return -1;
    *util = u.gpu / 100.0;
    *mem_mb = (double)m.used / 1048576.0;
    return 0;
}

void train_nvml_close(struct train_nvml *n)
{
    if (!n)
        return;
    if (n->shutdown)
        n->shutdown();
    dlclose(n->lib);
    free(n);
}
