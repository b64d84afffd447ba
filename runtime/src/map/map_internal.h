/* Internals of the map module shared between its files. */
#ifndef WHALE_MAP_INTERNAL_H
#define WHALE_MAP_INTERNAL_H

#include "whale/map.h"

/* Working state of one whale_map_compute call. Slots are the step's tasks
 * in node-major order: slot off[i] + j is the j-th task on node i. */
struct map_ctx {
    const struct whale_map_input *in;
    int nnodes, ntasks;
    int *off;            /* [nnodes+1] first slot of each node */
    int *tid;            /* [ntasks] Slurm task id of each slot */
    int *slot_node;      /* [ntasks] node of each slot */
    int *tnode;          /* [nnodes] topo node index or -1 */
    int *dom;            /* [nnodes] NVLink domain key: topo domain, else ndomains + node */
    int *leaf;           /* [nnodes] leaf switch or -1 */
    unsigned char *spare;/* [nnodes] */
    WHALE_GRID(grid);
    int world;
};

/* Default per-rank traffic of a mid-size GPT for the given degrees. */
void map_default_traffic(int tp, int pp, int dp, struct whale_map_traffic *t);

/* Spare node selection (map_spares.c); sets c->spare. */
int map_choose_spares(struct map_ctx *c);

/* Working nodes in switch-tree (DFS) order, NVLink-domain members kept
 * together (map_order.c). *order is malloc'd. */
int map_tree_order(struct map_ctx *c, int **order, int *n);

/* Candidates (map_topo.c): fill slot_of_rank[world]. */
void map_block(struct map_ctx *c, int *slot_of_rank);
void map_sorted_block(struct map_ctx *c, const int *order, int norder, int *slot_of_rank);
int map_topo(struct map_ctx *c, const int *order, int norder, int *slot_of_rank);

/* Index of the first TP group that crosses an NVLink domain, -1 if none. */
int map_first_tp_crossing(const struct map_ctx *c, const int *slot_of_rank);

/* Cost of a candidate. */
void map_cost_slots(const struct map_ctx *c, const int *slot_of_rank, struct whale_map_cost *cost);

#endif
