/* DP shares that follow the replicas' measured speeds: --dp-shares=auto
 * (a calibration over the first steps) and --rebalance (re-measured at
 * every step, moved when a replica's speed drifts). The arithmetic is in
 * train_balance.c; this file measures, agrees and applies.
 *
 * Measure: every rank's compute seconds of the step (forward, backward,
 * optimizer, timed by the engine around each layer: the time blocked in DP
 * collectives and pipeline receives is not in it), the slowest rank of each
 * replica, agreed over the job by one allreduce (MAX) of a vector with one
 * entry per replica. With a pipeline a replica is all its stages, and the
 * slowest stage sets its pace: the MAX over the replica's ranks is that
 * stage. Every rank feeds the same vector to the same detector, so all
 * decide the same step and the same shares.
 *
 * What moves: ZeRO 0/1, micro-batches (the count per replica; the size is
 * the same everywhere); ZeRO 2/3, the micro-batch size (they reduce at
 * every micro-batch, so the count stays equal over the replicas).
 *
 * Apply at the step boundary: the engine's micro-batch count and global
 * batch (whale_engine_set_batch) or, where the buffers follow the shape (a
 * new micro-batch size, a pipeline's schedule), the engine built again with
 * the same state (whale_engine_reshape); the data reader's slice (offset,
 * size). The global batch, the sample order and the loss scaling (1 /
 * global batch) do not change, so the loss curve is the one of any other
 * split. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "whale/comm.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"

#include "train.h"
#include "train_areas.h"
#include "train_balance.h"
#include "train_rebalance.h"

#define RB_THRESHOLD 0.15 /* a rebalance must promise a step >= 15 % faster */
#define RB_PATIENCE 3     /* ... for 3 steps in a row */
#define RB_ALPHA 0.5      /* moving average: the newest step weighs half */
#define RB_CALIB_STEPS 2  /* --dp-shares=auto: steps measured after the first */
#define RB_MAX_EVENTS 64  /* rebalances listed in the summary */

static struct {
    const char *spec;   /* --rebalance[=...] as given (NULL: not given) */
    bool on;            /* re-measure and rebalance during the run */
    double threshold;
    int patience;
    bool calib;         /* --dp-shares=auto: calibration pending */
    bool active;
    bool sizes;         /* ZeRO 2/3: the units are micro-batch sizes */
    bool rebuild;       /* the engine is built again to apply new shares */
    long unit;          /* samples per unit: the micro-batch, or the count (ZeRO 2/3) */
    int n;              /* DP replicas */
    long *units;        /* micro-batches (ZeRO 2/3: samples per micro-batch) per replica now */
    long *next;         /* the shares a rebalance moves to */
    double *sec;        /* the agreed compute seconds of a step */
    float *vec;
    long measured;      /* steps fed to the detector */
    struct train_drift d;
    int slow_rank;      /* WHALE_SLOWDOWN (testing) */
    double slow_factor;
    long slow_from;
    json_t *events;     /* rank 0: the rebalances, for the summary */
    long count;
} rb = { .slow_rank = -1 };

static int set_rebalance(struct train *t, const char *a)
{
    (void)t;
    rb.spec = a ? a : "";
    return 0;
}

/* "" (defaults), "off"/"0", or THRESHOLD[:STEPS]. 0, or -1 with a message. */
static int parse_spec(const char *s, const char *what)
{
    rb.threshold = RB_THRESHOLD;
    rb.patience = RB_PATIENCE;
    rb.on = true;
    if (!*s)
        return 0;
    if (!strcmp(s, "off") || !strcmp(s, "0")) {
        rb.on = false;
        return 0;
    }
    char *end;
    errno = 0;
    double th = strtod(s, &end);
    long pat = RB_PATIENCE;
    if (!errno && end != s && *end == ':') {
        char *e2;
        pat = strtol(end + 1, &e2, 10);
        end = e2 == end + 1 ? end : e2;
    }
    if (errno || end == s || *end || !(th >= 0.01 && th <= 10) || pat < 1 || pat > 1000) {
        whale_error("%s=%s: expected THRESHOLD[:STEPS] (threshold 0.01..10, the predicted "
                    "gain of a rebalance: 0.15 = a 15 %% faster step; steps 1..1000 in a row), "
                    "or off", what, s);
        return -1;
    }
    rb.threshold = th;
    rb.patience = (int)pat;
    return 0;
}

/* WHALE_SLOWDOWN=rank=R:factor=F[:step=S]: rank R's compute counts F times
 * (it sleeps the difference) from step S on: a slow node for the tests. */
static int parse_slowdown(void)
{
    const char *s = whale_knob_getenv("WHALE_SLOWDOWN");
    if (!s || !*s)
        return 0;
    int r = -1;
    double f = 0;
    long from = 1;
    char *copy = strdup(s), *save = NULL;
    int bad = !copy;
    for (char *it = copy ? strtok_r(copy, ":", &save) : NULL; it && !bad;
         it = strtok_r(NULL, ":", &save)) {
        char *v = strchr(it, '='), *end = NULL;
        if (!v) {
            bad = 1;
            break;
        }
        v++;
        errno = 0;
        if (!strncmp(it, "rank=", 5))
            r = (int)strtol(v, &end, 10);
        else if (!strncmp(it, "factor=", 7))
            f = strtod(v, &end);
        else if (!strncmp(it, "step=", 5))
            from = strtol(v, &end, 10);
        bad |= !end || end == v || *end || errno;
    }
    free(copy);
    if (bad || r < 0 || !(f >= 1 && f <= 100) || from < 1) {
        whale_error("WHALE_SLOWDOWN=%s: expected rank=R:factor=F[:step=S] (R >= 0, F 1..100, "
                    "S >= 1)", s);
        return -1;
    }
    rb.slow_rank = r;
    rb.slow_factor = f;
    rb.slow_from = from;
    return 0;
}

bool train_rebalance_auto(const struct train *t)
{
    return t->o.dp_shares && !strcmp(t->o.dp_shares, "auto");
}

static int why_not(const struct train *t, const char **why)
{
    const bool sizes = t->ec.zero_stage >= 2, rebuild = sizes || t->grid.pp > 1;
    const long unit = sizes ? t->accum : t->micro;
    *why = t->dp < 2                   ? "DP = 1"
           : t->grid.pp > 1 && t->ec.schedule == WHALE_SCHED_INTERLEAVED
               ? "the interleaved schedule (micro-batches per step stay a multiple of PP)"
           : rebuild && t->ec.offload != WHALE_OFFLOAD_NONE
               ? "--offload with ZeRO 2/3 or PP > 1 (the engine is built again for new shares)"
           : sizes && t->ec.seqpar && t->grid.tp > 1
               ? "--seqpar with ZeRO 2/3 (the micro-batch sizes change)"
           : train_area_data_validating() ? "--val-data (evaluation uses the training split)"
           : t->gbatch / unit < t->dp
               ? (sizes ? "fewer samples per micro-batch than DP replicas"
                        : "fewer micro-batches than DP replicas")
               : NULL;
    return *why != NULL;
}

/* After the engine, data and buffers exist: decide, and learn every
 * replica's share (one allreduce). */
static int rb_start(struct train *t)
{
    const char *env = whale_knob_getenv("WHALE_REBALANCE");
    const bool asked = rb.spec || (env && *env);
    rb.calib = train_rebalance_auto(t);
    if (parse_slowdown())
        return 2;
    if (parse_spec(rb.spec ? rb.spec : env ? env : "", rb.spec ? "--rebalance" : "WHALE_REBALANCE"))
        return 2;
    if (!asked)
        rb.on = rb.calib; /* auto follows the speeds for the whole run */
    if (!rb.on && !rb.calib)
        return TRAIN_GO;
    const char *why;
    if (why_not(t, &why)) {
        whale_error("%s: shares that follow the replicas' speeds need DP > 1 and at least one "
                    "micro-batch (ZeRO 2/3: one sample per micro-batch) per replica; here %s",
                    rb.calib ? "--dp-shares=auto" : "--rebalance", why);
        return 2;
    }
    rb.n = t->dp;
    rb.sizes = t->ec.zero_stage >= 2;
    rb.rebuild = rb.sizes || t->grid.pp > 1;
    rb.unit = rb.sizes ? t->accum : t->micro;
    rb.units = calloc((size_t)rb.n, sizeof *rb.units);
    rb.vec = calloc((size_t)rb.n, sizeof *rb.vec);
    rb.next = calloc((size_t)rb.n, sizeof *rb.next);
    rb.sec = calloc((size_t)rb.n, sizeof *rb.sec);
    if (!rb.units || !rb.vec || !rb.next || !rb.sec ||
        train_drift_init(&rb.d, rb.n, rb.threshold, rb.patience, RB_ALPHA)) {
        whale_error("rank %d: out of memory for the shares of %d DP replicas", t->rank, rb.n);
        return 1;
    }
    rb.vec[t->dp_rank] = (float)(rb.sizes ? t->micro : t->accum);
    int rc = whale_allreduce(whale_world(t->ctx), rb.vec, rb.vec, (size_t)rb.n, WHALE_FLOAT32,
                             WHALE_MAX);
    if (rc) {
        whale_error("rank %d: agreeing on the replicas' shares failed: %s", t->rank,
                    whale_strerror(rc));
        return 1;
    }
    for (int i = 0; i < rb.n; i++)
        rb.units[i] = lrintf(rb.vec[i]);
    if (t->rank == 0 && !(rb.events = json_array()))
        return 1;
    rb.active = true;
    if (t->rank == 0)
        whale_info("DP shares follow the measured speeds:%s%s (threshold %.0f %%, %d steps)",
                   rb.calib ? " calibration over the first steps" : "",
                   rb.on ? ", re-measured every step" : "", 100 * rb.threshold, rb.patience);
    return TRAIN_GO;
}

static void fmt_list(char *buf, size_t n, const long *v, int k)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < k && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%ld", i ? "," : "", v[i]);
}

static json_t *json_longs(const long *v, int k)
{
    json_t *a = json_array();
    for (int i = 0; a && i < k; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

/* The new shares on this rank: engine, data slice, batch buffers. */
static int apply(struct train *t, const long *next)
{
    long *sh = malloc(sizeof *sh * (size_t)rb.n);
    if (!sh)
        return WHALE_ENOMEM;
    for (int i = 0; i < rb.n; i++)
        sh[i] = next[i] * rb.unit;
    struct train_share ts;
    int rc = train_share_of(sh, rb.n, t->dp_rank, t->micro, t->accum, rb.sizes ? 2 : 0,
                            "rebalance", &ts);
    free(sh);
    if (rc)
        return WHALE_EINVAL;
    const int gb = ts.uneven ? (int)ts.global : 0;
    if (rb.rebuild) {
        /* a save in flight still reads the old engine's tensors */
        if (t->ck && (rc = whale_ckpt_fence(t->ck)))
            return rc;
        rc = whale_engine_reshape(&t->e, (int)ts.micro, (int)ts.accum, gb);
    } else {
        rc = whale_engine_set_batch(t->e, (int)ts.accum, gb);
    }
    if (rc)
        return rc;
    size_t bt = (size_t)ts.micro * ts.accum * t->seq;
    int32_t *in = realloc(t->in, bt * sizeof(int32_t));
    if (in)
        t->in = in;
    int32_t *tg = realloc(t->tg, bt * sizeof(int32_t));
    if (tg)
        t->tg = tg;
    if (!in || !tg)
        return WHALE_ENOMEM;
    t->share = ts;
    t->accum = ts.accum;
    t->micro = ts.micro;
    t->ec.micro_batch = (int)ts.micro;
    t->ec.grad_accum = (int)ts.accum;
    t->ec.global_batch = ts.uneven ? (int)ts.global : 0;
    whale_data_close(t->data);
    t->data = NULL;
    t->dc.local_batch = (int)(t->micro * ts.accum);
    t->dc.global_batch = t->ec.global_batch;
    t->dc.offset = (int)ts.offset;
    return whale_data_open(&t->dc, &t->data);
}

static void record(struct train *t, long step1, const char *reason, const long *from,
                   const long *to, double gain, json_t *line)
{
    char a[256], b[256];
    fmt_list(a, sizeof a, from, rb.n);
    fmt_list(b, sizeof b, to, rb.n);
    rb.count++;
    if (t->rank != 0)
        return;
    json_t *sp = json_array();
    for (int i = 0; sp && i < rb.n; i++) /* samples per second */
        json_array_append_new(sp, json_real(rb.d.speed[i] * (double)rb.unit));
    json_t *ev = json_pack("{sIsssososfsoso}", "step", (json_int_t)step1, "reason", reason,
                           "from", json_longs(from, rb.n), "to", json_longs(to, rb.n),
                           "predicted_gain", gain, "speeds", sp, "unit",
                           json_string(rb.sizes ? "micro-batch samples" : "micro-batches"));
    whale_info("rebalance after step %ld (%s): %s per DP replica %s -> %s, predicted step "
               "%.0f %% faster", step1, reason,
               rb.sizes ? "samples per micro-batch" : "micro-batches", a, b, 100 * gain);
    if (!ev)
        return;
    if (line)
        json_object_set(line, "rebalance", ev);
    if (json_array_size(rb.events) < RB_MAX_EVENTS)
        json_array_append(rb.events, ev);
    json_decref(ev);
}

int train_rebalance_step(struct train *t, const struct whale_step_stats *st, long step1,
                         json_t *line)
{
    if (!rb.active)
        return 0;
    if (t->elastic && t->dp != rb.n) {
        /* the replicas changed under an elastic shrink: the shares are the
         * survivors' split from here on */
        if (t->rank == 0)
            whale_warn("DP changed (%d -> %d): shares no longer follow the speeds", rb.n,
                       t->dp);
        rb.active = false;
        return 0;
    }
    /* the engine times compute around each layer's forward and backward
     * and the optimizer: the waits in DP collectives are outside it */
    double c = st->t_compute;
    if (rb.slow_rank == t->rank && step1 >= rb.slow_from && rb.slow_factor > 1) {
        double extra = (rb.slow_factor - 1) * c;
        struct timespec ts = { (time_t)extra, (long)((extra - floor(extra)) * 1e9) };
        nanosleep(&ts, NULL);
        c += extra;
    }
    memset(rb.vec, 0, sizeof *rb.vec * (size_t)rb.n);
    rb.vec[t->dp_rank] = (float)c;
    int rc = whale_allreduce(whale_world(t->ctx), rb.vec, rb.vec, (size_t)rb.n, WHALE_FLOAT32,
                             WHALE_MAX);
    if (rc) {
        whale_error("rank %d: agreeing on the replicas' step times failed: %s", t->rank,
                    whale_strerror(rc));
        return 1;
    }
    if (line) { /* what the decisions see: each replica's compute seconds */
        json_t *a = json_array();
        for (int i = 0; a && i < rb.n; i++)
            json_array_append_new(a, json_real(rb.vec[i]));
        if (a)
            json_object_set_new(line, "replica_compute_s", a);
    }
    if (++rb.measured == 1)
        return 0; /* the first step warms caches: not a speed */
    double *sec = rb.sec;
    long *next = rb.next;
    for (int i = 0; i < rb.n; i++)
        sec[i] = rb.vec[i];
    int due = train_drift_step(&rb.d, rb.units, sec, next);
    const char *reason = "drift";
    if (rb.calib && rb.measured > RB_CALIB_STEPS) {
        /* the calibration: whatever the speeds call for, once */
        rb.calib = false;
        due = !train_balance_split(rb.d.speed, rb.n, t->gbatch / rb.unit, next) &&
              memcmp(next, rb.units, sizeof *next * (size_t)rb.n) != 0;
        reason = "calibration";
        if (due) /* what the calibration promises: the step now over the step then */
            rb.d.gain = train_balance_step_s(rb.units, rb.d.speed, rb.n) /
                            train_balance_step_s(next, rb.d.speed, rb.n) - 1;
    }
    if (!due || (!rb.on && strcmp(reason, "calibration")))
        return 0;
    double gain = rb.d.gain;
    record(t, step1, reason, rb.units, next, gain, line);
    if ((rc = apply(t, next))) {
        whale_error("rank %d: applying the new DP shares failed: %s", t->rank,
                    whale_strerror(rc));
        return 1;
    }
    memcpy(rb.units, next, sizeof *next * (size_t)rb.n);
    train_drift_applied(&rb.d);
    return 0;
}

static void rb_report(struct train *t, json_t *summary)
{
    (void)t;
    if (!rb.events)
        return;
    json_object_set_new(summary, "rebalances", json_integer(rb.count));
    json_object_set(summary, "rebalance_events", rb.events);
    json_t *now = json_longs(rb.units, rb.n);
    if (now)
        json_object_set_new(summary, "dp_shares_final", now);
}

static int rb_teardown(struct train *t, int rc)
{
    (void)t;
    free(rb.units);
    free(rb.vec);
    free(rb.next);
    free(rb.sec);
    rb.units = rb.next = NULL;
    rb.vec = NULL;
    rb.sec = NULL;
    train_drift_free(&rb.d);
    json_decref(rb.events);
    rb.events = NULL;
    return rc;
}

static void rb_usage(FILE *f)
{
    fprintf(f,
"  --rebalance[=TH[:K]] re-measure every DP replica's compute time each step and move\n"
"                       micro-batches to the faster replicas when the step would be TH\n"
"                       faster (default 0.15) for K steps in a row (default 3); off: never\n"
"                       (ZeRO 2/3: samples per micro-batch move instead; PP > 1 or\n"
"                       ZeRO 2/3 build the engine again; on with --dp-shares=auto;\n"
"                       WHALE_REBALANCE)\n");
}

static const struct train_opt rb_opts[] = {
    { "rebalance", 2 /* optional_argument */, set_rebalance },
    { NULL, 0, NULL },
};

const struct train_area train_area_rebalance = {
    .name = "rebalance",
    .opts = rb_opts,
    .usage = rb_usage,
    .start = rb_start,
    .report = rb_report,
    .teardown = rb_teardown,
};
