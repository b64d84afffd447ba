/* whale-train's feature areas: each brings its options, its --help lines
 * and hooks at fixed points of the run, so that areas never edit each
 * other's code (or whale-train.c). Register an area with one line in
 * train_areas.c. Every hook is optional (NULL). */
#ifndef WHALE_TRAIN_AREAS_H
#define WHALE_TRAIN_AREAS_H

#include <jansson.h>
#include <stdio.h>

#include "train.h"

/* One long option. set() gets the argument (NULL for no_argument) and
 * returns 0, or -1 after printing "whale-train: --opt=VALUE: expected ..."
 * (the run then stops with status 2 once every option was read). */
struct train_opt {
    const char *name;  /* without the leading -- */
    int has_arg;       /* getopt's no_argument / required_argument */
    int (*set)(struct train *t, const char *arg);
};

struct train_area {
    const char *name;
    const struct train_opt *opts; /* ends with { NULL } */
    /* --help lines, printed after the core engine options */
    void (*usage)(FILE *f);
    /* Right after whale_init, before the layout is known: TRAIN_GO, or the
     * exit status of a task that takes no further part (a hot spare whose
     * step ended while it waited). */
    int (*ranks)(struct train *t);
    /* After flags, environment and plan set t->ec, before the engine is
     * created: check this area's knobs, put them into t->ec. Returns
     * TRAIN_GO or the exit status (2: bad value; 1: cannot run). */
    int (*configure)(struct train *t);
    /* Working ranks, once the engine exists (before data, resume and
     * checkpoints): TRAIN_GO or the exit status. */
    int (*setup)(struct train *t);
    /* Working ranks once the engine, data, checkpoints, batch buffers and
     * t->job exist, right before the first step: TRAIN_GO or 1. */
    int (*start)(struct train *t);
    /* Around every step (step1: 1-based): before the engine computes it,
     * and right after it completed (0, or 1 to stop). */
    void (*step_begin)(struct train *t, long step1);
    int (*step_done)(struct train *t);
    /* Every working rank: a checkpoint of step step1 was handed to the
     * saver (it may still be in flight). */
    void (*ckpt_saved)(struct train *t, long step1);
    /* The engine's step failed with rc: the first area with this hook
     * decides. TRAIN_GO with *redo = the 0-based step to compute next, or
     * the exit status (a message said why). */
    int (*step_failed)(struct train *t, int rc, long step1, long *redo);
    /* Every working rank after every completed step; line is this step's
     * metrics line (add fields, never rename) or NULL where no metrics
     * file is written (ranks other than 0). */
    void (*step)(struct train *t, const struct whale_step_stats *st, json_t *line);
    /* Rank 0: add fields to the final summary object. */
    void (*report)(struct train *t, json_t *summary);
    /* Every task at the end, before the engine and ranks go; returns the
     * exit status (rc, or 1 where this area's own end failed). */
    int (*teardown)(struct train *t, int rc);
};

extern const struct train_area *const train_areas[];

/* Run a hook of every area in order (train_areas.c). */
int train_areas_ranks(struct train *t);
int train_areas_configure(struct train *t);
int train_areas_setup(struct train *t);
int train_areas_start(struct train *t);
void train_areas_step_begin(struct train *t, long step1);
int train_areas_step_done(struct train *t);
int train_areas_step_failed(struct train *t, int rc, long step1, long *redo);
void train_areas_ckpt_saved(struct train *t, long step1);
void train_areas_step(struct train *t, const struct whale_step_stats *st, json_t *line);
void train_areas_report(struct train *t, json_t *summary);
int train_areas_teardown(struct train *t, int rc);
void train_areas_usage(FILE *f);

/* The areas. */
extern const struct train_area train_area_offload;
extern const struct train_area train_area_device;
extern const struct train_area train_area_observe;
extern const struct train_area train_area_models;
extern const struct train_area train_area_data;
extern const struct train_area train_area_moe;
extern const struct train_area train_area_elastic;
extern const struct train_area train_area_rebalance;
/* The data area's two calls from the core (train_area_data.c). */
int train_area_data_ckpt(struct train *t);
const char *train_area_data_progress(char *buf, size_t n);
/* --val-data was given (train_area_data.c) */
bool train_area_data_validating(void);
/* The observe area's wall clock (train_totals.c hands it to a promoted spare). */
double train_area_observe_elapsed(void);
void train_area_observe_rebase(double elapsed);

#endif
