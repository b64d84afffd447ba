/* Human-readable layout: one line per node (switch, NVLink domain, its
 * tasks with their logical rank and TP/DP/PP coordinates) and the cost per
 * link class. Used by whale-map and by srun --whale-verbose. */
#include "whale/map.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 1024;
        while (nc < b->len + (size_t)n + 1)
            nc *= 2;
        char *p = realloc(b->s, nc);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = nc;
    }
}

static const char *leaf_name(const struct whale_map_input *in, const struct whale_layout *l, int i)
{
    int k = l->topo_node[i];
    if (!in->topo || k < 0 || in->topo->nodes[k].leaf < 0)
        return "-";
    return in->topo->switches[in->topo->nodes[k].leaf].name;
}

static const char *domain_name(const struct whale_map_input *in, const struct whale_layout *l, int i)
{
    int k = l->topo_node[i];
    if (!in->topo || k < 0 || in->topo->nodes[k].domain < 0)
        return "-";
    return in->topo->domains[in->topo->nodes[k].domain].name;
}

/* NVLink domain key of node i: the topology's domain, else the node alone. */
static int domain_key(const struct whale_map_input *in, const struct whale_layout *l, int i)
{
    int k = l->topo_node ? l->topo_node[i] : -1;
    if (in->topo && k >= 0 && in->topo->nodes[k].domain >= 0)
        return in->topo->nodes[k].domain;
    return (in->topo ? in->topo->ndomains : 0) + i;
}

int whale_layout_ep_crossings(const struct whale_map_input *in, const struct whale_layout *l,
                              int *first_rank)
{
    int ep = whale_grid_ep(&l->grid), n = 0;
    if (first_rank)
        *first_rank = -1;
    if (ep < 2)
        return 0;
    int *members = malloc((size_t)ep * sizeof *members);
    if (!members)
        return 0;
    for (int r = 0; r < l->world; r++) {
        if (whale_grid_group_index(&l->grid, WHALE_AXIS_EP, r))
            continue; /* each group once, from its first member */
        whale_grid_group(&l->grid, WHALE_AXIS_EP, r, members);
        int d0 = domain_key(in, l, l->node_of_task[l->task_of_rank[members[0]]]);
        for (int k = 1; k < ep; k++)
            if (domain_key(in, l, l->node_of_task[l->task_of_rank[members[k]]]) != d0) {
                if (!n && first_rank)
                    *first_rank = r;
                n++;
                break;
            }
    }
    free(members);
    return n;
}

static void human_bytes(double b, char *buf, size_t n)
{
    const char *u[] = { "B", "KB", "MB", "GB", "TB", "PB" };
    int k = 0;
    while (b >= 1000 && k < 5) {
        b /= 1000;
        k++;
    }
    snprintf(buf, n, "%.3g %s", b, u[k]);
}

char *whale_layout_describe(const struct whale_map_input *in, const struct whale_layout *l,
                            int max_nodes)
{
    struct sbuf b = { 0 };
    sb_printf(&b, "layout: TP=%d PP=%d DP=%d, %d working rank(s), %d task(s) on %d node(s), "
                  "%d spare node(s), map=%s\n",
              l->tp, l->pp, l->dp, l->world, l->ntasks, l->nnodes, l->nspare_nodes,
              whale_map_policy_name(l->policy));
    /* tasks of each node in local order */
    int *first = calloc((size_t)l->nnodes + 1, sizeof(int));
    int *byslot = malloc((size_t)l->ntasks * sizeof(int));
    if (!first || !byslot) {
        free(first);
        free(byslot);
        free(b.s);
        return NULL;
    }
    for (int t = 0; t < l->ntasks; t++)
        first[l->node_of_task[t] + 1]++;
    for (int i = 0; i < l->nnodes; i++)
        first[i + 1] += first[i];
    for (int t = 0; t < l->ntasks; t++)
        byslot[first[l->node_of_task[t]] + l->local_of_task[t]] = t;
    int shown = 0;
    for (int i = 0; i < l->nnodes; i++) {
        if (max_nodes > 0 && shown >= max_nodes) {
            sb_printf(&b, "  ... %d more node(s)\n", l->nnodes - shown);
            break;
        }
        shown++;
        sb_printf(&b, "  %-12s switch %-8s nvl %-8s%s", in->nodes[i], leaf_name(in, l, i),
                  domain_name(in, l, i), l->spare_node[i] ? " SPARE" : "");
        for (int s = first[i]; s < first[i + 1]; s++) {
            int t = byslot[s], r = l->rank_of_task[t];
            if (r < 0) {
                sb_printf(&b, " task%d=spare", t);
            } else {
                struct whale_coords co;
                whale_grid_coords(&l->grid, r, &co);
                sb_printf(&b, " task%d=r%d(t%d,d%d,p%d)", t, r, co.tp, co.dp, co.pp);
            }
        }
        sb_printf(&b, "\n");
    }
    if (whale_grid_ep(&l->grid) > 1) {
        int first_r, n = whale_layout_ep_crossings(in, l, &first_r);
        int groups = l->world / whale_grid_ep(&l->grid);
        if (n)
            sb_printf(&b, "EP=%d: %d of %d expert group(s) span more than one NVLink domain "
                          "(the first holds rank %d): EP*TP = %d tasks do not fit one domain at "
                          "their place\n", l->grid.ep, n, groups, first_r, l->grid.ep * l->tp);
        else
            sb_printf(&b, "EP=%d: each of the %d expert group(s) inside one NVLink domain\n",
                      l->grid.ep, groups);
    }
    sb_printf(&b, "cost per step:");
    for (int k = 0; k < WHALE_LINK_NCLASS; k++) {
        char hb[32];
        human_bytes(l->cost.bytes[k], hb, sizeof hb);
        sb_printf(&b, " %s %s%s", whale_link_class_name(k), hb, k + 1 < WHALE_LINK_NCLASS ? "," : "");
    }
    sb_printf(&b, "; link time %.4g s\n", l->cost.seconds);
    free(first);
    free(byslot);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
