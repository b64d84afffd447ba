/* whale.conf: Slurm-style Key=Value lines. Object lines start with
 * NodeName=, GPUType= or NVLinkDomain=; all other lines hold globals. */
#include "whale/conf.h"
#include "whale/error.h"
#include "whale/kv.h"
#include "whale/log.h"
#include "whale/nameidx.h"
#include "conf_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const global_keys[] = {
    "TopologyFile", "DefaultMap", "MaxSpares", "MaxTP", "MaxPP", "MaxDP", "MaxMicrobatch",
    "MaxZero", "MinCkptEvery", "CheckpointRoot", "CkptKeep", "CkptMilestoneEvery",
    "AllowedOffload", "AllowedRecompute",
    "AllowUserConfig", "SetCudaVisibleDevices", "SetUCXNetDevices", "SetNCCLEnv",
    "LinkBandwidth", "DeviceTypeFromFeature", "DeviceTypeFromGres", NULL
};
static const char *const node_keys[] = { "NodeName", "GPUs", "Cores", "GPUType", "NICs",
                                         "NICBandwidth", "PricePerNodeHour",
                                         "PricePerGPUHour", NULL };
static const char *const gpu_keys[] = { "GPUType", "PeakTFLOPS", "Memory", "NVLinkBandwidth",
                                        NULL };
static const char *const domain_keys[] = { "NVLinkDomain", "Nodes", NULL };

/* Case-insensitive edit distance, for "did you mean" hints. */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 40 || lb > 40)
        return 99;
    int d[41][41];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int m = d[i - 1][j - 1] + c;
            if (d[i - 1][j] + 1 < m)
                m = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < m)
                m = d[i][j - 1] + 1;
            d[i][j] = m;
        }
    return d[la][lb];
}

int conf_check_keys(const struct whale_kv_line *l, const char *const *allowed, const char *what)
{
    for (int i = 0; i < l->n; i++) {
        const char *k = l->kv[i].key;
        int ok = 0;
        for (int a = 0; allowed[a]; a++)
            if (!strcasecmp(k, allowed[a]))
                ok = 1;
        if (!ok) {
            const char *best = NULL;
            int bd = 3;
            for (int a = 0; allowed[a]; a++) {
                int d = edit_distance(k, allowed[a]);
                size_t la = strlen(allowed[a]);
                /* "GPUsPerNode" for "GPUs": a known key as prefix is a good hint too */
                if (d >= bd && la >= 3 && !strncasecmp(k, allowed[a], la))
                    d = bd - 1;
                if (d < bd) {
                    bd = d;
                    best = allowed[a];
                }
            }
            if (best)
                whale_error("%s:%d: unknown key '" WHALE_KV_ECHO_FMT "' in %s (did you mean "
                            "'%s'?)", l->file, l->line, WHALE_KV_ECHO_ARG(k), what, best);
            else
                whale_error("%s:%d: unknown key '" WHALE_KV_ECHO_FMT "' in %s", l->file, l->line,
                            WHALE_KV_ECHO_ARG(k), what);
            return WHALE_ECONF;
        }
        for (int j = 0; j < i; j++)
            if (!strcasecmp(k, l->kv[j].key)) {
                whale_error("%s:%d: key '" WHALE_KV_ECHO_FMT "' given twice on one line", l->file,
                            l->line, WHALE_KV_ECHO_ARG(k));
                return WHALE_ECONF;
            }
    }
    return 0;
}

/* "400", "400Gb", "400Gb/s", "50GB", "50GB/s" -> GB/s; a bare number is in
 * the default unit (bits_default: Gb/s, else GB/s). */
int conf_parse_bandwidth(const struct whale_kv_line *l, const struct whale_kv *kv,
                         bool bits_default, double *gbs)
{
    char *end;
    errno = 0;
    double v = strtod(kv->value, &end);
    if (end == kv->value || errno || !isfinite(v) || v <= 0)
        goto bad;
    bool bits = bits_default;
    if (*end) {
        if (!strcmp(end, "Gb") || !strcmp(end, "Gb/s") || !strcasecmp(end, "Gbps"))
            bits = true;
        else if (!strcmp(end, "GB") || !strcmp(end, "GB/s") || !strcmp(end, "GBps"))
            bits = false;
        else
            goto bad;
    }
    *gbs = bits ? v / 8.0 : v;
    return 0;
bad:
    whale_error("%s:%d: %s=" WHALE_KV_ECHO_FMT ": expected a positive bandwidth such as 400Gb or "
                "50GB (GB/s), bare numbers are %s",
                l->file, l->line, kv->key, WHALE_KV_ECHO_ARG(kv->value),
                bits_default ? "Gb/s" : "GB/s");
    return WHALE_ECONF;
}

static int parse_gib(const struct whale_kv_line *l, const struct whale_kv *kv, double *gib)
{
    char *end;
    errno = 0;
    double v = strtod(kv->value, &end);
    if (end == kv->value || errno || !isfinite(v) || v <= 0)
        goto bad;
    if (!*end || !strcasecmp(end, "G") || !strcasecmp(end, "GB") || !strcasecmp(end, "GiB"))
        *gib = v;
    else if (!strcasecmp(end, "T") || !strcasecmp(end, "TB") || !strcasecmp(end, "TiB"))
        *gib = v * 1024;
    else if (!strcasecmp(end, "M") || !strcasecmp(end, "MB") || !strcasecmp(end, "MiB"))
        *gib = v / 1024;
    else
        goto bad;
    return 0;
bad:
    whale_error("%s:%d: %s=" WHALE_KV_ECHO_FMT ": expected a memory size such as 80G", l->file,
                l->line, kv->key, WHALE_KV_ECHO_ARG(kv->value));
    return WHALE_ECONF;
}

static int get_int(const struct whale_kv_line *l, const char *key, long min, long max, int *out)
{
    const struct whale_kv *kv = whale_kv_find(l, key);
    if (!kv)
        return 0;
    long v;
    int rc = whale_kv_to_long(l, kv, min, max, false, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

static int get_bool(const struct whale_kv_line *l, const char *key, bool *out)
{
    const struct whale_kv *kv = whale_kv_find(l, key);
    return kv ? whale_kv_to_bool(l, kv, out) : 0;
}

static int set_str(char **dst, const char *v)
{
    char *s = strdup(v);
    if (!s)
        return WHALE_ENOMEM;
    free(*dst);
    *dst = s;
    return 0;
}

/* "a,b,c" of names from tab (parse fn) -> bit set */
static int parse_name_set(const struct whale_kv_line *l, const struct whale_kv *kv,
                          int (*parse)(const char *, int *), const char *allowed, unsigned *bits)
{
    char *dup = strdup(kv->value), *save = NULL;
    if (!dup)
        return WHALE_ENOMEM;
    unsigned b = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int v;
        if (parse(tok, &v)) {
            whale_error("%s:%d: %s=" WHALE_KV_ECHO_FMT ": '" WHALE_KV_ECHO_FMT "' is not one of %s",
                        l->file, l->line, kv->key, WHALE_KV_ECHO_ARG(kv->value),
                        WHALE_KV_ECHO_ARG(tok), allowed);
            free(dup);
            return WHALE_ECONF;
        }
        b |= 1u << v;
    }
    free(dup);
    *bits = b;
    return 0;
}

static int parse_offload_int(const char *s, int *v)
{
    enum whale_offload o;
    int rc = whale_offload_parse(s, &o);
    *v = (int)o;
    return rc;
}

static int parse_recompute_int(const char *s, int *v)
{
    enum whale_recompute r;
    int rc = whale_recompute_parse(s, &r);
    *v = (int)r;
    return rc;
}

/* "node:450,nvl:900,leaf:50,spine:25,core:12.5" (GB/s per rank) */
static int parse_link_bw(const struct whale_kv_line *l, const struct whale_kv *kv, double *gbs)
{
    char *dup = strdup(kv->value), *save = NULL;
    if (!dup)
        return WHALE_ENOMEM;
    int rc = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        int cls = -1;
        if (colon) {
            *colon = '\0';
            for (int k = 0; k < WHALE_LINK_NCLASS; k++)
                if (!strcasecmp(tok, whale_link_class_name(k)))
                    cls = k;
        }
        char *end = NULL;
        double v = colon ? strtod(colon + 1, &end) : 0;
        if (cls < 0 || !end || end == colon + 1 || *end || !(v > 0) || !isfinite(v)) {
            whale_error("%s:%d: LinkBandwidth=%s: expected class:GB/s pairs with class one of "
                        "node, nvl, leaf, spine, core (e.g. leaf:50,spine:25)",
                        l->file, l->line, kv->value);
            rc = WHALE_ECONF;
        } else {
            gbs[cls] = v;
        }
    }
    free(dup);
    return rc;
}

static int check_hostlist(const struct whale_kv_line *l, const struct whale_kv *kv, long *budget)
{
    int n = conf_hostlist_count(kv->value, budget);
    if (n > 0)
        return 0;
    return conf_hostlist_error(l->file, l->line, kv->key, kv->value, n ? n : WHALE_EINVAL, budget);
}

static void nodeset_clear(struct whale_conf_nodeset *n)
{
    free(n->hosts);
    free(n->gpu_type);
    for (int i = 0; i < n->nnics; i++)
        free(n->nics[i]);
    free(n->nics);
    memset(n, 0, sizeof *n);
    n->gpus = n->cores = n->nnics = -1;
    n->nic_gbs = -1;
    n->price_node_hour = n->price_gpu_hour = -1;
}

/* Room for element n of *arr: doubles at powers of two, so n lines cost
 * O(n) copies (a realloc per line was O(n^2) under ASan, whose realloc
 * always copies). */
static int conf_room(void **arr, int n, size_t elem)
{
    if (n > 0 && (n < 16 || (n & (n - 1))))
        return 0;
    size_t cap = n < 16 ? 16 : (size_t)n * 2;
    void *p = realloc(*arr, cap * elem);
    if (!p)
        return WHALE_ENOMEM;
    *arr = p;
    return 0;
}

/* Per-parse state: name maps for the GPUType and NVLinkDomain duplicate
 * checks (a linear search per line was O(n^2) on long files). */
struct conf_parse {
    struct whale_conf *c;
    struct whale_nameidx gpus, domains;
    long host_budget; /* hosts this file's hostlists may still expand to */
};

static int parse_node_line(struct conf_parse *cp, const struct whale_kv_line *l)
{
    struct whale_conf *c = cp->c;
    int rc = conf_check_keys(l, node_keys, "a NodeName line");
    if (rc)
        return rc;
    const struct whale_kv *name = whale_kv_find(l, "NodeName");
    bool is_default = !strcasecmp(name->value, "DEFAULT");
    if (!is_default && (rc = check_hostlist(l, name, &cp->host_budget)))
        return rc;
    /* start from the DEFAULT line (as slurm.conf does) */
    struct whale_conf_nodeset ns;
    memset(&ns, 0, sizeof ns);
    nodeset_clear(&ns);
    if (!is_default) {
        const struct whale_conf_nodeset *d = &c->node_default;
        ns.gpus = d->gpus;
        ns.cores = d->cores;
        ns.nic_gbs = d->nic_gbs;
        ns.price_node_hour = d->price_node_hour;
        ns.price_gpu_hour = d->price_gpu_hour;
        if (d->gpu_type && !(ns.gpu_type = strdup(d->gpu_type)))
            return WHALE_ENOMEM;
        if (d->nnics > 0) {
            ns.nics = calloc((size_t)d->nnics, sizeof(char *));
            if (!ns.nics)
                return WHALE_ENOMEM;
            for (int i = 0; i < d->nnics; i++)
                if (!(ns.nics[i] = strdup(d->nics[i]))) {
                    ns.nnics = i;
                    nodeset_clear(&ns);
                    return WHALE_ENOMEM;
                }
            ns.nnics = d->nnics;
        }
    }
    ns.line = l->line;
    if ((rc = get_int(l, "GPUs", 0, 1024, &ns.gpus)) || (rc = get_int(l, "Cores", 1, 1 << 20, &ns.cores)))
        goto fail;
    const struct whale_kv *kv;
    if ((kv = whale_kv_find(l, "GPUType")) && (rc = set_str(&ns.gpu_type, kv->value)))
        goto fail;
    if ((rc = conf_parse_price(l, &ns.price_node_hour, &ns.price_gpu_hour)))
        goto fail;
    if ((kv = whale_kv_find(l, "NICBandwidth")) && (rc = conf_parse_bandwidth(l, kv, true, &ns.nic_gbs)))
        goto fail;
    if ((kv = whale_kv_find(l, "NICs"))) {
        for (int i = 0; i < ns.nnics; i++)
            free(ns.nics[i]);
        free(ns.nics);
        ns.nics = NULL;
        ns.nnics = 0;
        if ((rc = conf_expand_names(kv->value, &ns.nics, &ns.nnics))) {
            if (rc == WHALE_EINVAL) {
                whale_error("%s:%d: NICs=%s: expected names like mlx5_[0-7]:1 or eth0,eth1",
                            l->file, l->line, kv->value);
                rc = WHALE_ECONF;
            }
            goto fail;
        }
    }
    if (ns.gpus == 0 && ns.gpu_type && !whale_kv_find(l, "GPUType")) {
        free(ns.gpu_type); /* inherited from DEFAULT by CPU-only nodes */
        ns.gpu_type = NULL;
    }
    if (ns.gpu_type && ns.gpus == 0) {
        whale_error("%s:%d: GPUType=%s given for nodes with GPUs=0", l->file, l->line, ns.gpu_type);
        rc = WHALE_ECONF;
        goto fail;
    }
    if (is_default) {
        nodeset_clear(&c->node_default);
        c->node_default = ns;
        if (!(c->node_default.hosts = strdup("DEFAULT")))
            return WHALE_ENOMEM;
        return 0;
    }
    if ((rc = set_str(&ns.hosts, name->value)))
        goto fail;
    struct whale_conf_nodeset *p = conf_room((void **)&c->nodesets, c->nnodesets, sizeof *p)
                                       ? NULL : c->nodesets;
    if (!p) {
        rc = WHALE_ENOMEM;
        goto fail;
    }
    c->nodesets = p;
    c->nodesets[c->nnodesets++] = ns;
    return 0;
fail:
    nodeset_clear(&ns);
    return rc;
}

static int parse_gpu_line(struct conf_parse *cp, const struct whale_kv_line *l)
{
    struct whale_conf *c = cp->c;
    int rc = conf_check_keys(l, gpu_keys, "a GPUType line");
    if (rc)
        return rc;
    struct whale_gpu_type g = { 0 };
    const struct whale_kv *kv = whale_kv_find(l, "GPUType");
    if (whale_nameidx_find(&cp->gpus, kv->value) >= 0) {
        whale_error("%s:%d: GPUType=%s is defined twice", l->file, l->line, kv->value);
        return WHALE_ECONF;
    }
    if ((kv = whale_kv_find(l, "PeakTFLOPS")) &&
        (rc = whale_kv_to_double(l, kv, 1e-3, 1e6, &g.peak_tflops)))
        return rc;
    if ((kv = whale_kv_find(l, "Memory")) && (rc = parse_gib(l, kv, &g.mem_gib)))
        return rc;
    if ((kv = whale_kv_find(l, "NVLinkBandwidth")) &&
        (rc = conf_parse_bandwidth(l, kv, false, &g.nvlink_gbs)))
        return rc;
    if (!(g.name = strdup(whale_kv_find(l, "GPUType")->value)))
        return WHALE_ENOMEM;
    if (conf_room((void **)&c->gpu_types, c->ngpu_types, sizeof *c->gpu_types)) {
        free(g.name);
        return WHALE_ENOMEM;
    }
    c->gpu_types[c->ngpu_types] = g;
    /* the map points at the name the array owns */
    return whale_nameidx_add(&cp->gpus, g.name, c->ngpu_types++);
}

static int parse_domain_line(struct conf_parse *cp, const struct whale_kv_line *l)
{
    struct whale_conf *c = cp->c;
    int rc = conf_check_keys(l, domain_keys, "an NVLinkDomain line");
    if (rc)
        return rc;
    const struct whale_kv *name = whale_kv_find(l, "NVLinkDomain");
    const struct whale_kv *nodes = whale_kv_find(l, "Nodes");
    if (!nodes) {
        whale_error("%s:%d: NVLinkDomain=%s needs Nodes=<hostlist>", l->file, l->line,
                    name->value);
        return WHALE_ECONF;
    }
    if ((rc = check_hostlist(l, nodes, &cp->host_budget)))
        return rc;
    if (whale_nameidx_find(&cp->domains, name->value) >= 0) {
        whale_error("%s:%d: NVLinkDomain=%s is defined twice", l->file, l->line, name->value);
        return WHALE_ECONF;
    }
    if (conf_room((void **)&c->domains, c->ndomains, sizeof *c->domains))
        return WHALE_ENOMEM;
    struct whale_conf_domain *d = &c->domains[c->ndomains];
    d->name = strdup(name->value);
    d->hosts = strdup(nodes->value);
    d->line = l->line;
    if (!d->name || !d->hosts) {
        free(d->name);
        free(d->hosts);
        return WHALE_ENOMEM;
    }
    return whale_nameidx_add(&cp->domains, d->name, c->ndomains++);
}

static int parse_global_line(struct whale_conf *c, const struct whale_kv_line *l)
{
    int rc = conf_check_keys(l, global_keys, "the global settings");
    if (rc)
        return rc;
    const struct whale_kv *kv;
    if ((kv = whale_kv_find(l, "TopologyFile"))) {
        if ((rc = set_str(&c->topology_file, kv->value)))
            return rc;
        c->topology_file_set = true;
    }
    if ((kv = whale_kv_find(l, "DefaultMap")) && whale_map_policy_parse(kv->value, &c->default_map)) {
        whale_error("%s:%d: DefaultMap=%s: expected topo or block", l->file, l->line, kv->value);
        return WHALE_ECONF;
    }
    /* where each limit was set, for the messages that refuse a value */
    for (int i = 0; i < WHALE_LIMIT_N; i++)
        if (whale_kv_find(l, whale_conf_limit_key((enum whale_conf_limit)i)))
            c->limit_line[i] = l->line;
    if ((rc = get_int(l, "MaxSpares", 0, 1 << 20, &c->max_spares)) ||
        (rc = get_int(l, "MaxTP", 1, 1 << 20, &c->max_tp)) ||
        (rc = get_int(l, "MaxPP", 1, 1 << 20, &c->max_pp)) ||
        (rc = get_int(l, "MaxDP", 1, 1 << 24, &c->max_dp)) ||
        (rc = get_int(l, "MaxMicrobatch", 1, 1 << 20, &c->max_microbatch)) ||
        (rc = get_int(l, "MaxZero", 0, 3, &c->max_zero)) ||
        (rc = get_int(l, "MinCkptEvery", 0, 1 << 30, &c->min_ckpt_every)) ||
        (rc = get_int(l, "CkptKeep", 0, 1000000, &c->ckpt_keep)) ||
        (rc = get_int(l, "CkptMilestoneEvery", 0, 1 << 30, &c->ckpt_milestone_every)))
        return rc;
    if ((kv = whale_kv_find(l, "CheckpointRoot"))) {
        if (kv->value[0] != '/') {
            whale_error("%s:%d: CheckpointRoot=%s: must be an absolute path", l->file, l->line,
                        kv->value);
            return WHALE_ECONF;
        }
        if ((rc = set_str(&c->checkpoint_root, kv->value)))
            return rc;
    }
    if ((kv = whale_kv_find(l, "AllowedOffload")) &&
        (rc = parse_name_set(l, kv, parse_offload_int, "none, optimizer, params",
                             &c->allowed_offload)))
        return rc;
    if ((kv = whale_kv_find(l, "AllowedRecompute")) &&
        (rc = parse_name_set(l, kv, parse_recompute_int, "none, selective, full, auto",
                             &c->allowed_recompute)))
        return rc;
    if ((rc = get_bool(l, "AllowUserConfig", &c->allow_user_config)) ||
        (rc = get_bool(l, "SetCudaVisibleDevices", &c->set_cuda_visible_devices)) ||
        (rc = get_bool(l, "SetUCXNetDevices", &c->set_ucx_net_devices)) ||
        (rc = get_bool(l, "SetNCCLEnv", &c->set_nccl_env)))
        return rc;
    if ((kv = whale_kv_find(l, "LinkBandwidth")) && (rc = parse_link_bw(l, kv, c->link_gbs)))
        return rc;
    if ((kv = whale_kv_find(l, "DeviceTypeFromFeature")) &&
        (rc = conf_parse_devmap(l, kv, &c->feature_types, &c->nfeature_types)))
        return rc;
    if ((kv = whale_kv_find(l, "DeviceTypeFromGres")) &&
        (rc = conf_parse_devmap(l, kv, &c->gres_types, &c->ngres_types)))
        return rc;
    return 0;
}

static int conf_line(const struct whale_kv_line *l, void *user)
{
    struct conf_parse *cp = user;
    struct whale_conf *c = cp->c;
    const char *first = l->kv[0].key;
    if (!strcasecmp(first, "NodeName"))
        return parse_node_line(cp, l);
    if (!strcasecmp(first, "GPUType") && l->n > 1)
        return parse_gpu_line(cp, l);
    if (!strcasecmp(first, "GPUType")) {
        whale_error("%s:%d: GPUType=%s alone: a GPUType line defines a GPU (PeakTFLOPS=, "
                    "Memory=, NVLinkBandwidth=); to give a node its GPU type put GPUType= on "
                    "its NodeName line",
                    l->file, l->line, l->kv[0].value);
        return WHALE_ECONF;
    }
    if (!strcasecmp(first, "NVLinkDomain"))
        return parse_domain_line(cp, l);
    for (int i = 1; i < l->n; i++) {
        const char *k = l->kv[i].key;
        if (!strcasecmp(k, "NodeName") || !strcasecmp(k, "NVLinkDomain")) {
            whale_error("%s:%d: %s= must be the first key of its line", l->file, l->line, k);
            return WHALE_ECONF;
        }
    }
    return parse_global_line(c, l);
}

struct whale_conf *whale_conf_defaults(void)
{
    struct whale_conf *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->default_map = WHALE_MAP_TOPO;
    c->max_spares = -1;
    c->ckpt_keep = -1;
    c->max_tp = c->max_pp = c->max_dp = c->max_microbatch = 0; /* 0: no site limit */
    c->max_zero = 3;
    c->allowed_offload = (1u << WHALE_OFFLOAD_NONE) | (1u << WHALE_OFFLOAD_OPTIMIZER) |
                         (1u << WHALE_OFFLOAD_PARAMS);
    c->allowed_recompute = (1u << WHALE_RECOMPUTE_NONE) | (1u << WHALE_RECOMPUTE_SELECTIVE) |
                           (1u << WHALE_RECOMPUTE_FULL) | (1u << WHALE_RECOMPUTE_AUTO) |
                           (1u << WHALE_RECOMPUTE_LAYERS);
    c->set_cuda_visible_devices = true;
    c->set_ucx_net_devices = true;
    c->set_nccl_env = true;
    nodeset_clear(&c->node_default);
    return c;
}

/* Cross-line checks: GPU types referenced by nodes exist. */
static int conf_validate(struct conf_parse *cp)
{
    struct whale_conf *c = cp->c;
    for (int i = -1; i < c->nnodesets; i++) {
        const struct whale_conf_nodeset *n = i < 0 ? &c->node_default : &c->nodesets[i];
        if (!n->gpu_type)
            continue;
        if (whale_nameidx_find(&cp->gpus, n->gpu_type) < 0) {
            whale_error("%s:%d: GPUType=%s is not defined by a GPUType=%s line", c->path, n->line,
                        n->gpu_type, n->gpu_type);
            return WHALE_ECONF;
        }
    }
    return 0;
}

static int conf_finish(struct conf_parse *cp, int rc, struct whale_conf **out)
{
    struct whale_conf *c = cp->c;
    if (!rc)
        rc = conf_validate(cp);
    whale_nameidx_free(&cp->gpus);
    whale_nameidx_free(&cp->domains);
    if (rc) {
        whale_conf_free(c);
        *out = NULL;
        return rc;
    }
    *out = c;
    return 0;
}

int whale_conf_load(const char *path, struct whale_conf **out)
{
    *out = NULL;
    struct whale_conf *c = whale_conf_defaults();
    if (!c || !(c->path = strdup(path))) {
        whale_conf_free(c);
        return WHALE_ENOMEM;
    }
    struct conf_parse cp = { .c = c, .host_budget = CONF_MAX_HOSTS_FILE };
    int rc = whale_kv_parse_file(path, conf_line, &cp);
    return conf_finish(&cp, rc, out);
}

int whale_conf_parse_string(const char *text, const char *name, struct whale_conf **out)
{
    *out = NULL;
    struct whale_conf *c = whale_conf_defaults();
    if (!c || !(c->path = strdup(name ? name : "<string>"))) {
        whale_conf_free(c);
        return WHALE_ENOMEM;
    }
    struct conf_parse cp = { .c = c, .host_budget = CONF_MAX_HOSTS_FILE };
    int rc = whale_kv_parse_string(text, c->path, conf_line, &cp);
    return conf_finish(&cp, rc, out);
}

void whale_conf_free(struct whale_conf *c)
{
    if (!c)
        return;
    free(c->path);
    free(c->topology_file);
    free(c->checkpoint_root);
    for (int i = 0; i < c->nnodesets; i++)
        nodeset_clear(&c->nodesets[i]);
    free(c->nodesets);
    nodeset_clear(&c->node_default);
    for (int i = 0; i < c->ngpu_types; i++)
        free(c->gpu_types[i].name);
    free(c->gpu_types);
    conf_devmap_free(c->feature_types, c->nfeature_types);
    conf_devmap_free(c->gres_types, c->ngres_types);
    for (int i = 0; i < c->ndomains; i++) {
        free(c->domains[i].name);
        free(c->domains[i].hosts);
    }
    free(c->domains);
    free(c);
}

char *whale_conf_expand_path(const char *pattern, const char *user, const char *jobid)
{
    size_t cap = strlen(pattern) + 1, len = 0;
    for (const char *p = pattern; *p; p++)
        if (*p == '%')
            cap += 64 + (user ? strlen(user) : 0) + (jobid ? strlen(jobid) : 0);
    char *s = malloc(cap);
    if (!s)
        return NULL;
    for (const char *p = pattern; *p; p++) {
        const char *ins = NULL;
        if (p[0] == '%' && p[1] == 'u')
            ins = user ? user : "unknown";
        else if (p[0] == '%' && p[1] == 'j')
            ins = jobid ? jobid : "0";
        else if (p[0] == '%' && p[1] == '%')
            ins = "%";
        if (ins) {
            size_t n = strlen(ins);
            memcpy(s + len, ins, n);
            len += n;
            p++;
        } else {
            s[len++] = *p;
        }
    }
    s[len] = '\0';
    return s;
}

char *whale_conf_topology_path(const struct whale_conf *c, const char *slurm_conf)
{
    if (c && c->topology_file) {
        if (!strcasecmp(c->topology_file, "none"))
            return NULL;
        /* relative to the directory of the whale.conf that names it */
        const char *slash = c->path ? strrchr(c->path, '/') : NULL;
        if (c->topology_file[0] == '/' || !slash)
            return strdup(c->topology_file);
        size_t dl = (size_t)(slash - c->path) + 1, fl = strlen(c->topology_file);
        char *p = malloc(dl + fl + 1);
        if (!p)
            return NULL;
        memcpy(p, c->path, dl);
        memcpy(p + dl, c->topology_file, fl + 1);
        return p;
    }
    const char *base = slurm_conf && *slurm_conf ? slurm_conf : "/etc/slurm/slurm.conf";
    const char *slash = strrchr(base, '/');
    size_t dlen = slash ? (size_t)(slash - base) : 1;
    char *s = malloc(dlen + sizeof "/topology.conf");
    if (!s)
        return NULL;
    if (slash)
        memcpy(s, base, dlen);
    else
        s[0] = '.';
    memcpy(s + dlen, "/topology.conf", sizeof "/topology.conf");
    return s;
}
