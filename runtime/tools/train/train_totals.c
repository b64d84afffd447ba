/* The run's totals and every rate whale-train reports (step lines, the
 * progress line, --rank-metrics, the summary).
 *
 * A rate is work over the measured seconds of the same steps: tokens/s and
 * MFU of a step from that step's FLOPs and time; the summary's from the
 * FLOPs, tokens and time of one window, the steps this process timed (a
 * redone step counts its work and its time again, the time lost to a
 * failure and the recovery counts neither).
 *
 * MFU divides by a peak that is itself a measurement (one sgemm on rank 0,
 * on a machine the other ranks may share, or --peak-gflops): a step that
 * runs faster than it proves the peak too low, so the peak is raised to
 * what the step achieved (said once) and MFU never exceeds 1.
 *
 * A rank that joins a running job (a promoted spare) or becomes rank 0
 * after a recovery reports for the whole run: at every recovery the
 * members of the new world take the run's history (start step, first
 * loss, steps computed, checkpoints committed) from the lowest surviving rank,
 * and rank 0 (whoever it is now) keeps appending to the metrics file. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "whale/error.h"
#include "whale/log.h"

#include "train.h"
#include "train_areas.h"

double train_rate(double work, double seconds)
{
    return seconds > 0 && isfinite(seconds) && work > 0 ? work / seconds : 0;
}

double train_mfu(struct train *t, double flops, double seconds)
{
    double gflops = train_rate(flops, seconds) / 1e9;
    if (!(t->peak > 0) || gflops <= t->peak)
        return t->peak > 0 ? gflops / t->peak : 0;
    if (t->rank == 0 && !t->tot.peak_raised)
        whale_warn("MFU: a step ran at %.1f GFLOP/s per rank, above the peak of %.1f GFLOP/s "
                   "%s; MFU is relative to the faster figure from now on (give "
                   "--peak-gflops with the device's real peak for a fixed reference)",
                   gflops, t->peak, t->o.peak_gflops > 0 ? "given by --peak-gflops"
                                    : "measured at the start (other ranks shared the cores)");
    t->tot.peak_raised = true;
    t->peak = gflops;
    return 1;
}

void train_account(struct train *t, bool timed, const struct whale_step_stats *st,
                   double tokens)
{
    struct train_totals *r = &t->tot;
    if (timed) { /* one window for time, tokens and FLOPs */
        r->t_run += st->t_total;
        r->tok_run += tokens;
        r->flops_run += st->flops;
        r->n_tps++;
    }
    r->sum_comm += st->t_comm;
    r->sum_wait += st->t_wait;
    r->done++;
    if (isnan(r->first_loss))
        r->first_loss = st->loss;
    r->last_loss = st->loss;
}

int train_share_peak(struct train *t)
{
    if (t->o.peak_gflops > 0)
        return 0;
    if (t->elastic) { /* rank 0's came with the setup exchange */
        if (te_peak(t->te) > 0)
            t->peak = te_peak(t->te);
        return 0;
    }
    if (!t->ctx || whale_world_size(t->ctx) < 2)
        return 0;
    int64_t bits;
    memcpy(&bits, &t->peak, sizeof bits);
    int rc = whale_broadcast(whale_world(t->ctx), &bits, 1, WHALE_INT64, 0);
    if (rc) {
        whale_error("rank %d: cannot receive rank 0's peak for MFU: %s", t->rank,
                    whale_strerror(rc));
        return 1;
    }
    memcpy(&t->peak, &bits, sizeof bits);
    return 0;
}

/* Rank 0 writes the metrics file; after a recovery that may be another
 * process than before (a promoted spare, or a survivor renumbered by a
 * shrink): it opens the file to append, one that is no longer rank 0
 * closes it. */
static void follow_metrics(struct train *t)
{
    const char *p = t->o.metrics;
    bool want = t->rank == 0 && p && *p;
    if (want && !t->mf) {
        if (!(t->mf = fopen(p, "a")))
            whale_warn("rank 0: cannot append to the metrics file %s after the recovery: %s",
                       p, strerror(errno));
    } else if (!want && t->mf) {
        fclose(t->mf);
        t->mf = NULL;
    }
    te_set_metrics(t->te, t->mf);
}

/* Did the last save this rank started commit? One in flight when a rank
 * died is dropped (the recovery closed every checkpointer, rank 0's waits
 * for its commit, so it is decided by now). A committed save is the
 * directory step-<N> under the root (pruning removes only older ones). */
static bool save_committed(const struct train *t)
{
    if (t->tot.last_save <= 0 || !t->ckc.root)
        return true;
    char p[4096];
    int n = snprintf(p, sizeof p, "%s/step-%08ld", t->ckc.root, t->tot.last_save);
    return n < 0 || (size_t)n >= sizeof p || access(p, F_OK) == 0;
}

enum { H_START, H_LOSS, H_DONE, H_SAVES, H_STALL_US, H_WALL_US, H_N };

int train_history_agree(struct train *t, bool joined)
{
    struct train_totals *r = &t->tot;
    if (!joined && !save_committed(t))
        r->nsaves--, r->last_save = 0;
    int32_t root = joined ? INT32_MAX : t->rank;
    whale_group *w = whale_world(t->ctx);
    int rc = whale_allreduce(w, &root, &root, 1, WHALE_INT32, WHALE_MIN);
    if (!rc && root == INT32_MAX) /* nobody survived: nothing to hand on */
        return 0;
    int64_t h[H_N] = { r->start_step, 0, r->done, r->nsaves,
                       (int64_t)((r->ckpt_stall + r->hist_stall) * 1e6),
                       (int64_t)(train_area_observe_elapsed() * 1e6) };
    memcpy(&h[H_LOSS], &r->first_loss, sizeof r->first_loss);
    if (!rc)
        rc = whale_broadcast(w, h, H_N, WHALE_INT64, root);
    if (rc) { /* a further failure: the next step notices it too */
        whale_warn("rank %d: the run's history could not be exchanged after the recovery (%s): "
                   "the summary counts what this rank saw", t->rank, whale_strerror(rc));
        follow_metrics(t);
        return 0;
    }
    if (joined) {
        r->start_step = h[H_START];
        memcpy(&r->first_loss, &h[H_LOSS], sizeof r->first_loss);
        r->done = h[H_DONE];
        r->nsaves = (int)h[H_SAVES];
        r->hist_stall = h[H_STALL_US] / 1e6;
        train_area_observe_rebase(h[H_WALL_US] / 1e6);
        r->joined = true;
    }
    if (t->o.peak_gflops <= 0 && te_peak(t->te) > t->peak)
        t->peak = te_peak(t->te);
    follow_metrics(t);
    return 0;
}
