/* Prices in whale.conf: PricePerNodeHour= or PricePerGPUHour= on NodeName
 * lines, for the cost figures of whale-train's summary, whale-report and
 * whale-plan --tokens (whale.conf(5), "Cost"). */
#include "whale/conf.h"
#include "whale/error.h"
#include "whale/kv.h"
#include "whale/log.h"
#include "conf_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int one_price(const struct whale_kv_line *l, const struct whale_kv *kv, double *out)
{
    const char *s = kv->value;
    if (*s == '$')
        s++; /* "$32.77" reads as naturally as "32.77" */
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0 || v > 1e6) {
        whale_error("%s:%d: %s=%s: expected a price in dollars per hour, 0..1000000 "
                    "(e.g. %s=32.77)", l->file, l->line, kv->key, kv->value, kv->key);
        return WHALE_ECONF;
    }
    *out = v;
    return 0;
}

int conf_parse_price(const struct whale_kv_line *l, double *node_hour, double *gpu_hour)
{
    const struct whale_kv *n = whale_kv_find(l, "PricePerNodeHour");
    const struct whale_kv *g = whale_kv_find(l, "PricePerGPUHour");
    if (n && g) {
        whale_error("%s:%d: PricePerNodeHour= and PricePerGPUHour= on one line: give one of "
                    "them", l->file, l->line);
        return WHALE_ECONF;
    }
    int rc = 0;
    if (n && !(rc = one_price(l, n, node_hour)))
        *gpu_hour = -1;
    if (g && !(rc = one_price(l, g, gpu_hour)))
        *node_hour = -1;
    return rc;
}

static double nodeset_price(const struct whale_conf_nodeset *s)
{
    if (s->price_node_hour >= 0)
        return s->price_node_hour;
    if (s->price_gpu_hour >= 0)
        return s->gpus > 0 ? s->price_gpu_hour * s->gpus : 0;
    return -1;
}

static bool lists(const struct whale_conf_nodeset *s, const char *node)
{
    char **names = NULL;
    int n = 0;
    bool hit = false;
    if (!s->hosts || whale_hostlist_expand(s->hosts, &names, &n))
        return false;
    for (int i = 0; i < n; i++) {
        hit |= !strcmp(names[i], node);
        free(names[i]);
    }
    free(names);
    return hit;
}

int whale_conf_price_per_hour(const struct whale_conf *c, const char *const *nodes, int n,
                              double *usd_per_hour, int *priced)
{
    if (!c || n < 0 || (n > 0 && !nodes) || !usd_per_hour)
        return WHALE_EINVAL;
    double sum = 0;
    int np = 0;
    for (int i = 0; i < n; i++) {
        const struct whale_conf_nodeset *hit = &c->node_default;
        for (int k = c->nnodesets - 1; k >= 0; k--) /* the last line naming it wins */
            if (lists(&c->nodesets[k], nodes[i])) {
                hit = &c->nodesets[k];
                break;
            }
        double p = nodeset_price(hit);
        if (p >= 0) {
            sum += p;
            np++;
        }
    }
    *usd_per_hour = sum;
    if (priced)
        *priced = np;
    return 0;
}
