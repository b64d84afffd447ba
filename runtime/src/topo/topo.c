/* Topology model: growable arrays of nodes, switches, NVLink domains and GPU
 * types, plus one name index per array so that building and mapping long
 * hostlists stays linear (a topology.conf line with tens of thousands of
 * names used to cost O(n^2), found by tests/fuzz). Dependency-free (runs
 * inside srun/slurmstepd). */
#include "whale/topo.h"
#include "whale/error.h"
#include "whale/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "whale/nameidx.h"

/* one index per named array; the names are the arrays' own strdup'd strings */
struct whale_topo_hash {
    struct whale_nameidx nodes, switches, domains, gpu_types;
};

static const char *const link_names[WHALE_LINK_NCLASS] = { "node", "nvl", "leaf", "spine", "core" };

const char *whale_link_class_name(int cls)
{
    return cls >= 0 && cls < WHALE_LINK_NCLASS ? link_names[cls] : "?";
}

struct whale_topo *whale_topo_new(void)
{
    struct whale_topo *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->hash = calloc(1, sizeof *t->hash);
    if (!t->hash) {
        free(t);
        return NULL;
    }
    /* GB/s per rank. Defaults: NVLink 4 (450 GB/s) inside a node/domain,
     * one 400 Gb/s NIC per GPU under a leaf, 2:1 taper per level above. */
    t->link_gbs[WHALE_LINK_NODE] = 450;
    t->link_gbs[WHALE_LINK_NVL] = 450;
    t->link_gbs[WHALE_LINK_LEAF] = 50;
    t->link_gbs[WHALE_LINK_SPINE] = 25;
    t->link_gbs[WHALE_LINK_CORE] = 12.5;
    return t;
}

void whale_topo_free(struct whale_topo *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nnodes; i++) {
        free(t->nodes[i].name);
        for (int k = 0; k < t->nodes[i].nnics; k++)
            free(t->nodes[i].nics[k]);
        free(t->nodes[i].nics);
    }
    for (int i = 0; i < t->nswitches; i++)
        free(t->switches[i].name);
    for (int i = 0; i < t->ndomains; i++)
        free(t->domains[i].name);
    for (int i = 0; i < t->ngpu_types; i++)
        free(t->gpu_types[i].name);
    free(t->nodes);
    free(t->switches);
    free(t->domains);
    free(t->gpu_types);
    if (t->hash) {
        whale_nameidx_free(&t->hash->nodes);
        whale_nameidx_free(&t->hash->switches);
        whale_nameidx_free(&t->hash->domains);
        whale_nameidx_free(&t->hash->gpu_types);
    }
    free(t->hash);
    free(t);
}

static int topo_grow(void **arr, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return 0;
    int nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p)
        return WHALE_ENOMEM;
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return 0;
}

int whale_topo_find_node(const struct whale_topo *t, const char *name)
{
    return t && name ? whale_nameidx_find(&t->hash->nodes, name) : -1;
}

int whale_topo_add_node(struct whale_topo *t, const char *name, int gpus, int leaf, int domain)
{
    int i = whale_topo_find_node(t, name);
    if (i >= 0) {
        if (gpus >= 0)
            t->nodes[i].gpus = gpus;
        if (leaf >= 0)
            t->nodes[i].leaf = leaf;
        if (domain >= 0)
            t->nodes[i].domain = domain;
        return i;
    }
    if (topo_grow((void **)&t->nodes, &t->cap_nodes, t->nnodes, sizeof *t->nodes) ||
        whale_nameidx_reserve(&t->hash->nodes, t->nnodes + 1))
        return WHALE_ENOMEM;
    struct whale_topo_node *n = &t->nodes[t->nnodes];
    memset(n, 0, sizeof *n);
    n->name = strdup(name);
    if (!n->name)
        return WHALE_ENOMEM;
    n->gpus = gpus > 0 ? gpus : 0;
    n->leaf = leaf;
    n->domain = domain;
    n->gpu_type = -1;
    i = t->nnodes++;
    whale_nameidx_insert(&t->hash->nodes, n->name, i);
    return i;
}

int whale_topo_node_add_nic(struct whale_topo *t, int node, const char *nic)
{
    struct whale_topo_node *n = &t->nodes[node];
    char **p = realloc(n->nics, (size_t)(n->nnics + 1) * sizeof *p);
    if (!p)
        return WHALE_ENOMEM;
    n->nics = p;
    if (!(p[n->nnics] = strdup(nic)))
        return WHALE_ENOMEM;
    n->nnics++;
    return 0;
}

int whale_topo_find_switch(const struct whale_topo *t, const char *name)
{
    return t && name ? whale_nameidx_find(&t->hash->switches, name) : -1;
}

int whale_topo_add_switch(struct whale_topo *t, const char *name, int parent)
{
    int i = whale_topo_find_switch(t, name);
    if (i >= 0) {
        if (parent >= 0)
            t->switches[i].parent = parent;
        return i;
    }
    if (topo_grow((void **)&t->switches, &t->cap_switches, t->nswitches, sizeof *t->switches) ||
        whale_nameidx_reserve(&t->hash->switches, t->nswitches + 1))
        return WHALE_ENOMEM;
    struct whale_topo_switch *s = &t->switches[t->nswitches];
    s->name = strdup(name);
    if (!s->name)
        return WHALE_ENOMEM;
    s->parent = parent;
    s->level = 0;
    s->link_gbs = 0;
    whale_nameidx_insert(&t->hash->switches, s->name, t->nswitches);
    return t->nswitches++;
}

int whale_topo_set_switch_parent(struct whale_topo *t, int sw, int parent)
{
    if (sw < 0 || sw >= t->nswitches || parent >= t->nswitches)
        return WHALE_EINVAL;
    t->switches[sw].parent = parent;
    return 0;
}

int whale_topo_find_domain(const struct whale_topo *t, const char *name)
{
    return t && name ? whale_nameidx_find(&t->hash->domains, name) : -1;
}

int whale_topo_add_domain(struct whale_topo *t, const char *name)
{
    int i = whale_topo_find_domain(t, name);
    if (i >= 0)
        return i;
    if (topo_grow((void **)&t->domains, &t->cap_domains, t->ndomains, sizeof *t->domains) ||
        whale_nameidx_reserve(&t->hash->domains, t->ndomains + 1))
        return WHALE_ENOMEM;
    if (!(t->domains[t->ndomains].name = strdup(name)))
        return WHALE_ENOMEM;
    t->domains[t->ndomains].nnodes = 0;
    whale_nameidx_insert(&t->hash->domains, t->domains[t->ndomains].name, t->ndomains);
    return t->ndomains++;
}

int whale_topo_find_gpu_type(const struct whale_topo *t, const char *name)
{
    return t && name ? whale_nameidx_find(&t->hash->gpu_types, name) : -1;
}

int whale_topo_add_gpu_type(struct whale_topo *t, const char *name, double peak_tflops,
                            double mem_gib, double nvlink_gbs)
{
    int i = whale_topo_find_gpu_type(t, name);
    if (i < 0) {
        if (topo_grow((void **)&t->gpu_types, &t->cap_gpu_types, t->ngpu_types,
                      sizeof *t->gpu_types) ||
            whale_nameidx_reserve(&t->hash->gpu_types, t->ngpu_types + 1))
            return WHALE_ENOMEM;
        i = t->ngpu_types;
        if (!(t->gpu_types[i].name = strdup(name)))
            return WHALE_ENOMEM;
        whale_nameidx_insert(&t->hash->gpu_types, t->gpu_types[i].name, i);
        t->ngpu_types++;
    }
    t->gpu_types[i].peak_tflops = peak_tflops;
    t->gpu_types[i].mem_gib = mem_gib;
    t->gpu_types[i].nvlink_gbs = nvlink_gbs;
    return i;
}

/* After topo_switch_levels' pass the switches left pending are exactly
 * the cycle members (a switch has one parent, so nothing hangs above a
 * cycle). Name the lowest-index switch whose way up runs into a cycle, as
 * the message always did: one memoised walk per switch, O(n) in all.
 * Returns the index, or -1 without memory. */
static int topo_first_above_cycle(const struct whale_topo *t, const int *pending)
{
    int n = t->nswitches;
    signed char *state = calloc((size_t)n, 1); /* 0 unknown, 1 reaches a root, 2 a cycle */
    int *path = malloc((size_t)n * sizeof *path);
    int found = -1;
    if (!state || !path)
        goto out;
    for (int i = 0; i < n && found < 0; i++) {
        int len = 0, s = i;
        signed char end = 1;
        while (s >= 0 && !state[s]) {
            if (pending[s]) {
                end = 2;
                break;
            }
            path[len++] = s;
            s = t->switches[s].parent;
        }
        if (s >= 0 && state[s])
            end = state[s];
        for (int k = 0; k < len; k++)
            state[path[k]] = end;
        if (end == 2 || pending[i])
            found = i;
    }
out:
    free(state);
    free(path);
    return found;
}

/* level = distance from the farthest leaf below. Leaves first (Kahn's
 * order): a switch is done once all its children are, so a chain of n
 * switches costs O(n), not the O(n^2) of walking up from every switch.
 * Switches never done sit on a cycle. */
static int topo_switch_levels(struct whale_topo *t)
{
    int n = t->nswitches;
    if (n == 0)
        return 0;
    int *pending = calloc((size_t)n, sizeof *pending), *queue = malloc((size_t)n * sizeof *queue);
    if (!pending || !queue) {
        free(pending);
        free(queue);
        return WHALE_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        t->switches[i].level = 0;
        if (t->switches[i].parent >= 0)
            pending[t->switches[i].parent]++;
    }
    int head = 0, tail = 0;
    for (int i = 0; i < n; i++)
        if (!pending[i])
            queue[tail++] = i;
    while (head < tail) {
        int s = queue[head++], p = t->switches[s].parent;
        if (p < 0)
            continue;
        if (t->switches[p].level < t->switches[s].level + 1)
            t->switches[p].level = t->switches[s].level + 1;
        if (--pending[p] == 0)
            queue[tail++] = p;
    }
    int rc = 0;
    if (tail < n) {
        int first = topo_first_above_cycle(t, pending);
        rc = first < 0 ? WHALE_ENOMEM : WHALE_ECONF;
        if (first >= 0)
            whale_error("switch tree has a cycle through switch '%s'", t->switches[first].name);
    }
    free(pending);
    free(queue);
    return rc;
}

int whale_topo_finalize(struct whale_topo *t)
{
    for (int i = 0; i < t->ndomains; i++)
        t->domains[i].nnodes = 0;
    for (int i = 0; i < t->nnodes; i++)
        if (t->nodes[i].domain >= 0)
            t->domains[t->nodes[i].domain].nnodes++;
    return topo_switch_levels(t);
}

enum whale_link_class whale_topo_link_class(const struct whale_topo *t, int a, int b)
{
    if (a == b)
        return WHALE_LINK_NODE;
    if (!t || a < 0 || b < 0)
        return WHALE_LINK_CORE;
    const struct whale_topo_node *na = &t->nodes[a], *nb = &t->nodes[b];
    if (na->domain >= 0 && na->domain == nb->domain)
        return WHALE_LINK_NVL;
    int sa = na->leaf, sb = nb->leaf;
    if (sa < 0 || sb < 0)
        return WHALE_LINK_CORE;
    if (sa == sb)
        return WHALE_LINK_LEAF;
    /* climb the lower of the two until they meet; count hops above the leaf */
    int up = 0;
    for (int guard = 0; guard < 2 * t->nswitches + 2 && sa != sb; guard++) {
        int la = t->switches[sa].level, lb = t->switches[sb].level;
        if (la <= lb) {
            sa = t->switches[sa].parent;
            if (sa < 0)
                return WHALE_LINK_CORE;
            if (t->switches[sa].level > up)
                up = t->switches[sa].level;
        } else {
            sb = t->switches[sb].parent;
            if (sb < 0)
                return WHALE_LINK_CORE;
            if (t->switches[sb].level > up)
                up = t->switches[sb].level;
        }
    }
    if (sa != sb)
        return WHALE_LINK_CORE;
    return up <= 1 ? WHALE_LINK_SPINE : WHALE_LINK_CORE;
}

int whale_topo_domain_gpus(const struct whale_topo *t, int node)
{
    if (!t || node < 0)
        return 0;
    const struct whale_topo_node *n = &t->nodes[node];
    if (n->domain < 0)
        return n->gpus;
    int sum = 0;
    for (int i = 0; i < t->nnodes; i++)
        if (t->nodes[i].domain == n->domain)
            sum += t->nodes[i].gpus;
    return sum;
}
