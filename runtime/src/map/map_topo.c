/* Topology-aware pieces of the mapper: spare node choice, the switch-tree
 * order of nodes, and the bottom-up carving of PP stages (DP groups of TP
 * groups) out of NVLink domains, leaf switches and upper switches. */
#include "map_internal.h"
#include "whale/error.h"
#include "whale/log.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- spares ----------------------------------------------------------- */

struct spare_key {
    int group;  /* locality group the node belongs to */
    int idx;    /* node index in step order */
};

static int cmp_spare_key(const void *a, const void *b)
{
    const struct spare_key *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return x->idx - y->idx;
}

struct spare_group {
    int first;   /* first step index (stable tie-break) */
    int count;   /* step nodes in the group */
    int lo, hi;  /* range in the sorted key array */
};

static int cmp_group(const void *a, const void *b)
{
    const struct spare_group *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->first - y->first;
}

/* Spares are whole nodes. A spare must be able to replace any working node,
 * so only nodes with the most common task count qualify. The locality group
 * is the multi-node NVLink domain when the node has one, else its leaf
 * switch; spares are taken round-robin over groups with the most step nodes
 * first, the last qualifying node of a group in step order. */
int map_choose_spares(struct map_ctx *c)
{
    int ns = c->in->spares;
    if (ns < 0) {
        whale_error("spares must be >= 0 (got %d)", ns);
        return WHALE_EINVAL;
    }
    if (ns == 0)
        return 0;
    if (ns >= c->nnodes) {
        whale_error("%d spare node(s) leave no working node: the step has %d node(s)", ns,
                    c->nnodes);
        return WHALE_ENOFIT;
    }
    int n = c->nnodes;
    /* most common task count (ties: the larger count) */
    int mode = 0, mode_n = 0;
    {
        int *cnt = malloc((size_t)n * sizeof *cnt);
        int *val = malloc((size_t)n * sizeof *val);
        int nv = 0;
        if (!cnt || !val) {
            free(cnt);
            free(val);
            return WHALE_ENOMEM;
        }
        for (int i = 0; i < n; i++) {
            int k;
            for (k = 0; k < nv && val[k] != c->in->ntasks[i]; k++)
                ;
            if (k == nv) {
                if (nv >= 64) /* pathological variety; only track the first 64 values */
                    continue;
                val[nv] = c->in->ntasks[i];
                cnt[nv++] = 0;
            }
            cnt[k]++;
        }
        for (int k = 0; k < nv; k++)
            if (cnt[k] > mode_n || (cnt[k] == mode_n && val[k] > mode)) {
                mode = val[k];
                mode_n = cnt[k];
            }
        free(cnt);
        free(val);
    }
    const struct whale_topo *t = c->in->topo;
    int ndom = t ? t->ndomains : 0;
    /* multi-node domain: more than one step node in it */
    int *dom_nodes = calloc((size_t)(ndom + n), sizeof(int));
    struct spare_key *keys = malloc((size_t)n * sizeof *keys);
    struct spare_group *g = malloc((size_t)n * sizeof *g);
    if (!dom_nodes || !keys || !g) {
        free(dom_nodes);
        free(keys);
        free(g);
        return WHALE_ENOMEM;
    }
    for (int i = 0; i < n; i++)
        dom_nodes[c->dom[i]]++;
    int nswitch = t ? t->nswitches : 0;
    for (int i = 0; i < n; i++) {
        int grp;
        if (c->dom[i] < ndom && dom_nodes[c->dom[i]] > 1)
            grp = c->dom[i];                       /* [0, ndom) */
        else if (c->leaf[i] >= 0)
            grp = ndom + c->leaf[i];               /* [ndom, ndom+nswitch) */
        else
            grp = ndom + nswitch;                  /* nodes outside the tree */
        keys[i].group = grp;
        keys[i].idx = i;
    }
    qsort(keys, (size_t)n, sizeof *keys, cmp_spare_key);
    int ng = 0;
    for (int a = 0; a < n;) {
        int b = a;
        int first = keys[a].idx;
        while (b < n && keys[b].group == keys[a].group) {
            if (keys[b].idx < first)
                first = keys[b].idx;
            b++;
        }
        g[ng].first = first;
        g[ng].count = b - a;
        g[ng].lo = a;
        g[ng].hi = b;
        ng++;
        a = b;
    }
    qsort(g, (size_t)ng, sizeof *g, cmp_group);
    /* In a multi-node NVLink domain the working tasks must stay a multiple
     * of TP, so spares leave such a domain k nodes at a time. */
    int k = 1;
    bool any_multi = false;
    for (int q = 0; q < ng; q++)
        if (keys[g[q].lo].group < ndom)
            any_multi = true;
    if (any_multi && mode > 0) {
        int a = c->in->tp, b = mode;
        while (b) {
            int r = a % b;
            a = b;
            b = r;
        }
        k = c->in->tp / a;
    }
    if (ns % k) {
        whale_error("--whale-spares=%d: spare nodes leave an NVLink domain %d at a time here "
                    "(TP=%d, %d task(s) per node), so the number of spares must be a multiple of %d",
                    ns, k, c->in->tp, mode, k);
        free(dom_nodes);
        free(keys);
        free(g);
        return WHALE_ENOFIT;
    }
    /* pass 0 never empties a locality group (a replacement stays close to
     * the ranks it may replace); pass 1 lifts that when there is no other
     * way (e.g. one step node per leaf) */
    int chosen = 0;
    for (int pass = 0; pass < 2 && chosen < ns; pass++) {
        int progress = 1;
        while (chosen < ns && progress) {
            progress = 0;
            for (int q = 0; q < ng && chosen < ns; q++) {
                int kk = keys[g[q].lo].group < ndom ? k : 1;
                int cand[64], nc = 0, working = 0;
                for (int x = g[q].hi - 1; x >= g[q].lo; x--) {
                    int i = keys[x].idx;
                    if (c->spare[i])
                        continue;
                    working++;
                    if (c->in->ntasks[i] == mode && nc < 64 && nc < kk)
                        cand[nc++] = i;
                }
                if (nc < kk || (pass == 0 && working - kk < 1))
                    continue;
                for (int x = 0; x < kk; x++)
                    c->spare[cand[x]] = 1;
                chosen += kk;
                progress = 1;
            }
        }
    }
    free(dom_nodes);
    free(keys);
    free(g);
    if (chosen < ns) {
        whale_error("cannot hold back %d spare node(s): only %d node(s) with the usual %d "
                    "task(s) can be spared in this step of %d node(s)",
                    ns, chosen, mode, n);
        return WHALE_ENOFIT;
    }
    return 0;
}

/* ---- switch-tree order -------------------------------------------------- */

struct order_key {
    int leafkey, domkey, idx;
};

static int cmp_order(const void *a, const void *b)
{
    const struct order_key *x = a, *y = b;
    if (x->leafkey != y->leafkey)
        return x->leafkey < y->leafkey ? -1 : 1;
    if (x->domkey != y->domkey)
        return x->domkey < y->domkey ? -1 : 1;
    return x->idx - y->idx;
}

int map_tree_order(struct map_ctx *c, int **order, int *norder)
{
    const struct whale_topo *t = c->in->topo;
    int n = c->nnodes, ns = t ? t->nswitches : 0;
    int nd = (t ? t->ndomains : 0) + n;
    int *dfs = malloc(((size_t)ns + 1) * sizeof *dfs);
    int *dfirst = malloc((size_t)nd * sizeof *dfirst);
    struct order_key *keys = malloc((size_t)n * sizeof *keys);
    int *out = malloc((size_t)n * sizeof *out);
    int *stack = malloc(((size_t)ns + 1) * sizeof *stack);
    int *child_head = malloc(((size_t)ns + 1) * sizeof(int));
    int *child_next = malloc(((size_t)ns + 1) * sizeof(int));
    int rc = 0;
    if (!dfs || !dfirst || !keys || !out || !stack || !child_head || !child_next) {
        rc = WHALE_ENOMEM;
        goto done;
    }
    /* pre-order DFS over the switch forest, children in index order */
    for (int s = 0; s < ns; s++) {
        dfs[s] = INT_MAX;
        child_head[s] = -1;
    }
    for (int s = ns - 1; s >= 0; s--) {
        int p = t->switches[s].parent;
        if (p >= 0) {
            child_next[s] = child_head[p];
            child_head[p] = s;
        }
    }
    /* iterative pre-order DFS: child_head[] doubles as each switch's cursor */
    int counter = 0;
    for (int r = 0; r < ns; r++) {
        if (t->switches[r].parent >= 0)
            continue;
        int sp = 0;
        stack[sp++] = r;
        dfs[r] = counter++;
        while (sp) {
            int s = stack[sp - 1];
            int ch = child_head[s];
            if (ch < 0) {
                sp--;
                continue;
            }
            child_head[s] = child_next[ch];
            if (dfs[ch] == INT_MAX && sp < ns + 1) {
                dfs[ch] = counter++;
                stack[sp++] = ch;
            }
        }
    }
    for (int d = 0; d < nd; d++)
        dfirst[d] = -1;
    for (int i = 0; i < n; i++)
        if (!c->spare[i] && dfirst[c->dom[i]] < 0)
            dfirst[c->dom[i]] = i;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (c->spare[i])
            continue;
        int lead = dfirst[c->dom[i]]; /* members of a domain sort with its first node */
        int lf = c->leaf[lead];
        keys[k].leafkey = lf >= 0 ? dfs[lf] : INT_MAX;
        keys[k].domkey = lead;
        keys[k].idx = i;
        k++;
    }
    qsort(keys, (size_t)k, sizeof *keys, cmp_order);
    for (int q = 0; q < k; q++)
        out[q] = keys[q].idx;
    *order = out;
    *norder = k;
    out = NULL;
done:
    free(dfs);
    free(dfirst);
    free(keys);
    free(out);
    free(stack);
    free(child_head);
    free(child_next);
    return rc;
}

/* ---- topology carve ----------------------------------------------------- */

/* A piece is a contiguous range [a, b) of TP units (in tree order) that
 * has not been placed in a stage yet, owned by the switch it waits at. */
struct piece {
    int a, b, owner;
};

struct carve {
    const struct map_ctx *c;
    int dp;
    int *stage_units;  /* emitted units, DP per stage */
    int nout;
    struct piece *pieces;
    int npieces, cap;
};

static void emit_range(struct carve *cv, int a, int b)
{
    for (int u = a; u < b; u++)
        cv->stage_units[cv->nout++] = u;
}

static int push_piece(struct carve *cv, int a, int b, int owner)
{
    if (cv->npieces == cv->cap) {
        int nc = cv->cap ? cv->cap * 2 : 64;
        struct piece *p = realloc(cv->pieces, (size_t)nc * sizeof *p);
        if (!p)
            return WHALE_ENOMEM;
        cv->pieces = p;
        cv->cap = nc;
    }
    cv->pieces[cv->npieces++] = (struct piece){ a, b, owner };
    return 0;
}

static int cmp_piece_size(const void *x, const void *y)
{
    const struct piece *a = x, *b = y;
    int sa = a->b - a->a, sb = b->b - b->a;
    if (sa != sb)
        return sa > sb ? -1 : 1;
    return a->a - b->a;
}

/* Combine the pieces p[0..n) (all smaller than DP) into whole stages:
 * largest piece first, completed by the best-fitting piece (smallest one
 * that is large enough, split if larger), else by the next largest.
 * Pieces left over stay in p with b > a. Wide groups (> 512 pieces) are
 * combined in tree order to stay linear. */
static void combine(struct carve *cv, struct piece *p, int n)
{
    int dp = cv->dp;
    long total = 0;
    for (int i = 0; i < n; i++)
        total += p[i].b - p[i].a;
    if (total < dp)
        return;
    if (n > 512) {
        /* tree order: take units in position order */
        int i = 0;
        while (total >= dp) {
            int need = dp;
            while (need) {
                while (p[i].b == p[i].a)
                    i++;
                int take = p[i].b - p[i].a < need ? p[i].b - p[i].a : need;
                emit_range(cv, p[i].a, p[i].a + take);
                p[i].a += take;
                need -= take;
            }
            total -= dp;
        }
        return;
    }
    qsort(p, (size_t)n, sizeof *p, cmp_piece_size);
    while (total >= dp) {
        int big = -1;
        for (int i = 0; i < n; i++)
            if (p[i].b > p[i].a && (big < 0 || p[i].b - p[i].a > p[big].b - p[big].a))
                big = i;
        int need = dp - (p[big].b - p[big].a);
        emit_range(cv, p[big].a, p[big].b);
        p[big].a = p[big].b;
        while (need) {
            int fit = -1, large = -1;
            for (int i = 0; i < n; i++) {
                int s = p[i].b - p[i].a;
                if (!s)
                    continue;
                if (s >= need && (fit < 0 || s < p[fit].b - p[fit].a))
                    fit = i;
                if (large < 0 || s > p[large].b - p[large].a)
                    large = i;
            }
            if (fit >= 0) {
                emit_range(cv, p[fit].a, p[fit].a + need);
                p[fit].a += need;
                need = 0;
            } else {
                need -= p[large].b - p[large].a;
                emit_range(cv, p[large].a, p[large].b);
                p[large].a = p[large].b;
            }
        }
        total -= dp;
    }
}

static int cmp_piece_owner(const void *x, const void *y)
{
    const struct piece *a = x, *b = y;
    if (a->owner != b->owner)
        return a->owner < b->owner ? -1 : 1;
    return (a->a > b->a) - (a->a < b->a);
}

static int cmp_piece_pos(const void *x, const void *y)
{
    const struct piece *a = x, *b = y;
    return (a->a > b->a) - (a->a < b->a);
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

struct stage_ref {
    int first;   /* smallest unit index: the stage's place in the tree */
    int start;   /* offset in stage_units */
};

static int cmp_stage(const void *x, const void *y)
{
    const struct stage_ref *a = x, *b = y;
    return (a->first > b->first) - (a->first < b->first);
}

int map_topo(struct map_ctx *c, const int *order, int norder, int *slot_of_rank)
{
    const struct whale_topo *t = c->in->topo;
    int tp = c->tp, dp = c->dp;
    int nunits = c->world / tp;
    int ns = t ? t->nswitches : 0;
    int rc = 0;
    /* slots in tree order; unit u = slots[u*tp .. u*tp+tp) */
    int *slots = malloc((size_t)c->world * sizeof *slots);
    struct carve cv = { .c = c, .dp = dp };
    cv.stage_units = malloc((size_t)nunits * sizeof(int));
    struct stage_ref *st = malloc((size_t)c->pp * sizeof *st);
    if (!slots || !cv.stage_units || !st) {
        rc = WHALE_ENOMEM;
        goto done;
    }
    int k = 0;
    for (int q = 0; q < norder; q++) {
        int i = order[q];
        for (int j = c->off[i]; j < c->off[i + 1]; j++)
            slots[k++] = j;
    }
    /* level 0: NVLink domains (consecutive in tree order). Whole stages
     * inside one domain first; the remainder waits at the domain's leaf. */
    for (int u = 0; u < nunits;) {
        int d = c->dom[c->slot_node[slots[u * tp]]];
        int v = u;
        while (v < nunits && c->dom[c->slot_node[slots[v * tp]]] == d)
            v++;
        int whole = (v - u) / dp;
        emit_range(&cv, u, u + whole * dp);
        if (u + whole * dp < v) {
            int owner = c->leaf[c->slot_node[slots[u * tp]]];
            if ((rc = push_piece(&cv, u + whole * dp, v, owner)))
                goto done;
        }
        u = v;
    }
    /* switches bottom-up: all switches of level 0, then 1, ...; each
     * combines the pieces waiting at it and passes the rest to its parent. */
    int maxlvl = 0;
    for (int s = 0; s < ns; s++)
        if (t->switches[s].level > maxlvl)
            maxlvl = t->switches[s].level;
    for (int lvl = 0; lvl <= maxlvl && ns; lvl++) {
        /* group pieces of this level's switches: sort by owner */
        int m = 0;
        for (int i = 0; i < cv.npieces; i++)
            if (cv.pieces[i].owner >= 0 && t->switches[cv.pieces[i].owner].level == lvl)
                m++;
        if (!m)
            continue;
        struct piece *grp = malloc((size_t)m * sizeof *grp);
        if (!grp) {
            rc = WHALE_ENOMEM;
            goto done;
        }
        int w = 0, g = 0;
        for (int i = 0; i < cv.npieces; i++) {
            if (cv.pieces[i].owner >= 0 && t->switches[cv.pieces[i].owner].level == lvl)
                grp[g++] = cv.pieces[i];
            else
                cv.pieces[w++] = cv.pieces[i];
        }
        cv.npieces = w;
        /* pieces were pushed in tree order, so equal owners are adjacent
         * except when a domain's lead node sits elsewhere: sort stably by
         * owner then position */
        qsort(grp, (size_t)m, sizeof *grp, cmp_piece_owner);
        for (int a = 0; a < m;) {
            int b = a;
            while (b < m && grp[b].owner == grp[a].owner)
                b++;
            combine(&cv, grp + a, b - a);
            int parent = t->switches[grp[a].owner].parent;
            for (int i = a; i < b; i++)
                if (grp[i].b > grp[i].a && (rc = push_piece(&cv, grp[i].a, grp[i].b, parent))) {
                    free(grp);
                    goto done;
                }
            a = b;
        }
        free(grp);
    }
    /* the root pool: everything left, in tree order */
    if (cv.npieces) {
        qsort(cv.pieces, (size_t)cv.npieces, sizeof *cv.pieces, cmp_piece_pos);
        combine(&cv, cv.pieces, cv.npieces);
    }
    if (cv.nout != nunits) {
        whale_error("internal mapper error: %d of %d TP groups placed", cv.nout, nunits);
        rc = WHALE_EINVAL;
        goto done;
    }
    /* order units inside each stage (DP ring along the tree), then stages
     * along the tree (PP neighbours adjacent) */
    for (int s = 0; s < c->pp; s++) {
        qsort(cv.stage_units + s * dp, (size_t)dp, sizeof(int), cmp_int);
        st[s].first = cv.stage_units[s * dp];
        st[s].start = s * dp;
    }
    qsort(st, (size_t)c->pp, sizeof *st, cmp_stage);
    for (int p = 0; p < c->pp; p++)
        for (int d = 0; d < dp; d++) {
            int u = cv.stage_units[st[p].start + d];
            for (int x = 0; x < tp; x++) {
                struct whale_coords co = { .tp = x, .pp = p, .dp = d };
                slot_of_rank[whale_grid_rank(&c->grid, &co)] = slots[u * tp + x];
            }
        }
done:
    free(slots);
    free(cv.stage_units);
    free(cv.pieces);
    free(st);
    return rc;
}
