/* whale-train's offload and device-memory knobs, kept apart from
 * the rest of the tool: options, their sources (flag > WHALE_* variable >
 * plan), and the metrics they add. */
#ifndef WHALE_TRAIN_OFFLOAD_OPTS_H
#define WHALE_TRAIN_OFFLOAD_OPTS_H

#include <jansson.h>
#include <stdio.h>

#include "whale/engine.h"
#include "whale/planfile.h"

struct train_offload {
    const char *mode;       /* --offload none|optimizer|params */
    const char *target;     /* --whale-offload-target local|spares|HOSTLIST */
    const char *device_mem; /* --device-mem SIZE */
    const char *prefetch;   /* --offload-prefetch N */
    const char *where;      /* resolved target, NULL: local */
    struct whale_offload_target *tgt;
    bool joined;            /* took part in the target's setup collective */
    /* run totals */
    double t_move, t_wait;
    long steps;
    long long arena_peak, host_bytes, moved;
};

/* Option indices (0..3) in the order above. */
enum { TRAIN_OFF_MODE, TRAIN_OFF_TARGET, TRAIN_OFF_DEVMEM, TRAIN_OFF_PREFETCH, TRAIN_OFF_N_ };
extern const char *const train_offload_optnames[TRAIN_OFF_N_];

/* Records one option's value (validated later, with the others). */
void train_offload_opt(struct train_offload *o, int which, const char *value);
/* Fills ec->offload, offload_prefetch, device_mem from flags, then
 * WHALE_OFFLOAD / WHALE_OFFLOAD_PREFETCH / WHALE_DEVICE_MEM /
 * WHALE_OFFLOAD_TARGET, then the plan. A bad value or a target this build
 * cannot reach is reported (option, value, allowed range); returns 0 or
 * -1 (usage error). */
int train_offload_apply(struct train_offload *o, const struct whale_plan *plan,
                        struct whale_engine_config *ec);
void train_offload_usage(FILE *f);
/* Workers, after the engine exists (before a resume): the remote target's
 * collective. Spares: take part and serve until the workers close. */
int train_offload_open(struct train_offload *o, whale_ctx *ctx, whale_engine *e);
/* elastic: no barrier (spares wait in whale_spare_wait); see
 * whale_offload_target_release for when that is safe. */
int train_offload_close(struct train_offload *o, bool elastic);
/* A spare of a non-elastic step: lends memory and serves until the end. */
int train_offload_spare(struct train_offload *o, whale_ctx *ctx);
/* A spare of an elastic step, before whale_spare_wait: takes part in the
 * target's setup and registers the memory it lends; the elastic wait serves
 * the workers' RMA. Released by train_offload_close(o, true) when the wait
 * ended (or, promoted, at the end of the run). Nonzero: every task saw the
 * setup fail (stop). */
int train_offload_lend(struct train_offload *o, whale_ctx *ctx);
/* A worker failing before the setup (or with a remote target it refused):
 * tells the waiting spares, so that they stop too. */
void train_offload_fail(struct train_offload *o, whale_ctx *ctx);
/* Counts one step into the run totals (every rank, every step). */
void train_offload_account(struct train_offload *o, const struct whale_step_stats *st);
/* Adds the step's arena and transfer figures to a metrics line. */
void train_offload_step(json_t *line, const struct whale_step_stats *st);
/* Adds the run's memory and offload figures to the summary. */
void train_offload_summary(const struct train_offload *o, json_t *summary, whale_engine *e,
                           const struct whale_engine_config *ec);

#endif
