/* The parallel degrees and the logical rank order (whale/grid.h): the
 * one place that knows rank = ((pp * DP) + dp) * TP + tp. */
#include "whale/grid.h"
#include "whale/checked.h"
#include "whale/envnum.h"
#include "whale/env.h"
#include "whale/error.h"

#include <stdint.h>
#include <stdio.h>

void whale_grid_init(struct whale_grid *d)
{
    d->tp = d->pp = d->dp = d->ep = d->cp = 1;
}

int whale_grid_ep(const struct whale_grid *d)
{
    return d->ep > 0 ? d->ep : 1;
}

int whale_grid_world(const struct whale_grid *d)
{
    return d->tp * d->pp * d->dp;
}

int whale_grid_rank(const struct whale_grid *d, const struct whale_coords *c)
{
    return (c->pp * d->dp + c->dp) * d->tp + c->tp;
}

void whale_grid_coords(const struct whale_grid *d, int rank, struct whale_coords *c)
{
    c->tp = rank % d->tp;
    c->dp = (rank / d->tp) % d->dp;
    c->pp = rank / (d->tp * d->dp);
}

/* Size of the groups along an axis. */
static int axis_size(const struct whale_grid *d, enum whale_axis axis)
{
    switch (axis) {
    case WHALE_AXIS_TP: return d->tp;
    case WHALE_AXIS_PP: return d->pp;
    case WHALE_AXIS_EP: return whale_grid_ep(d);
    case WHALE_AXIS_EDP: return d->dp / whale_grid_ep(d);
    default: return d->dp;
    }
}

/* The i-th member of the group along `axis` through coordinates c. */
static int axis_member(const struct whale_grid *d, enum whale_axis axis,
                       const struct whale_coords *c, int i)
{
    struct whale_coords x = *c;
    switch (axis) {
    case WHALE_AXIS_TP: x.tp = i; break;
    case WHALE_AXIS_PP: x.pp = i; break;
    case WHALE_AXIS_EP: x.dp = c->dp / whale_grid_ep(d) * whale_grid_ep(d) + i; break;
    case WHALE_AXIS_EDP: x.dp = i * whale_grid_ep(d) + c->dp % whale_grid_ep(d); break;
    default: x.dp = i; break;
    }
    return whale_grid_rank(d, &x);
}

int whale_grid_group(const struct whale_grid *d, enum whale_axis axis, int rank, int *ranks)
{
    int n = axis_size(d, axis);
    if (ranks) {
        struct whale_coords c;
        whale_grid_coords(d, rank, &c);
        for (int i = 0; i < n; i++)
            ranks[i] = axis_member(d, axis, &c, i);
    }
    return n;
}

int whale_grid_group_index(const struct whale_grid *d, enum whale_axis axis, int rank)
{
    struct whale_coords c;
    whale_grid_coords(d, rank, &c);
    switch (axis) {
    case WHALE_AXIS_TP: return c.tp;
    case WHALE_AXIS_PP: return c.pp;
    case WHALE_AXIS_EP: return c.dp % whale_grid_ep(d);
    case WHALE_AXIS_EDP: return c.dp / whale_grid_ep(d);
    default: return c.dp;
    }
}

void whale_grid_ep_choices(int dp, char *buf, size_t n)
{
    /* divisors in ascending order: i <= sqrt(dp) forward, dp / i backward */
    size_t len = 0;
    int hi[32], nhi = 0, shown = 0;
    buf[0] = '\0';
    for (int i = 1; (long)i * i <= dp && shown < 24; i++)
        if (dp % i == 0) {
            len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%d", shown ? ", " : "", i);
            shown++;
            if (i != dp / i && nhi < 32)
                hi[nhi++] = dp / i;
        }
    for (int k = nhi - 1; k >= 0 && len < n; k--)
        len += (size_t)snprintf(buf + len, n - len, ", %d", hi[k]);
}

int whale_grid_check(const struct whale_grid *d, int world, const char *prefix, char *msg,
                        size_t msgsz)
{
    static const struct { const char *name; size_t off; int max; } deg[] = {
        { "tp", offsetof(struct whale_grid, tp), WHALE_GRID_MAX_TP },
        { "pp", offsetof(struct whale_grid, pp), WHALE_GRID_MAX_PP },
        { "dp", offsetof(struct whale_grid, dp), WHALE_GRID_MAX_DP },
    };
    if (!prefix)
        prefix = "";
    for (size_t i = 0; i < sizeof deg / sizeof deg[0]; i++) {
        int v = *(const int *)((const char *)d + deg[i].off);
        if (v < 1 || v > deg[i].max) {
            snprintf(msg, msgsz, "%s%s=%d is out of range: allowed 1..%d", prefix, deg[i].name, v,
                     deg[i].max);
            return WHALE_EINVAL;
        }
    }
    if (d->ep < 0 || d->ep > WHALE_GRID_MAX_DP) {
        snprintf(msg, msgsz, "%sep=%d is out of range: allowed 1..%d", prefix, d->ep,
                 WHALE_GRID_MAX_DP);
        return WHALE_EINVAL;
    }
    if (d->dp % whale_grid_ep(d)) {
        char ok[256];
        whale_grid_ep_choices(d->dp, ok, sizeof ok);
        snprintf(msg, msgsz, "%sep=%d must divide %sdp=%d: expert groups are carved out of the "
                 "data-parallel ranks (allowed: %s)", prefix, d->ep, prefix, d->dp, ok);
        return WHALE_EINVAL;
    }
    if (d->cp != 0 && d->cp != 1) {
        snprintf(msg, msgsz, "%scp=%d: context parallelism is not supported yet (allowed: 1)", prefix,
                 d->cp);
        return WHALE_EINVAL;
    }
    int64_t w;
    if (!whale_mul_i64(d->tp, d->pp, &w) || !whale_mul_i64(w, d->dp, &w) ||
        w > WHALE_GRID_MAX_WORLD) {
        snprintf(msg, msgsz, "%stp*%spp*%sdp = %d*%d*%d is more than %d ranks", prefix, prefix,
                 prefix, d->tp, d->pp, d->dp, WHALE_GRID_MAX_WORLD);
        return WHALE_EINVAL;
    }
    if (world > 0 && w != world) {
        snprintf(msg, msgsz, "%stp*%spp*%sdp = %d*%d*%d = %lld does not match the %d working ranks",
                 prefix, prefix, prefix, d->tp, d->pp, d->dp, (long long)w, world);
        return WHALE_EINVAL;
    }
    return 0;
}

/* The exported degrees: contract name, member, maximum. */
#define EXPORTED(X)                                  \
    X(WHALE_ENV_TP, tp, WHALE_GRID_MAX_TP)         \
    X(WHALE_ENV_PP, pp, WHALE_GRID_MAX_PP)         \
    X(WHALE_ENV_DP, dp, WHALE_GRID_MAX_DP)         \
    X(WHALE_ENV_EP, ep, WHALE_GRID_MAX_DP)

int whale_grid_to_env(const struct whale_grid *d,
                         int (*fn)(const char *name, const char *value, void *user), void *user)
{
    char buf[24];
    int rc;
    struct whale_grid n = *d; /* zero-initialised axes export their default */
    n.ep = whale_grid_ep(d);
#define SET(env, m, max)                          \
    snprintf(buf, sizeof buf, "%d", n.m);         \
    if ((rc = fn(env, buf, user)))                \
        return rc;
    EXPORTED(SET)
#undef SET
    return 0;
}

int whale_grid_from_env(struct whale_grid *d, const char *(*get)(const char *name, void *user),
                           void *user, char *msg, size_t msgsz)
{
    whale_grid_init(d);
    d->dp = 0;
    long v;
    const char *s;
#define GET(env, m, max)                                                                   \
    if ((s = get(env, user)) && *s) {                                                      \
        if (whale_parse_long(s, 1, max, &v)) {                                             \
            snprintf(msg, msgsz, "%s='%s' is not an integer in [%d, %d]", env, s, 1, max); \
            return WHALE_EINVAL;                                                           \
        }                                                                                  \
        d->m = (int)v;                                                                     \
    }
    EXPORTED(GET)
#undef GET
    return 0;
}
