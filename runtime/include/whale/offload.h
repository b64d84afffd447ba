/* Where offloaded optimizer state lives (--whale-offload-target):
 *   local     this process's host memory (the engine's host tier; default)
 *   spares    the host memory of the step's hot-spare tasks, reached with RMA
 *             through UCX (whale/comm.h regions): spares register memory for
 *             the workers assigned to them (round robin in task order) and
 *             keep serving it while they wait
 *   HOSTLIST  the same, with the spare tasks on those nodes (node[3-4])
 * The engine's host AdamW still runs on the worker: per bucket it fetches
 * master weights and moments, updates, and puts them back. */
#ifndef WHALE_OFFLOAD_H
#define WHALE_OFFLOAD_H

#include "whale/comm.h"
#include "whale/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct whale_offload_target whale_offload_target;

/* Collective over whale_all_tasks(ctx): every task of the step calls it
 * with the same target; workers pass their engine (created, before the first
 * step and before a resume), spares pass NULL. "local" (or NULL) returns 0
 * with *out = NULL and no communication. Refuses (every task alike) a target
 * without a spare task to hold the state, naming what is missing. */
int whale_offload_target_open(whale_ctx *ctx, const char *target, whale_engine *e,
                              whale_offload_target **out);
/* A worker that fails before it could call open (bad option, model that
 * does not fit, ...) calls this instead, so that the spares waiting in the
 * collective learn it and stop rather than wait. Returns WHALE_ECANCELED. */
int whale_offload_target_abort(whale_ctx *ctx, const char *target);
/* Spares: serve the registered memory until every worker has closed (the
 * wait progresses RMA over tcp), then release it. Workers: close after the
 * last step. Collective over whale_all_tasks(ctx). NULL is a no-op. */
int whale_offload_target_close(whale_offload_target *t);
/* Not collective: releases the handles and (spares) the lent memory. For
 * elastic steps, where spares wait in whale_spare_wait rather than in a
 * barrier: workers call it after their last step (every put to the spare
 * was flushed by the step that issued it), spares after whale_spare_wait
 * returned WHALE_EDONE (every rank finalized: no access can follow) or at
 * the end of the run when they were promoted. NULL is a no-op. */
void whale_offload_target_release(whale_offload_target *t);
/* Bytes this task serves for others (spares) or keeps remotely (workers). */
size_t whale_offload_target_bytes(const whale_offload_target *t);

#ifdef __cplusplus
}
#endif
#endif
