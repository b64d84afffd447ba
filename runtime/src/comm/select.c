/* Algorithm choice: an alpha-beta(-gamma) cost model per link class.
 *
 * Every member of a group must pick the same algorithm for the same call,
 * so the inputs are only group structure, message size and the model
 * parameters, which rank 0 measures (or reads from WHALE_COLL_MODEL) and
 * broadcasts at init. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "whale/error.h"
#include "whale/log.h"

static const char *const algo_names[COMM_ALGO_COUNT_] = { "auto", "ring", "rd", "raben", "hier",
                                                          "tree" };
static const char *const coll_names[COMM_COLL_COUNT_] = { "allreduce", "reduce_scatter",
                                                          "allgather", "broadcast", "reduce",
                                                          "barrier" };

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

static double cost(const whale_group *g, int coll, int algo, double n)
{
    const whale_ctx *ctx = g->ctx;
    int p = g->size;
    struct comm_link l = ctx->link[comm_link_class(g)];
    const double inf = INFINITY;
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
            double intra = (q - 1) * shm.alpha + (double)(q - 1) / q * n * shm.beta;
            double inter = fmin(ring_ar(m, n / q, net), rd_ar(m, n / q, net));
            return 2 * intra + (double)(q - 1) / q * n * g_gamma + inter;
        }
        default: return inf;
        }
    case COMM_REDUCE_SCATTER: /* n = total bytes (size * count) */
        switch (algo) {
        case COMM_ALGO_RING: return (p - 1) * l.alpha + (double)(p - 1) / p * n * (l.beta + g_gamma);
        case COMM_ALGO_RD:
            return is_pow2(p) ? ilog2_ceil(p) * l.alpha + (double)(p - 1) / p * n * (l.beta + g_gamma) - 1e-12
                              : inf;
        default: return inf;
        }
    case COMM_ALLGATHER: /* n = total bytes */
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
                            "allgather, broadcast, reduce)", tok);
                rc = WHALE_EINVAL;
                break;
            }
        }
        int a = comm_algo_parse(an);
        if (a < 0) {
            whale_error("WHALE_COLL_ALGO: unknown algorithm '%s' (auto, ring, rd, raben, hier, tree)", an);
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

/* WHALE_COLL_MODEL: "shm=ALPHA_US:GBPS,net=ALPHA_US:GBPS" (either part). */
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
            (strcmp(cls, "shm") && strcmp(cls, "net"))) {
            whale_error("WHALE_COLL_MODEL: '%s' is not shm=ALPHA_US:GBPS or net=ALPHA_US:GBPS", tok);
            rc = WHALE_EINVAL;
            break;
        }
        int k = strcmp(cls, "shm") ? COMM_LINK_NET : COMM_LINK_SHM;
        link[k].alpha = a * 1e-6;
        link[k].beta = 1.0 / (bw * 1e9);
    }
    free(dup);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Ping-pong between world rank 0 and peer: returns one-way seconds. */
static double pingpong(whale_group *w, int peer, void *buf, size_t bytes, int iters, bool lead)
{
    double best = INFINITY;
    for (int i = 0; i < iters; i++) {
        double t0 = now_s();
        if (lead) {
            if (whale_send(w, buf, bytes, WHALE_UINT8, peer, 0x77) ||
                whale_recv(w, buf, bytes, WHALE_UINT8, peer, 0x77))
                return INFINITY;
        } else {
            if (whale_recv(w, buf, bytes, WHALE_UINT8, 0, 0x77) ||
                whale_send(w, buf, bytes, WHALE_UINT8, 0, 0x77))
                return INFINITY;
        }
        double dt = (now_s() - t0) / 2;
        if (dt < best)
            best = dt;
    }
    return best;
}

/* Measure alpha/beta for the link classes present from world rank 0, and
 * gamma (reduction speed) on rank 0; broadcast so every rank decides alike.
 * About 10 ms. */
int comm_probe(whale_ctx *ctx, bool measure)
{
    whale_group *w = ctx->world;
    if (!w || w->rank < 0)
        return 0;
    double params[5] = { ctx->link[0].alpha, ctx->link[0].beta, ctx->link[1].alpha,
                         ctx->link[1].beta, g_gamma };
    if (measure && w->size > 1) {
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
            double a = pingpong(w, peer, buf, 8, 20, lead);
            double b = pingpong(w, peer, buf, big, 3, lead);
            if (lead && isfinite(a) && isfinite(b) && b > a) {
                params[2 * cls] = a;
                params[2 * cls + 1] = (b - a) / (double)big;
            }
        }
        if (w->rank == 0) {
            float *x = buf, *y = (float *)buf + big / 8;
            double t0 = now_s();
            for (int i = 0; i < 4; i++)
                comm_reduce(x, x, y, big / 8, WHALE_FLOAT32, WHALE_SUM);
            double dt = (now_s() - t0) / 4;
            if (dt > 0)
                params[4] = dt / (double)(big / 2);
        }
        free(buf);
    }
    int rc = whale_broadcast(w, params, 5 * sizeof(double), WHALE_UINT8, 0);
    if (rc)
        return rc;
    ctx->link[0] = (struct comm_link){ params[0], params[1] };
    ctx->link[1] = (struct comm_link){ params[2], params[3] };
    g_gamma = params[4];
    whale_debug("cost model: shm alpha %.2f us %.2f GB/s, net alpha %.2f us %.2f GB/s, reduce %.2f GB/s",
                params[0] * 1e6, 1e-9 / params[1], params[2] * 1e6, 1e-9 / params[3], 1e-9 / params[4]);
    return 0;
}
