/* The engine's data-parallel table over NCCL on the cuda device (ecomm_dev.c). */
#ifndef ENGINE_ECOMM_DEV_H
#define ENGINE_ECOMM_DEV_H

#include <stdbool.h>

#include "whale/par_comm.h"
#include "whale/backend.h"

/* Turns c (over a whale_group, from eng_groups_from_ctx) into the NCCL
 * table; size <= 1: nothing to do. */
int  eng_dev_comm_dp(struct whale_par_comm *c);
bool eng_dev_comm_is(const struct whale_par_comm *c);
/* The backend whose stream the collectives run on (after it is open). */
void eng_dev_comm_bind(struct whale_par_comm *c, whale_backend *bk);
/* Back to the group table; frees the stream. */
void eng_dev_comm_free(struct whale_par_comm *c);

#endif
