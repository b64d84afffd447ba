/* Bootstrap (module-internal API): who am I, who are my peers, and a
 * rendezvous to exchange small blobs with every task of the step.
 *
 * Sources, in order: the WHALE_* contract (set by the SPANK plugin or
 * whale-run), then PMIx (rank, size). Without both the process is a world
 * of one. */
#ifndef WHALE_BOOT_H
#define WHALE_BOOT_H

#include <stdbool.h>
#include <stddef.h>

#include "whale/grid.h"
struct boot {
    int ntasks;            /* all tasks of the step, spares included */
    int task;              /* my task id (= PMIx rank) */
    WHALE_GRID(grid);      /* degrees */
    int world;             /* working ranks */
    int rank;              /* logical rank, -1 for a spare */
    int tp_rank, pp_rank, dp_rank;
    bool spare;
    int *rank_of_task;     /* [ntasks] logical rank or -1 */
    int *task_of_rank;     /* [world] task id */
    int *node_of_task;     /* [ntasks] index into node_names */
    char **node_names;     /* [nnodes] */
    int nnodes;
    bool have_pmix;
    bool detached;         /* left PMIx after the wire-up (boot_detach) */
    void *pmix;            /* pmix_proc_t of this process when have_pmix */
};

/* Read the contract + PMIx; fills everything except the node names (known
 * after the first exchange). Errors are logged. */
int boot_init(struct boot *b);

/* Every task publishes `len` bytes under `key`; on return blobs[t] (malloc'd,
 * lens[t] bytes) holds task t's value for every task. A real barrier. */
/* A real barrier over every task (spares included) through PMIx, outside
 * UCX: 0 or WHALE_EPMIX. */
int boot_fence(struct boot *b);
int boot_exchange(struct boot *b, const char *key, const void *data, size_t len,
                  void ***blobs, size_t **lens);
void boot_free_blobs(int n, void **blobs, size_t *lens);

/* Node name of this process: WHALE_NODE when set (the node the mapper chose,
 * also how whale-run --nodes simulates several nodes), else the host name. */
int boot_node_name(char *buf, size_t len);

/* Fill node_of_task/node_names from every task's node name. */
int boot_set_nodes(struct boot *b, char **names_of_task);

int boot_finalize(struct boot *b);
/* Leave PMIx now and keep the rest (an elastic step, after the wire-up):
 * Slurm 22.05's PMIx server in slurmstepd kills the whole step
 * (slurm_kill_job_step, SIGKILL) when a client it still serves dies
 * without PMIx_Finalize (mpi/pmix _errhandler: "Error handler invoked"),
 * which would turn one failed rank into a failed step. boot_fence is a
 * no-op afterwards. */
int boot_detach(struct boot *b);

/* Parse the contract from an environment lookup function (unit-testable). */
typedef const char *(*boot_getenv_fn)(const char *name, void *user);
int boot_read_contract(struct boot *b, boot_getenv_fn get, void *user, int pmix_size, int pmix_rank);

#endif
