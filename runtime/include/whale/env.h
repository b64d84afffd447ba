/* The environment contract between the SPANK plugin (and whale-run) and
 * every task. This header is the single source of truth for the names; what
 * each means is in spank_whale(8), "ENVIRONMENT OF EACH TASK" (man/), and
 * docs/running.md.
 *
 * Logical rank order (Megatron convention, TP fastest, PP slowest):
 *     rank = ((pp * DP) + dp) * TP + tp
 */
#ifndef WHALE_ENV_H
#define WHALE_ENV_H

#define WHALE_ENV_TP        "WHALE_TP"        /* tensor-parallel degree */
#define WHALE_ENV_PP        "WHALE_PP"        /* pipeline-parallel degree */
#define WHALE_ENV_DP        "WHALE_DP"        /* data-parallel degree */
#define WHALE_ENV_EP        "WHALE_EP"        /* expert-parallel degree (divides DP; whale/grid.h) */
#define WHALE_ENV_RANK      "WHALE_RANK"      /* logical rank of this task (-1 for a spare) */
#define WHALE_ENV_WORLD     "WHALE_WORLD"     /* number of working ranks = TP*PP*DP */
#define WHALE_ENV_TP_RANK   "WHALE_TP_RANK"
#define WHALE_ENV_PP_RANK   "WHALE_PP_RANK"
#define WHALE_ENV_DP_RANK   "WHALE_DP_RANK"
#define WHALE_ENV_SPARE     "WHALE_SPARE"     /* 1 for a hot-spare task, else 0 */
#define WHALE_ENV_RANKMAP   "WHALE_RANKMAP"   /* logical rank -> task id, compact (see map.h) */
#define WHALE_ENV_PLAN      "WHALE_PLAN"      /* path to, or inline JSON of, the plan */
#define WHALE_ENV_CONF      "WHALE_CONF"      /* site config the plugin used */

/* Set next to the contract (not part of the minimum set). */
#define WHALE_ENV_NTASKS    "WHALE_NTASKS"    /* all tasks of the step, spares included */
#define WHALE_ENV_TASK_ID   "WHALE_TASK_ID"   /* Slurm/whale-run task id of this task */
#define WHALE_ENV_LOCAL_RANK "WHALE_LOCAL_RANK" /* index of this task on its node */
#define WHALE_ENV_NODE      "WHALE_NODE"      /* node name this task was mapped to */
#define WHALE_ENV_NODE_GRACE "WHALE_NODE_GRACE" /* elastic recovery window, seconds
                                               * (--whale-node-grace, whale.conf NodeGrace=) */
#define WHALE_ENV_MEMBERSHIP "WHALE_MEMBERSHIP" /* elastic agreement: coordinator | tree */
#define WHALE_ENV_REPORT    "WHALE_REPORT"    /* FIFO of this node's slurmstepd: failure reports
                                               * "NODE KIND RANK TASK\n" (spank_whale(8)) */

/* Runtime knobs read by libwhale. */
#define WHALE_ENV_LOG       "WHALE_LOG"       /* error|warn|info|debug|trace */
#define WHALE_ENV_TRACE     "WHALE_TRACE"     /* Chrome trace output file */
#define WHALE_ENV_COLL_ALGO "WHALE_COLL_ALGO" /* force a collective algorithm */

#endif
