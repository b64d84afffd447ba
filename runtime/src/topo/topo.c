/* Topology model: growable arrays of nodes, switches, NVLink domains and GPU
 * types, plus a name hash so that mapping 12,500-node allocations stays
 * linear. Dependency-free (runs inside srun/slurmstepd). */
#include "whale/topo.h"
#include "whale/error.h"
#include "whale/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct whale_topo_hash {
    int *slot;      /* node index + 1, 0 = empty */
    size_t cap;     /* power of two */
};

static const char *const link_names[WHALE_LINK_NCLASS] = { "node", "nvl", "leaf", "spine", "core" };

const char *whale_link_class_name(int cls)
{
    return cls >= 0 && cls < WHALE_LINK_NCLASS ? link_names[cls] : "?";
}

/* FNV-1a: names are short, distribution is good enough for open addressing. */
static uint64_t topo_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
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
    if (t->hash)
        free(t->hash->slot);
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

static int topo_hash_insert(struct whale_topo *t, int idx);

static int topo_hash_rehash(struct whale_topo *t, size_t ncap)
{
    int *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return WHALE_ENOMEM;
    free(t->hash->slot);
    t->hash->slot = ns;
    t->hash->cap = ncap;
    for (int i = 0; i < t->nnodes; i++)
        topo_hash_insert(t, i);
    return 0;
}

static int topo_hash_insert(struct whale_topo *t, int idx)
{
    size_t mask = t->hash->cap - 1;
    size_t h = (size_t)topo_hash_str(t->nodes[idx].name) & mask;
    while (t->hash->slot[h])
        h = (h + 1) & mask;
    t->hash->slot[h] = idx + 1;
    return 0;
}

int whale_topo_find_node(const struct whale_topo *t, const char *name)
{
    if (!t || !name || !t->hash->cap)
        return -1;
    size_t mask = t->hash->cap - 1;
    size_t h = (size_t)topo_hash_str(name) & mask;
    while (t->hash->slot[h]) {
        int i = t->hash->slot[h] - 1;
        if (!strcmp(t->nodes[i].name, name))
            return i;
        h = (h + 1) & mask;
    }
    return -1;
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
    if (topo_grow((void **)&t->nodes, &t->cap_nodes, t->nnodes, sizeof *t->nodes))
        return WHALE_ENOMEM;
    /* keep load factor <= 1/2 */
    if ((size_t)(t->nnodes + 1) * 2 > t->hash->cap) {
        size_t nc = t->hash->cap ? t->hash->cap * 2 : 64;
        while ((size_t)(t->nnodes + 1) * 2 > nc)
            nc *= 2;
        if (topo_hash_rehash(t, nc))
            return WHALE_ENOMEM;
    }
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
    topo_hash_insert(t, i);
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
    for (int i = 0; i < t->nswitches; i++)
        if (!strcmp(t->switches[i].name, name))
            return i;
    return -1;
}

int whale_topo_add_switch(struct whale_topo *t, const char *name, int parent)
{
    int i = whale_topo_find_switch(t, name);
    if (i >= 0) {
        if (parent >= 0)
            t->switches[i].parent = parent;
        return i;
    }
    if (topo_grow((void **)&t->switches, &t->cap_switches, t->nswitches, sizeof *t->switches))
        return WHALE_ENOMEM;
    struct whale_topo_switch *s = &t->switches[t->nswitches];
    s->name = strdup(name);
    if (!s->name)
        return WHALE_ENOMEM;
    s->parent = parent;
    s->level = 0;
    s->link_gbs = 0;
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
    for (int i = 0; i < t->ndomains; i++)
        if (!strcmp(t->domains[i].name, name))
            return i;
    return -1;
}

int whale_topo_add_domain(struct whale_topo *t, const char *name)
{
    int i = whale_topo_find_domain(t, name);
    if (i >= 0)
        return i;
    if (topo_grow((void **)&t->domains, &t->cap_domains, t->ndomains, sizeof *t->domains))
        return WHALE_ENOMEM;
    if (!(t->domains[t->ndomains].name = strdup(name)))
        return WHALE_ENOMEM;
    t->domains[t->ndomains].nnodes = 0;
    return t->ndomains++;
}

int whale_topo_find_gpu_type(const struct whale_topo *t, const char *name)
{
    for (int i = 0; i < t->ngpu_types; i++)
        if (!strcmp(t->gpu_types[i].name, name))
            return i;
    return -1;
}

int whale_topo_add_gpu_type(struct whale_topo *t, const char *name, double peak_tflops,
                            double mem_gib, double nvlink_gbs)
{
    int i = whale_topo_find_gpu_type(t, name);
    if (i < 0) {
        if (topo_grow((void **)&t->gpu_types, &t->cap_gpu_types, t->ngpu_types,
                      sizeof *t->gpu_types))
            return WHALE_ENOMEM;
        i = t->ngpu_types;
        if (!(t->gpu_types[i].name = strdup(name)))
            return WHALE_ENOMEM;
        t->ngpu_types++;
    }
    t->gpu_types[i].peak_tflops = peak_tflops;
    t->gpu_types[i].mem_gib = mem_gib;
    t->gpu_types[i].nvlink_gbs = nvlink_gbs;
    return i;
}

int whale_topo_finalize(struct whale_topo *t)
{
    for (int i = 0; i < t->ndomains; i++)
        t->domains[i].nnodes = 0;
    for (int i = 0; i < t->nnodes; i++)
        if (t->nodes[i].domain >= 0)
            t->domains[t->nodes[i].domain].nnodes++;
    /* level = distance from the farthest leaf below; walk up from every
     * leaf, bounded by nswitches steps to catch cycles. */
    for (int i = 0; i < t->nswitches; i++)
        t->switches[i].level = 0;
    for (int i = 0; i < t->nswitches; i++) {
        int lvl = 0, s = i, steps = 0;
        while (t->switches[s].parent >= 0) {
            int p = t->switches[s].parent;
            lvl++;
            if (t->switches[p].level < lvl)
                t->switches[p].level = lvl;
            s = p;
            if (++steps > t->nswitches) {
                whale_error("switch tree has a cycle through switch '%s'", t->switches[i].name);
                return WHALE_ECONF;
            }
        }
    }
    return 0;
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
