/* Site limits on a step's degrees (whale/conf.h), shared by the tools that
 * lay out steps offline, so that they never show a layout the plugin
 * refuses. The plugin itself reports the same limits per option
 * (spank/options.c) and per plan (spank/trust.c). */
#include <stdbool.h>

#include "whale/conf.h"
#include "whale/error.h"
#include "whale/log.h"

/* lim < 0: no limit; lim == 0: no limit unless zero_limits (MaxSpares=0
 * disables spares, MaxTP=0 means unlimited: conf.c's defaults) */
static int over(const struct whale_conf *c, const char *key, int v, int lim, const char *name,
                bool zero_limits)
{
    if (v <= 0 || lim < 0 || (lim == 0 && !zero_limits) || v <= lim)
        return 0;
    whale_error("%s=%d exceeds the site limit %s=%d (%s)", key, v, name, lim,
                c->path ? c->path : "whale.conf");
    return 1;
}

int whale_conf_check_degrees(const struct whale_conf *c, int tp, int pp, int dp, int spares)
{
    if (over(c, "tp", tp, c->max_tp, "MaxTP", false) ||
        over(c, "pp", pp, c->max_pp, "MaxPP", false) ||
        over(c, "dp", dp, c->max_dp, "MaxDP", false) ||
        over(c, "spares", spares, c->max_spares, "MaxSpares", true))
        return WHALE_EINVAL;
    return 0;
}
