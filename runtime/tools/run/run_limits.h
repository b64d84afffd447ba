/* whale-run: resource limits checked before any task starts (run_limits.c). */
#ifndef WHALE_RUN_LIMITS_H
#define WHALE_RUN_LIMITS_H

#include <stddef.h>

#define RUN_FD_BASE 64   /* stdio, PMIx server, UCX, logs */
#define RUN_PROC_BASE 16 /* the launcher's own threads and helpers */

/* Descriptors whale-run holds for ntasks tasks. */
long run_fds_needed(int ntasks);
/* Raises the soft RLIMIT_NOFILE to the hard one when needed; 0 when the
 * tasks fit, else -1 with the reason (limits and the fix) in why. */
int run_check_limits(int ntasks, char *why, size_t n);

#endif
