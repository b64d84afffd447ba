/* What slurmstepd (root, every node) accepts from srun (the user's side).
 *
 * srun runs with the user's rights: its environment, any file it names and
 * even the plugin code it runs can be changed by the user (LD_PRELOAD, a
 * modified copy of srun, plain `--export=SLURM_WHALE_PLAN=...`). A digest
 * computed in srun proves nothing: a key srun can read the user can read,
 * and a munge credential only proves the uid, which slurmstepd knows
 * anyway. So slurmstepd treats the plan as untrusted input and checks it
 * itself, against its own copy of the site configuration:
 *   - it comes inline (never a path: nothing user-named is opened),
 *     bounded in size, through SLURM_WHALE_PLAN, which srun forwards
 *     whatever --export says (srun keeps SLURM_* variables);
 *   - every site limit (whale.conf) is enforced again, exactly as srun
 *     does for the same plan;
 *   - it must agree with the --whale-* options, which Slurm itself carries
 *     to slurmstepd in the launch request (not through the environment);
 *   - its degrees must match the step's real task layout (remote.c).
 * A forged plan can therefore ask for nothing the user could not have
 * asked for with options. */
#include "plugin.h"
#include "trust.h"
#include "whale/log.h"

#include <stdio.h>
#include <string.h>

int whale_plan_check_site(const struct whale_conf *c, const struct whale_plan *p,
                          const char *origin)
{
    const char *conf = whale_site.used_path ? whale_site.used_path : "whale.conf";
#define LIMIT(cond, key, val, lim)                                                             \
    if (cond) {                                                                                \
        slurm_error(PLUGIN_NAME ": %s: %s=%d exceeds the site limit %s (%s)", origin, key,     \
                    (int)(val), lim, conf);                                                    \
        return -1;                                                                             \
    }
    char lim[64];
    snprintf(lim, sizeof lim, "MaxTP=%d", c->max_tp);
    LIMIT(c->max_tp > 0 && p->tp > c->max_tp, "tp", p->tp, lim);
    snprintf(lim, sizeof lim, "MaxPP=%d", c->max_pp);
    LIMIT(c->max_pp > 0 && p->pp > c->max_pp, "pp", p->pp, lim);
    snprintf(lim, sizeof lim, "MaxDP=%d", c->max_dp);
    LIMIT(c->max_dp > 0 && p->dp > c->max_dp, "dp", p->dp, lim);
    snprintf(lim, sizeof lim, "MaxZero=%d", c->max_zero);
    LIMIT(p->zero > c->max_zero, "zero", p->zero, lim);
    snprintf(lim, sizeof lim, "MaxSpares=%d", c->max_spares);
    LIMIT(c->max_spares >= 0 && p->spares > c->max_spares, "spares", p->spares, lim);
    snprintf(lim, sizeof lim, "MaxMicrobatch=%d", c->max_microbatch);
    LIMIT(c->max_microbatch > 0 && p->micro_batch > c->max_microbatch, "micro_batch",
          p->micro_batch, lim);
    snprintf(lim, sizeof lim, "MinCkptEvery=%d", c->min_ckpt_every);
    LIMIT(p->ckpt_every > 0 && c->min_ckpt_every > 0 && p->ckpt_every < c->min_ckpt_every,
          "ckpt_every (below)", p->ckpt_every, lim);
#undef LIMIT
    if ((unsigned)p->offload > 31 || !(c->allowed_offload & (1u << p->offload))) {
        slurm_error(PLUGIN_NAME ": %s: offload=%s is not allowed on this site (AllowedOffload in "
                    "%s)", origin, whale_offload_name(p->offload), conf);
        return -1;
    }
    if ((unsigned)p->recompute > 31 || !(c->allowed_recompute & (1u << p->recompute))) {
        slurm_error(PLUGIN_NAME ": %s: recompute=%s is not allowed on this site "
                    "(AllowedRecompute in %s)", origin, whale_recompute_name(p->recompute), conf);
        return -1;
    }
    return 0;
}

/* The options Slurm replayed in slurmstepd must be what the plan says. */
static int agrees(int id, long opt, long plan)
{
    if (whale_opts.given[id] && opt != plan) {
        slurm_error(PLUGIN_NAME ": the step's plan says %s=%ld but --%s=%ld was given: refusing "
                    "a plan srun did not produce", whale_option_name(id), plan,
                    whale_option_name(id), opt);
        return 0;
    }
    return 1;
}

int whale_plan_accept_remote(const char *value, const struct whale_conf *c,
                             struct whale_plan *out)
{
    whale_plan_init(out);
    if (!value) {
        slurm_error(PLUGIN_NAME ": %s is missing from the step: srun ran without the Whale plugin "
                    "(check plugstack.conf on the submit host) or the variable was removed",
                    WHALE_SPANK_PLAN_ENV);
        return -1;
    }
    size_t n = strnlen(value, WHALE_PLAN_MAX_ENV + 1);
    if (n > WHALE_PLAN_MAX_ENV) {
        slurm_error(PLUGIN_NAME ": %s is longer than %d bytes: refused", WHALE_SPANK_PLAN_ENV,
                    WHALE_PLAN_MAX_ENV);
        return -1;
    }
    /* inline JSON only: slurmstepd opens no file named by the user (a FIFO
     * would block it, a huge file would flood it) */
    if (value[0] != '{') {
        slurm_error(PLUGIN_NAME ": %s must hold the plan as inline JSON (srun writes it so); a "
                    "path is not accepted in slurmstepd", WHALE_SPANK_PLAN_ENV);
        return -1;
    }
    if (whale_plan_from_json(value, WHALE_SPANK_PLAN_ENV, out)) {
        slurm_error(PLUGIN_NAME ": the step's plan is not valid (see above)");
        return -1;
    }
    if (whale_plan_validate(out, 0, 0, WHALE_SPANK_PLAN_ENV) ||
        whale_plan_check_site(c, out, "the step's plan")) {
        whale_plan_free(out);
        return -1;
    }
    const struct whale_opts *o = &whale_opts;
    bool from_file = o->given[OPT_PLAN];
    /* with a plan file or auto, only the options given alongside it bind */
    if (!agrees(OPT_TP, o->tp, out->tp) || !agrees(OPT_PP, o->pp, out->pp) ||
        !agrees(OPT_DP, o->dp, out->dp) || !agrees(OPT_SPARES, o->spares, out->spares) ||
        !agrees(OPT_ZERO, o->zero, out->zero) ||
        !agrees(OPT_MICROBATCH, o->microbatch, out->micro_batch) ||
        !agrees(OPT_CKPT_EVERY, o->ckpt_every, out->ckpt_every) ||
        !agrees(OPT_OFFLOAD, o->offload, out->offload) ||
        !agrees(OPT_RECOMPUTE, o->recompute, out->recompute) ||
        !agrees(OPT_MAP, o->map, out->map) ||
        !agrees(OPT_PRECISION, o->precision, out->precision)) {
        whale_plan_free(out);
        return -1;
    }
    /* without a plan file, every knob comes from an option: one not given
     * keeps its default, so a plan that changes it was not made by srun */
    if (!from_file) {
        struct whale_plan d;
        whale_plan_init(&d);
        if ((!o->given[OPT_ZERO] && out->zero != d.zero) ||
            (!o->given[OPT_OFFLOAD] && out->offload != d.offload) ||
            (!o->given[OPT_CKPT_EVERY] && out->ckpt_every != d.ckpt_every) ||
            (!o->given[OPT_TP] && out->tp != 1) || (!o->given[OPT_PP] && out->pp != 1)) {
            slurm_error(PLUGIN_NAME ": the step's plan sets tp=%d pp=%d zero=%d offload=%s "
                        "ckpt_every=%d that no --whale-* option asked for: refusing a plan srun "
                        "did not produce", out->tp, out->pp, out->zero,
                        whale_offload_name(out->offload), out->ckpt_every);
            whale_plan_free(out);
            return -1;
        }
    }
    return 0;
}
