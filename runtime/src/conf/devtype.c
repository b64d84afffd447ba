/* Device types from Slurm's own description of a node: whale.conf's
 * DeviceTypeFromFeature= (a node feature, "a100") and DeviceTypeFromGres=
 * (the type of a gpu GRES, "gpu:a100:4") name the GPU type of nodes that
 * no NodeName line types, so a mixed allocation forms the right node
 * groups for the planner without a line per node. The features and GRES
 * strings come from slurmctld through the plugin; they are parsed with
 * bounds and never trusted to be well formed. */
#include "whale/conf.h"
#include "whale/error.h"
#include "whale/log.h"
#include "conf_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Longest feature, GRES type or device type name accepted. */
#define DEVMAP_NAME_MAX 63
/* Longest features / GRES string of one node looked at. */
#define DEVMAP_INPUT_MAX 8192

static bool name_ok(const char *s, size_t n)
{
    if (n < 1 || n > DEVMAP_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("_.+-", s[i]))
            return false;
    return true;
}

int conf_parse_devmap(const struct whale_kv_line *l, const struct whale_kv *kv,
                      struct whale_conf_devmap **arr, int *n)
{
    const char *p = kv->value;
    if (!*p)
        goto bad;
    while (*p) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (!colon || !name_ok(p, (size_t)(colon - p)) ||
            !name_ok(colon + 1, (size_t)(end - colon - 1)))
            goto bad;
        for (int i = 0; i < *n; i++)
            if (strlen((*arr)[i].from) == (size_t)(colon - p) &&
                !strncasecmp((*arr)[i].from, p, (size_t)(colon - p))) {
                whale_error("%s:%d: %s: '%.*s' is mapped twice (first on line %d)", l->file,
                            l->line, kv->key, (int)(colon - p), p, (*arr)[i].line);
                return WHALE_ECONF;
            }
        struct whale_conf_devmap *na = realloc(*arr, (size_t)(*n + 1) * sizeof *na);
        if (!na)
            return WHALE_ENOMEM;
        *arr = na;
        struct whale_conf_devmap *m = &na[*n];
        m->from = strndup(p, (size_t)(colon - p));
        m->type = strndup(colon + 1, (size_t)(end - colon - 1));
        m->line = l->line;
        if (!m->from || !m->type) {
            free(m->from);
            free(m->type);
            return WHALE_ENOMEM;
        }
        (*n)++;
        p = comma ? comma + 1 : end;
        if (comma && !*p)
            goto bad;
    }
    return 0;
bad:
    whale_error("%s:%d: %s=%s: expected NAME:TYPE[,NAME:TYPE...] (names of 1..%d letters, "
                "digits and _.+-; TYPE a GPUType line or a device the planner knows, such as "
                "A100-80GB)", l->file, l->line, kv->key, kv->value, DEVMAP_NAME_MAX);
    return WHALE_ECONF;
}

void conf_devmap_free(struct whale_conf_devmap *arr, int n)
{
    for (int i = 0; i < n; i++) {
        free(arr[i].from);
        free(arr[i].type);
    }
    free(arr);
}

static const struct whale_conf_devmap *devmap_find(const struct whale_conf_devmap *arr, int n,
                                                   const char *s, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(arr[i].from) == len && !strncasecmp(arr[i].from, s, len))
            return &arr[i];
    return NULL;
}

/* One GRES item "gpu:TYPE:COUNT(S:0-1)" (or "gpu:COUNT", "gpu"): the
 * mapped type of a gpu item and its count (0: not given). */
static const struct whale_conf_devmap *gres_item(const struct whale_conf *c, const char *s,
                                                 size_t len, int *count)
{
    const char *paren = memchr(s, '(', len);
    if (paren)
        len = (size_t)(paren - s);
    if (len < 4 || strncasecmp(s, "gpu:", 4))
        return NULL;
    s += 4;
    len -= 4;
    const char *colon = memchr(s, ':', len);
    if (!colon)
        return NULL; /* "gpu:4": no type */
    const struct whale_conf_devmap *m = devmap_find(c->gres_types, c->ngres_types, s,
                                                    (size_t)(colon - s));
    if (!m)
        return NULL;
    char num[16];
    size_t nl = len - (size_t)(colon - s) - 1;
    *count = 0;
    if (nl > 0 && nl < sizeof num) {
        memcpy(num, colon + 1, nl);
        num[nl] = 0;
        char *end;
        errno = 0;
        long v = strtol(num, &end, 10);
        if (!errno && end != num && !*end && v > 0 && v <= 1 << 16)
            *count = (int)v;
    }
    return m;
}

const char *whale_conf_device_type(const struct whale_conf *c, const char *features,
                                   const char *gres, int *gpus, int *line)
{
    *gpus = 0;
    if (line)
        *line = 0;
    if (!c)
        return NULL;
    if (features && c->nfeature_types && strnlen(features, DEVMAP_INPUT_MAX) < DEVMAP_INPUT_MAX) {
        for (const char *p = features; *p;) {
            size_t n = strcspn(p, ",");
            const struct whale_conf_devmap *m = devmap_find(c->feature_types,
                                                            c->nfeature_types, p, n);
            if (m) {
                if (line)
                    *line = m->line;
                /* the count, when a GRES of the same type gives one */
                int cnt = 0;
                if (gres && strnlen(gres, DEVMAP_INPUT_MAX) < DEVMAP_INPUT_MAX)
                    for (const char *q = gres; *q;) {
                        size_t k = strcspn(q, ",");
                        const struct whale_conf_devmap *g = gres_item(c, q, k, &cnt);
                        if (g && !strcasecmp(g->type, m->type)) {
                            *gpus = cnt;
                            break;
                        }
                        q += k + (q[k] == ',');
                    }
                return m->type;
            }
            p += n + (p[n] == ',');
        }
    }
    if (gres && c->ngres_types && strnlen(gres, DEVMAP_INPUT_MAX) < DEVMAP_INPUT_MAX) {
        /* "(S:0,1)" may hold commas: items end at a comma outside parentheses */
        for (const char *p = gres; *p;) {
            size_t n = 0;
            int depth = 0;
            while (p[n] && (depth > 0 || p[n] != ',')) {
                depth += p[n] == '(' ? 1 : p[n] == ')' && depth > 0 ? -1 : 0;
                n++;
            }
            int cnt = 0;
            const struct whale_conf_devmap *m = gres_item(c, p, n, &cnt);
            if (m) {
                *gpus = cnt;
                if (line)
                    *line = m->line;
                return m->type;
            }
            p += n + (p[n] == ',');
        }
    }
    return NULL;
}

int whale_conf_topo_set_device(struct whale_topo *t, int node, const char *type, int gpus)
{
    if (!t || node < 0 || node >= t->nnodes || !type)
        return WHALE_EINVAL;
    struct whale_topo_node *n = &t->nodes[node];
    if (n->gpu_type >= 0)
        return 0; /* a NodeName line typed it: the site's word wins */
    int g = whale_topo_find_gpu_type(t, type);
    if (g < 0 && (g = whale_topo_add_gpu_type(t, type, 0, 0, 0)) < 0)
        return g;
    n->gpu_type = g;
    if (n->gpus <= 0 && gpus > 0)
        n->gpus = gpus;
    return 1;
}
