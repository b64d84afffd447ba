/* The adaptive refresh interval (WHALE_REDUNDANCY_EVERY=auto, the
 * default): the smallest K for which one refresh's cost spread over K steps
 * stays within the target share of a step. Pure: whale-train feeds it the
 * measured times and agrees on the maximum over all ranks (every rank must
 * snapshot the same steps, or no common rollback step exists). */
#include <math.h>

#include "whale/redundancy.h"

int whale_red_adapt_every(double refresh_s, double step_s, double target, int cur, int kmax)
{
    if (kmax < 1)
        kmax = 1;
    if (cur < 1)
        cur = 1;
    if (!(refresh_s >= 0) || !(step_s > 0) || !(target > 0))
        return cur > kmax ? kmax : cur; /* nothing measured yet */
    double k = ceil(refresh_s / (target * step_s) - 1e-9);
    int want = k < 1 ? 1 : k > kmax ? kmax : (int)k;
    /* Up at once; down one step at a time and only when K - 1 would stay
     * inside half the target, so a noisy machine does not flip K at every
     * evaluation. */
    if (want < cur)
        want = refresh_s / (double)(cur - 1) <= 0.5 * target * step_s ? cur - 1 : cur;
    return want;
}
