/* whale-run's embedded PMIx server (one node, every task local). */
#ifndef WHALE_RUN_PMIX_HOST_H
#define WHALE_RUN_PMIX_HOST_H

#include <stdbool.h>

struct pmix_host;

/* Start the server and register a namespace of ntasks local clients. */
int pmix_host_start(int ntasks, struct pmix_host **out);
/* Add the PMIx variables task needs to *env (NULL-terminated, malloc'd
 * strings; the array may be reallocated). */
int pmix_host_child_env(struct pmix_host *h, int task, char ***env);
/* Set when a client called PMIx_Abort: the status it gave, else 0. */
int pmix_host_abort_status(struct pmix_host *h, bool *aborted);
void pmix_host_stop(struct pmix_host *h);

#endif
