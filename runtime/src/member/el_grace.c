/* The recovery window (WHALE_NODE_GRACE): pure rules, no ctx, no lock.
 *
 * A member declared failed for silence (LINK, or HANG: stopped or stuck)
 * may still be alive with all its state: a link that flapped, a node that
 * froze for a while. When the only decision the survivors could take
 * without it costs something (a DP replica dropped, the step stopped, or
 * this side stopping as a minority), they wait up to the grace period,
 * counted from when each such member was declared failed, for it to be
 * heard again. A member known crashed (CRASH, NODE) lost its state and
 * never comes back into its place; a failure that a free spare absorbs is
 * not worth a wait either. */
#include "member/el_internal.h"
#include "whale/error.h"

bool el_grace_wanted(bool quorum, int decide_rc, const struct whale_membership_event *ev)
{
    if (!quorum || decide_rc == WHALE_ENOFIT)
        return true;
    return decide_rc == 0 && ev && ev->kind == WHALE_RECOVERY_SHRUNK;
}

double el_grace_left(int n, const uint8_t *member, const uint8_t *gone, const bool *hard,
                     const double *gone_at, double grace, double now)
{
    double left = 0;
    if (!(grace > 0))
        return 0;
    for (int t = 0; t < n; t++) {
        if (!member[t] || !gone[t] || hard[t])
            continue;
        double l = gone_at[t] + grace - now;
        if (l > left)
            left = l;
    }
    return left;
}

bool el_grace_may_revive(bool member, bool dead, bool hard, double gone_at, double grace,
                         double now)
{
    return grace > 0 && member && dead && !hard && now - gone_at <= grace;
}
