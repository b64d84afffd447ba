/* The offload area plugged into whale-train's hooks: its options,
 * help text, configuration, setup collective, per-step figures, summary and
 * end. The logic lives in offload_opts.c; a spare lends memory through
 * train_offload_lend before the elastic wait, or train_offload_spare in a
 * non-elastic step (both called from train_setup.c). */
#include "train_areas.h"

static int set_mode(struct train *t, const char *a)
{
    train_offload_opt(&t->off, TRAIN_OFF_MODE, a);
    return 0;
}
static int set_target(struct train *t, const char *a)
{
    train_offload_opt(&t->off, TRAIN_OFF_TARGET, a);
    return 0;
}
static int set_devmem(struct train *t, const char *a)
{
    train_offload_opt(&t->off, TRAIN_OFF_DEVMEM, a);
    return 0;
}
static int set_prefetch(struct train *t, const char *a)
{
    train_offload_opt(&t->off, TRAIN_OFF_PREFETCH, a);
    return 0;
}

static const struct train_opt offload_opts[] = {
    { "offload", 1, set_mode },
    { "whale-offload-target", 1, set_target },
    { "device-mem", 1, set_devmem },
    { "offload-prefetch", 1, set_prefetch },
    { NULL, 0, NULL },
};

static int configure(struct train *t)
{
    return train_offload_apply(&t->off, t->have_plan ? &t->plan : NULL, &t->ec) ? 2 : TRAIN_GO;
}

static int setup(struct train *t)
{
    return train_offload_open(&t->off, t->ctx, t->e) ? 1 : TRAIN_GO;
}

static void step(struct train *t, const struct whale_step_stats *st, json_t *line)
{
    train_offload_account(&t->off, st);
    if (line)
        train_offload_step(line, st);
}

static void report(struct train *t, json_t *summary)
{
    train_offload_summary(&t->off, summary, t->e, &t->ec);
}

static int teardown(struct train *t, int rc)
{
    /* non-elastic spares lending memory wait in close for the workers;
     * elastic ones in whale_spare_wait (no barrier then) */
    if (t->off.tgt && train_offload_close(&t->off, t->elastic))
        rc = 1;
    if (rc && t->ctx && !whale_is_spare(t->ctx))
        train_offload_fail(&t->off, t->ctx); /* spares waiting for the setup stop too */
    return rc;
}

const struct train_area train_area_offload = {
    .name = "offload",
    .opts = offload_opts,
    .usage = train_offload_usage,
    .configure = configure,
    .setup = setup,
    .step = step,
    .report = report,
    .teardown = teardown,
};
