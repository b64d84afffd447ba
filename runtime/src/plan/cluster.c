/* Cluster description for the planner: node groups (several for mixed
 * clusters), NVLink domain size, leaf switches and the alpha-beta link
 * classes. Hypothetical clusters come from whale_cluster_init/add_group;
 * the allocation the plugin sees comes from whale_cluster_from_topo
 * (from_topo.c). */
#include "whale/plan.h"
#include "whale/error.h"
#include "whale/log.h"
#include "plan_internal.h"

#include <stdio.h>
#include <string.h>

#define GiB 1073741824.0

void plan_eff_defaults(struct whale_eff_model *e)
{
    /* GEMM efficiency and its shape dependence come from the device type
     * (measured per GPU generation: gpu.c); 0 here means "the device's",
     * a calibration profile (whale-bench, --calib) overrides them. The
     * others are generic properties of NCCL/HBM systems, set by hand from
     * public measurements, never fitted to one table. */
    e->gemm_eff = 0;
    e->gemm_half_dim = 0;
    e->mem_eff = 0.70;         /* fused softmax/dropout/layernorm reach ~70 % of HBM */
    e->coll_eff = 0.80;        /* NCCL large-message bus bandwidth / link rate
                                  (nccl-tests: ~190 of 240 GB/s on A100 NVLink) */
    e->dp_overlap = 0.8;       /* share of the DP reduction hidden behind backward */
    e->overlap_cost = 0.15;    /* NCCL kernels take SMs/HBM from overlapped compute */
    /* ZeRO-3: every collective's ring latency is on the critical path and
     * the gathers' bandwidth is not hidden behind compute (zero3_overlap 0:
     * the fit on the published DeepSpeed and FSDP runs,
     * tests/data/plan-validation.txt, finds no hiding). DeepSpeed ZeRO-3 (as
     * of Megatron-LM SC'21 table 2) issues one collective per parameter
     * tensor (zero3_msgs 0, the default); PyTorch FSDP one flat buffer per
     * layer (zero3_msgs 1). A calibration profile (ZeRO3Overlap=) can say
     * what a runtime hides. */
    e->zero3_overlap = 0;
    e->zero3_msgs = 0;         /* 0 = one collective per parameter tensor of the block */
    e->offload_overlap = 0.3;  /* offload=params: host fetches hidden behind 30 % of compute
                                  (the wave-1 value, kept apart from ZeRO-3's) */
    e->host_adam_rate = 1e9;   /* params/s of a multi-threaded host Adam (per GPU share) */
    e->kernel_overhead = 30e-6;/* launch + sync per layer pass not hidden by async launch */
}

int whale_cluster_init(struct whale_cluster *c, int nodes, int gpus_per_node, const char *gpu_type)
{
    memset(c, 0, sizeof *c);
    plan_eff_defaults(&c->eff);
    c->nodes_per_leaf = 32;            /* 32 nodes x 8 rails: a 2-level fat-tree pod */
    c->spine_oversub = 1.0;
    /* per ring step: NCCL's own latency model (src/graph/tuning.cc) puts a
     * Simple-protocol ring step at 3.4-5.7 us over NVLink and 6.6-9.6 us
     * over the network; a spine crossing adds two switch hops */
    c->link[WHALE_PLAN_LINK_NVLINK].alpha = 3e-6;
    c->link[WHALE_PLAN_LINK_LEAF].alpha = 7e-6;
    c->link[WHALE_PLAN_LINK_SPINE].alpha = 9e-6;
    c->overhead_bytes = 3.0 * GiB;     /* CUDA context, cuBLAS workspace, NCCL buffers */
    c->frag = 0.05;
    int rc = whale_cluster_add_group(c, nodes, gpus_per_node, gpu_type);
    if (rc)
        return rc;
    if (!strcmp(c->group[0].gpu.name, "cpu")) {
        /* CPU ranks: no CUDA context; the runtime and MPI-like buffers. */
        c->overhead_bytes = 0.2 * GiB;
        c->link[WHALE_PLAN_LINK_NVLINK].alpha = 2e-6;
        c->link[WHALE_PLAN_LINK_LEAF].alpha = 40e-6;
        c->link[WHALE_PLAN_LINK_SPINE].alpha = 50e-6;
    } else {
        /* fitted with the GPU model (plan_internal.h) */
        c->eff.coll_eff = PLAN_FIT_COLL_EFF;
        c->eff.zero3_overlap = PLAN_FIT_Z3_OVERLAP;
    }
    c->nvlink_domain = c->group[0].gpu.domain > gpus_per_node ? c->group[0].gpu.domain : gpus_per_node;
    if (c->group[0].gpu.domain > 0 && (int64_t)nodes * gpus_per_node < c->nvlink_domain)
        c->nvlink_domain = nodes * gpus_per_node;   /* a partial rack */
    c->host_mem_per_gpu = 2 * c->group[0].gpu.mem_bytes;
    snprintf(c->name, sizeof c->name, "%dx%d %s", nodes, gpus_per_node, c->group[0].gpu.name);
    return 0;
}

int whale_cluster_add_group(struct whale_cluster *c, int nodes, int gpus_per_node, const char *gpu_type)
{
    if (c->ngroups >= WHALE_CLUSTER_MAX_GROUPS) {
        whale_error("cluster: at most %d node groups", WHALE_CLUSTER_MAX_GROUPS);
        return WHALE_ERANGE;
    }
    if (nodes < 1 || gpus_per_node < 1 || gpus_per_node > 1024) {
        whale_error("cluster: nodes=%d gpus-per-node=%d: both must be >= 1 (gpus <= 1024)",
                    nodes, gpus_per_node);
        return WHALE_ERANGE;
    }
    struct whale_node_group *g = &c->group[c->ngroups];
    int rc = whale_plan_device_find(gpu_type, &g->gpu);
    if (rc)
        return rc;
    g->nodes = nodes;
    g->gpus_per_node = gpus_per_node;
    c->ngroups++;
    return 0;
}

int64_t whale_cluster_gpus(const struct whale_cluster *c)
{
    int64_t n = 0;
    for (int i = 0; i < c->ngroups; i++)
        n += (int64_t)c->group[i].nodes * c->group[i].gpus_per_node;
    return n;
}

bool whale_cluster_is_mixed(const struct whale_cluster *c)
{
    for (int i = 1; i < c->ngroups; i++)
        if (strcmp(c->group[i].gpu.name, c->group[0].gpu.name) ||
            c->group[i].gpu.peak_flops != c->group[0].gpu.peak_flops ||
            c->group[i].gpu.mem_bytes != c->group[0].gpu.mem_bytes)
            return true;
    return false;
}

int whale_cluster_validate(const struct whale_cluster *c)
{
    if (c->ngroups < 1) {
        whale_error("cluster: no nodes");
        return WHALE_EINVAL;
    }
    for (int i = 0; i < c->ngroups; i++) {
        const struct whale_plan_device *g = &c->group[i].gpu;
        if (!(g->peak_flops > 0) || !(g->mem_bytes > 0) || !(g->hbm_bw > 0) || !(g->nic_bw > 0)
            || !(g->nvlink_bw > 0)) {
            whale_error("cluster: device type '%s' lacks peak FLOP/s, memory or bandwidth", g->name);
            return WHALE_EINVAL;
        }
    }
    if (c->nvlink_domain < 1) {
        whale_error("cluster: NVLink domain size must be >= 1");
        return WHALE_EINVAL;
    }
    for (int i = 0; i < c->ngroups; i++)
        if (c->nvlink_domain % c->group[i].gpus_per_node && c->group[i].gpus_per_node % c->nvlink_domain) {
            whale_error("cluster: NVLink domain of %d GPUs does not align with %d GPUs per node",
                        c->nvlink_domain, c->group[i].gpus_per_node);
            return WHALE_EINVAL;
        }
    if (c->spine_oversub < 1 || c->frag < 0 || c->frag >= 1 || c->overhead_bytes < 0) {
        whale_error("cluster: spine oversubscription must be >= 1, fragmentation in [0,1)");
        return WHALE_EINVAL;
    }
    const struct whale_eff_model *e = &c->eff;
    if (!(e->gemm_eff >= 0 && e->gemm_eff <= 1) || e->zero3_msgs < 0 || e->grad_reduce_bytes < 0 || e->grad_reduce_bytes > 8 || !(e->mem_eff > 0 && e->mem_eff <= 1) ||
        !(e->coll_eff > 0 && e->coll_eff <= 1) || e->dp_overlap < 0 || e->dp_overlap > 1 ||
        e->gemm_half_dim < 0 || e->overlap_cost < 0 || e->overlap_cost > 1 || e->zero3_overlap < 0 || e->zero3_overlap > 1 || e->offload_overlap < 0 || e->offload_overlap > 1 || e->kernel_overhead < 0 || !(e->host_adam_rate > 0) ||
        e->gemm_scale < 0 || e->gemm_scale > 1.5 || e->lat_scale < 0 || e->tp_overlap < 0 || e->tp_overlap > 1 ||
        e->dp_bucket < 0) {
        whale_error("cluster: efficiency constants out of range (efficiencies in (0,1], GEMM "
                    "efficiency 0 = the device's)");
        return WHALE_EINVAL;
    }
    return 0;
}

void whale_cluster_describe(const struct whale_cluster *c, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < c->ngroups && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%d x %d %s", i ? " + " : "", c->group[i].nodes,
                              c->group[i].gpus_per_node, c->group[i].gpu.name);
    if (o < len)
        snprintf(buf + o, len - o, " (%lld %s, NVLink domain %d, %d nodes/leaf switch)",
                 (long long)whale_cluster_gpus(c),
                 strcmp(c->group[0].gpu.name, "cpu") ? "GPUs" : "CPU ranks", c->nvlink_domain,
                 c->nodes_per_leaf);
}
