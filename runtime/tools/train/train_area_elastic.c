/* The elastic area plugged into whale-train's hooks: fault injection and
 * the in-memory copies (WHALE_FAULT, WHALE_REDUNDANCY_EVERY), the hot
 * spare's wait and promotion, the copy after each step and the recovery of
 * a failed one. The logic lives in train_elastic.c (train_elastic.h); this
 * file maps it onto the area interface (train_areas.h) and sets t->elastic
 * and t->promoted for the core. The core still asks train_elastic.h for
 * rank 0's peak, the checkpoint fence and the copy's metrics fields. */
#include <stdlib.h>

#include "train_areas.h"
#include "whale/env.h"
#include "whale/envnum.h"
#include "whale/log.h"

/* --node-grace S: the recovery window of the membership layer, which reads
 * it from WHALE_NODE_GRACE at whale_init (flags run before it). */
static int set_node_grace(struct train *t, const char *arg)
{
    (void)t;
    long g;
    char v[16];
    if (whale_parse_long(arg, 0, 86400, &g)) {
        fprintf(stderr, "whale-train: --node-grace=%s: expected seconds in 0..86400\n", arg);
        return -1;
    }
    snprintf(v, sizeof v, "%ld", g);
    return setenv(WHALE_ENV_NODE_GRACE, v, 1) ? -1 : 0;
}

static const struct train_opt elastic_opts[] = {
    { "node-grace", 1, set_node_grace },
    { NULL, 0, NULL },
};

static void elastic_usage(FILE *f)
{
    fprintf(f, "  --node-grace S       elastic steps: wait up to S seconds for a rank gone silent\n"
               "                       (link, hang) to come back before dropping its DP replica\n"
               "                       or stopping, when no spare is free (WHALE_NODE_GRACE; srun\n"
               "                       --whale-node-grace, whale.conf NodeGrace=)\n");
}

/* Right after whale_init: the knobs, then a spare waits here until it is
 * promoted (then it carries on as the rank it took) or the step ends. */
static int elastic_ranks(struct train *t)
{
    int rc;
    if ((rc = te_init(&t->te, t->ctx))) /* WHALE_FAULT, WHALE_REDUNDANCY_EVERY */
        return rc;
    t->elastic = te_elastic(t->te);
    if (whale_is_spare(t->ctx) && t->elastic) {
        if (train_offload_lend(&t->off, t->ctx)) /* lends memory while it waits */
            return 1;
        int src = te_spare(t->te, t->ctx); /* 0: promoted into a failed rank's place */
        if (src)
            return src > 0 ? 0 : 1;
        t->promoted = te_promoted(t->te);
    }
    return TRAIN_GO;
}

/* Before the first step: rank 0's peak travels with the setup exchange (a
 * promoted spare holds rank 0's from it); a promoted spare takes the failed
 * rank's state here. */
static int elastic_start(struct train *t)
{
    if (!t->promoted)
        te_set_peak(t->te, t->peak);
    return te_start(t->te, t->ctx, &t->job) ? 1 : TRAIN_GO;
}

static void elastic_step_begin(struct train *t, long step1)
{
    te_step_begin(t->te, step1);
}

/* WHALE_FAULT phase=ckpt: a save is in flight */
static void elastic_ckpt_saved(struct train *t, long step1)
{
    te_ckpt_started(t->te, step1);
}

/* After a completed step: the copy (snapshot + refresh of the holder). */
static int elastic_step_done(struct train *t)
{
    return te_step_done(t->te, t->e) ? 1 : 0;
}

/* A failed step: rebuild and agree on the run's history, then redo. */
static int elastic_step_failed(struct train *t, int rc, long step1, long *redo)
{
    int64_t from;
    int trc = te_recover(t->te, t->ctx, &t->job, rc, step1, &from);
    if (trc)
        return trc > 0 ? 0 : 1;
    if (train_history_agree(t, false))
        return 1;
    *redo = (long)from;
    return TRAIN_GO;
}

const struct train_area train_area_elastic = {
    .name = "elastic",
    .opts = elastic_opts,
    .usage = elastic_usage,
    .ranks = elastic_ranks,
    .start = elastic_start,
    .step_begin = elastic_step_begin,
    .step_done = elastic_step_done,
    .step_failed = elastic_step_failed,
    .ckpt_saved = elastic_ckpt_saved,
};
