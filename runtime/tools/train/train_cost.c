/* The cost of a run (train_observe.h): price per hour of the step's nodes
 * from the flags or whale.conf, and dollars per million tokens and per 0.1
 * of loss. */
#define _GNU_SOURCE
#include "train_observe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/conf.h"
#include "whale/knobs.h"
#include "whale/log.h"

void train_cost_compute(double usd_per_hour, double wall_s, double tokens, double first_loss,
                        double last_loss, struct train_cost *c)
{
    c->usd = c->usd_per_mtok = c->usd_per_01_loss = -1;
    if (!(usd_per_hour >= 0) || !(wall_s >= 0))
        return;
    c->usd = usd_per_hour * wall_s / 3600.0;
    if (tokens > 0)
        c->usd_per_mtok = c->usd / (tokens / 1e6);
    /* per 0.1 of loss gained: only when the loss went down */
    double drop = first_loss - last_loss;
    if (isfinite(drop) && drop > 0)
        c->usd_per_01_loss = c->usd / (drop / 0.1);
}

/* The step's nodes: Slurm's SLURM_STEP_NODELIST (spare nodes included:
 * they are allocated and paid for), else this host (whale-run, a plain
 * start). */
static int step_nodes(char ***names, int *n)
{
    const char *nl = getenv("SLURM_STEP_NODELIST");
    if (!nl || !*nl)
        nl = getenv("SLURM_JOB_NODELIST");
    if (nl && *nl && !whale_hostlist_expand(nl, names, n))
        return 0;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    *names = calloc(1, sizeof(char *));
    if (!*names || !((*names)[0] = strdup(host))) {
        free(*names);
        return -1;
    }
    *n = 1;
    return 0;
}

double train_cost_price(const struct train_observe *o, char *src, size_t n)
{
    src[0] = '\0';
    if (o->price_node_hour >= 0) {
        snprintf(src, n, "$%g per node-hour x %d node%s", o->price_node_hour, o->nnodes,
                 o->nnodes == 1 ? "" : "s");
        return o->price_node_hour * o->nnodes;
    }
    if (o->price_gpu_hour >= 0) { /* one GPU per rank */
        snprintf(src, n, "$%g per GPU-hour x %d rank%s", o->price_gpu_hour, o->world,
                 o->world == 1 ? "" : "s");
        return o->price_gpu_hour * o->world;
    }
    const char *path = whale_knob_getenv("WHALE_CONF");
    if (!path || !*path)
        path = WHALE_CONF_DEFAULT_PATH;
    if (access(path, R_OK))
        return -1;
    struct whale_conf *c = NULL;
    if (whale_conf_load(path, &c)) {
        whale_warn("%s: cannot read prices from it (see above); no cost in the summary", path);
        return -1;
    }
    char **names = NULL;
    int nn = 0, priced = 0;
    double usd = -1;
    if (!step_nodes(&names, &nn) && !whale_conf_price_per_hour(c, (const char *const *)names, nn,
                                                               &usd, &priced) && priced > 0)
        snprintf(src, n, "%s: $%g per hour for %d node%s", path, usd, nn, nn == 1 ? "" : "s");
    else
        usd = -1;
    for (int i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    whale_conf_free(c);
    return usd;
}
