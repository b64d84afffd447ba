/* Internals of the conf module. */
#ifndef WHALE_CONF_INTERNAL_H
#define WHALE_CONF_INTERNAL_H

/* Most hosts one hostlist expression may expand to (a typo such as
 * n[0-999999999] must not take minutes and gigabytes). */
#define CONF_MAX_HOSTS (1 << 20)

#include <stdbool.h>

#include "whale/kv.h"

/* Unknown / duplicate keys on a line -> error with file:line and a hint. */
int conf_check_keys(const struct whale_kv_line *l, const char *const *allowed, const char *what);
int conf_parse_bandwidth(const struct whale_kv_line *l, const struct whale_kv *kv,
                         bool bits_default, double *gbs);

/* PricePerNodeHour= / PricePerGPUHour= of a NodeName line (price.c): a
 * dollar amount >= 0; both on one line is an error (which one counts?).
 * Giving one clears the other one inherited from NodeName=DEFAULT. */
int conf_parse_price(const struct whale_kv_line *l, double *node_hour, double *gpu_hour);

/* Slurm hostlist expressions through libslurm (resolved from the host
 * process inside srun/slurmstepd). Count: number of hosts, or -1 when the
 * expression is malformed. */
int conf_hostlist_count(const char *expr);
/* Call fn for each host name; stops at the first non-zero return. */
int conf_hostlist_foreach(const char *expr, int (*fn)(const char *host, void *user), void *user);

/* "mlx5_[0-3]:1,eth0" -> names (one bracket group per item, ranges and
 * commas inside it, zero padding kept). */
int conf_expand_names(const char *expr, char ***names, int *n);

#endif
