/* Site limits handed to each task (whale.conf(5), "SITE LIMITS").
 *
 * The plugin enforces whale.conf's limits on the --whale-* options; the
 * runtime has flags, WHALE_* variables and plan files of its own that
 * reach the same knobs. So that those cannot pass a limit by accident,
 * slurmstepd (root) writes the limits of the whale.conf it used into a
 * root-owned, read-only record in a private directory and names it in
 * WHALE_SITE_LIMITS; the runtime reads it and refuses any value beyond a
 * limit, naming the value, where it came from, the limit and the
 * whale.conf line that set it.
 *
 * This is a policy the runtime honours, not a sandbox: a user can always
 * run another binary. What the task cannot do is widen the limits through
 * the record: a record that is not a root-owned regular file writable by
 * root alone is refused, and so is a plugin-launched step (WHALE_CONF set)
 * without one. Without either variable (whale-run, a plain run) there are
 * no site limits. */
#ifndef WHALE_SITELIMITS_H
#define WHALE_SITELIMITS_H

#include <stdbool.h>

#include "whale/conf.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WHALE_ENV_SITE_LIMITS "WHALE_SITE_LIMITS" /* path of the record (plugin steps) */
#define WHALE_SITE_LIMITS_MAX ((size_t)64 << 10)  /* bound on the record's size */

struct whale_site_limits {
    bool present;              /* false: no site limits apply */
    char conf[1024];           /* the whale.conf the limits came from */
    /* Max*: the limit (0: none); MinCkptEvery: the limit (0: none);
     * Allowed*: bit (1 << enum value) per allowed value */
    long value[WHALE_LIMIT_N];
    int line[WHALE_LIMIT_N];   /* the whale.conf line; 0: not set (no limit) */
};

/* The record of c's limits, as slurmstepd writes it (JSON, malloc'd; NULL
 * when out of memory). Only limits the file sets are listed. */
char *whale_site_limits_to_json(const struct whale_conf *c);

/* Parse a record (name: for messages). Unknown keys and bad values are
 * refused (WHALE_EINVAL), the record being the site's word. */
int whale_site_limits_from_json(const char *text, const char *name, struct whale_site_limits *out);

/* Read the record at path: a regular file owned by root and writable by
 * root alone, at most WHALE_SITE_LIMITS_MAX bytes, no symbolic link. */
int whale_site_limits_load(const char *path, struct whale_site_limits *out);

/* The limits that apply to this process: WHALE_SITE_LIMITS's record; none
 * when neither it nor WHALE_CONF is set; WHALE_EINVAL (logged) when
 * WHALE_CONF is set without it or the record is refused. */
int whale_site_limits_from_env(struct whale_site_limits *out);

/* Check one value against limit `which` (Max*: value above the limit;
 * MinCkptEvery: 0 < value < limit; Allowed*: value is the enum). source
 * names where the value came from ("--zero", "WHALE_ZERO", "the plan
 * plan.json"). 0, or WHALE_EINVAL after logging e.g.
 *   "zero=3 (from --zero) exceeds the site limit MaxZero=1
 *    (/etc/slurm/whale.conf:3)". */
int whale_site_limits_check(const struct whale_site_limits *l, enum whale_conf_limit which,
                            long value, const char *source);

/* A checkpoint interval in seconds cannot be compared with MinCkptEvery
 * (steps): refused while that limit is set. */
int whale_site_limits_check_seconds(const struct whale_site_limits *l, double seconds,
                                    const char *source);

#ifdef __cplusplus
}
#endif
#endif
