/* Site configuration: whale.conf (whale.conf(5)) and Slurm's topology.conf.
 *
 * whale.conf uses slurm.conf's line syntax. Lines whose first key is
 * NodeName=, GPUType= or NVLinkDomain= describe an object; every other line
 * holds global settings. Hostlist expressions (gpu[001-128]) are expanded
 * with libslurm. Any unknown key or bad value is an error with file:line;
 * the caller (the plugin) then refuses to start the step. */
#ifndef WHALE_CONF_H
#define WHALE_CONF_H

#include <stdbool.h>

#include "whale/planfile.h"
#include "whale/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WHALE_CONF_DEFAULT_PATH "/etc/slurm/whale.conf"

/* Attributes of a NodeName= line; -1 / NULL = not given. */
struct whale_conf_nodeset {
    char *hosts;        /* hostlist expression, or "DEFAULT" */
    int gpus;
    int cores;
    char *gpu_type;
    char **nics;        /* expanded NIC names */
    int nnics;          /* -1: not given */
    double nic_gbs;     /* GB/s per NIC, < 0: not given */
    int line;
    double price_node_hour; /* $ per node-hour (PricePerNodeHour=), < 0: not given */
    double price_gpu_hour;  /* $ per GPU-hour (PricePerGPUHour=), < 0: not given */
};

/* One DeviceTypeFromFeature= / DeviceTypeFromGres= entry: a Slurm node
 * feature or GPU GRES type (from, matched without case) -> a GPU type
 * (a GPUType line, or a device the planner's catalogue knows). */
struct whale_conf_devmap {
    char *from;
    char *type;
    int line;
};

struct whale_conf_domain {
    char *name;
    char *hosts;
    int line;
};

/* The site limits of whale.conf, in the order whale.conf(5) lists them.
 * They bind the --whale-* options (the plugin) and, through the record the
 * plugin hands each task (whale/sitelimits.h), the runtime's own flags,
 * WHALE_* variables and plan files. */
enum whale_conf_limit {
    WHALE_LIMIT_MAX_TP,
    WHALE_LIMIT_MAX_PP,
    WHALE_LIMIT_MAX_DP,
    WHALE_LIMIT_MAX_SPARES,
    WHALE_LIMIT_MAX_MICROBATCH,
    WHALE_LIMIT_MAX_ZERO,
    WHALE_LIMIT_MIN_CKPT_EVERY,
    WHALE_LIMIT_ALLOWED_OFFLOAD,
    WHALE_LIMIT_ALLOWED_RECOMPUTE,
    WHALE_LIMIT_N
};
/* The whale.conf key of a limit ("MaxZero"); NULL out of range. */
const char *whale_conf_limit_key(enum whale_conf_limit l);

struct whale_conf {
    char *path;               /* file it came from ("<string>" for tests) */

    /* switch tree / NVLink blocks */
    char *topology_file;      /* NULL: default next to slurm.conf; "none": no tree */
    bool topology_file_set;   /* given explicitly: a missing file is an error */

    /* site defaults and limits */
    enum whale_map_policy default_map;
    int max_spares;           /* -1: no limit beyond the step's nodes */
    int max_tp, max_pp, max_dp, max_microbatch;
    int min_ckpt_every;       /* refuse more frequent checkpoints (0: no limit) */
    char *checkpoint_root;    /* may hold %u (user) and %j (job id) */
    int ckpt_keep;            /* CkptKeep: default --ckpt-keep of a step's plan (-1: unset) */
    int ckpt_milestone_every; /* CkptMilestoneEvery: default milestone interval (0: none) */
    unsigned allowed_offload;   /* bit (1 << enum whale_offload), all by default */
    unsigned allowed_recompute; /* bit (1 << enum whale_recompute) */
    int max_zero;             /* highest ZeRO stage allowed (3) */
    bool allow_user_config;   /* --whale-conf=FILE accepted */
    int limit_line[WHALE_LIMIT_N]; /* line that set each limit; 0: the default */

    /* per-task environment */
    bool set_cuda_visible_devices;
    bool set_ucx_net_devices;
    bool set_nccl_env;

    /* link bandwidth per class, GB/s per rank (0: derive) */
    double link_gbs[WHALE_LINK_NCLASS];

    struct whale_conf_nodeset *nodesets;
    int nnodesets;
    struct whale_conf_nodeset node_default;  /* NodeName=DEFAULT */
    struct whale_gpu_type *gpu_types;
    int ngpu_types;
    struct whale_conf_domain *domains;
    int ndomains;
    /* GPU types of nodes no NodeName line types, from Slurm's description */
    struct whale_conf_devmap *feature_types; /* DeviceTypeFromFeature= */
    int nfeature_types;
    struct whale_conf_devmap *gres_types;    /* DeviceTypeFromGres= */
    int ngres_types;
};

/* Load and validate a file; *out is NULL on error (message logged). */
int whale_conf_load(const char *path, struct whale_conf **out);
int whale_conf_parse_string(const char *text, const char *name, struct whale_conf **out);
/* Defaults only (no file): what a site without whale.conf gets. */
struct whale_conf *whale_conf_defaults(void);
void whale_conf_free(struct whale_conf *c);

/* Expand "%u" (user name) and "%j" (job id) in a checkpoint path pattern.
 * Returns a malloc'd string or NULL. */
char *whale_conf_expand_path(const char *pattern, const char *user, const char *jobid);

/* The topology file the config points to: its TopologyFile, else
 * topology.conf next to slurm_conf (SLURM_CONF, may be NULL -> /etc/slurm).
 * Returns NULL for "none". Malloc'd. */
char *whale_conf_topology_path(const struct whale_conf *c, const char *slurm_conf);

/* Parse Slurm's topology.conf into t: SwitchName= lines (Nodes= or
 * Switches=, LinkSpeed=), BlockName= lines (NVLink domains, Slurm's
 * topology/block). Unknown keys are errors, like slurmctld does. */
int whale_topology_conf_parse(const char *path, struct whale_topo *t);
int whale_topology_conf_parse_string(const char *text, const char *name, struct whale_topo *t);

/* Build the topology model: the switch tree from the topology file (if
 * any), then node attributes, GPU types and NVLink domains from the config.
 * slurm_conf: value of SLURM_CONF or NULL. */
int whale_conf_build_topo(const struct whale_conf *c, const char *slurm_conf,
                          struct whale_topo **out);

/* Add a node the topology does not know yet (a step node missing from
 * topology.conf and NodeName lines) with the NodeName=DEFAULT attributes.
 * Returns its index or a negative WHALE_E* code. */
int whale_conf_topo_ensure_node(const struct whale_conf *c, struct whale_topo *t,
                                const char *name);

/* The GPU type DeviceTypeFromFeature= / DeviceTypeFromGres= give a node
 * with Slurm's features (comma-separated, "a100,ib"; NULL: none) and GRES
 * ("gpu:a100:4(S:0-1),..."; NULL: none): the first mapped feature, else
 * the first gpu GRES of a mapped type. NULL when nothing maps. *gpus: the
 * count of that GPU type's GRES (0: unknown); *line (may be NULL): the
 * whale.conf line of the mapping. Malformed or oversized strings map to
 * nothing. */
const char *whale_conf_device_type(const struct whale_conf *c, const char *features,
                                   const char *gres, int *gpus, int *line);
/* Gives topology node `node` GPU type `type` (added to t's types without
 * figures when whale.conf has no GPUType line of that name: the planner's
 * catalogue supplies them) and, when its GPU count is unknown, `gpus`.
 * A node a NodeName line typed keeps its type. 1 set, 0 kept, or a
 * negative WHALE_E* code. */
int whale_conf_topo_set_device(struct whale_topo *t, int node, const char *type, int gpus);

/* Price of running on the named nodes, in dollars per hour (price.c):
 * per node the NodeName line that lists it (the last one, as slurm.conf),
 * else NodeName=DEFAULT; PricePerNodeHour, or PricePerGPUHour times the
 * line's GPUs (a GPU price on GPUs=0 nodes costs nothing). *priced: how
 * many of the nodes had a price (the others count 0). WHALE_EINVAL on a
 * bad argument. */
int whale_conf_price_per_hour(const struct whale_conf *c, const char *const *nodes, int n,
                              double *usd_per_hour, int *priced);

/* The site's limits on a step's degrees (MaxTP, MaxPP, MaxDP, MaxSpares):
 * 0, or WHALE_EINVAL after logging "tp=16 exceeds the site limit MaxTP=8
 * (PATH)". A degree <= 0 is not checked (not known yet). Tools that lay out
 * steps (whale-map) use it so that they never show what the plugin refuses. */
int whale_conf_check_degrees(const struct whale_conf *c, int tp, int pp, int dp, int spares);

/* Expand a Slurm hostlist expression ("node[1-4,7]") into names in order.
 * *names is malloc'd (free each and the array); WHALE_EINVAL when
 * malformed. */
int whale_hostlist_expand(const char *expr, char ***names, int *n);

#ifdef __cplusplus
}
#endif
#endif
