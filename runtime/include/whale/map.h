/* Rank mapping: which physical slot (node, task on that node) each logical
 * rank takes, the WHALE_RANKMAP encoding, and the per-task contract
 * environment. Shared by the SPANK plugin (srun checks, every slurmstepd
 * computes the same answer), whale-run (one node, N tasks, no config),
 * whale-map (offline) and the planner.
 *
 * Pure and deterministic: the same input gives the same layout on every
 * node, no clock, no randomness, no environment reads.
 *
 * Logical rank order is the contract's (whale/env.h):
 *     rank = ((pp * DP) + dp) * TP + tp      (TP fastest, PP slowest)
 *
 * Policies:
 *   WHALE_MAP_BLOCK  logical rank r on the r-th working task in Slurm task-id
 *                    order (spare nodes skipped) — what a plain launcher does.
 *   WHALE_MAP_TOPO   every TP group inside one NVLink domain (else refused);
 *                    PP stages (each one DP group of TP groups) carved
 *                    bottom-up from the switch tree so that a DP group spans
 *                    as few nodes / leaf switches / spines as the allocation
 *                    allows; stages ordered along the tree so PP neighbours
 *                    are adjacent. The result is never costlier than the
 *                    topology-sorted block order it is compared with.
 *
 * Cost of a layout (whale_map_cost): every group runs ring collectives, so
 * each rank sends its per-step bytes (whale_map_traffic) to its ring
 * successor in its TP group and in its DP group, and its PP bytes to the
 * same (tp, dp) rank of the next stage. Each transfer is charged to the
 * link class between the two nodes (node, nvl, leaf, spine, core); the
 * scalar cost is sum(bytes[class] / bandwidth[class]) over classes.
 *
 * EP groups (whale/grid.h: EP consecutive DP ranks) are not placed on their
 * own: WHALE_MAP_TOPO puts the DP ranks of a stage on TP groups in switch-
 * tree order, so consecutive DP ranks, and with them an EP group, share an
 * NVLink domain whenever the domain holds EP whole TP groups at that
 * position. whale_layout_ep_crossings counts the EP groups that do not.
 *
 * Spare nodes (whole nodes, WHALE_SPARE=1 on all their tasks): taken one per
 * leaf switch, round-robin over the leaves that hold the most step nodes
 * (so that the most ranks have a replacement under their own leaf), the
 * last such node in step order within a leaf; nodes with an unusual task
 * count are never chosen when it would break TP*PP*DP. */
#ifndef WHALE_MAP_H
#define WHALE_MAP_H

#include <stdbool.h>
#include <stddef.h>

#include "whale/planfile.h"   /* enum whale_map_policy, whale_map_policy_parse/name */
#include "whale/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes each rank sends per training step in each kind of group; all zero
 * selects defaults of a mid-size GPT (the planner passes exact figures). */
struct whale_map_traffic {
    double tp_bytes;   /* TP collectives per rank per step (ring) */
    double dp_bytes;   /* gradient reduce-scatter + all-gather per rank */
    double pp_bytes;   /* activations + gradients to each PP neighbour */
};

struct whale_map_input {
    WHALE_GRID(grid);  /* >= 1; dp 0: derived = working tasks / (tp * pp) */
    int spares;        /* whole spare nodes held back (>= 0) */
    enum whale_map_policy policy;
    int nnodes;
    const char *const *nodes;  /* step node names in Slurm order */
    const int *ntasks;         /* tasks of the step on each node */
    /* Slurm task id of the j-th task on node i at task_ids[sum(ntasks[<i]) + j];
     * NULL = block distribution (node 0 holds 0..ntasks[0]-1, ...). */
    const int *task_ids;
    /* NULL: flat (each node its own NVLink domain, CPU-only, no switches). */
    const struct whale_topo *topo;
    struct whale_map_traffic traffic;
};

struct whale_map_cost {
    double bytes[WHALE_LINK_NCLASS];  /* bytes per step over each link class, all ranks */
    double seconds;                   /* sum of bytes/bandwidth per class over ranks (lower is better) */
};

struct whale_layout {
    WHALE_GRID(grid);
    int world;                 /* world = tp * pp * dp working ranks */
    int ntasks, nnodes, nspare_nodes;
    enum whale_map_policy policy; /* policy actually used */
    int *rank_of_task;         /* [ntasks] logical rank, -1 for a spare task */
    int *task_of_rank;         /* [world]  Slurm task id of each logical rank */
    int *node_of_task;         /* [ntasks] index into input->nodes */
    int *local_of_task;        /* [ntasks] index of the task among its node's tasks */
    int *topo_node;            /* [nnodes] index in input->topo, -1: unknown/flat */
    unsigned char *spare_node; /* [nnodes] 1 for a spare node */
    struct whale_map_cost cost;
};

/* Compute the layout. Errors (logged with the reason and the numbers, e.g.
 * "TP=4 does not fit in one NVLink domain: node m1 holds 2 tasks of this
 * step"): WHALE_EINVAL for bad degrees / counts, WHALE_ENOFIT when the
 * topology cannot hold the request. */
int whale_map_compute(const struct whale_map_input *in, struct whale_layout *out);
void whale_layout_free(struct whale_layout *l);

/* Cost of a layout (also stored in out->cost by whale_map_compute). */
int whale_map_cost(const struct whale_map_input *in, const struct whale_layout *l,
                   struct whale_map_cost *cost);

/* EP groups that span more than one NVLink domain (0 when EP = 1); the
 * first such group's lowest rank in *first_rank (-1 none; may be NULL). */
int whale_layout_ep_crossings(const struct whale_map_input *in, const struct whale_layout *l,
                              int *first_rank);

/* Multi-line description: one line per node (switch, NVLink domain, each
 * task's rank and TP/DP/PP coordinates, SPARE), then the cost per link
 * class. max_nodes > 0 truncates. Malloc'd; NULL on ENOMEM. */
char *whale_layout_describe(const struct whale_map_input *in, const struct whale_layout *l,
                            int max_nodes);

/* WHALE_RANKMAP: logical rank -> task id for ranks 0..world-1, as a
 * comma-separated list of items "A" or "A-B" (A, A+1, ..., B; or descending
 * when B < A), e.g. "0-3,8-11,4-7,12-15". A value starting with '@' names a
 * file holding the same text (used by the plugin when the list would exceed
 * the 128 KiB Linux limit of one environment string). Returns a malloc'd
 * string or NULL (ENOMEM). */
char *whale_rankmap_encode(const int *task_of_rank, int world);
/* Decode (inline text only; see whale_rankmap_load for '@file').
 * On success *task_of_rank is malloc'd with *world entries. */
int whale_rankmap_decode(const char *s, int **task_of_rank, int *world);
int whale_rankmap_load(const char *value, int **task_of_rank, int *world);

/* The contract environment of one task. */
typedef int (*whale_env_fn)(const char *name, const char *value, void *user);

struct whale_env_opts {
    const char *plan;      /* WHALE_PLAN value (inline JSON or path); NULL: not set */
    const char *conf_path; /* WHALE_CONF value; NULL: not set */
    const char *rankmap;   /* WHALE_RANKMAP value; NULL: encoded here */
    bool set_cuda;         /* CUDA_VISIBLE_DEVICES from the node's GPUs */
    bool set_nics;         /* UCX_NET_DEVICES rail-matched from the node's NICs */
    bool set_nccl;         /* NCCL_IB_HCA / NCCL_SOCKET_IFNAME rail-matched */
};

/* Call fn(name, value) for every variable of task task_id: WHALE_TP/PP/DP,
 * WHALE_RANK (-1 for a spare), WHALE_WORLD, WHALE_TP_RANK/PP_RANK/DP_RANK
 * (-1 for a spare), WHALE_SPARE, WHALE_RANKMAP, WHALE_PLAN, WHALE_CONF,
 * WHALE_NTASKS, WHALE_TASK_ID, WHALE_LOCAL_RANK, WHALE_NODE, and when the
 * options and the node's topology say so CUDA_VISIBLE_DEVICES,
 * UCX_NET_DEVICES, NCCL_IB_HCA or NCCL_SOCKET_IFNAME. Stops at the first
 * non-zero return of fn and returns it. */
int whale_map_task_env(const struct whale_map_input *in, const struct whale_layout *l,
                       int task_id, const struct whale_env_opts *opts, whale_env_fn fn,
                       void *user);

/* Parse Slurm's process mapping (SLURM_PMIX_MAPPING_SERV / PMI_process_mapping,
 * "(vector,(start_node,nodes,tasks),...)") into node-major task ids as
 * expected by whale_map_input.task_ids; ntasks[] must be known.
 * *task_ids is malloc'd. */
int whale_map_parse_pmi_mapping(const char *s, int nnodes, const int *ntasks, int **task_ids);

/* Expand Slurm's tasks-per-node syntax "2(x3),1" into ntasks[nnodes]. */
int whale_map_parse_tasks_per_node(const char *s, int nnodes, int *ntasks);

#ifdef __cplusplus
}
#endif
#endif
