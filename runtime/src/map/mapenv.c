/* The contract environment of one task (whale/env.h names), identical for
 * the SPANK plugin and whale-run. */
#include "whale/env.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int set_int(whale_env_fn fn, void *user, const char *name, long v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%ld", v);
    return fn(name, buf, user);
}

/* GPUs of a task: the node's GPUs split evenly over its tasks in local
 * order (a task's local index is fixed by Slurm; the mapper chose which
 * logical rank sits there). Returns the first GPU and the count. */
static void task_gpus(int gpus, int ntasks, int local, int *first, int *count)
{
    if (ntasks <= gpus) {
        *count = gpus / ntasks;
        *first = local * *count;
    } else {
        *count = 1;
        *first = local % gpus;
    }
}

int whale_map_task_env(const struct whale_map_input *in, const struct whale_layout *l,
                       int task_id, const struct whale_env_opts *opts, whale_env_fn fn,
                       void *user)
{
    static const struct whale_env_opts none;
    if (!opts)
        opts = &none;
    if (task_id < 0 || task_id >= l->ntasks) {
        whale_error("task id %d is outside the step's %d task(s)", task_id, l->ntasks);
        return WHALE_EINVAL;
    }
    int rank = l->rank_of_task[task_id];
    int node = l->node_of_task[task_id];
    int local = l->local_of_task[task_id];
    struct whale_coords co = { .tp = -1, .pp = -1, .dp = -1 };
    if (rank >= 0)
        whale_grid_coords(&l->grid, rank, &co);
    const int tpr = co.tp, dpr = co.dp, ppr = co.pp;
    int rc;
#define TRY(x) do { if ((rc = (x))) return rc; } while (0)
    TRY(whale_grid_to_env(&l->grid, fn, user));
    TRY(set_int(fn, user, WHALE_ENV_WORLD, l->world));
    TRY(set_int(fn, user, WHALE_ENV_RANK, rank));
    TRY(set_int(fn, user, WHALE_ENV_TP_RANK, tpr));
    TRY(set_int(fn, user, WHALE_ENV_PP_RANK, ppr));
    TRY(set_int(fn, user, WHALE_ENV_DP_RANK, dpr));
    TRY(fn(WHALE_ENV_SPARE, rank < 0 ? "1" : "0", user));
    TRY(set_int(fn, user, WHALE_ENV_NTASKS, l->ntasks));
    TRY(set_int(fn, user, WHALE_ENV_TASK_ID, task_id));
    TRY(set_int(fn, user, WHALE_ENV_LOCAL_RANK, local));
    TRY(fn(WHALE_ENV_NODE, in->nodes[node], user));
    if (opts->rankmap) {
        TRY(fn(WHALE_ENV_RANKMAP, opts->rankmap, user));
    } else {
        char *m = whale_rankmap_encode(l->task_of_rank, l->world);
        if (!m)
            return WHALE_ENOMEM;
        rc = fn(WHALE_ENV_RANKMAP, m, user);
        free(m);
        if (rc)
            return rc;
    }
    if (opts->plan)
        TRY(fn(WHALE_ENV_PLAN, opts->plan, user));
    if (opts->conf_path)
        TRY(fn(WHALE_ENV_CONF, opts->conf_path, user));

    const struct whale_topo *t = in->topo;
    int tn = l->topo_node ? l->topo_node[node] : -1;
    if (!t || tn < 0)
        return 0;
    const struct whale_topo_node *n = &t->nodes[tn];
    int ntask_node = in->ntasks[node];
    int g0 = 0, gn = 0;
    if (n->gpus > 0) {
        task_gpus(n->gpus, ntask_node, local, &g0, &gn);
        if (opts->set_cuda) {
            char buf[256];
            size_t len = 0;
            buf[0] = '\0';
            for (int g = g0; g < g0 + gn && len < sizeof buf - 12; g++)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", g > g0 ? "," : "", g);
            TRY(fn("CUDA_VISIBLE_DEVICES", buf, user));
        }
    }
    if (n->nnics > 0 && (opts->set_nics || opts->set_nccl)) {
        /* rail matching: GPU g (or task slot on CPU nodes) uses NIC
         * g * nics / gpus, the NIC on the same PCIe switch in the usual
         * 1:1 or 1:2 wiring */
        int nic = n->gpus > 0 ? (int)((long)g0 * n->nnics / n->gpus)
                              : (int)((long)local * n->nnics / ntask_node);
        if (nic >= n->nnics)
            nic = n->nnics - 1;
        const char *dev = n->nics[nic];
        if (opts->set_nics)
            TRY(fn("UCX_NET_DEVICES", dev, user));
        if (opts->set_nccl) {
            char buf[128];
            snprintf(buf, sizeof buf, "=%s", dev);
            /* "mlx5_0:1" is an InfiniBand/RoCE port, anything else a netdev */
            TRY(fn(strchr(dev, ':') ? "NCCL_IB_HCA" : "NCCL_SOCKET_IFNAME", buf, user));
        }
    }
#undef TRY
    return 0;
}
