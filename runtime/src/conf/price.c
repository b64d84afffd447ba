/* Prices in whale.conf: PricePerNodeHour= or PricePerGPUHour= on NodeName
 * lines, for the cost figures of whale-train's summary, whale-report and
 * whale-plan --tokens (whale.conf(5), "Cost"). */
#include "whale/conf.h"
#include "whale/error.h"
#include "whale/kv.h"
#include "whale/log.h"
#include "whale/nameidx.h"
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
        whale_error("%s:%d: %s=" WHALE_KV_ECHO_FMT ": expected a price in dollars per hour, "
                    "0..1000000 (e.g. %s=32.77)", l->file, l->line, kv->key,
                    WHALE_KV_ECHO_ARG(kv->value), kv->key);
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

/* Which NodeName line prices each node: every line's hostlist expanded
 * once into one name map (a later line naming a node wins), instead of
 * expanding every line again for every node of the job, which was
 * O(nodes x names) for a 50,000-node job. */
struct price_lines {
    struct whale_nameidx ix; /* name -> nodeset index */
    char **names;             /* owned; the map points into them */
    int n, cap;
};

static int price_lines_keep(struct price_lines *pl, char *name, int set)
{
    if (whale_nameidx_find(&pl->ix, name) >= 0) {
        whale_nameidx_set(&pl->ix, name, set);
        free(name);
        return 0;
    }
    if (pl->n == pl->cap) {
        int nc = pl->cap ? pl->cap * 2 : 64;
        char **p = realloc(pl->names, (size_t)nc * sizeof *p);
        if (!p) {
            free(name);
            return WHALE_ENOMEM;
        }
        pl->names = p;
        pl->cap = nc;
    }
    pl->names[pl->n++] = name;
    return whale_nameidx_add(&pl->ix, name, set);
}

static void price_lines_free(struct price_lines *pl)
{
    whale_nameidx_free(&pl->ix);
    for (int i = 0; i < pl->n; i++)
        free(pl->names[i]);
    free(pl->names);
}

static int price_lines_build(const struct whale_conf *c, struct price_lines *pl)
{
    for (int k = 0; k < c->nnodesets; k++) {
        char **names = NULL;
        int n = 0;
        /* a line whose hostlist does not expand prices nothing, as before */
        if (!c->nodesets[k].hosts || whale_hostlist_expand(c->nodesets[k].hosts, &names, &n))
            continue;
        int rc = 0;
        for (int i = 0; i < n; i++)
            if (rc)
                free(names[i]);
            else
                rc = price_lines_keep(pl, names[i], k);
        free(names);
        if (rc)
            return rc;
    }
    return 0;
}

int whale_conf_price_per_hour(const struct whale_conf *c, const char *const *nodes, int n,
                              double *usd_per_hour, int *priced)
{
    if (!c || n < 0 || (n > 0 && !nodes) || !usd_per_hour)
        return WHALE_EINVAL;
    struct price_lines pl = { 0 };
    int rc = price_lines_build(c, &pl);
    if (rc) {
        price_lines_free(&pl);
        return rc;
    }
    double sum = 0;
    int np = 0;
    for (int i = 0; i < n; i++) {
        int k = whale_nameidx_find(&pl.ix, nodes[i]);
        const struct whale_conf_nodeset *hit = k >= 0 ? &c->nodesets[k] : &c->node_default;
        double p = nodeset_price(hit);
        if (p >= 0) {
            sum += p;
            np++;
        }
    }
    price_lines_free(&pl);
    *usd_per_hour = sum;
    if (priced)
        *priced = np;
    return 0;
}
