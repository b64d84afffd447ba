/* Adapter: the planner's cluster description from the topology model the
 * plugin builds (whale/topo.h: whale.conf + topology.conf) for the nodes of
 * one step. Kept in this one file so the planner's own model does not
 * depend on the topology module's details. */
#include "plan_internal.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/topo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define GiB 1073741824.0

/* Catalogue entry for a site's GPU type name ("H100", "a100-80gb"): exact
 * name, else the entry whose name starts with it and whose memory is
 * closest to the site's figure. */
static int match_device(const struct whale_gpu_type *gt, struct whale_plan_device *out)
{
    int n;
    const struct whale_plan_device *cat = whale_plan_devices(&n);
    int best = -1;
    double bd = INFINITY;
    size_t len = gt->name ? strlen(gt->name) : 0;
    for (int i = 0; i < n && len; i++) {
        if (!strcasecmp(cat[i].name, gt->name)) {
            best = i;
            break;
        }
        if (!strncasecmp(cat[i].name, gt->name, len)) {
            double d = gt->mem_gib > 0 ? fabs(cat[i].mem_bytes / GiB - gt->mem_gib) : (double)i;
            if (d < bd) {
                bd = d;
                best = i;
            }
        }
    }
    if (best >= 0) {
        *out = cat[best];
    } else {
        /* unknown to the catalogue: the site's figures, H100-class links */
        whale_plan_device_find("H100-80GB", out);
        snprintf(out->name, sizeof out->name, "%s", gt->name ? gt->name : "gpu");
    }
    if (gt->peak_tflops > 0) out->peak_flops = gt->peak_tflops * 1e12;
    if (gt->mem_gib > 0) out->mem_bytes = gt->mem_gib * GiB;
    if (gt->nvlink_gbs > 0) out->nvlink_bw = gt->nvlink_gbs * 1e9;
    if (best < 0 && !(gt->peak_tflops > 0 && gt->mem_gib > 0)) {
        whale_error("GPU type '%s' is not in the planner's catalogue; give its peak TFLOP/s and "
                    "memory in whale.conf (GPUType=%s PeakTFLOPS=... MemoryGiB=...)",
                    out->name, out->name);
        return WHALE_EINVAL;
    }
    return 0;
}

int whale_cluster_from_topo(const struct whale_topo *t, const int *nodes, int nnodes,
                            int ranks_per_node, struct whale_cluster *c)
{
    if (!t || !nodes || nnodes < 1) {
        whale_error("planner: no nodes to plan on");
        return WHALE_EINVAL;
    }
    int rc = 0;
    for (int i = 0; i < nnodes; i++) {
        if (nodes[i] < 0 || nodes[i] >= t->nnodes) {
            whale_error("planner: node index %d out of range", nodes[i]);
            return WHALE_EINVAL;
        }
        const struct whale_topo_node *nd = &t->nodes[nodes[i]];
        int ranks = ranks_per_node > 0 ? ranks_per_node : nd->gpus > 0 ? nd->gpus
                  : nd->cores > 0 ? nd->cores : 1;
        struct whale_plan_device dev;
        if (nd->gpus > 0 && nd->gpu_type >= 0 && nd->gpu_type < t->ngpu_types) {
            if ((rc = match_device(&t->gpu_types[nd->gpu_type], &dev)))
                return rc;
            if (t->link_gbs[WHALE_LINK_LEAF] > 0)
                dev.nic_bw = (nd->nic_gbs > 0 ? fmin(nd->nic_gbs, t->link_gbs[WHALE_LINK_LEAF])
                                              : t->link_gbs[WHALE_LINK_LEAF]) * 1e9;
        } else if (nd->gpus > 0) {
            whale_plan_device_find("H100-80GB", &dev);  /* GPUs of no declared type */
        } else {
            whale_plan_device_find("cpu", &dev);        /* ranks on cores; calibrate */
        }
        /* consecutive nodes of one kind form a group (the block order the
         * planner maps ranks in) */
        struct whale_node_group *last = c->ngroups && i ? &c->group[c->ngroups - 1] : NULL;
        if (i == 0) {
            if ((rc = whale_cluster_init(c, 1, ranks, "cpu")))
                return rc;
            c->group[0].gpu = dev;
            if (nd->gpus > 0)
                c->overhead_bytes = 3.0 * GiB;
        } else if (last && last->gpus_per_node == ranks && !strcmp(last->gpu.name, dev.name) &&
                   last->gpu.peak_flops == dev.peak_flops) {
            last->nodes++;
        } else {
            if (c->ngroups == WHALE_CLUSTER_MAX_GROUPS) {
                whale_error("planner: the step's nodes alternate between more than %d kinds; "
                            "order the node list by GPU type", WHALE_CLUSTER_MAX_GROUPS);
                return WHALE_ERANGE;
            }
            struct whale_node_group *g = &c->group[c->ngroups++];
            g->nodes = 1;
            g->gpus_per_node = ranks;
            g->gpu = dev;
        }
    }
    /* NVLink domain: the first node's (a node, or an NVL72-style block) */
    int dom = whale_topo_domain_gpus(t, nodes[0]);
    c->nvlink_domain = dom > 0 ? dom : c->group[0].gpus_per_node;
    if (c->nvlink_domain % c->group[0].gpus_per_node && c->group[0].gpus_per_node % c->nvlink_domain)
        c->nvlink_domain = c->group[0].gpus_per_node;
    /* nodes per leaf switch: the largest share of the step under one leaf
     * (fragmented allocations: the mapper packs DP groups there first) */
    int best = 0;
    if (t->nswitches > 0) {
        int *cnt = calloc((size_t)t->nswitches, sizeof *cnt);
        if (!cnt)
            return WHALE_ENOMEM;
        for (int i = 0; i < nnodes; i++) {
            int leaf = t->nodes[nodes[i]].leaf;
            if (leaf >= 0 && leaf < t->nswitches && ++cnt[leaf] > best)
                best = cnt[leaf];
        }
        free(cnt);
    }
    c->nodes_per_leaf = best > 0 ? best : 0;
    if (t->link_gbs[WHALE_LINK_LEAF] > 0 && t->link_gbs[WHALE_LINK_SPINE] > 0)
        c->spine_oversub = fmax(1.0, t->link_gbs[WHALE_LINK_LEAF] / t->link_gbs[WHALE_LINK_SPINE]);
    snprintf(c->name, sizeof c->name, "step of %d nodes", nnodes);
    return whale_cluster_validate(c);
}
