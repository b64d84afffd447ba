/* Shares that follow the replicas' speeds (see train_balance.h). */
#include "train_balance.h"

#include <math.h>
#include <stdlib.h>

int train_balance_split(const double *speed, int n, long units, long *out)
{
    if (n < 1 || units < n)
        return -1;
    for (int i = 0; i < n; i++)
        if (!(speed[i] > 0) || !isfinite(speed[i]))
            return -1;
    /* one unit each, then every further unit to the replica that would
     * finish it first: this minimises the slowest replica's time (the
     * step's) over whole units, and ties go to the lower index */
    for (int i = 0; i < n; i++)
        out[i] = 1;
    for (long u = n; u < units; u++) {
        int best = 0;
        double bt = (out[0] + 1) / speed[0];
        for (int i = 1; i < n; i++) {
            double t = (out[i] + 1) / speed[i];
            if (t < bt) {
                bt = t;
                best = i;
            }
        }
        out[best]++;
    }
    return 0;
}

double train_balance_step_s(const long *share, const double *speed, int n)
{
    double t = 0;
    for (int i = 0; i < n; i++)
        t = fmax(t, share[i] / speed[i]);
    return t;
}

int train_drift_init(struct train_drift *d, int n, double threshold, int patience, double alpha)
{
    *d = (struct train_drift){ .n = n, .threshold = threshold, .patience = patience,
                               .alpha = alpha };
    if (n < 1 || !(d->speed = calloc((size_t)n, sizeof *d->speed)))
        return -1;
    return 0;
}

void train_drift_free(struct train_drift *d)
{
    free(d->speed);
    d->speed = NULL;
}

int train_drift_step(struct train_drift *d, const long *share, const double *compute_s,
                     long *next)
{
    long units = 0;
    bool known = true;
    for (int i = 0; i < d->n; i++) {
        units += share[i];
        if (compute_s[i] > 0 && share[i] > 0) {
            double v = share[i] / compute_s[i];
            d->speed[i] = d->speed[i] > 0 ? d->alpha * v + (1 - d->alpha) * d->speed[i] : v;
        }
        known &= d->speed[i] > 0;
    }
    d->gain = 0;
    if (!known)
        return 0;
    long *cand = malloc(sizeof *cand * (size_t)d->n);
    if (!cand || train_balance_split(d->speed, d->n, units, cand)) {
        free(cand);
        return 0;
    }
    double now = train_balance_step_s(share, d->speed, d->n);
    double bal = train_balance_step_s(cand, d->speed, d->n);
    d->gain = bal > 0 ? now / bal - 1 : 0;
    bool differ = false;
    for (int i = 0; i < d->n; i++)
        differ |= cand[i] != share[i];
    if (differ && d->gain > d->threshold)
        d->over++;
    else
        d->over = 0;
    int due = d->over >= d->patience;
    if (due)
        for (int i = 0; i < d->n; i++)
            next[i] = cand[i];
    free(cand);
    return due;
}

void train_drift_applied(struct train_drift *d)
{
    d->over = 0;
}
