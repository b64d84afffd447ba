/* Algorithm choice: an alpha-beta(-gamma) cost model per link class.
 *
 * Every member of a group must pick the same algorithm for the same call,
 * so the inputs are only group structure, message size and the model
 * parameters, which rank 0 measures (or reads from WHALE_COLL_MODEL) and
 * broadcasts at init. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "whale/conf.h"
#include "whale/env.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/clock.h"

static const char *const algo_names[COMM_ALGO_COUNT_] = { "auto", "ring", "rd", "raben", "hier",
                                                          "tree", "shm" };
static const char *const coll_names[COMM_COLL_COUNT_] = { "allreduce", "reduce_scatter",
                                                          "allgather", "broadcast", "reduce",
                                                          "barrier", "alltoall" };

const char *comm_algo_name(int algo)
{
    return algo >= 0 && algo < COMM_ALGO_COUNT_ ? algo_names[algo] : "?";
}

const char *comm_coll_name(int coll)
{
    return coll >= 0 && coll < COMM_COLL_COUNT_ ? coll_names[coll] : "?";
}

int comm_algo_parse(const char *s)
{
    for (int i = 0; i < COMM_ALGO_COUNT_; i++)
        if (!strcasecmp(s, algo_names[i]))
            return i;
    if (!strcasecmp(s, "rabenseifner"))
        return COMM_ALGO_RABEN;
    if (!strcasecmp(s, "hierarchical"))
        return COMM_ALGO_HIER;
    if (!strcasecmp(s, "chain") || !strcasecmp(s, "pipeline"))
        return COMM_ALGO_RING;
    return -1;
}

int comm_link_class(const whale_group *g)
{
    return g->nnodes > 1 ? COMM_LINK_NET : COMM_LINK_SHM;
}

static bool is_pow2(int p) { return p > 0 && (p & (p - 1)) == 0; }

static int ilog2_ceil(int p)
{
    int k = 0;
    while ((1 << k) < p)
        k++;
    return k;
}

static int pow2_floor(int p)
{
    int q = 1;
    while (q * 2 <= p)
        q *= 2;
    return q;
}

/* The model as rank 0 broadcasts it: shm alpha, beta, net alpha, beta,
 * gamma, copy alpha, beta. */
#define MODEL_N 7

/* gamma: seconds per byte of reduction (shared by both link classes). */
static double g_gamma = 1.0 / 6e9;

void comm_set_gamma(double gamma) { g_gamma = gamma; }
double comm_get_gamma(void) { return g_gamma; }

static double ring_ar(int p, double n, struct comm_link l)
{
    return 2.0 * (p - 1) * l.alpha + 2.0 * (p - 1) / p * n * l.beta + (double)(p - 1) / p * n * g_gamma;
}

static double rd_ar(int p, double n, struct comm_link l)
{
    int p2 = pow2_floor(p);
    double c = ilog2_ceil(p2) * (l.alpha + n * l.beta + n * g_gamma);
    if (p != p2)
        c += 2.0 * (l.alpha + n * l.beta) + n * g_gamma;
    return c;
}

static double raben_ar(int p, double n, struct comm_link l)
{
    int p2 = pow2_floor(p);
    double c = 2.0 * ilog2_ceil(p2) * l.alpha + 2.0 * (p2 - 1) / p2 * n * l.beta +
               (double)(p2 - 1) / p2 * n * g_gamma;
    if (p != p2)
        c += 2.0 * (l.alpha + n * l.beta) + n * g_gamma;
    return c;
}

/* Through the group's shared segment (shm_coll.c): alpha per flag wait,
 * beta of a memcpy. Allreduce: one copy in, 1/p of the reduction, one copy
 * out, two waits (one below 16 KiB, where each member reduces it all);
 * reduce-scatter: copy in and reduce; allgather: copy in and out.
 * Below 16 KiB the p vectors a member reduces are in its cache: gamma (the
 * probe's rate, with operands larger than L3) priced that reduction 5-10x
 * too high, and on 4 ranks the model chose Rabenseifner (4 point-to-point
 * rounds) for 4 KiB: 73 us against 18 us for Open MPI at load 20, where
 * this path takes a single wait. In cache a reduction reads two operands
 * and writes one: about 1.5 copies of the (in-cache, measured) memcpy. */
static double shm_cost(const whale_group *g, int coll, double n)
{
    struct comm_link c = g->ctx->link[COMM_LINK_COPY];
    int p = g->size;
    switch (coll) {
    case COMM_ALLREDUCE:
        if (n <= 16384)
            return c.alpha + n * c.beta + (p - 1) * n * fmin(g_gamma, 1.5 * c.beta);
        return 2 * c.alpha + 2.0 * n * c.beta + (double)(p - 1) / p * n * g_gamma;
    case COMM_REDUCE_SCATTER: /* n = total bytes */
        return c.alpha + (double)(p - 1) / p * n * (c.beta + g_gamma);
    case COMM_ALLGATHER:
        return 2 * c.alpha + (1.0 + 1.0 / p) * n * c.beta;
    case COMM_ALLTOALL: /* n = total bytes; a2a_shm.c: copy in and out */
        return c.alpha + 2.0 * (p - 1) / p * n * c.beta;
    default:
        return INFINITY;
    }
}

/* Hierarchical reduce-scatter / allgather (build.c hier_rs, hier_ag): a
 * regrouping copy of the whole vector, the node's q members over all of
 * it, the rail of m nodes over 1/q of it. */
static double hier_rs_ag(const whale_group *g, int coll, double n)
{
    if (!g->local || !g->cross)
        return INFINITY;
    const whale_ctx *ctx = g->ctx;
    struct comm_link shm = ctx->link[COMM_LINK_SHM], net = ctx->link[COMM_LINK_NET];
    int q = g->ppn, m = g->nnodes;
    double red = coll == COMM_REDUCE_SCATTER ? g_gamma : 0;
    double intra = g->local->shm_state == COMM_SHM_READY
                       ? shm_cost(g->local, coll, n)
                       : (q - 1) * shm.alpha + (double)(q - 1) / q * n * (shm.beta + red);
    double inter = (m - 1) * net.alpha + (double)(m - 1) / m * (n / q) * (net.beta + red);
    return n * ctx->link[COMM_LINK_COPY].beta + intra + inter;
}

static double cost(const whale_group *g, int coll, int algo, double n)
{
    const whale_ctx *ctx = g->ctx;
    int p = g->size;
    struct comm_link l = ctx->link[comm_link_class(g)];
    const double inf = INFINITY;
    if (algo == COMM_ALGO_SHM)
        return g->shm_state == COMM_SHM_READY ? shm_cost(g, coll, n) : inf;
    switch (coll) {
    case COMM_ALLREDUCE:
        switch (algo) {
        case COMM_ALGO_RING: return ring_ar(p, n, l);
        case COMM_ALGO_RD: return rd_ar(p, n, l);
        case COMM_ALGO_RABEN: return p >= 4 ? raben_ar(p, n, l) : inf;
        case COMM_ALGO_HIER: {
            if (!g->local || !g->cross)
                return inf;
            struct comm_link shm = ctx->link[COMM_LINK_SHM], net = ctx->link[COMM_LINK_NET];
            int q = g->ppn, m = g->nnodes;
            double inter = fmin(ring_ar(m, n / q, net), rd_ar(m, n / q, net));
            if (g->local->shm_state == COMM_SHM_READY)
                return shm_cost(g->local, COMM_REDUCE_SCATTER, n) +
                       shm_cost(g->local, COMM_ALLGATHER, n) + inter;
            double intra = (q - 1) * shm.alpha + (double)(q - 1) / q * n * shm.beta;
            return 2 * intra + (double)(q - 1) / q * n * g_gamma + inter;
        }
        default: return inf;
        }
    case COMM_REDUCE_SCATTER: /* n = total bytes (size * count) */
        if (algo == COMM_ALGO_HIER)
            return hier_rs_ag(g, coll, n);
        switch (algo) {
        case COMM_ALGO_RING: return (p - 1) * l.alpha + (double)(p - 1) / p * n * (l.beta + g_gamma);
        case COMM_ALGO_RD:
            return is_pow2(p) ? ilog2_ceil(p) * l.alpha + (double)(p - 1) / p * n * (l.beta + g_gamma) - 1e-12
                              : inf;
        default: return inf;
        }
    case COMM_ALLGATHER: /* n = total bytes */
        if (algo == COMM_ALGO_HIER)
            return hier_rs_ag(g, coll, n);
        switch (algo) {
        case COMM_ALGO_RING: return (p - 1) * l.alpha + (double)(p - 1) / p * n * l.beta;
        case COMM_ALGO_RD:
            return is_pow2(p) ? ilog2_ceil(p) * l.alpha + (double)(p - 1) / p * n * l.beta - 1e-12 : inf;
        default: return inf;
        }
    case COMM_BROADCAST:
        switch (algo) {
        case COMM_ALGO_TREE: return ilog2_ceil(p) * (l.alpha + n * l.beta);
        case COMM_ALGO_RING: {
            double chunk = (double)ctx->chunk_bytes;
            double nch = ceil(n / chunk);
            return (p - 2 + nch) * (l.alpha + fmin(chunk, n) * l.beta);
        }
        default: return inf;
        }
    case COMM_REDUCE:
        switch (algo) {
        case COMM_ALGO_TREE: return ilog2_ceil(p) * (l.alpha + n * (l.beta + g_gamma));
        case COMM_ALGO_RING:
            return p * l.alpha + 2.0 * (p - 1) / p * n * l.beta + (double)(p - 1) / p * n * g_gamma;
        default: return inf;
        }
    case COMM_BARRIER:
        return algo == COMM_ALGO_RD ? 0 : inf;
    case COMM_ALLTOALL: /* n = total bytes; pairwise exchange (a2a.c) */
        return algo == COMM_ALGO_RING ? (p - 1) * l.alpha + (double)(p - 1) / p * n * l.beta : inf;
    }
    return inf;
}

int comm_select(whale_group *g, int coll, size_t bytes, int forced)
{
    if (coll == COMM_BARRIER)
        return COMM_ALGO_RD;
    if (g->size == 1)
        return coll == COMM_BROADCAST || coll == COMM_REDUCE ? COMM_ALGO_TREE : COMM_ALGO_RING;
    double n = (double)bytes;
    if (forced > COMM_ALGO_AUTO && isfinite(cost(g, coll, forced, n)))
        return forced;
    int best = -1;
    double bc = INFINITY;
    for (int a = COMM_ALGO_RING; a < COMM_ALGO_COUNT_; a++) {
        double c = cost(g, coll, a, n);
        if (c < bc) {
            bc = c;
            best = a;
        }
    }
    return best;
}

/* WHALE_COLL_ALGO: "ring" (every collective that has it) or
 * "allreduce=ring,broadcast=tree,...". Unknown names are an error. */
int comm_parse_algo_env(const char *s, int forced[COMM_COLL_COUNT_])
{
    for (int c = 0; c < COMM_COLL_COUNT_; c++)
        forced[c] = COMM_ALGO_AUTO;
    if (!s || !*s)
        return 0;
    char *dup = strdup(s), *save = NULL;
    if (!dup)
        return WHALE_ENOMEM;
    int rc = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        int coll = -1;
        const char *an = tok;
        if (eq) {
            *eq = '\0';
            an = eq + 1;
            for (int c = 0; c < COMM_COLL_COUNT_; c++)
                if (!strcasecmp(tok, coll_names[c]))
                    coll = c;
            if (coll < 0) {
                whale_error("WHALE_COLL_ALGO: unknown collective '%s' (allreduce, reduce_scatter, "
                            "allgather, broadcast, reduce, alltoall)", tok);
                rc = WHALE_EINVAL;
                break;
            }
        }
        int a = comm_algo_parse(an);
        if (a < 0) {
            whale_error("WHALE_COLL_ALGO: unknown algorithm '%s' (auto, ring, rd, raben, hier, tree, shm)", an);
            rc = WHALE_EINVAL;
            break;
        }
        for (int c = 0; c < COMM_COLL_COUNT_; c++)
            if (coll < 0 || c == coll)
                forced[c] = a;
    }
    free(dup);
    return rc;
}

/* WHALE_COLL_MODEL: "shm=ALPHA_US:GBPS,net=ALPHA_US:GBPS,copy=ALPHA_US:GBPS" (any part). */
int comm_parse_model_env(const char *s, struct comm_link *link)
{
    if (!s || !*s)
        return 0;
    char *dup = strdup(s), *save = NULL;
    if (!dup)
        return WHALE_ENOMEM;
    int rc = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        double a, bw;
        char cls[8];
        if (sscanf(tok, "%7[a-z]=%lf:%lf", cls, &a, &bw) != 3 || a < 0 || bw <= 0 ||
            (strcmp(cls, "shm") && strcmp(cls, "net") && strcmp(cls, "copy"))) {
            whale_error("WHALE_COLL_MODEL: '%s' is not shm=ALPHA_US:GBPS, net=ALPHA_US:GBPS or "
                        "copy=ALPHA_US:GBPS", tok);
            rc = WHALE_EINVAL;
            break;
        }
        int k = !strcmp(cls, "shm") ? COMM_LINK_SHM : !strcmp(cls, "net") ? COMM_LINK_NET : COMM_LINK_COPY;
        link[k].alpha = a * 1e-6;
        link[k].beta = 1.0 / (bw * 1e9);
    }
    free(dup);
    return rc;
}

/* Ping-pong between world rank 0 and peer: returns one-way seconds. */
static double pingpong(whale_group *w, int peer, void *buf, size_t bytes, int iters, bool lead)
{
    double best = INFINITY;
    for (int i = 0; i < iters; i++) {
        double t0 = whale_now_s();
        if (lead) {
            if (whale_send(w, buf, bytes, WHALE_UINT8, peer, 0x77) ||
                whale_recv(w, buf, bytes, WHALE_UINT8, peer, 0x77))
                return INFINITY;
        } else {
            if (whale_recv(w, buf, bytes, WHALE_UINT8, 0, 0x77) ||
                whale_send(w, buf, bytes, WHALE_UINT8, 0, 0x77))
                return INFINITY;
        }
        double dt = (whale_now_s() - t0) / 2;
        if (dt < best)
            best = dt;
    }
    return best;
}

/* Cache of the probe, per host of rank 0 and link classes present:
 * $XDG_CACHE_HOME/whale (or ~/.cache/whale)/comm-model-<host>-<classes>.
 * Every later run on the same machine then makes the same choices. */
static int cache_path(char *buf, size_t len, const whale_group *w)
{
    const char *base = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[512];
    if (base && *base) {
        snprintf(dir, sizeof dir, "%s/whale", base);
    } else if (home && *home) {
        snprintf(dir, sizeof dir, "%s/.cache", home);
        mkdir(dir, 0755);
        snprintf(dir, sizeof dir, "%s/.cache/whale", home);
    } else {
        return -1;
    }
    mkdir(dir, 0755);
    const struct boot *b = &w->ctx->boot;
    const char *host = b->node_names ? b->node_names[w->node[0]] : "local";
    int net = w->nnodes > 1, shm = 0;
    for (int k = 1; k < w->size; k++)
        shm |= w->node[k] == w->node[0];
    int n = snprintf(buf, len, "%s/comm-model-%s-%s%s", dir, host, shm ? "shm" : "", net ? "net" : "");
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* A cache without the copy link (older runtimes) is measured again. */
static bool cache_read(const char *path, double p[MODEL_N])
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fscanf(f, "shm %lf %lf net %lf %lf gamma %lf copy %lf %lf", &p[0], &p[1], &p[2],
                     &p[3], &p[4], &p[5], &p[6]) == MODEL_N;
    fclose(f);
    for (int i = 0; i < MODEL_N; i++)
        ok = ok && isfinite(p[i]) && p[i] > 0;
    return ok;
}

static void cache_write(const char *path, const double p[MODEL_N])
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    /* exclusive and never through a link; rename then replaces a link at
     * path instead of following it */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return;
    }
    fprintf(f, "shm %.6g %.6g net %.6g %.6g gamma %.6g copy %.6g %.6g\n", p[0], p[1], p[2], p[3],
            p[4], p[5], p[6]);
    if (fclose(f) == 0)
        rename(tmp, path);
    else
        unlink(tmp);
}

/* Bandwidths from the site config the plugin used (WHALE_CONF), when set. */
static void site_bandwidths(double p[MODEL_N])
{
    const char *path = getenv(WHALE_ENV_CONF);
    struct whale_conf *c = NULL;
    if (!path || !*path || whale_conf_load(path, &c))
        return;
    if (c->link_gbs[WHALE_LINK_NODE] > 0)
        p[1] = 1.0 / (c->link_gbs[WHALE_LINK_NODE] * 1e9);
    double net = 0;
    for (int k = WHALE_LINK_LEAF; k < WHALE_LINK_NCLASS; k++)
        if (c->link_gbs[k] > 0 && (net == 0 || c->link_gbs[k] < net))
            net = c->link_gbs[k];
    if (net > 0)
        p[3] = 1.0 / (net * 1e9);
    whale_conf_free(c);
}

/* Model parameters: WHALE_COLL_MODEL, else the cached probe, else a probe
 * now (ping-pong from world rank 0 to a peer of each link class, reduction
 * speed out of cache); site-config bandwidths override. Rank 0 decides and
 * broadcasts, so every rank chooses alike. About 20 ms when probing. */
/* World rank 0 hands its cost model to every task, the spares included:
 * the algorithm of a collective is chosen from this model on each member
 * separately, so a promoted spare with the built-in defaults picked another
 * schedule than the survivors for the same call and both sides waited for
 * messages the other never sent (a hang after the first recovery under
 * srun, where the probed net link differs from the defaults). */
static int share_model(whale_ctx *ctx, double params[MODEL_N], bool cached)
{
    whale_group *g = ctx->boot.ntasks > ctx->boot.world && ctx->all ? ctx->all : ctx->world;
    int root = 0;
    if (g == ctx->all) {
        root = -1;
        for (int k = 0; k < g->size; k++)
            if (g->world_ranks[k] == 0)
                root = k;
        if (root < 0)
            return WHALE_ESTATE;
    }
    int rc = whale_broadcast(g, params, MODEL_N * sizeof(double), WHALE_UINT8, root);
    if (rc)
        return rc;
    ctx->link[0] = (struct comm_link){ params[0], params[1] };
    ctx->link[1] = (struct comm_link){ params[2], params[3] };
    ctx->link[COMM_LINK_COPY] = (struct comm_link){ params[5], params[6] };
    g_gamma = params[4];
    whale_debug("cost model%s: shm alpha %.2f us %.2f GB/s, net alpha %.2f us %.2f GB/s, reduce %.2f GB/s, "
                "copy %.2f us %.2f GB/s",
                cached ? " (cached)" : "", params[0] * 1e6, 1e-9 / params[1], params[2] * 1e6,
                1e-9 / params[3], 1e-9 / params[4], params[5] * 1e6, 1e-9 / params[6]);
    return 0;
}

int comm_probe(whale_ctx *ctx, bool measure)
{
    whale_group *w = ctx->world;
    double params[MODEL_N] = { ctx->link[0].alpha, ctx->link[0].beta, ctx->link[1].alpha,
                               ctx->link[1].beta, g_gamma, ctx->link[COMM_LINK_COPY].alpha,
                               ctx->link[COMM_LINK_COPY].beta };
    if (!w || w->rank < 0)
        return share_model(ctx, params, false); /* a spare: take the ranks' model */
    const char *pe = whale_knob_getenv("WHALE_COLL_PROBE");
    bool force = pe && !strcmp(pe, "force");
    if (pe && !strcmp(pe, "0"))
        measure = false;
    char path[1024];
    bool cached = false, have_path = w->rank == 0 && cache_path(path, sizeof path, w) == 0;
    int flag = 0; /* rank 0 tells the others whether to take part in the probe */
    if (w->rank == 0 && measure)
        flag = !(have_path && !force && (cached = cache_read(path, params)));
    int rc = whale_broadcast(w, &flag, 1, WHALE_INT32, 0);
    if (rc)
        return rc;
    if (flag && w->size > 1) {
        const size_t big = 1 << 20;
        void *buf = calloc(1, big);
        if (!buf)
            return WHALE_ENOMEM;
        int peer_cls[2] = { -1, -1 };
        for (int k = 1; k < w->size; k++) {
            int cls = w->node[k] == w->node[0] ? COMM_LINK_SHM : COMM_LINK_NET;
            if (peer_cls[cls] < 0)
                peer_cls[cls] = k;
        }
        for (int cls = 0; cls < 2; cls++) {
            int peer = peer_cls[cls];
            if (peer < 0 || (w->rank != 0 && w->rank != peer))
                continue;
            bool lead = w->rank == 0;
            double a = pingpong(w, peer, buf, 8, 50, lead);
            double b = pingpong(w, peer, buf, big, 5, lead);
            if (lead && isfinite(a) && isfinite(b) && b > a) {
                params[2 * cls] = a;
                params[2 * cls + 1] = (b - a) / (double)big;
            }
        }
        free(buf);
        if (w->rank == 0) {
            /* reduction speed out of cache: operands larger than L3 */
            size_t n = 8 << 20;
            float *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y);
            if (x && y) {
                double best = INFINITY;
                for (int i = 0; i < 3; i++) {
                    double t0 = whale_now_s();
                    comm_reduce(x, x, y, n, WHALE_FLOAT32, WHALE_SUM);
                    double dt = whale_now_s() - t0;
                    best = dt < best ? dt : best;
                }
                if (best > 0)
                    params[4] = best / (double)(n * sizeof(float));
                /* the shm algorithm's beta: a memcpy of the size the
                 * ping-pong above moved (1 MiB), so that both link figures
                 * are alike and the model compares copies with copies (a
                 * UCX shm message is two of them) */
                best = INFINITY;
                for (int i = 0; i < 20; i++) {
                    double t0 = whale_now_s();
                    memcpy(x, y, big);
                    double dt = whale_now_s() - t0;
                    best = dt < best ? dt : best;
                }
                if (best > 0)
                    params[6] = best / (double)big;
            }
            free(x);
            free(y);
            if (have_path)
                cache_write(path, params);
        }
    }
    if (w->rank == 0)
        site_bandwidths(params);
    return share_model(ctx, params, cached);
}
