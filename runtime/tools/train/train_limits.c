/* The site limits (whale/sitelimits.h) over whale-train's resolved knobs.
 * Flags, WHALE_* variables and the plan each reach ZeRO, offload,
 * recomputation, the micro-batch and the checkpoint interval; the check
 * runs once all of them are resolved (train_setup, after the engine's
 * configuration) so that no source is missed, and names the source of a
 * refused value. */
#include "whale/env.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/sitelimits.h"

#include "train.h"

/* flags > WHALE_* > the plan > defaults, as train_config.c resolves them */
const char *train_source(const struct train *t, bool flag, const char *flag_name, const char *env,
                         bool plan)
{
    const char *e = env ? whale_knob_getenv(env) : NULL;
    if (flag)
        return flag_name;
    if (e && *e)
        return env;
    if (plan && t->have_plan)
        return t->plan_src[0] ? t->plan_src : "the plan";
    return "the default";
}

const char *train_pick(const struct train *t, const char *flag, const char *flag_name,
                       const char *env, const char *plan, const char **src)
{
    const char *e = whale_knob_getenv(env);
    *src = train_source(t, flag != NULL, flag_name, env, plan && *plan);
    if (flag)
        return flag;
    if (e && *e)
        return e;
    return plan && *plan ? plan : e;
}

int train_check_site_limits(const struct train *t)
{
    struct whale_site_limits l;
    if (whale_site_limits_from_env(&l))
        return -1;
    if (!l.present)
        return 0;
    const struct whale_engine_config *ec = &t->ec;
    const struct train_opts *o = &t->o;
    const char *layout = "the step's layout (" WHALE_ENV_TP "/" WHALE_ENV_PP "/" WHALE_ENV_DP ")";
    int bad = 0;
    bad |= whale_site_limits_check(&l, WHALE_LIMIT_MAX_TP, t->tp, layout) != 0;
    bad |= whale_site_limits_check(&l, WHALE_LIMIT_MAX_PP, t->pp, layout) != 0;
    bad |= whale_site_limits_check(&l, WHALE_LIMIT_MAX_DP, t->dp, layout) != 0;
    /* MaxSpares counts spare nodes, which only the plan records (a task
     * sees its own node's tasks, not how many nodes are spares) */
    if (t->have_plan)
        bad |= whale_site_limits_check(&l, WHALE_LIMIT_MAX_SPARES, t->plan.spares,
                                       t->plan_src) != 0;
    bad |= whale_site_limits_check(&l, WHALE_LIMIT_MAX_ZERO, ec->zero_stage, t->src_zero) != 0;
    bad |= whale_site_limits_check(&l, WHALE_LIMIT_MAX_MICROBATCH, t->micro, t->src_micro) != 0;
    bad |= whale_site_limits_check(&l, WHALE_LIMIT_ALLOWED_OFFLOAD, ec->offload,
                                   train_source(t, t->off.mode, "--offload", "WHALE_OFFLOAD",
                                                true)) != 0;
    bad |= whale_site_limits_check(&l, WHALE_LIMIT_ALLOWED_RECOMPUTE, ec->recompute,
                                   train_source(t, o->recompute, "--recompute", NULL, true)) != 0;
    if (t->ckc.every_steps > 0)
        bad |= whale_site_limits_check(&l, WHALE_LIMIT_MIN_CKPT_EVERY, t->ckc.every_steps,
                                       t->src_ckpt) != 0;
    bad |= whale_site_limits_check_seconds(&l, t->ckc.every_seconds, t->src_ckpt) != 0;
    if (bad)
        whale_error("refusing before any step: site limits (%s, whale.conf(5)) bind every source "
                    "of these values, not only the --whale-* options", l.conf);
    return bad ? -1 : 0;
}
