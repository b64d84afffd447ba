/* Internal interface of spank_whale.so: one file per Slurm context
 * (local.c = srun, allocator.c = sbatch/salloc, remote.c = slurmstepd)
 * behind the dispatcher in spank_whale.c; options.c holds the option table
 * and the parsed option state, site.c the plugstack arguments and the site
 * configuration, plan.c the plan built from options or a plan file, mpi.c
 * the PMIx arrangement in srun. */
#ifndef SPANK_WHALE_PLUGIN_H
#define SPANK_WHALE_PLUGIN_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <slurm/spank.h>

#include "whale/conf.h"
#include "whale/planfile.h"

#define PLUGIN_NAME "whale"

/* Option ids (spank_option.val). New options (e.g. the planner's
 * --whale-model) take the next id and one row of the table in options.c. */
enum whale_opt_id {
    OPT_ENABLE = 1,   /* --whale */
    OPT_TP,
    OPT_PP,
    OPT_DP,
    OPT_SPARES,
    OPT_MAP,
    OPT_PLAN,
    OPT_ZERO,
    OPT_MICROBATCH,
    OPT_RECOMPUTE,
    OPT_OFFLOAD,
    OPT_CKPT_DIR,
    OPT_CKPT_EVERY,
    OPT_VERBOSE,
    OPT_CONF,
    OPT_MODEL,        /* --whale-model (planner) */
    OPT_BATCH,        /* --whale-batch (planner) */
    OPT_OFFLOAD_TARGET, /* --whale-offload-target (exported as WHALE_OFFLOAD_TARGET) */
    OPT_PRECISION,    /* --whale-precision */
    OPT_EP,           /* --whale-ep */
    OPT_COUNT_
};

struct whale_opts {
    bool enabled;              /* any --whale* option given */
    bool given[OPT_COUNT_];    /* which options the user set */
    WHALE_GRID(grid);
    int spares;
    enum whale_map_policy map;
    char plan_file[1024];
    int zero, microbatch;
    enum whale_recompute recompute;
    enum whale_offload offload;
    char ckpt_dir[1024];
    int ckpt_every;
    bool verbose;
    char conf[1024];           /* --whale-conf (only when the site allows) */
    char model[1024];          /* --whale-model: preset name or file */
    int batch;                 /* --whale-batch: global batch, sequences per step */
    char offload_target[1024]; /* --whale-offload-target: local | spares | hostlist */
    enum whale_precision precision; /* --whale-precision */
};

extern struct whale_opts whale_opts;

/* A refusal before anything exists (an option value, srun/sbatch/salloc's
 * init_post_opt). Slurm follows a failing callback with generic lines of
 * its own ("Invalid --whale-tp argument: abc", "init_post_opt() failed",
 * "Plugin stack post-option processing failed"); in srun, sbatch and
 * salloc, before any allocation or step exists, the plugin exits instead
 * (status 1) after its own message, so that message stands alone. Set only
 * there (spank_whale.c); NULL elsewhere (slurmstepd, unit tests): the
 * caller returns -1 as usual. */
extern void (*whale_refuse_early)(void);

int whale_options_register(spank_t sp);
/* Long name of an option id ("whale-tp"). */
const char *whale_option_name(int id);
/* Check option values against the site's limits (after the config is known). */
int whale_options_check_site(const struct whale_conf *c);

/* Plugstack arguments: conf=PATH (default /etc/slurm/whale.conf),
 * rankmap_inline_max=BYTES (longer rank maps go to a file, default 64 KiB). */
struct whale_site {
    char conf_path[1024];      /* from plugstack conf= */
    long rankmap_inline_max;   /* plugstack rankmap_inline_max= (bytes) */
    const char *used_path;     /* the file actually loaded (site or --whale-conf) */
    struct whale_conf *conf;
};
extern struct whale_site whale_site;
int whale_site_parse_args(int ac, char **av);
/* Load the site config (and --whale-conf if allowed). Logs and fails on
 * any error; idempotent. */
int whale_site_load(void);
void whale_site_free(void);

/* Plan from options / --whale-plan=FILE (plan.c). step: the step's nodes
 * and topology (srun), NULL where no step exists yet (sbatch/salloc);
 * --whale-plan=auto searches on it. */
struct whale_step;
int whale_plan_from_options(const struct whale_conf *c, const struct whale_step *step,
                            const char *user, const char *jobid, struct whale_plan *out);

/* slurm_types.c: the GPU types whale.conf's DeviceTypeFromFeature= /
 * DeviceTypeFromGres= give the step's untyped nodes (srun only). 0, or -1
 * after a message. */
int whale_step_types_from_slurm(const struct whale_conf *c, const struct whale_step *step);
/* The planner in srun (autoplan.c): search a plan on the step
 * (--whale-plan=auto), or check explicit degrees against device memory
 * (--whale-model). Log the reason and return -1 when nothing fits. */
int whale_plan_auto_for_step(const struct whale_conf *c, const struct whale_step *step,
                             struct whale_plan *p);
int whale_plan_check_fit(const struct whale_conf *c, const struct whale_step *step,
                         struct whale_plan *p, int world);

/* srun: arrange --mpi=pmix before srun reads its options (mpi.c). */
void whale_mpi_preset(void);
int whale_mpi_check(void);
/* 1 when a mpi_pmix*.so is in one of the ':'-separated dirs, 0 if not,
 * -1 when the dirs are unknown. */
int whale_mpi_pmix_installed(const char *dirs);

/* Route libwhale's log lines into Slurm's log (error -> slurm_error). */
void whale_plugin_log_init(void);

int whale_local_init_post_opt(spank_t sp, int ac, char **av);
int whale_local_user_init(spank_t sp, int ac, char **av);
int whale_allocator_init_post_opt(spank_t sp, int ac, char **av);
int whale_remote_user_init(spank_t sp, int ac, char **av);
int whale_remote_task_init(spank_t sp, int ac, char **av);
int whale_remote_task_post_fork(spank_t sp, int ac, char **av);
int whale_remote_task_exit(spank_t sp, int ac, char **av);
int whale_remote_exit(spank_t sp, int ac, char **av);

#endif
