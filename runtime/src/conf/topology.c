/* Slurm's topology.conf (switch tree and NVLink blocks) and the assembly
 * of the topology model from it plus whale.conf. */
#include "conf_internal.h"
#include "whale/conf.h"
#include "whale/error.h"
#include "whale/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *const switch_keys[] = { "SwitchName", "Nodes", "Switches", "LinkSpeed", NULL };
static const char *const block_keys[] = { "BlockName", "Nodes", NULL };
static const char *const topo_global_keys[] = { "BlockSizes", NULL };

struct topo_parse {
    struct whale_topo *t;
    const struct whale_kv_line *l;
    int sw;         /* current switch / domain */
    const char *what;
    long host_budget; /* hosts this file's hostlists may still expand to */
};

static int add_leaf_node(const char *host, void *user)
{
    struct topo_parse *tp = user;
    int k = whale_topo_find_node(tp->t, host);
    if (k >= 0 && tp->t->nodes[k].leaf >= 0 && tp->t->nodes[k].leaf != tp->sw) {
        whale_error("%s:%d: node %s is already under switch %s", tp->l->file, tp->l->line, host,
                    tp->t->switches[tp->t->nodes[k].leaf].name);
        return WHALE_ECONF;
    }
    k = whale_topo_add_node(tp->t, host, -1, tp->sw, -1);
    return k < 0 ? k : 0;
}

static int add_child_switch(const char *name, void *user)
{
    struct topo_parse *tp = user;
    int k = whale_topo_add_switch(tp->t, name, -1);
    if (k < 0)
        return k;
    if (k == tp->sw) {
        whale_error("%s:%d: switch %s lists itself", tp->l->file, tp->l->line, name);
        return WHALE_ECONF;
    }
    int par = tp->t->switches[k].parent;
    if (par >= 0 && par != tp->sw) {
        whale_error("%s:%d: switch %s already has parent %s", tp->l->file, tp->l->line, name,
                    tp->t->switches[par].name);
        return WHALE_ECONF;
    }
    return whale_topo_set_switch_parent(tp->t, k, tp->sw);
}

static int add_domain_node(const char *host, void *user)
{
    struct topo_parse *tp = user;
    int k = whale_topo_find_node(tp->t, host);
    if (k >= 0 && tp->t->nodes[k].domain >= 0 && tp->t->nodes[k].domain != tp->sw) {
        whale_error("%s:%d: node %s is already in NVLink domain %s", tp->l->file, tp->l->line,
                    host, tp->t->domains[tp->t->nodes[k].domain].name);
        return WHALE_ECONF;
    }
    k = whale_topo_add_node(tp->t, host, -1, -1, tp->sw);
    return k < 0 ? k : 0;
}

static int hostlist_error(struct topo_parse *tp, const struct whale_kv *kv, int rc)
{
    return conf_hostlist_error(tp->l->file, tp->l->line, kv->key, kv->value, rc, &tp->host_budget);
}

static int topo_line(const struct whale_kv_line *l, void *user)
{
    struct topo_parse *tp = user;
    struct whale_topo *t = tp->t;
    tp->l = l;
    const char *first = l->kv[0].key;
    int rc;
    if (!strcasecmp(first, "SwitchName")) {
        if ((rc = conf_check_keys(l, switch_keys, "a SwitchName line")))
            return rc;
        const struct whale_kv *nodes = whale_kv_find(l, "Nodes");
        const struct whale_kv *sws = whale_kv_find(l, "Switches");
        const struct whale_kv *speed = whale_kv_find(l, "LinkSpeed");
        tp->sw = whale_topo_add_switch(t, l->kv[0].value, -1);
        if (tp->sw < 0)
            return tp->sw;
        if (speed) {
            long v;
            if ((rc = whale_kv_to_long(l, speed, 1, 1L << 40, false, &v)))
                return rc;
            /* Slurm's LinkSpeed has no unit; sites use Gb/s by convention */
            t->switches[tp->sw].link_gbs = (double)v / 8.0;
        }
        if (nodes && (rc = conf_hostlist_foreach(nodes->value, add_leaf_node, tp, &tp->host_budget)))
            return hostlist_error(tp, nodes, rc);
        if (sws && (rc = conf_hostlist_foreach(sws->value, add_child_switch, tp, &tp->host_budget)))
            return hostlist_error(tp, sws, rc);
        return 0;
    }
    if (!strcasecmp(first, "BlockName")) {
        if ((rc = conf_check_keys(l, block_keys, "a BlockName line")))
            return rc;
        const struct whale_kv *nodes = whale_kv_find(l, "Nodes");
        if (!nodes) {
            whale_error("%s:%d: BlockName=%s needs Nodes=<hostlist>", l->file, l->line,
                        l->kv[0].value);
            return WHALE_ECONF;
        }
        tp->sw = whale_topo_add_domain(t, l->kv[0].value);
        if (tp->sw < 0)
            return tp->sw;
        if ((rc = conf_hostlist_foreach(nodes->value, add_domain_node, tp, &tp->host_budget)))
            return hostlist_error(tp, nodes, rc);
        return 0;
    }
    return conf_check_keys(l, topo_global_keys, tp->what);
}

int whale_topology_conf_parse(const char *path, struct whale_topo *t)
{
    struct topo_parse tp = { .t = t, .what = "topology.conf", .host_budget = CONF_MAX_HOSTS_FILE };
    int rc = whale_kv_parse_file(path, topo_line, &tp);
    return rc ? rc : whale_topo_finalize(t);
}

int whale_topology_conf_parse_string(const char *text, const char *name, struct whale_topo *t)
{
    struct topo_parse tp = { .t = t, .what = "topology.conf", .host_budget = CONF_MAX_HOSTS_FILE };
    int rc = whale_kv_parse_string(text, name, topo_line, &tp);
    return rc ? rc : whale_topo_finalize(t);
}

/* ---- assembling the model ------------------------------------------------ */

struct apply {
    struct whale_topo *t;
    const struct whale_conf_nodeset *ns;
    int gpu_type;
    int domain;
    const char *file;
    int line;
};

static int apply_nodeset(struct whale_topo *t, int k, const struct whale_conf_nodeset *ns,
                         int gpu_type)
{
    struct whale_topo_node *n = &t->nodes[k];
    if (ns->gpus >= 0)
        n->gpus = ns->gpus;
    if (ns->cores > 0)
        n->cores = ns->cores;
    if (gpu_type >= 0)
        n->gpu_type = gpu_type;
    if (ns->nic_gbs > 0)
        n->nic_gbs = ns->nic_gbs;
    if (ns->nnics >= 0 && ns->nics) {
        for (int i = 0; i < n->nnics; i++)
            free(n->nics[i]);
        free(n->nics);
        n->nics = NULL;
        n->nnics = 0;
        for (int i = 0; i < ns->nnics; i++) {
            int rc = whale_topo_node_add_nic(t, k, ns->nics[i]);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int apply_host(const char *host, void *user)
{
    struct apply *a = user;
    int k = whale_topo_add_node(a->t, host, -1, -1, -1);
    if (k < 0)
        return k;
    return apply_nodeset(a->t, k, a->ns, a->gpu_type);
}

static int domain_host(const char *host, void *user)
{
    struct apply *a = user;
    int k = whale_topo_find_node(a->t, host);
    if (k >= 0 && a->t->nodes[k].domain >= 0 && a->t->nodes[k].domain != a->domain) {
        whale_error("%s:%d: node %s is already in NVLink domain %s", a->file, a->line, host,
                    a->t->domains[a->t->nodes[k].domain].name);
        return WHALE_ECONF;
    }
    k = whale_topo_add_node(a->t, host, -1, -1, a->domain);
    return k < 0 ? k : 0;
}

static int conf_gpu_index(struct whale_topo *t, const char *name)
{
    return name ? whale_topo_find_gpu_type(t, name) : -1;
}

int whale_conf_topo_ensure_node(const struct whale_conf *c, struct whale_topo *t, const char *name)
{
    int k = whale_topo_find_node(t, name);
    if (k >= 0)
        return k;
    k = whale_topo_add_node(t, name, -1, -1, -1);
    if (k < 0)
        return k;
    int rc = apply_nodeset(t, k, &c->node_default, conf_gpu_index(t, c->node_default.gpu_type));
    return rc ? rc : k;
}

int whale_conf_build_topo(const struct whale_conf *c, const char *slurm_conf,
                          struct whale_topo **out)
{
    *out = NULL;
    struct whale_topo *t = whale_topo_new();
    if (!t)
        return WHALE_ENOMEM;
    int rc = 0;
    char *tpath = whale_conf_topology_path(c, slurm_conf);
    if (tpath) {
        if (access(tpath, R_OK) == 0) {
            rc = whale_topology_conf_parse(tpath, t);
        } else if (c->topology_file_set) {
            whale_error("%s: TopologyFile=%s: %s", c->path, tpath, strerror(errno));
            rc = WHALE_ECONF;
        } else {
            whale_debug("no %s: no switch tree, nodes are flat", tpath);
        }
        free(tpath);
        if (rc)
            goto fail;
    }
    for (int i = 0; i < c->ngpu_types; i++) {
        const struct whale_gpu_type *g = &c->gpu_types[i];
        if ((rc = whale_topo_add_gpu_type(t, g->name, g->peak_tflops, g->mem_gib, g->nvlink_gbs)) < 0)
            goto fail;
    }
    rc = 0;
    /* defaults apply to every node already known from topology.conf; later
     * NodeName lines (which start from DEFAULT) override them */
    int gdef = conf_gpu_index(t, c->node_default.gpu_type);
    for (int k = 0; k < t->nnodes; k++)
        if ((rc = apply_nodeset(t, k, &c->node_default, gdef)))
            goto fail;
    for (int i = 0; i < c->nnodesets; i++) {
        struct apply a = { .t = t, .ns = &c->nodesets[i],
                           .gpu_type = conf_gpu_index(t, c->nodesets[i].gpu_type),
                           .file = c->path, .line = c->nodesets[i].line };
        if ((rc = conf_hostlist_foreach(c->nodesets[i].hosts, apply_host, &a, NULL)))
            goto fail;
    }
    for (int i = 0; i < c->ndomains; i++) {
        struct apply a = { .t = t, .file = c->path, .line = c->domains[i].line };
        if ((a.domain = whale_topo_add_domain(t, c->domains[i].name)) < 0) {
            rc = a.domain;
            goto fail;
        }
        if ((rc = conf_hostlist_foreach(c->domains[i].hosts, domain_host, &a, NULL)))
            goto fail;
    }
    /* bandwidth per link class: explicit LinkBandwidth wins; else NVLink of
     * the GPU types in use and NIC bandwidth per GPU, with a 2:1 taper per
     * switch level above the leaves */
    double nvl = 0, nic = 0;
    for (int k = 0; k < t->nnodes; k++) {
        const struct whale_topo_node *n = &t->nodes[k];
        if (n->gpu_type >= 0 && t->gpu_types[n->gpu_type].nvlink_gbs > 0 &&
            (nvl == 0 || t->gpu_types[n->gpu_type].nvlink_gbs < nvl))
            nvl = t->gpu_types[n->gpu_type].nvlink_gbs;
        if (n->nic_gbs > 0 && n->nnics > 0) {
            double per = n->nic_gbs * n->nnics / (n->gpus > 0 ? n->gpus : 1);
            if (nic == 0 || per < nic)
                nic = per;
        }
    }
    if (nvl > 0)
        t->link_gbs[WHALE_LINK_NODE] = t->link_gbs[WHALE_LINK_NVL] = nvl;
    if (nic > 0) {
        t->link_gbs[WHALE_LINK_LEAF] = nic;
        t->link_gbs[WHALE_LINK_SPINE] = nic / 2;
        t->link_gbs[WHALE_LINK_CORE] = nic / 4;
    }
    for (int k = 0; k < WHALE_LINK_NCLASS; k++)
        if (c->link_gbs[k] > 0)
            t->link_gbs[k] = c->link_gbs[k];
    if ((rc = whale_topo_finalize(t)))
        goto fail;
    *out = t;
    return 0;
fail:
    if (rc == WHALE_EINVAL)
        rc = WHALE_ECONF;
    whale_topo_free(t);
    return rc;
}
