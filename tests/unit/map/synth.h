/* Synthetic topologies for mapper tests and benchmarks (header-only so
 * tests and contrib/bench share it without another library). */
#ifndef WHALE_TEST_SYNTH_H
#define WHALE_TEST_SYNTH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/map.h"
#include "whale/topo.h"

/* deterministic LCG so tests are reproducible */
static inline uint32_t synth_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

struct synth {
    struct whale_topo *topo;
    char **names;       /* step nodes in "Slurm" order */
    int *ntasks;
    int nnodes;
};

static inline void synth_free(struct synth *s)
{
    for (int i = 0; i < s->nnodes; i++)
        free(s->names[i]);
    free(s->names);
    free(s->ntasks);
    whale_topo_free(s->topo);
    memset(s, 0, sizeof *s);
}

/* 3-level fat tree: spines x leaves_per_spine x nodes_per_leaf, gpus per
 * node, every node its own NVLink domain (domain_nodes == 1) or blocks of
 * domain_nodes consecutive nodes under one leaf (NVL72 style). */
static inline struct whale_topo *synth_fat_tree(int spines, int leaves_per_spine,
                                                int nodes_per_leaf, int gpus, int domain_nodes)
{
    struct whale_topo *t = whale_topo_new();
    char name[64];
    int core = spines > 1 ? whale_topo_add_switch(t, "core", -1) : -1;
    int nidx = 0, didx = 0;
    for (int s = 0; s < spines; s++) {
        snprintf(name, sizeof name, "spine%d", s);
        int sp = whale_topo_add_switch(t, name, core);
        for (int l = 0; l < leaves_per_spine; l++) {
            snprintf(name, sizeof name, "leaf%d", s * leaves_per_spine + l);
            int lf = whale_topo_add_switch(t, name, sp);
            int dom = -1;
            for (int n = 0; n < nodes_per_leaf; n++) {
                if (domain_nodes > 1 && n % domain_nodes == 0) {
                    snprintf(name, sizeof name, "nvl%d", didx++);
                    dom = whale_topo_add_domain(t, name);
                }
                snprintf(name, sizeof name, "n%05d", nidx++);
                whale_topo_add_node(t, name, gpus, lf, domain_nodes > 1 ? dom : -1);
            }
        }
    }
    whale_topo_finalize(t);
    return t;
}

static inline int synth_cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Take `want` nodes spread unevenly over the topology (a fragmented
 * allocation): per leaf a random share, then the node list sorted by name
 * like Slurm's hostlist. With interleave, names do not follow the tree
 * (nodes renamed round-robin across leaves, as after re-cabling). */
static inline int synth_alloc(struct synth *s, struct whale_topo *t, int want, int tasks_per_node,
                              uint64_t seed, int fragment)
{
    memset(s, 0, sizeof *s);
    s->topo = t;
    s->names = calloc((size_t)want, sizeof(char *));
    s->ntasks = calloc((size_t)want, sizeof(int));
    unsigned char *used = calloc((size_t)t->nnodes, 1);
    uint64_t st = seed;
    int got = 0;
    if (!fragment) {
        for (int i = 0; i < t->nnodes && got < want; i++)
            used[i] = 1, got++;
    } else {
        /* random free nodes: uneven share per leaf; keep NVL domains whole
         * when the topology has them (allocate by domain) */
        int guard = 0;
        while (got < want && guard++ < 100 * t->nnodes) {
            int i = (int)(synth_rand(&st) % (uint32_t)t->nnodes);
            if (t->nodes[i].domain >= 0) {
                int d = t->nodes[i].domain, cnt = 0;
                for (int k = 0; k < t->nnodes; k++)
                    if (t->nodes[k].domain == d && !used[k])
                        cnt++;
                if (cnt != t->domains[d].nnodes || got + cnt > want)
                    continue;
                for (int k = 0; k < t->nnodes; k++)
                    if (t->nodes[k].domain == d)
                        used[k] = 1, got++;
            } else if (!used[i]) {
                used[i] = 1;
                got++;
            }
        }
    }
    for (int i = 0; i < t->nnodes && s->nnodes < got; i++)
        if (used[i]) {
            s->names[s->nnodes] = strdup(t->nodes[i].name);
            s->ntasks[s->nnodes] = tasks_per_node;
            s->nnodes++;
        }
    free(used);
    qsort(s->names, (size_t)s->nnodes, sizeof(char *), synth_cmp_name);
    return s->nnodes == want ? 0 : -1;
}

static inline void synth_input(const struct synth *s, int tp, int pp, int dp, int spares,
                               int policy, struct whale_map_input *in)
{
    memset(in, 0, sizeof *in);
    in->tp = tp;
    in->pp = pp;
    in->dp = dp;
    in->spares = spares;
    in->policy = (enum whale_map_policy)policy;
    in->nnodes = s->nnodes;
    in->nodes = (const char *const *)s->names;
    in->ntasks = s->ntasks;
    in->topo = s->topo;
}

/* Shuffle node order relative to the tree: rename nodes so that Slurm's
 * name order interleaves leaves (fragmented naming). */
static inline void synth_interleave_names(struct whale_topo *t, uint64_t seed)
{
    uint64_t st = seed;
    int n = t->nnodes;
    int *perm = malloc((size_t)n * sizeof *perm);
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(synth_rand(&st) % (uint32_t)(i + 1));
        int x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    /* rebuild the topology with permuted names */
    struct whale_topo *u = whale_topo_new();
    for (int k = 0; k < t->nswitches; k++)
        whale_topo_add_switch(u, t->switches[k].name, t->switches[k].parent);
    for (int k = 0; k < t->ndomains; k++)
        whale_topo_add_domain(u, t->domains[k].name);
    char name[64];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "n%05d", perm[i]);
        whale_topo_add_node(u, name, t->nodes[i].gpus, t->nodes[i].leaf, t->nodes[i].domain);
    }
    whale_topo_finalize(u);
    /* swap contents */
    struct whale_topo tmp = *t;
    *t = *u;
    *u = tmp;
    whale_topo_free(u);
    free(perm);
}

#endif
