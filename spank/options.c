/* Option table. One row per --whale-* option: its type, absolute range or
 * allowed names, and where the value goes. Callbacks run in srun/sbatch and
 * again in slurmstepd (remote=1), possibly twice with the same value, so
 * they only parse and record. Site limits are checked later, once the
 * site config is loaded (whale_options_check_site). */
#include "plugin.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct whale_opts whale_opts = { .tp = 1, .pp = 1, .ep = 1, .cp = 1 };

enum opt_kind { K_FLAG, K_INT, K_ENUM, K_STR };

struct optdef {
    int id;
    const char *name;
    const char *arginfo;
    const char *usage;
    enum opt_kind kind;
    long min, max;                       /* K_INT */
    int (*parse)(const char *, int *);   /* K_ENUM */
    const char *choices;                 /* K_ENUM, for messages */
    void *field;                         /* int*, char[1024], bool* */
};

static int parse_map(const char *s, int *v)
{
    enum whale_map_policy m;
    int rc = whale_map_policy_parse(s, &m);
    *v = (int)m;
    return rc;
}

static int parse_recompute(const char *s, int *v)
{
    enum whale_recompute r;
    /* "layers" needs a per-layer list: only through a plan file */
    int rc = whale_recompute_parse(s, &r);
    if (!rc && r == WHALE_RECOMPUTE_LAYERS)
        return -1;
    *v = (int)r;
    return rc;
}

static int parse_offload(const char *s, int *v)
{
    enum whale_offload o;
    int rc = whale_offload_parse(s, &o);
    *v = (int)o;
    return rc;
}

static int parse_precision(const char *s, int *v)
{
    enum whale_precision pr;
    int rc = whale_precision_parse(s, &pr);
    *v = (int)pr;
    return rc;
}

static const struct optdef optdefs[] = {
    { OPT_ENABLE, "whale", NULL,
      "Run this step with Whale (defaults: TP=1, PP=1, DP = tasks).", K_FLAG, 0, 0, NULL, NULL,
      NULL },
    { OPT_TP, "whale-tp", "N", "Tensor-parallel degree (each TP group inside one NVLink domain).",
      K_INT, 1, 65536, NULL, NULL, &whale_opts.tp },
    { OPT_PP, "whale-pp", "N", "Pipeline-parallel degree.", K_INT, 1, 65536, NULL, NULL,
      &whale_opts.pp },
    { OPT_DP, "whale-dp", "N", "Data-parallel degree (default: working tasks / (TP*PP)).", K_INT, 1,
      1 << 24, NULL, NULL, &whale_opts.dp },
    { OPT_EP, "whale-ep", "N",
      "Expert-parallel degree (default 1): divides DP; each expert group is EP consecutive DP "
      "ranks.", K_INT, 1, 1 << 24, NULL, NULL, &whale_opts.ep },
    { OPT_SPARES, "whale-spares", "N", "Hot-spare nodes held back inside the step (default 0).",
      K_INT, 0, 65536, NULL, NULL, &whale_opts.spares },
    { OPT_MAP, "whale-map", "topo|block",
      "Rank placement: topology-aware (default) or plain task order.", K_ENUM, 0, 0, parse_map,
      "topo, block", &whale_opts.map },
    { OPT_PLAN, "whale-plan", "FILE|auto",
      "Plan JSON fixing degrees and runtime knobs (whale-plan --json), or auto: search the "
      "fastest plan that fits on this step's nodes (needs --whale-model, --whale-batch).",
      K_STR, 0, 0, NULL, NULL, whale_opts.plan_file },
    { OPT_ZERO, "whale-zero", "0..3", "ZeRO stage.", K_INT, 0, 3, NULL, NULL, &whale_opts.zero },
    { OPT_MICROBATCH, "whale-microbatch", "N", "Sequences per micro-batch.", K_INT, 1, 1 << 20,
      NULL, NULL, &whale_opts.microbatch },
    { OPT_RECOMPUTE, "whale-recompute", "none|selective|full|auto", "Activation recomputation.",
      K_ENUM, 0, 0, parse_recompute, "none, selective, full, auto", &whale_opts.recompute },
    { OPT_OFFLOAD, "whale-offload", "none|optimizer|params", "Offload to host memory.", K_ENUM, 0,
      0, parse_offload, "none, optimizer, params", &whale_opts.offload },
    { OPT_CKPT_DIR, "whale-ckpt-dir", "PATH", "Checkpoint directory (%u = user, %j = job id).",
      K_STR, 0, 0, NULL, NULL, whale_opts.ckpt_dir },
    { OPT_CKPT_EVERY, "whale-ckpt-every", "N", "Checkpoint every N steps.", K_INT, 1, INT_MAX,
      NULL, NULL, &whale_opts.ckpt_every },
    { OPT_VERBOSE, "whale-verbose", NULL, "Print the chosen layout.", K_FLAG, 0, 0, NULL, NULL,
      &whale_opts.verbose },
    { OPT_CONF, "whale-conf", "FILE",
      "Use another whale.conf (only where the site sets AllowUserConfig=yes).", K_STR, 0, 0, NULL,
      NULL, whale_opts.conf },
    { OPT_MODEL, "whale-model", "NAME|FILE",
      "Model preset or file: with --whale-plan=auto the plan is searched for it; with explicit "
      "degrees they are checked against device memory before any task starts.", K_STR, 0, 0,
      NULL, NULL, whale_opts.model },
    { OPT_BATCH, "whale-batch", "N",
      "Global batch in sequences per step (planner; default with --whale-model: the plan's).",
      K_INT, 1, 1 << 30, NULL, NULL, &whale_opts.batch },
    { OPT_OFFLOAD_TARGET, "whale-offload-target", "local|spares|HOSTLIST",
      "Where offloaded state (optimizer state; with --whale-offload=params also the ZeRO-3 "
      "weight shard) lives: this task's host memory (default), the step's hot-spare tasks, or "
      "the spare tasks on the listed nodes (over UCX RMA).", K_STR, 0, 0,
      NULL, NULL, whale_opts.offload_target },
    { OPT_PRECISION, "whale-precision", "fp32|bf16|fp16",
      "Training precision: bf16/fp16 mixed precision (16-bit weights in compute, activations "
      "and gradients; fp32 master weights and optimizer state) or fp32.", K_ENUM, 0, 0,
      parse_precision, "fp32, bf16, fp16", &whale_opts.precision },
    { OPT_NODE_GRACE, "whale-node-grace", "SECONDS",
      "Elastic steps: when a node goes silent (link, hang) and no spare is free, wait this long "
      "for it to come back before shrinking DP or stopping (default: the site's NodeGrace, "
      "else 0).", K_INT, 0, 86400, NULL, NULL, &whale_opts.node_grace },
};
#define NOPTS ((int)(sizeof optdefs / sizeof optdefs[0]))

static const struct optdef *optdef_of(int id)
{
    for (int i = 0; i < NOPTS; i++)
        if (optdefs[i].id == id)
            return &optdefs[i];
    return NULL;
}

const char *whale_option_name(int id)
{
    const struct optdef *d = optdef_of(id);
    return d ? d->name : "whale-?";
}

void (*whale_refuse_early)(void);

/* A bad value: the message is out; no "Invalid --whale-x argument" after it
 * where the plugin may stop srun/sbatch/salloc itself (plugin.h). */
static int refuse(int remote)
{
    if (!remote && whale_refuse_early)
        whale_refuse_early();
    return -1;
}

static int opt_cb(int val, const char *optarg, int remote)
{
    const struct optdef *d = optdef_of(val);
    if (!d) {
        slurm_error(PLUGIN_NAME ": unknown option id %d", val);
        return refuse(remote);
    }
    switch (d->kind) {
    case K_FLAG:
        if (d->field)
            *(bool *)d->field = true;
        break;
    case K_INT: {
        if (!optarg || !*optarg) {
            slurm_error(PLUGIN_NAME ": --%s needs a value (%ld..%ld)", d->name, d->min, d->max);
            return refuse(remote);
        }
        char *end;
        errno = 0;
        long v = strtol(optarg, &end, 10);
        if (*end || errno == ERANGE) {
            slurm_error(PLUGIN_NAME ": --%s=%s: not an integer (allowed %ld..%ld)", d->name,
                        optarg, d->min, d->max);
            return refuse(remote);
        }
        if (v < d->min || v > d->max) {
            slurm_error(PLUGIN_NAME ": --%s=%s: out of range (allowed %ld..%ld)", d->name, optarg,
                        d->min, d->max);
            return refuse(remote);
        }
        *(int *)d->field = (int)v;
        break;
    }
    case K_ENUM: {
        int v;
        if (!optarg || d->parse(optarg, &v)) {
            slurm_error(PLUGIN_NAME ": --%s=%s: must be one of %s", d->name,
                        optarg ? optarg : "", d->choices);
            return refuse(remote);
        }
        *(int *)d->field = v;
        break;
    }
    case K_STR:
        if (!optarg || !*optarg) {
            slurm_error(PLUGIN_NAME ": --%s needs a value", d->name);
            return refuse(remote);
        }
        if (val == OPT_CONF && optarg[0] != '/') {
            /* slurmstepd reads it on every node, from its own working dir */
            slurm_error(PLUGIN_NAME ": --whale-conf=%s: give an absolute path", optarg);
            return refuse(remote);
        }
        if (strlen(optarg) >= 1024) {
            slurm_error(PLUGIN_NAME ": --%s: value longer than 1023 characters", d->name);
            return refuse(remote);
        }
        snprintf((char *)d->field, 1024, "%s", optarg);
        break;
    }
    whale_opts.given[val] = true;
    whale_opts.enabled = true;
    return 0;
}

int whale_options_register(spank_t sp)
{
    for (int i = 0; i < NOPTS; i++) {
        const struct optdef *d = &optdefs[i];
        struct spank_option o = {
            .name = (char *)d->name,
            .arginfo = (char *)d->arginfo,
            .usage = (char *)d->usage,
            .has_arg = d->kind == K_FLAG ? 0 : 1,
            .val = d->id,
            .cb = (spank_opt_cb_f)opt_cb,
        };
        spank_err_t e = spank_option_register(sp, &o);
        if (e != ESPANK_SUCCESS) {
            slurm_error(PLUGIN_NAME ": cannot register --%s: %s", d->name, spank_strerror(e));
            return -1;
        }
    }
    return 0;
}

static int over_limit(int id, long v, long limit, const char *key)
{
    if (limit > 0 && whale_opts.given[id] && v > limit) {
        slurm_error(PLUGIN_NAME ": --%s=%ld exceeds the site limit %s=%ld (%s)", whale_option_name(id),
                    v, key, limit, whale_site.used_path ? whale_site.used_path : "whale.conf");
        return 1;
    }
    return 0;
}

int whale_options_check_site(const struct whale_conf *c)
{
    const struct whale_opts *o = &whale_opts;
    if (over_limit(OPT_TP, o->tp, c->max_tp, "MaxTP") || over_limit(OPT_PP, o->pp, c->max_pp, "MaxPP") ||
        over_limit(OPT_DP, o->dp, c->max_dp, "MaxDP") ||
        over_limit(OPT_SPARES, o->spares, c->max_spares, "MaxSpares") ||
        over_limit(OPT_MICROBATCH, o->microbatch, c->max_microbatch, "MaxMicrobatch") ||
        over_limit(OPT_ZERO, o->zero, c->max_zero, "MaxZero"))
        return -1;
    if (c->max_spares == 0 && o->spares > 0) {
        slurm_error(PLUGIN_NAME ": --whale-spares=%d: spare nodes are disabled on this site "
                    "(MaxSpares=0 in %s)", o->spares, whale_site.used_path);
        return -1;
    }
    if (o->given[OPT_RECOMPUTE] && !(c->allowed_recompute & (1u << o->recompute))) {
        slurm_error(PLUGIN_NAME ": --whale-recompute=%s is not allowed on this site "
                    "(AllowedRecompute in %s)", whale_recompute_name(o->recompute), whale_site.used_path);
        return -1;
    }
    if (o->given[OPT_OFFLOAD] && !(c->allowed_offload & (1u << o->offload))) {
        slurm_error(PLUGIN_NAME ": --whale-offload=%s is not allowed on this site "
                    "(AllowedOffload in %s)", whale_offload_name(o->offload), whale_site.used_path);
        return -1;
    }
    if (o->given[OPT_OFFLOAD_TARGET] && strcmp(o->offload_target, "local")) {
        char **names = NULL;
        int n = 0;
        bool bad = strcmp(o->offload_target, "spares") &&
                   (whale_hostlist_expand(o->offload_target, &names, &n) || n <= 0);
        for (int i = 0; i < n; i++)
            free(names[i]);
        free(names);
        if (bad) {
            slurm_error(PLUGIN_NAME ": --whale-offload-target=%s: expected local, spares or a "
                        "host list such as node[3-4]", o->offload_target);
            return -1;
        }
        if (o->spares <= 0) {
            slurm_error(PLUGIN_NAME ": --whale-offload-target=%s keeps optimizer state in the "
                        "memory of hot-spare tasks: add --whale-spares=N", o->offload_target);
            return -1;
        }
        if (o->given[OPT_OFFLOAD] && o->offload == WHALE_OFFLOAD_NONE) {
            slurm_error(PLUGIN_NAME ": --whale-offload-target=%s needs --whale-offload=optimizer "
                        "or params (not none)", o->offload_target);
            return -1;
        }
    }
    if (o->given[OPT_CKPT_EVERY] && c->min_ckpt_every > 0 && o->ckpt_every < c->min_ckpt_every) {
        slurm_error(PLUGIN_NAME ": --whale-ckpt-every=%d is below the site minimum "
                    "MinCkptEvery=%d (%s)", o->ckpt_every, c->min_ckpt_every, whale_site.used_path);
        return -1;
    }
    return 0;
}
