/* Shares that follow the replicas' speeds (see train_shares.h for what a
 * share is): the arithmetic of --dp-shares=auto and --rebalance, kept free
 * of communication so that it is tested on synthetic times.
 *
 * Every rank feeds the same per-replica measurements (agreed over the job
 * by an allreduce) into the same functions, so every rank reaches the same
 * decision at the same step and computes the same shares: no extra vote.
 *
 * Speed of a replica = samples it computed / seconds of compute (waiting in
 * collectives excluded), smoothed by an exponential moving average. The
 * shares are worth changing when the step predicted under the current
 * shares is more than `threshold` slower than under the shares the speeds
 * call for (whole units: micro-batches); that for `patience` steps in a row,
 * so that a single noisy step never moves the batch. */
#ifndef WHALE_TRAIN_BALANCE_H
#define WHALE_TRAIN_BALANCE_H

#include <stdbool.h>

/* `units` over n replicas in proportion to speed[] (> 0), every replica at
 * least one: largest remainders, ties to the lower index (deterministic).
 * Returns 0, or -1 when units < n or a speed is not a positive number. */
int train_balance_split(const double *speed, int n, long units, long *out);

/* Step time predicted for shares share[] (units) at speed[] (units/s):
 * the slowest replica's. */
double train_balance_step_s(const long *share, const double *speed, int n);

struct train_drift {
    int n;
    double threshold; /* predicted gain that counts, e.g. 0.15 = 15 % faster */
    int patience;     /* steps in a row over the threshold before a rebalance */
    double alpha;     /* weight of the newest step in the moving average */
    double *speed;    /* smoothed units/s per replica (0: nothing measured yet) */
    int over;         /* steps in a row over the threshold so far */
    double gain;      /* the last step's predicted gain (step time now / balanced - 1) */
};

/* 0, or -1 (out of memory, or n < 1). */
int train_drift_init(struct train_drift *d, int n, double threshold, int patience, double alpha);
void train_drift_free(struct train_drift *d);

/* One step: replica r computed units[r] units in compute_s[r] seconds under
 * the shares share[] (units). Returns 1 when the shares should change now
 * (then next[] holds the new ones, summing to the same total), else 0 (next
 * untouched). A replica with no time measured (<= 0) keeps its estimate. */
int train_drift_step(struct train_drift *d, const long *share, const double *compute_s,
                     long *next);

/* After new shares were applied: the count of steps over the threshold
 * starts again (the speeds are kept: they are per unit). */
void train_drift_applied(struct train_drift *d);

#endif
