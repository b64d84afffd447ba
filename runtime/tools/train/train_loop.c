/* whale-train's step loop: one optimizer step, elastic recovery when it
 * fails, the checkpoint when one is due, the metrics line (with each
 * area's fields) and the progress line. A SIGINT/SIGTERM ends the loop
 * after the step in flight. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/clock.h"
#include "whale/outfile.h"

#include "train.h"
#include "train_areas.h"
#include "train_rebalance.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* SIGUSR2: the next checkpoint is a milestone (retention keeps it) */
static volatile sig_atomic_t sigusr2_seen;
static void on_usr2(int sig)
{
    (void)sig;
    sigusr2_seen = 1;
}

bool train_stop_requested(void)
{
    return stop_requested != 0;
}

/* A number for JSON: null where it is not finite (a diverged or absent
 * loss), since json_real() refuses NaN and infinities. */
json_t *train_json_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

double train_peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static void fmt_eta(char *buf, size_t n, double s)
{
    if (s < 0 || !isfinite(s))
        snprintf(buf, n, "--");
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* Whether a save is still in flight on any rank (BUSY=defer): the ranks
 * must agree, or they would save different steps and never commit. */
static int any_in_flight(struct train *t, bool *busy)
{
    float b = whale_ckpt_in_flight(t->ck) ? 1.0f : 0.0f;
    if (t->ctx && whale_world_size(t->ctx) > 1 &&
        whale_allreduce(whale_world(t->ctx), &b, &b, 1, WHALE_FLOAT32, WHALE_MAX))
        return 1;
    *busy = b > 0;
    return 0;
}

/* After step `step1` (1-based): save when due. Returns 0 and the seconds
 * the save stalled the step in *t_ck, or 1 (stop). With BUSY=defer a save
 * due while the previous one is still being written waits for the first
 * step boundary after it ends (at most one save in flight, and the step
 * never blocks on the disk); `force` (the run's last step) waits instead. */
static int step_checkpoint(struct train *t, long step1, double *t_ck, bool force)
{
    *t_ck = 0;
    int due = whale_ckpt_due(t->ck, step1);
    /* a time-based interval is decided on rank 0 (clocks differ) */
    if (t->ckc.every_seconds > 0 && t->ctx && whale_world_size(t->ctx) > 1 &&
        whale_broadcast(whale_world(t->ctx), &due, 1, WHALE_INT32, 0))
        return 1;
    if (!due && !t->tot.ck_deferred)
        return 0;
    if (t->ckc.busy == WHALE_CKPT_BUSY_DEFER && !force) {
        bool busy;
        if (any_in_flight(t, &busy))
            return 1;
        if (busy) {
            if (due && t->tot.ck_deferred && t->rank == 0)
                whale_info("checkpoint of step %ld folded into the postponed one: the "
                           "previous save is still being written", step1);
            t->tot.ck_deferred = true;
            return 0;
        }
    }
    t->tot.ck_deferred = false;
    if (sigusr2_seen) { /* the milestone request: rank 0's commit marks it */
        sigusr2_seen = 0;
        whale_ckpt_mark_milestone(t->ck);
    }
    double t0 = whale_now_s();
    bool skipped = false;
    int sv = whale_ckpt_save_engine(t->ck, t->e, t->plan_json, &skipped);
    train_areas_ckpt_saved(t, step1); /* elastic: WHALE_FAULT phase=ckpt */
    if (sv) {
        whale_error("stopping: checkpoint of step %ld failed (the previous ones are intact)",
                    step1);
        return 1;
    }
    *t_ck = whale_now_s() - t0;
    if (!skipped) {
        t->tot.nsaves++;
        t->tot.last_save = step1;
        t->tot.ckpt_stall += *t_ck;
        t->tot.save_stall = *t_ck;
        t->tot.save_step = step1;
    }
    return 0;
}

/* The stall of the save of step save_step, once complete: its call plus
 * the fences that waited for its snapshot (the next step's optimizer). */
static void close_save_stall(struct train *t, json_t *line)
{
    if (!t->tot.save_step)
        return;
    if (t->tot.save_stall > t->tot.save_stall_max)
        t->tot.save_stall_max = t->tot.save_stall;
    if (line) {
        json_object_set_new(line, "ckpt_save_stall_s", json_real(t->tot.save_stall));
        json_object_set_new(line, "ckpt_save_step", json_integer(t->tot.save_step));
    }
    t->tot.save_step = 0;
}

/* Rank 0's metrics line of a step (NULL without a metrics file). */
static json_t *step_line(struct train *t, long step1, const struct whale_step_stats *st,
                         double tps, double mfu, double t_ck, double cpu_s)
{
    if (!t->mf)
        return NULL;
    json_t *j = json_pack("{sIsososfsfsfsfsfsfsfsfsfsbsf}",
                          "step", (json_int_t)step1, "loss", train_json_num(st->loss),
                          /* JSON has no inf/NaN: null for a skipped step's */
                          "grad_norm", train_json_num(st->grad_norm), "lr", (double)st->lr,
                          "tokens_per_s", tps, "step_s", st->t_total,
                          "compute_s", st->t_compute, "comm_s", st->t_comm,
                          "wait_s", st->t_wait, "overlap", st->overlap, "mfu", mfu,
                          "loss_scale", (double)st->loss_scale, "skipped", st->skipped,
                          "peak_rss_mb", train_peak_rss_mb());
    if (!isfinite(st->grad_norm))
        json_object_set_new(j, "grad_norm", json_null());
    if (t_ck > 0)
        json_object_set_new(j, "ckpt_stall_s", json_real(t_ck));
    if (t->ec.loss_mask) /* the targets the masked loss counted (global batch) */
        json_object_set_new(j, "loss_tokens", json_integer((json_int_t)st->loss_tokens));
    json_object_set_new(j, "pipe_wait_s", json_real(st->t_pipe_wait));
    json_object_set_new(j, "cpu_s", json_real(cpu_s)); /* CPU time of this process */
    json_object_set_new(j, "recompute_s", json_real(st->t_recompute));
    json_object_set_new(j, "act_peak_mb", json_real(st->act_peak_bytes / 1048576.0));
    double red_s, red_b;
    te_step_metrics(t->te, &red_s, &red_b);
    if (red_s > 0) { /* the in-memory copy of this step (elastic steps) */
        json_object_set_new(j, "redundancy_s", json_real(red_s));
        json_object_set_new(j, "redundancy_bytes", json_real(red_b));
    }
    json_object_set_new(j, "precision", json_string(whale_precision_name(t->ec.precision)));
    struct whale_train_state ts2;
    whale_engine_get_state(t->e, &ts2);
    json_object_set_new(j, "skipped_steps", json_integer(ts2.scaler_skipped));
    return j;
}

static void write_line(struct train *t, json_t *j)
{
    if (!j)
        return;
    json_dumpf(j, t->mf, JSON_COMPACT);
    fputc('\n', t->mf);
    whale_output_flush(t->mf);
    json_decref(j);
}

/* Rank 0: the live line on a terminal, else a line every --log-every steps. */
static void step_progress(struct train *t, long step, long first_step,
                          const struct whale_step_stats *st, double tps, double mfu)
{
    const struct train_totals *r = &t->tot;
    double avg = r->n_tps ? r->t_run / r->n_tps : st->t_total;
    char eta[32], val[48]; /* val: the last validation loss (data area) */
    fmt_eta(eta, sizeof eta, avg * (t->o.steps - step - 1));
    train_area_data_progress(val, sizeof val);
    if (t->tty)
        fprintf(stderr, "\rstep %ld/%ld  loss %.4f%s  %.0f tok/s  MFU %.0f%%  ETA %s   ",
                step + 1, t->o.steps, st->loss, val, tps, 100 * mfu, eta);
    else if ((step + 1) % t->o.log_every == 0 || step + 1 == t->o.steps || step == first_step)
        fprintf(stderr, "step %ld/%ld loss %.4f%s grad_norm %.3f lr %.2e %.0f tok/s MFU "
                "%.0f%% ETA %s\n", step + 1, t->o.steps, st->loss, val, st->grad_norm,
                (double)st->lr, tps, 100 * mfu, eta);
}

int train_loop(struct train *t)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGUSR2, on_usr2);
    struct whale_train_state ts;
    whale_engine_get_state(t->e, &ts);
    const long first_step = (long)ts.step;
    if (!t->tot.joined) { /* a promoted spare has the run's history already */
        t->tot.start_step = first_step;
        t->tot.first_loss = NAN;
    }
    t->tot.last_loss = NAN;
    double loop_t0 = whale_now_s();
    if (first_step >= t->o.steps && t->rank == 0) {
        /* a finished run resumed again (a requeued job script): success
         * with nothing to do; the summary keeps only its JSON line */
        if (first_step > 0)
            whale_info("checkpoint is at step %ld >= --steps %ld: nothing to train (raise "
                       "--steps to continue)", first_step, t->o.steps);
        else
            whale_info("--steps %ld: nothing to train", t->o.steps);
    }
    for (long step = first_step; step < t->o.steps && !stop_requested; step++) {
        whale_engine_get_state(t->e, &ts);
        double t_data = whale_now_s();
        if (whale_data_next(t->data, ts.samples, t->in, t->tg))
            return 1;
        t->data_wait_s = whale_now_s() - t_data; /* the data loader's stall of this step */
        struct whale_step_stats st;
        /* copy snapshot: nothing to wait for; deferred: the fence is in the
         * optimizer phase (train_elastic.c), so the copy overlaps this
         * step's forward and backward */
        if (t->ck && ((t->ckc.snapshot != WHALE_CKPT_SNAPSHOT_DEFERRED &&
                       whale_ckpt_fence(t->ck)) || whale_ckpt_poll(t->ck))) {
            whale_error("stopping: a checkpoint failed (the previous ones are intact)");
            return 1;
        }
        struct timespec cpu0, cpu1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
        train_areas_step_begin(t, step + 1);
        if (t->o.inject_overflow == step + 1)
            whale_engine_inject_overflow(t->e);
        int src = whale_engine_step(t->e, t->in, t->tg, &st);
        if (src) { /* the elastic area recovers, or says why the run stops */
            long redo;
            int frc = train_areas_step_failed(t, src, step + 1, &redo);
            if (frc != TRAIN_GO)
                return frc;
            step = redo - 1; /* the loop's step++ makes it redo */
            continue;
        }
        if (train_areas_step_done(t))
            return 1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
        double cpu_s = (cpu1.tv_sec - cpu0.tv_sec) + (cpu1.tv_nsec - cpu0.tv_nsec) * 1e-9;
        double t_ck = 0;
        /* the previous save's deferred snapshot, waited for before this
         * step's optimizer: part of that checkpoint's stall */
        double t_fence = te_take_ckpt_fence_s(t->te);
        t->tot.ckpt_stall += t_fence;
        /* the open save's snapshot is complete after this step's fence (or
         * at its call, copy snapshot): its stall is known */
        bool close_prev = t->tot.save_step != 0;
        t->tot.save_stall += t_fence;
        long prev_save = t->tot.save_step;
        double prev_stall = t->tot.save_stall;
        t->tot.save_step = 0;
        if (t->ck && step_checkpoint(t, step + 1, &t_ck, step + 1 == t->o.steps))
            return 1;
        double tokens = (double)t->gbatch * t->seq;
        double tps = train_rate(tokens, st.t_total);
        double mfu = train_mfu(t, st.flops, st.t_total);
        /* the summary's window: every step after the first (which warms
         * caches), unless the run is one step */
        train_account(t, step > first_step || t->o.steps - first_step == 1, &st, tokens);
        json_t *line = step_line(t, step + 1, &st, tps, mfu, t_ck, cpu_s);
        if (line && t_fence > 0)
            json_object_set_new(line, "ckpt_fence_s", json_real(t_fence));
        if (close_prev) { /* the previous save's, then this step's save stays open */
            long cur = t->tot.save_step;
            double cur_stall = t->tot.save_stall;
            t->tot.save_step = prev_save;
            t->tot.save_stall = prev_stall;
            close_save_stall(t, line);
            t->tot.save_step = cur;
            t->tot.save_stall = cur_stall;
        }
        if (t->tot.save_step && t->ckc.snapshot != WHALE_CKPT_SNAPSHOT_DEFERRED)
            close_save_stall(t, line); /* copied before the call returned */
        train_areas_step(t, &st, line);
        if (train_rebalance_step(t, &st, step + 1, line)) {
            write_line(t, line);
            return 1;
        }
        write_line(t, line);
        if (t->rank == 0)
            step_progress(t, step, first_step, &st, tps, mfu);
    }
    if (t->tty)
        fputc('\n', stderr);
    /* a save postponed behind a running one (BUSY=defer) when the loop
     * ended early (a signal): taken now, at the last finished step */
    whale_engine_get_state(t->e, &ts);
    double t_ck;
    if (t->ck && t->tot.ck_deferred && (long)ts.step > first_step &&
        step_checkpoint(t, (long)ts.step, &t_ck, true))
        return 1;
    close_save_stall(t, NULL); /* the last save's snapshot: fenced at close */
    t->tot.loop_s += whale_now_s() - loop_t0;
    return TRAIN_GO;
}
