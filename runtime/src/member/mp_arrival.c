/* Adaptive suspicion bound from observed inter-arrival times (mp.h).
 *
 * A fixed timeout is either too short for a loaded node (healthy tasks
 * removed: seen with 5 s at load 25) or too long for a crash. Tracking
 * the mean and variance of the gaps between a peer's answers and
 * suspecting only beyond mean + 6 sd (phi-accrual in its normal
 * approximation, phi ~ 9) follows the peer's actual behaviour: a starved
 * node whose answers come late and irregularly widens its own bound. */
#include <math.h>

#include "member/mp.h"

/* EWMA weight of a new gap: ~the last 16 gaps matter. */
#define ALPHA 0.0625

void mp_arrival_init(struct mp_arrival *a, double now, double expect)
{
    a->mean = expect;
    a->var = 0.0625 * expect * expect;
    a->last = now;
    a->n = 0;
}

void mp_arrival_note(struct mp_arrival *a, double now)
{
    double gap = now - a->last;
    a->last = now;
    if (gap < 0)
        return;
    double d = gap - a->mean;
    a->mean += ALPHA * d;
    a->var = (1 - ALPHA) * (a->var + ALPHA * d * d);
    a->n++;
}

double mp_arrival_bound(const struct mp_arrival *a, double floor)
{
    double sd = sqrt(a->var);
    if (sd < 0.25 * a->mean)
        sd = 0.25 * a->mean;
    double b = a->mean + 6 * sd;
    return b > floor ? b : floor;
}

double mp_own_stall(double *last_poll, double now, double interval)
{
    double gap = now - *last_poll;
    *last_poll = now;
    return gap > 2 * interval ? gap - interval : 0;
}
