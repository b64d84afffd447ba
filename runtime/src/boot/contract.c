/* The WHALE_* environment contract as seen by a task: degrees, logical rank,
 * rank map. Cross-checked against what PMIx says (size, rank) so that a task
 * launched by a mismatching launcher fails with a clear message instead of
 * deadlocking in the first collective. */
#include "boot/boot.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "whale/env.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/map.h"

static int parse_int(const char *name, const char *s, int lo, int hi, int *out)
{
    long v;
    if (whale_parse_long(s, lo, hi, &v)) { /* whale/envnum.h's checked parser */
        whale_error("%s='%s' is not an integer in [%d, %d]", name, s, lo, hi);
        return WHALE_EINVAL;
    }
    *out = (int)v;
    return 0;
}

static int get_int(boot_getenv_fn get, void *user, const char *name, int lo, int hi, int dflt,
                   int *out)
{
    const char *s = get(name, user);
    if (!s || !*s) {
        *out = dflt;
        return 0;
    }
    return parse_int(name, s, lo, hi, out);
}

int boot_read_contract(struct boot *b, boot_getenv_fn get, void *user, int pmix_size, int pmix_rank)
{
    int rc;
    int *map = NULL;
    const char *cw = get(WHALE_ENV_WORLD, user), *ct = get(WHALE_ENV_TP, user);
    const bool have_contract = (cw && *cw) || (ct && *ct);
    int ntasks, task, world;
    struct whale_grid g;
    char msg[256];

    if ((rc = get_int(get, user, WHALE_ENV_NTASKS, 1, INT_MAX, pmix_size > 0 ? pmix_size : 1, &ntasks)) ||
        (rc = get_int(get, user, WHALE_ENV_TASK_ID, 0, INT_MAX, pmix_rank > 0 ? pmix_rank : 0, &task)))
        return rc;
    if (whale_grid_from_env(&g, get, user, msg, sizeof msg)) {
        whale_error("%s", msg);
        return WHALE_EINVAL;
    }
    const int tp = g.tp, pp = g.pp;
    if ((rc = get_int(get, user, WHALE_ENV_WORLD, 1, INT_MAX, ntasks, &world)))
        return rc;
    if (!g.dp) /* not exported: every working rank not in TP*PP is a replica */
        g.dp = world / ((long)tp * pp) > 0 ? (int)(world / ((long)tp * pp)) : 1;
    const int dp = g.dp;
    if (pmix_size > 0 && ntasks != pmix_size) {
        whale_error("%s=%d but the launcher (PMIx) started %d tasks: was the step launched with "
                    "other options than the ones that planned it?", WHALE_ENV_NTASKS, ntasks, pmix_size);
        return WHALE_EINVAL;
    }
    if (pmix_rank >= 0 && task != pmix_rank) {
        whale_error("%s=%d but PMIx says this is rank %d", WHALE_ENV_TASK_ID, task, pmix_rank);
        return WHALE_EINVAL;
    }
    if ((long)tp * pp * dp != world) {
        whale_error("contract: TP*PP*DP = %d*%d*%d != %s=%d", tp, pp, dp, WHALE_ENV_WORLD, world);
        return WHALE_EINVAL;
    }
    if (world > ntasks || task >= ntasks) {
        whale_error("contract: %s=%d, task %d, but only %d tasks in the step", WHALE_ENV_WORLD, world,
                    task, ntasks);
        return WHALE_EINVAL;
    }
    if (!have_contract && pmix_size > 1)
        whale_info("no WHALE_* contract in the environment: running %d tasks as pure data parallel",
                   ntasks);

    const char *rm = get(WHALE_ENV_RANKMAP, user);
    if (rm && *rm) {
        int n = 0;
        if ((rc = whale_rankmap_load(rm, &map, &n)))
            return rc;
        if (n != world) {
            whale_error("%s lists %d ranks but %s=%d", WHALE_ENV_RANKMAP, n, WHALE_ENV_WORLD, world);
            free(map);
            return WHALE_EINVAL;
        }
    } else {
        /* Without a map rank r is task r; spares are the last tasks. */
        map = malloc(sizeof(int) * (size_t)world);
        if (!map)
            return WHALE_ENOMEM;
        for (int r = 0; r < world; r++)
            map[r] = r;
    }
    int *rot = malloc(sizeof(int) * (size_t)ntasks);
    if (!rot) {
        free(map);
        return WHALE_ENOMEM;
    }
    for (int t = 0; t < ntasks; t++)
        rot[t] = -1;
    for (int r = 0; r < world; r++) {
        if (map[r] < 0 || map[r] >= ntasks || rot[map[r]] >= 0) {
            whale_error("%s: rank %d maps to task %d, which is out of range or taken twice",
                        WHALE_ENV_RANKMAP, r, map[r]);
            free(map);
            free(rot);
            return WHALE_EINVAL;
        }
        rot[map[r]] = r;
    }
    int rank = rot[task];
    int env_rank, env_spare;
    if ((rc = get_int(get, user, WHALE_ENV_RANK, -1, INT_MAX, rank, &env_rank)) ||
        (rc = get_int(get, user, WHALE_ENV_SPARE, 0, 1, rank < 0, &env_spare))) {
        free(map);
        free(rot);
        return rc;
    }
    if (env_rank != rank || env_spare != (rank < 0)) {
        whale_error("contract: task %d is rank %d by %s but %s=%d %s=%d", task, rank,
                    WHALE_ENV_RANKMAP, WHALE_ENV_RANK, env_rank, WHALE_ENV_SPARE, env_spare);
        free(map);
        free(rot);
        return WHALE_EINVAL;
    }
    b->ntasks = ntasks;
    b->task = task;
    b->grid = g;
    b->world = world;
    b->rank = rank;
    b->spare = rank < 0;
    b->task_of_rank = map;
    b->rank_of_task = rot;
    if (rank >= 0) {
        struct whale_coords c;
        whale_grid_coords(&g, rank, &c);
        b->tp_rank = c.tp;
        b->dp_rank = c.dp;
        b->pp_rank = c.pp;
    } else {
        b->tp_rank = b->dp_rank = b->pp_rank = -1;
    }
    return 0;
}
