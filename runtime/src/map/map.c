/* whale_map_compute: validation of the request against the step, spare
 * selection, candidate layouts (topology carve, topology-sorted block,
 * plain block) and their cost. See whale/map.h for the rules. */
#include "map_internal.h"
#include "whale/error.h"
#include "whale/log.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void map_default_traffic(int tp, int pp, int dp, struct whale_map_traffic *t)
{
    /* Reference model: GPT with h=4096, s=2048, 32 layers (~6.4e9 params),
     * micro-batch 1, 8 micro-batches per step, bf16. Only the ratios
     * between TP, DP and PP volumes matter for comparing layouts. */
    const double h = 4096, s = 2048, layers = 32, m = 8, params = 12.0 * layers * h * h;
    const double act = s * h * 2.0; /* one micro-batch activation, bytes */
    t->tp_bytes = tp > 1 ? (layers / pp) * m * 4.0 * 2.0 * (tp - 1) / tp * act : 0;
    t->dp_bytes = dp > 1 ? 2.0 * (dp - 1) / dp * (params / ((double)tp * pp)) * 2.0 : 0;
    t->pp_bytes = pp > 1 ? m * 2.0 * act / tp : 0;
}

static void ctx_free(struct map_ctx *c)
{
    free(c->off);
    free(c->tid);
    free(c->slot_node);
    free(c->tnode);
    free(c->dom);
    free(c->leaf);
    free(c->spare);
}

/* Name of the NVLink domain of node i for messages. */
static const char *dom_name(const struct map_ctx *c, int i, char *buf, size_t n)
{
    const struct whale_topo *t = c->in->topo;
    if (t && c->tnode[i] >= 0 && t->nodes[c->tnode[i]].domain >= 0)
        snprintf(buf, n, "NVLink domain '%s'", t->domains[t->nodes[c->tnode[i]].domain].name);
    else
        snprintf(buf, n, "node %s", c->in->nodes[i]);
    return buf;
}

static int ctx_init(struct map_ctx *c, const struct whale_map_input *in)
{
    memset(c, 0, sizeof *c);
    c->in = in;
    c->nnodes = in->nnodes;
    if (in->nnodes < 1 || !in->nodes || !in->ntasks) {
        whale_error("the step has no nodes");
        return WHALE_EINVAL;
    }
    long total = 0;
    for (int i = 0; i < in->nnodes; i++) {
        if (in->ntasks[i] < 1) {
            whale_error("node %s has %d tasks in this step", in->nodes[i], in->ntasks[i]);
            return WHALE_EINVAL;
        }
        total += in->ntasks[i];
        if (total > INT_MAX / 4) {
            whale_error("too many tasks in the step (%ld)", total);
            return WHALE_EINVAL;
        }
    }
    int n = c->ntasks = (int)total;
    c->off = malloc(((size_t)in->nnodes + 1) * sizeof *c->off);
    c->tid = malloc((size_t)n * sizeof *c->tid);
    c->slot_node = malloc((size_t)n * sizeof *c->slot_node);
    c->tnode = malloc((size_t)in->nnodes * sizeof *c->tnode);
    c->dom = malloc((size_t)in->nnodes * sizeof *c->dom);
    c->leaf = malloc((size_t)in->nnodes * sizeof *c->leaf);
    c->spare = calloc((size_t)in->nnodes, 1);
    if (!c->off || !c->tid || !c->slot_node || !c->tnode || !c->dom || !c->leaf || !c->spare)
        return WHALE_ENOMEM;
    c->off[0] = 0;
    for (int i = 0; i < in->nnodes; i++) {
        c->off[i + 1] = c->off[i] + in->ntasks[i];
        for (int j = c->off[i]; j < c->off[i + 1]; j++)
            c->slot_node[j] = i;
    }
    if (in->task_ids) {
        /* must be a permutation of 0..n-1 */
        unsigned char *seen = calloc((size_t)n, 1);
        if (!seen)
            return WHALE_ENOMEM;
        for (int j = 0; j < n; j++) {
            int t = in->task_ids[j];
            if (t < 0 || t >= n || seen[t]) {
                whale_error("task ids of the step are not a permutation of 0..%d (task id %d)",
                            n - 1, t);
                free(seen);
                return WHALE_EINVAL;
            }
            seen[t] = 1;
            c->tid[j] = t;
        }
        free(seen);
    } else {
        for (int j = 0; j < n; j++)
            c->tid[j] = j;
    }
    const struct whale_topo *t = in->topo;
    int nd = t ? t->ndomains : 0;
    for (int i = 0; i < in->nnodes; i++) {
        int k = t ? whale_topo_find_node(t, in->nodes[i]) : -1;
        c->tnode[i] = k;
        c->dom[i] = (k >= 0 && t->nodes[k].domain >= 0) ? t->nodes[k].domain : nd + i;
        c->leaf[i] = k >= 0 ? t->nodes[k].leaf : -1;
    }
    return 0;
}

/* Degrees against the working task count; derive DP. */
static int check_degrees(struct map_ctx *c)
{
    const struct whale_map_input *in = c->in;
    if (in->tp < 1 || in->pp < 1 || in->dp < 0) {
        whale_error("parallel degrees must be >= 1 (TP=%d PP=%d DP=%d)", in->tp, in->pp, in->dp);
        return WHALE_EINVAL;
    }
    long work = 0, spare_tasks = 0;
    for (int i = 0; i < c->nnodes; i++) {
        if (c->spare[i])
            spare_tasks += c->in->ntasks[i];
        else
            work += c->in->ntasks[i];
    }
    long tpp = (long)in->tp * in->pp;
    c->grid = in->grid;
    c->grid.ep = whale_grid_ep(&in->grid); /* zero-initialised input: dense */
    c->grid.cp = 1;
    if (in->dp == 0) {
        if (work % tpp) {
            whale_error("%ld working tasks (%d tasks - %ld on %d spare node(s)) are not a "
                        "multiple of TP*PP = %d*%d = %ld; give --whale-dp or change -n",
                        work, c->ntasks, spare_tasks, in->spares, in->tp, in->pp, tpp);
            return WHALE_EINVAL;
        }
        c->dp = (int)(work / tpp);
        if (c->dp < 1) {
            whale_error("TP*PP = %ld needs more than the %ld working tasks of this step", tpp, work);
            return WHALE_EINVAL;
        }
    } else {
        c->dp = in->dp;
        if (tpp * in->dp != work) {
            whale_error("TP*PP*DP = %d*%d*%d = %ld working ranks, but the step has %ld working "
                        "tasks (%d tasks - %ld on %d spare node(s))",
                        in->tp, in->pp, in->dp, tpp * in->dp, work, c->ntasks, spare_tasks,
                        in->spares);
            return WHALE_EINVAL;
        }
    }
    if (c->dp % c->ep) {
        char ok[256];
        whale_grid_ep_choices(c->dp, ok, sizeof ok);
        whale_error("EP=%d does not divide DP=%d: expert groups are carved out of the "
                    "data-parallel ranks (allowed EP: %s)", c->ep, c->dp, ok);
        return WHALE_EINVAL;
    }
    c->world = (int)work;
    return 0;
}

/* Every TP group must fit inside one NVLink domain: the working tasks of
 * each domain must be a multiple of TP. */
static int check_domains(struct map_ctx *c)
{
    int nd = (c->in->topo ? c->in->topo->ndomains : 0) + c->nnodes;
    int *cnt = calloc((size_t)nd, sizeof *cnt);
    int *first = malloc((size_t)nd * sizeof *first);
    if (!cnt || !first) {
        free(cnt);
        free(first);
        return WHALE_ENOMEM;
    }
    for (int d = 0; d < nd; d++)
        first[d] = -1;
    for (int i = 0; i < c->nnodes; i++) {
        if (c->spare[i])
            continue;
        cnt[c->dom[i]] += c->in->ntasks[i];
        if (first[c->dom[i]] < 0)
            first[c->dom[i]] = i;
    }
    int rc = 0, best = -1;
    for (int d = 0; d < nd; d++)
        if (first[d] >= 0 && (best < 0 || cnt[d] > cnt[best]))
            best = d;
    char buf[256];
    if (best >= 0 && cnt[best] < c->tp) {
        whale_error("TP=%d is larger than any NVLink domain of this step: the largest, %s, "
                    "holds %d task(s) of the step",
                    c->tp, dom_name(c, first[best], buf, sizeof buf), cnt[best]);
        rc = WHALE_ENOFIT;
    } else {
        for (int d = 0; d < nd && !rc; d++) {
            if (first[d] >= 0 && cnt[d] % c->tp) {
                whale_error("TP=%d: %s holds %d task(s) of this step, not a multiple of %d, so "
                            "a TP group would cross NVLink domains",
                            c->tp, dom_name(c, first[d], buf, sizeof buf), cnt[d], c->tp);
                rc = WHALE_ENOFIT;
            }
        }
    }
    free(cnt);
    free(first);
    return rc;
}

int map_first_tp_crossing(const struct map_ctx *c, const int *slot_of_rank)
{
    for (int r = 0; r < c->world; r += c->tp) {
        int d = c->dom[c->slot_node[slot_of_rank[r]]];
        for (int k = 1; k < c->tp; k++)
            if (c->dom[c->slot_node[slot_of_rank[r + k]]] != d)
                return r / c->tp;
    }
    return -1;
}

static inline int link_of(const struct map_ctx *c, int na, int nb)
{
    if (na == nb)
        return WHALE_LINK_NODE;
    if (c->dom[na] == c->dom[nb])
        return WHALE_LINK_NVL;
    const struct whale_topo *t = c->in->topo;
    if (!t || c->tnode[na] < 0 || c->tnode[nb] < 0)
        return WHALE_LINK_CORE;
    return (int)whale_topo_link_class(t, c->tnode[na], c->tnode[nb]);
}

void map_cost_slots(const struct map_ctx *c, const int *slot_of_rank, struct whale_map_cost *cost)
{
    struct whale_map_traffic tr = c->in->traffic;
    if (tr.tp_bytes == 0 && tr.dp_bytes == 0 && tr.pp_bytes == 0)
        map_default_traffic(c->tp, c->pp, c->dp, &tr);
    memset(cost, 0, sizeof *cost);
    const struct whale_grid *g = &c->grid;
    for (int r = 0; r < c->world; r++) {
        struct whale_coords x, nx;
        whale_grid_coords(g, r, &x);
        int na = c->slot_node[slot_of_rank[r]];
        if (g->tp > 1) { /* ring over the TP group */
            nx = x;
            nx.tp = (x.tp + 1) % g->tp;
            cost->bytes[link_of(c, na, c->slot_node[slot_of_rank[whale_grid_rank(g, &nx)]])] +=
                tr.tp_bytes;
        }
        if (g->dp > 1) { /* ring over the DP group (same pp, tp) */
            nx = x;
            nx.dp = (x.dp + 1) % g->dp;
            cost->bytes[link_of(c, na, c->slot_node[slot_of_rank[whale_grid_rank(g, &nx)]])] +=
                tr.dp_bytes;
        }
        if (x.pp + 1 < g->pp) { /* to the next pipeline stage */
            nx = x;
            nx.pp = x.pp + 1;
            cost->bytes[link_of(c, na, c->slot_node[slot_of_rank[whale_grid_rank(g, &nx)]])] +=
                tr.pp_bytes;
        }
    }
    static const double dflt[WHALE_LINK_NCLASS] = { 450, 450, 50, 25, 12.5 };
    const double *bw = c->in->topo ? c->in->topo->link_gbs : dflt;
    for (int k = 0; k < WHALE_LINK_NCLASS; k++)
        cost->seconds += cost->bytes[k] / ((bw[k] > 0 ? bw[k] : dflt[k]) * 1e9);
}

void map_block(struct map_ctx *c, int *slot_of_rank)
{
    /* slots sorted by task id, spares skipped */
    int *slot_of_tid = malloc((size_t)c->ntasks * sizeof *slot_of_tid);
    if (!slot_of_tid) { /* fall back to node-major order: same for block distribution */
        int r = 0;
        for (int j = 0; j < c->ntasks && r < c->world; j++)
            if (!c->spare[c->slot_node[j]])
                slot_of_rank[r++] = j;
        return;
    }
    for (int j = 0; j < c->ntasks; j++)
        slot_of_tid[c->tid[j]] = j;
    int r = 0;
    for (int k = 0; k < c->ntasks && r < c->world; k++) {
        int j = slot_of_tid[k];
        if (!c->spare[c->slot_node[j]])
            slot_of_rank[r++] = j;
    }
    free(slot_of_tid);
}

void map_sorted_block(struct map_ctx *c, const int *order, int norder, int *slot_of_rank)
{
    int r = 0;
    for (int k = 0; k < norder; k++) {
        int i = order[k];
        for (int j = c->off[i]; j < c->off[i + 1]; j++)
            slot_of_rank[r++] = j;
    }
}

static int fill_layout(struct map_ctx *c, const int *slot_of_rank, enum whale_map_policy policy,
                       struct whale_layout *out)
{
    memset(out, 0, sizeof *out);
    out->grid = c->grid;
    out->world = c->world;
    out->ntasks = c->ntasks;
    out->nnodes = c->nnodes;
    out->policy = policy;
    size_t n = (size_t)c->ntasks;
    out->rank_of_task = malloc(n * sizeof(int));
    out->task_of_rank = malloc((size_t)c->world * sizeof(int));
    out->node_of_task = malloc(n * sizeof(int));
    out->local_of_task = malloc(n * sizeof(int));
    out->topo_node = malloc((size_t)c->nnodes * sizeof(int));
    out->spare_node = malloc((size_t)c->nnodes);
    if (!out->rank_of_task || !out->task_of_rank || !out->node_of_task || !out->local_of_task ||
        !out->topo_node || !out->spare_node) {
        whale_layout_free(out);
        return WHALE_ENOMEM;
    }
    for (int j = 0; j < c->ntasks; j++) {
        int t = c->tid[j], i = c->slot_node[j];
        out->rank_of_task[t] = -1;
        out->node_of_task[t] = i;
        out->local_of_task[t] = j - c->off[i];
    }
    for (int r = 0; r < c->world; r++) {
        int t = c->tid[slot_of_rank[r]];
        out->rank_of_task[t] = r;
        out->task_of_rank[r] = t;
    }
    for (int i = 0; i < c->nnodes; i++) {
        out->topo_node[i] = c->tnode[i];
        out->spare_node[i] = c->spare[i];
        out->nspare_nodes += c->spare[i];
    }
    map_cost_slots(c, slot_of_rank, &out->cost);
    return 0;
}

int whale_map_compute(const struct whale_map_input *in, struct whale_layout *out)
{
    struct map_ctx c;
    int *order = NULL, norder = 0;
    int *cand[3] = { NULL, NULL, NULL };
    memset(out, 0, sizeof *out);
    int rc = ctx_init(&c, in);
    if (rc)
        goto done;
    if (in->policy != WHALE_MAP_TOPO && in->policy != WHALE_MAP_BLOCK) {
        whale_error("unknown map policy %d", in->policy);
        rc = WHALE_EINVAL;
        goto done;
    }
    if ((rc = map_choose_spares(&c)))
        goto done;
    if ((rc = check_degrees(&c)))
        goto done;
    if ((rc = check_domains(&c)))
        goto done;
    for (int k = 0; k < 3; k++)
        if (!(cand[k] = malloc((size_t)c.world * sizeof(int)))) {
            rc = WHALE_ENOMEM;
            goto done;
        }
    map_block(&c, cand[2]);
    if (in->policy == WHALE_MAP_BLOCK) {
        int g = map_first_tp_crossing(&c, cand[2]);
        if (g >= 0) {
            int a = c.slot_node[cand[2][g * c.tp]];
            int b = a;
            for (int k = 1; k < c.tp && b == a; k++)
                if (c.dom[c.slot_node[cand[2][g * c.tp + k]]] != c.dom[a])
                    b = c.slot_node[cand[2][g * c.tp + k]];
            whale_error("block order puts TP group %d (tasks %d-%d) across nodes %s and %s, "
                        "which are not in one NVLink domain; use --whale-map=topo",
                        g, c.tid[cand[2][g * c.tp]], c.tid[cand[2][g * c.tp + c.tp - 1]],
                        in->nodes[a], in->nodes[b]);
            rc = WHALE_ENOFIT;
            goto done;
        }
        rc = fill_layout(&c, cand[2], WHALE_MAP_BLOCK, out);
        goto done;
    }
    if ((rc = map_tree_order(&c, &order, &norder)))
        goto done;
    if ((rc = map_topo(&c, order, norder, cand[0])))
        goto done;
    map_sorted_block(&c, order, norder, cand[1]);
    /* keep the cheapest valid candidate; ties go to the earlier one */
    int best = -1;
    double best_cost = 0;
    for (int k = 0; k < 3; k++) {
        if (map_first_tp_crossing(&c, cand[k]) >= 0)
            continue;
        struct whale_map_cost cc;
        map_cost_slots(&c, cand[k], &cc);
        if (best < 0 || cc.seconds < best_cost * (1 - 1e-12)) {
            best = k;
            best_cost = cc.seconds;
        }
    }
    if (best < 0) { /* cannot happen after check_domains; be explicit anyway */
        whale_error("no layout keeps every TP group inside one NVLink domain");
        rc = WHALE_ENOFIT;
        goto done;
    }
    whale_debug("map: candidate %d (%s) chosen, cost %.6g", best,
                best == 0 ? "topo carve" : best == 1 ? "sorted block" : "block", best_cost);
    rc = fill_layout(&c, cand[best], WHALE_MAP_TOPO, out);
done:
    for (int k = 0; k < 3; k++)
        free(cand[k]);
    free(order);
    ctx_free(&c);
    return rc;
}

void whale_layout_free(struct whale_layout *l)
{
    if (!l)
        return;
    free(l->rank_of_task);
    free(l->task_of_rank);
    free(l->node_of_task);
    free(l->local_of_task);
    free(l->topo_node);
    free(l->spare_node);
    memset(l, 0, sizeof *l);
}

int whale_map_cost(const struct whale_map_input *in, const struct whale_layout *l,
                   struct whale_map_cost *cost)
{
    struct map_ctx c;
    int rc = ctx_init(&c, in);
    int *slots = NULL;
    if (rc)
        goto done;
    c.grid = l->grid;
    c.world = l->world;
    int *slot_of_tid = malloc((size_t)c.ntasks * sizeof(int));
    slots = malloc((size_t)l->world * sizeof(int));
    if (!slot_of_tid || !slots) {
        free(slot_of_tid);
        rc = WHALE_ENOMEM;
        goto done;
    }
    for (int j = 0; j < c.ntasks; j++)
        slot_of_tid[c.tid[j]] = j;
    for (int r = 0; r < l->world; r++)
        slots[r] = slot_of_tid[l->task_of_rank[r]];
    free(slot_of_tid);
    map_cost_slots(&c, slots, cost);
done:
    free(slots);
    ctx_free(&c);
    return rc;
}
