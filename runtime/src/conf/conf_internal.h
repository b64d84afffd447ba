/* Internals of the conf module. */
#ifndef WHALE_CONF_INTERNAL_H
#define WHALE_CONF_INTERNAL_H

/* Most hosts one hostlist expression may expand to (a typo such as
 * n[0-999999999] must not take minutes and gigabytes), and all of one
 * file's expressions together (a file of many such lines must not either:
 * a 64 KiB whale.conf of 2^20-host lines took minutes under the fuzzer).
 * The largest machines have tens of thousands of nodes. */
#define CONF_MAX_HOSTS (1 << 16)
#define CONF_MAX_HOSTS_FILE (1 << 18)
/* Longest host name a hostlist may produce (a DNS name is at most 253).
 * Without it the hosts bound above bounds names, not bytes: 65536 names
 * of a 16 KB prefix are a gigabyte through libslurm, 8 s per line under
 * ASan, and a fuzzer input of four such lines passed 40 s. */
#define CONF_MAX_HOSTNAME 255

#include <stdbool.h>

#include "whale/kv.h"

/* Unknown / duplicate keys on a line -> error with file:line and a hint. */
int conf_check_keys(const struct whale_kv_line *l, const char *const *allowed, const char *what);
int conf_parse_bandwidth(const struct whale_kv_line *l, const struct whale_kv *kv,
                         bool bits_default, double *gbs);

/* PricePerNodeHour= / PricePerGPUHour= of a NodeName line (price.c): a
 * dollar amount >= 0; both on one line is an error (which one counts?).
 * Giving one clears the other one inherited from NodeName=DEFAULT. */
/* DeviceTypeFromFeature= / DeviceTypeFromGres= (devtype.c): NAME:TYPE
 * entries appended to *arr (error with file:line for bad syntax or a name
 * mapped twice). */
struct whale_conf_devmap;
int conf_parse_devmap(const struct whale_kv_line *l, const struct whale_kv *kv,
                      struct whale_conf_devmap **arr, int *n);
void conf_devmap_free(struct whale_conf_devmap *arr, int n);

int conf_parse_price(const struct whale_kv_line *l, double *node_hour, double *gpu_hour);

/* Slurm hostlist expressions through libslurm (resolved from the host
 * process inside srun/slurmstepd). budget (may be NULL): hosts the file
 * may still expand; each expression's count is taken from it, and
 * WHALE_ERANGE (nothing handed to fn) once it would go below 0, as for an
 * expression of more than CONF_MAX_HOSTS; WHALE_ETOOLONG for an item whose
 * names would be longer than CONF_MAX_HOSTNAME (checked on the text,
 * before any expansion).
 * Count: number of hosts, WHALE_EINVAL when malformed, WHALE_ERANGE,
 * WHALE_ETOOLONG. */
int conf_hostlist_count(const char *expr, long *budget);
/* Call fn for each host name; stops at the first non-zero return. */
int conf_hostlist_foreach(const char *expr, int (*fn)(const char *host, void *user), void *user,
                          long *budget);
/* The message for a conf_hostlist_* error of key=value at file:line
 * (WHALE_EINVAL, WHALE_ERANGE, WHALE_ETOOLONG; budget as passed), returned as WHALE_ECONF;
 * other codes (WHALE_ENOMEM, fn's) pass through unprinted. */
int conf_hostlist_error(const char *file, int line, const char *key, const char *value, int rc,
                        const long *budget);

/* "mlx5_[0-3]:1,eth0" -> names (one bracket group per item, ranges and
 * commas inside it, zero padding kept). */
int conf_expand_names(const char *expr, char ***names, int *n);

#endif
