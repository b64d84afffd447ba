/* The parallel layout of a step: its degrees and the logical rank order,
 * one type from the plugin's options through the plan, the environment
 * contract (whale/env.h), the rank map and the engine, so that a new axis is
 * added here and travels everywhere the degrees travel.
 *
 * Rank order (Megatron convention, TP fastest, PP slowest):
 *     rank = ((pp * DP) + dp) * TP + tp
 * world = TP * PP * DP working ranks.
 *
 * Expert parallelism (EP) does not add ranks: EP divides DP and the expert
 * groups are carved out of the data-parallel ranks, as in Megatron-Core's
 * expert-parallel groups. For a rank at (tp, pp, dp):
 *     EP group            same (tp, pp), dp' = (dp / EP) * EP + i, i = 0..EP-1
 *                         (EP consecutive DP ranks; its index in it: dp % EP)
 *     expert-data-parallel group
 *                         same (tp, pp), dp' = i * EP + dp % EP, i = 0..DP/EP-1
 *                         (the ranks that hold the same experts; its index
 *                         in it: dp / EP); expert gradients are reduced here.
 * With EP = 1 the EP group is the rank alone and the expert-data-parallel
 * group is its DP group.
 *
 * Context parallelism (cp) has its place in the type but is not used yet:
 * it is fixed at 1, takes no part in the rank order and is not exported.
 *
 * Structs that carry the degrees embed them with WHALE_GRID(name): the
 * members stay reachable as s.tp, s.pp, ... (as before) and the whole set as
 * s.name, a struct whale_grid for the helpers below. A member list in one
 * place is what makes a new axis a local change.
 *
 * A degree of 0 in a zero-initialised struct reads as 1 for the axes that
 * have a default (ep, cp); the parsers (plan file, environment, options) never
 * produce 0, and whale_grid_check refuses it. */
#ifndef WHALE_GRID_H
#define WHALE_GRID_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WHALE_GRID_MEMBERS int tp, pp, dp, ep, cp

struct whale_grid {
    WHALE_GRID_MEMBERS;
};

/* Embed the degrees in another struct: members by name and the set as one
 * value (the two views share storage). */
#define WHALE_GRID(name)                                                   \
    union {                                                                   \
        struct { WHALE_GRID_MEMBERS; };                                    \
        struct whale_grid name;                                            \
    }

/* Coordinates of one working rank. */
struct whale_coords {
    int tp, pp, dp;
};

/* The groups a rank belongs to. */
enum whale_axis {
    WHALE_AXIS_TP = 0,   /* same (pp, dp), tp = 0..TP-1 */
    WHALE_AXIS_PP,       /* same (dp, tp), pp = 0..PP-1 */
    WHALE_AXIS_DP,       /* same (pp, tp), dp = 0..DP-1 */
    WHALE_AXIS_EP,       /* same (pp, tp), EP consecutive DP ranks (see above) */
    WHALE_AXIS_EDP,      /* same (pp, tp), DP ranks EP apart: the expert-data-parallel group */
    WHALE_AXIS_COUNT_
};

/* Upper bounds of one degree and of the product, shared by every parser. */
#define WHALE_GRID_MAX_TP (1 << 20)
#define WHALE_GRID_MAX_PP (1 << 20)
#define WHALE_GRID_MAX_DP (1 << 24)
#define WHALE_GRID_MAX_WORLD (1 << 24)

/* All degrees 1. */
void whale_grid_init(struct whale_grid *d);

/* TP * PP * DP (the caller has validated the degrees). */
int whale_grid_world(const struct whale_grid *d);

/* rank = ((pp * DP) + dp) * TP + tp. */
int whale_grid_rank(const struct whale_grid *d, const struct whale_coords *c);
/* Inverse of whale_grid_rank for 0 <= rank < world. */
void whale_grid_coords(const struct whale_grid *d, int rank, struct whale_coords *c);

/* Size of `rank`'s group along `axis`, and (when ranks != NULL) its members
 * in group order (ranks[i] has coordinate i along the axis). */
int whale_grid_group(const struct whale_grid *d, enum whale_axis axis, int rank, int *ranks);
/* Position of `rank` in its group along `axis`. */
int whale_grid_group_index(const struct whale_grid *d, enum whale_axis axis, int rank);

/* The expert-parallel degree, 1 for a zero-initialised struct. */
int whale_grid_ep(const struct whale_grid *d);

/* Each degree in its range, EP divides DP and, when world > 0, TP*PP*DP == world. On
 * failure returns WHALE_EINVAL and writes into msg a sentence naming the
 * degree (prefix + name, e.g. "--whale-" + "dp" or "" + "dp") and its
 * allowed values; nothing is logged (the plugin and the library report
 * through different channels). */
int whale_grid_check(const struct whale_grid *d, int world, const char *prefix, char *msg,
                        size_t msgsz);

/* The values EP may take with this DP (its divisors: "1, 2, 4"), into buf. */
void whale_grid_ep_choices(int dp, char *buf, size_t n);

/* The contract's names (WHALE_TP, ...) and values of the exported degrees,
 * for each: fn(name, value, user); stops at the first non-zero return. */
int whale_grid_to_env(const struct whale_grid *d,
                         int (*fn)(const char *name, const char *value, void *user), void *user);

/* Read the exported degrees with get(name, user). Unset or "": 1, except
 * DP: 0, for the caller to derive from the number of working ranks. A value
 * must be a decimal integer in [1, its maximum], else WHALE_EINVAL and msg
 * names the variable, the value and the range. */
int whale_grid_from_env(struct whale_grid *d, const char *(*get)(const char *name, void *user),
                           void *user, char *msg, size_t msgsz);

#ifdef __cplusplus
}
#endif
#endif
