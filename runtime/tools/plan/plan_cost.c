/* whale-plan --train-tokens (plan_cost.h). */
#include "plan_cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "whale/conf.h"

static int conf_price(const struct plan_price *pr, double *usd, char *src, size_t n)
{
    struct whale_conf *c = NULL;
    char **names = NULL;
    int nn = 0, priced = 0, rc = 1;
    if (whale_conf_load(pr->conf, &c))
        return 1;
    if (whale_hostlist_expand(pr->nodelist, &names, &nn)) {
        fprintf(stderr, "whale-plan: --nodelist=%s: not a valid hostlist\n", pr->nodelist);
    } else if (!whale_conf_price_per_hour(c, (const char *const *)names, nn, usd, &priced) &&
               priced > 0) {
        snprintf(src, n, "%s: $%g per hour for %d node%s%s", pr->conf, *usd, nn, nn == 1 ? "" : "s",
                 priced < nn ? " (some without a price)" : "");
        rc = 0;
    } else {
        fprintf(stderr, "whale-plan: --train-tokens: %s gives no PricePerNodeHour= or "
                "PricePerGPUHour= for %s; give --price-per-node-hour or --price-per-gpu-hour\n",
                pr->conf, pr->nodelist);
    }
    for (int i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    whale_conf_free(c);
    return rc;
}

int plan_cost_compute(const struct whale_cluster *cl, const struct plan_price *pr,
                      double t_step, long batch, int seq, double train_tokens, struct plan_cost *out)
{
    memset(out, 0, sizeof *out);
    long nodes = 0, gpus = 0;
    for (int i = 0; i < cl->ngroups; i++) {
        nodes += cl->group[i].nodes;
        gpus += (long)cl->group[i].nodes * cl->group[i].gpus_per_node;
    }
    if (pr->node_hour >= 0) {
        out->usd_per_hour = pr->node_hour * nodes;
        snprintf(out->price, sizeof out->price, "$%g per node-hour x %ld node%s", pr->node_hour,
                 nodes, nodes == 1 ? "" : "s");
    } else if (pr->gpu_hour >= 0) {
        out->usd_per_hour = pr->gpu_hour * gpus;
        snprintf(out->price, sizeof out->price, "$%g per GPU-hour x %ld GPU%s", pr->gpu_hour, gpus,
                 gpus == 1 ? "" : "s");
    } else if (pr->conf && pr->nodelist) {
        if (conf_price(pr, &out->usd_per_hour, out->price, sizeof out->price))
            return 1;
    } else {
        fprintf(stderr, "whale-plan: --train-tokens needs a price: --price-per-node-hour X, "
                "--price-per-gpu-hour X, or --conf/--nodelist with PricePerNodeHour= in whale.conf\n");
        return 1;
    }
    double per_step = (double)batch * seq;
    out->steps = ceil(train_tokens / per_step);
    out->hours = out->steps * t_step / 3600.0;
    out->usd = out->usd_per_hour * out->hours;
    out->usd_per_mtok = out->usd / (out->steps * per_step / 1e6);
    return 0;
}

void plan_cost_print(FILE *f, double train_tokens, const struct plan_cost *c)
{
    fprintf(f, "cost: %.4g tokens = %.0f steps x %.4g s = %.4g hours at $%.4g per hour (%s): "
            "$%.*f, $%.4g per million tokens\n", train_tokens, c->steps,
            c->hours * 3600.0 / (c->steps > 0 ? c->steps : 1), c->hours, c->usd_per_hour, c->price,
            c->usd >= 100 ? 2 : 4, c->usd, c->usd_per_mtok);
}
