/* The observability area plugged into whale-train's hooks: its
 * options and help, system metrics and Prometheus every step, the summary
 * for people and the cost at the end. The logic lives in train_observe.c
 * (and train_sysmon.c, train_nvml.c, train_prom.c, train_cost.c); the
 * state is this file's, one run per process. */
#include <math.h>
#include <string.h>

#include "train_areas.h"
#include "train_observe.h"

static struct train_observe obs;
static bool obs_ready;

static struct train_observe *state(void)
{
    if (!obs_ready) {
        train_observe_defaults(&obs);
        obs_ready = true;
    }
    return &obs;
}

#define OBS_SET(fn, which)                                                                        \
    static int fn(struct train *t, const char *a)                                                 \
    {                                                                                             \
        (void)t;                                                                                  \
        return train_observe_opt(state(), which, a) ? -1 : 0;                                     \
    }
OBS_SET(set_prom_file, TRAIN_OBS_PROM_FILE)
OBS_SET(set_prom_every, TRAIN_OBS_PROM_EVERY)
OBS_SET(set_prom_port, TRAIN_OBS_PROM_PORT)
OBS_SET(set_prom_bind, TRAIN_OBS_PROM_BIND)
OBS_SET(set_price_node, TRAIN_OBS_PRICE_NODE)
OBS_SET(set_price_gpu, TRAIN_OBS_PRICE_GPU)
OBS_SET(set_rank_metrics, TRAIN_OBS_RANK_METRICS)

static const struct train_opt observe_opts[] = {
    { "prom-file", 1, set_prom_file },
    { "prom-every", 1, set_prom_every },
    { "prom-port", 1, set_prom_port },
    { "prom-bind", 1, set_prom_bind },
    { "price-per-node-hour", 1, set_price_node },
    { "price-per-gpu-hour", 1, set_price_gpu },
    { "rank-metrics", 0, set_rank_metrics },
    { NULL, 0, NULL },
};

static int configure(struct train *t)
{
    (void)t;
    return train_observe_check(state()) ? 2 : TRAIN_GO;
}

static double ckpt_seen; /* t->tot.ckpt_stall at the previous step */

static int setup(struct train *t)
{
    ckpt_seen = t->tot.ckpt_stall;
    return train_observe_start(state(), t->rank, t->world, t->ctx ? whale_nnodes(t->ctx) : 1,
                               t->o.metrics) ? 1 : TRAIN_GO;
}

static void step(struct train *t, const struct whale_step_stats *st, json_t *line)
{
    struct whale_train_state ts;
    whale_engine_get_state(t->e, &ts);
    double tokens = (double)t->gbatch * t->seq;
    struct train_obs_step os = {
        .step = (long)ts.step, .loss = st->loss, .grad_norm = st->grad_norm, .lr = st->lr,
        .tokens = tokens, .tokens_per_s = train_rate(tokens, st->t_total),
        .mfu = train_mfu(t, st->flops, st->t_total), .step_s = st->t_total,
        .compute_s = st->t_compute, .comm_s = st->t_comm, .wait_s = st->t_wait,
        .pipe_wait_s = st->t_pipe_wait, .recompute_s = st->t_recompute,
        .data_wait_s = t->data_wait_s, .ckpt_s = t->tot.ckpt_stall - ckpt_seen,
    };
    ckpt_seen = t->tot.ckpt_stall;
    train_observe_step(state(), line, &os);
}

double train_area_observe_elapsed(void)
{
    return train_observe_elapsed(state());
}

void train_area_observe_rebase(double elapsed)
{
    train_observe_rebase(state(), elapsed);
}

static void report(struct train *t, json_t *summary)
{
    struct train_observe *o = state();
    o->world = t->world; /* a shrink changed it */
    if (o->rank != 0) /* rank 0 since a recovery: the price was looked up on rank 0 only */
        o->usd_per_hour = train_cost_price(o, o->price_src, sizeof o->price_src);
    double mfu = json_number_value(json_object_get(summary, "mfu"));
    double ovl = json_number_value(json_object_get(summary, "comm_overlap"));
    train_observe_summary(state(), summary, t->o.metrics, mfu, ovl, t->tot.nsaves,
                          t->tot.ckpt_stall + t->tot.hist_stall);
}

static int teardown(struct train *t, int rc)
{
    (void)t;
    train_observe_close(state());
    return rc;
}

const struct train_area train_area_observe = {
    .name = "observe",
    .opts = observe_opts,
    .usage = train_observe_usage,
    .configure = configure,
    .setup = setup,
    .step = step,
    .report = report,
    .teardown = teardown,
};
