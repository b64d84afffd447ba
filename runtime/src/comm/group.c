/* Process groups: members (task ids for endpoints, logical ranks), node
 * structure for the hierarchical algorithms, and group creation. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/transport/transport.h"
#include "whale/error.h"
#include "whale/log.h"

static int register_group(whale_ctx *ctx, whale_group *g)
{
    if (ctx->ngroups == ctx->capgroups) {
        int nc = ctx->capgroups ? ctx->capgroups * 2 : 16;
        whale_group **np = realloc(ctx->groups, (size_t)nc * sizeof *np);
        if (!np)
            return WHALE_ENOMEM;
        ctx->groups = np;
        ctx->capgroups = nc;
    }
    ctx->groups[ctx->ngroups++] = g;
    return 0;
}

static void unregister_group(whale_ctx *ctx, whale_group *g)
{
    for (int i = 0; i < ctx->ngroups; i++)
        if (ctx->groups[i] == g) {
            ctx->groups[i] = ctx->groups[--ctx->ngroups];
            return;
        }
}

static int make_sub(whale_ctx *ctx, whale_group *g, uint16_t gid, bool local, whale_group **out)
{
    /* local: members on my node, in group order. cross: the members whose
     * index among their node's members equals mine, in node order of first
     * appearance. */
    int *tasks = malloc(sizeof(int) * (size_t)g->size), *wr = malloc(sizeof(int) * (size_t)g->size);
    int *lidx = malloc(sizeof(int) * (size_t)g->size);
    int *seen = calloc((size_t)ctx->boot.nnodes + 1, sizeof(int));
    int n = 0, rc;
    if (!tasks || !wr || !lidx || !seen) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    for (int i = 0; i < g->size; i++)
        lidx[i] = seen[g->node[i]]++;
    int mynode = g->node[g->rank], mylocal = lidx[g->rank];
    for (int i = 0; i < g->size; i++) {
        if (local ? g->node[i] == mynode : lidx[i] == mylocal) {
            tasks[n] = g->tasks[i];
            wr[n] = g->world_ranks[i];
            n++;
        }
    }
    rc = comm_group_new(ctx, gid, tasks, wr, n, true, out);
out:
    free(tasks);
    free(wr);
    free(lidx);
    free(seen);
    return rc;
}

int comm_group_new(whale_ctx *ctx, uint16_t gid, const int *tasks, const int *world_ranks, int n,
                   bool internal, whale_group **out)
{
    *out = NULL;
    whale_group *g = calloc(1, sizeof *g);
    if (!g)
        return WHALE_ENOMEM;
    g->ctx = ctx;
    g->gid = gid;
    g->size = n;
    g->rank = -1;
    g->internal = internal;
    g->failed_rank = -1;
    g->failed_task = -1;
    g->tasks = malloc(sizeof(int) * (size_t)n);
    g->world_ranks = malloc(sizeof(int) * (size_t)n);
    g->node = malloc(sizeof(int) * (size_t)n);
    int *per_node = calloc((size_t)ctx->boot.nnodes + 1, sizeof(int));
    if (!g->tasks || !g->world_ranks || !g->node || !per_node) {
        free(per_node);
        comm_group_destroy(g);
        return WHALE_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        g->tasks[i] = tasks[i];
        g->world_ranks[i] = world_ranks[i];
        g->node[i] = ctx->boot.node_of_task ? ctx->boot.node_of_task[tasks[i]] : 0;
        if (tasks[i] == ctx->boot.task)
            g->rank = i;
        if (per_node[g->node[i]]++ == 0)
            g->nnodes++;
        if (ctx->dead && ctx->dead[tasks[i]]) {
            g->failed = true;
            g->failed_rank = world_ranks[i];
            g->failed_task = tasks[i];
        }
    }
    g->ppn = 0;
    if (g->nnodes > 0 && n % g->nnodes == 0) {
        g->ppn = n / g->nnodes;
        for (int k = 0; k <= ctx->boot.nnodes; k++)
            if (per_node[k] && per_node[k] != g->ppn)
                g->ppn = 0;
    }
    free(per_node);
    int rc = register_group(ctx, g);
    if (!rc)
        rc = comm_transports_group_init(g);
    if (rc) {
        comm_group_destroy(g);
        return rc;
    }
    /* Two-level structure for the hierarchical algorithms: only when it
     * exists (several nodes, several members on each, same count). */
    if (!internal && g->rank >= 0 && g->nnodes > 1 && g->ppn > 1) {
        if ((rc = make_sub(ctx, g, (uint16_t)(gid + 1), true, &g->local)) ||
            (rc = make_sub(ctx, g, (uint16_t)(gid + 2), false, &g->cross))) {
            comm_group_destroy(g);
            return rc;
        }
    }
    *out = g;
    return 0;
}

void comm_group_destroy(whale_group *g)
{
    if (!g)
        return;
    if (g->local)
        comm_group_destroy(g->local);
    if (g->cross)
        comm_group_destroy(g->cross);
    comm_transports_group_fini(g);
    unregister_group(g->ctx, g);
    free(g->tasks);
    free(g->world_ranks);
    free(g->node);
    free(g);
}

int comm_group_world_label(const whale_group *g, int group_rank)
{
    return g->world_ranks[group_rank];
}

int whale_group_rank(const whale_group *g) { return g ? g->rank : -1; }
int whale_group_size(const whale_group *g) { return g ? g->size : 0; }
int whale_group_nnodes(const whale_group *g) { return g ? g->nnodes : 0; }

int whale_group_world_rank(const whale_group *g, int group_rank)
{
    if (!g || group_rank < 0 || group_rank >= g->size)
        return -1;
    return g->world_ranks[group_rank];
}

int whale_group_create(whale_group *parent, const int *world_ranks, int n, whale_group **out)
{
    if (!out)
        return WHALE_EINVAL;
    *out = NULL;
    if (!parent || parent->rank < 0 || n < 1 || !world_ranks) {
        whale_error("whale_group_create: need a parent group this rank belongs to and >= 1 ranks");
        return WHALE_EINVAL;
    }
    whale_ctx *ctx = parent->ctx;
    int *tasks = malloc(sizeof(int) * (size_t)n);
    if (!tasks)
        return WHALE_ENOMEM;
    for (int i = 0; i < n; i++) {
        int r = world_ranks[i], in_parent = 0;
        for (int k = 0; k < parent->size; k++)
            if (parent->world_ranks[k] == r && r >= 0) {
                in_parent = 1;
                tasks[i] = parent->tasks[k];
            }
        for (int k = 0; k < i && in_parent; k++)
            if (world_ranks[k] == r)
                in_parent = 0;
        if (!in_parent) {
            whale_error("whale_group_create: rank %d is not in the parent group or listed twice", r);
            free(tasks);
            return WHALE_EINVAL;
        }
    }
    /* A group id no member uses yet: the maximum of everyone's next free id
     * (every parent member then moves past it, so two groups that share a
     * member never share an id). */
    int32_t id = ctx->next_gid, maxid;
    int rc = whale_allreduce(parent, &id, &maxid, 1, WHALE_INT32, WHALE_MAX);
    if (rc) {
        free(tasks);
        return rc;
    }
    if (maxid + 3 > COMM_GID_REBUILT) { /* ids above belong to rebuilt standard groups */
        whale_error("whale_group_create: out of group ids (%d groups created)", maxid / 3);
        free(tasks);
        return WHALE_ERANGE;
    }
    ctx->next_gid = (uint16_t)(maxid + 3);
    bool member = false;
    for (int i = 0; i < n; i++)
        if (tasks[i] == ctx->boot.task)
            member = true;
    if (member) {
        pthread_mutex_lock(&ctx->lock);
        rc = comm_group_new(ctx, (uint16_t)maxid, tasks, world_ranks, n, false, out);
        if (*out)
            (*out)->owned = true;
        pthread_mutex_unlock(&ctx->lock);
    }
    free(tasks);
    return rc;
}

void whale_group_free(whale_group *g)
{
    if (!g || !g->owned)
        return;
    whale_ctx *ctx = g->ctx;
    pthread_mutex_lock(&ctx->lock);
    comm_group_destroy(g);
    pthread_mutex_unlock(&ctx->lock);
}
