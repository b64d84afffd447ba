/* Topology model shared by the SPANK plugin, whale-map, whale-run and the
 * planner: nodes (GPUs or cores, NICs), NVLink domains (a node on its own,
 * or a multi-node NVL72-style block), and the switch tree (leaf switches
 * under spines, as Slurm's topology.conf describes it).
 *
 * Built from whale.conf + topology.conf by whale_topo_load() (conf.h), or
 * programmatically (synthetic topologies in tests and benchmarks). Node
 * lookup by name is O(1) (hash), link class of two nodes is O(depth). */
#ifndef WHALE_TOPO_H
#define WHALE_TOPO_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the bytes between two ranks travel, fastest first. */
enum whale_link_class {
    WHALE_LINK_NODE  = 0,  /* same node: NVLink/NVSwitch or shared memory */
    WHALE_LINK_NVL   = 1,  /* other node of the same multi-node NVLink domain */
    WHALE_LINK_LEAF  = 2,  /* same leaf switch */
    WHALE_LINK_SPINE = 3,  /* common switch one level above the leaves */
    WHALE_LINK_CORE  = 4,  /* two or more levels up, or no common switch known */
    WHALE_LINK_NCLASS = 5
};

/* Short name of a link class: "node", "nvl", "leaf", "spine", "core". */
const char *whale_link_class_name(int cls);

struct whale_gpu_type {
    char *name;            /* e.g. "H100" */
    double peak_tflops;    /* dense bf16 peak per GPU */
    double mem_gib;        /* device memory */
    double nvlink_gbs;     /* NVLink bandwidth per GPU, GB/s (one direction) */
};

struct whale_topo_node {
    char *name;
    int gpus;              /* 0: CPU-only node, ranks map onto cores */
    int cores;             /* 0: unknown */
    int gpu_type;          /* index into topo->gpu_types, -1: none/unknown */
    int domain;            /* NVLink domain index, -1: the node is its own domain */
    int leaf;              /* index of its leaf switch, -1: not in the switch tree */
    char **nics;           /* e.g. "mlx5_0:1" (InfiniBand port) or "eth0" */
    int nnics;
    double nic_gbs;        /* per NIC, GB/s; 0: site default */
};

struct whale_topo_switch {
    char *name;
    int parent;            /* index of the parent switch, -1 for a root */
    int level;             /* 0 for a leaf (has nodes), parent level = child + 1 */
    double link_gbs;       /* uplink bandwidth (LinkSpeed), 0: unknown */
};

struct whale_topo_domain {
    char *name;
    int nnodes;
};

struct whale_topo_hash;    /* name -> node index */

struct whale_topo {
    struct whale_topo_node *nodes;
    int nnodes, cap_nodes;
    struct whale_topo_switch *switches;
    int nswitches, cap_switches;
    struct whale_topo_domain *domains;
    int ndomains, cap_domains;
    struct whale_gpu_type *gpu_types;
    int ngpu_types, cap_gpu_types;
    /* Bandwidth per link class in GB/s per rank, used by the cost model.
     * Defaults (whale_topo_new) are a DGX-H100-like fat tree; whale.conf
     * and the GPU/NIC entries refine them. */
    double link_gbs[WHALE_LINK_NCLASS];
    struct whale_topo_hash *hash;
};

struct whale_topo *whale_topo_new(void);
void whale_topo_free(struct whale_topo *t);

/* Builders. Return the new index (>= 0) or a negative WHALE_E* code.
 * Adding a node that already exists returns its index (attributes of the
 * later call win for fields given >= 0 / non-NULL). */
int whale_topo_add_gpu_type(struct whale_topo *t, const char *name, double peak_tflops,
                            double mem_gib, double nvlink_gbs);
int whale_topo_find_gpu_type(const struct whale_topo *t, const char *name);
int whale_topo_add_switch(struct whale_topo *t, const char *name, int parent);
int whale_topo_find_switch(const struct whale_topo *t, const char *name);
/* Re-parent a switch (topology.conf lists children before parents). */
int whale_topo_set_switch_parent(struct whale_topo *t, int sw, int parent);
int whale_topo_add_domain(struct whale_topo *t, const char *name);
int whale_topo_find_domain(const struct whale_topo *t, const char *name);
int whale_topo_add_node(struct whale_topo *t, const char *name, int gpus, int leaf, int domain);
int whale_topo_find_node(const struct whale_topo *t, const char *name);
int whale_topo_node_add_nic(struct whale_topo *t, int node, const char *nic);

/* Recompute switch levels and domain sizes after building; detects cycles
 * in the switch tree. Must be called before whale_topo_link_class(). */
int whale_topo_finalize(struct whale_topo *t);

/* Link class between two nodes (indices). */
enum whale_link_class whale_topo_link_class(const struct whale_topo *t, int a, int b);

/* Tasks-per-domain capacity helpers for messages: the NVLink domain size
 * of a node in GPUs (cores or 0 for CPU-only nodes, i.e. unknown). */
int whale_topo_domain_gpus(const struct whale_topo *t, int node);

#ifdef __cplusplus
}
#endif
#endif
