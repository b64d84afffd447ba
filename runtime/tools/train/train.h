/* whale-train's run, split by phase (whale-train.c calls them in order):
 *   train_cli.c      options and --help            (flags)
 *   train_config.c   resolve knobs: flags > WHALE_* > plan; the layout and
 *                    the engine configuration
 *   train_setup.c    ranks, spares, engine, data, checkpoints, metrics file
 *   train_loop.c     the step loop and each step's metrics line
 *   train_summary.c  the summary at the end, and teardown
 *   train_areas.c    the registry of feature areas (offload, ...): each area
 *                    brings its own options, help text and hooks
 * Every phase returns TRAIN_GO to go on, or the exit status to stop with.
 *
 * Adding a feature area (see train_areas.c): write train_<area>.c with a
 * `const struct train_area train_area_<area>` (an option table, a usage
 * function, and whichever hooks it needs), declare it in train_areas.h and
 * add one line to train_areas[]. Keep its state in its own file, or add
 * one field to struct train below. */
#ifndef WHALE_TRAIN_H
#define WHALE_TRAIN_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "whale/ckpt.h"
#include "whale/comm.h"
#include "whale/data.h"
#include "whale/engine.h"
#include "whale/modeldesc.h"
#include "whale/planfile.h"

#include "offload_opts.h"
#include "train_elastic.h"
#include "train_shares.h"

/* A phase's result: go on to the next phase. Anything else is the status
 * main exits with. */
#define TRAIN_GO (-1)

/* virtual pipeline stages --pp-layers / WHALE_PP_LAYERS may name (the
 * planner's own bound, WHALE_PLAN_MAX_STAGES) */
#define TRAIN_MAX_STAGES 512

/* Command-line values as given (0 / -1 / NULL: not set; the resolve phase
 * fills in environment, plan and defaults). */
struct train_opts {
    const char *model, *data, *metrics, *plan;
    const char *resume, *ckpt_dir, *ckpt_every; /* checkpoints */
    const char *init_from;   /* --init-from HF_DIR: Hugging Face weights (and model) */
    long ckpt_keep;
    long ckpt_milestone; /* --ckpt-milestone-every M (-1: unset) */
    long steps, batch, micro, accum, seq, seed, warmup, zero, threads, log_every;
    double lr, min_lr, wd, clip, bucket_mb, peak_gflops;
    int overlap; /* -1: unset */
    int loss_scale;
    int format;
    const char *loss_mask; /* --loss-mask: comma list, NULL = DATA.mask when present */
    int progress; /* -1 auto */
    const char *schedule, *recompute, *precision;
    long interleave;
    long ep;              /* --ep: expert-parallel degree (0: the step's) */
    long inject_overflow; /* step (1-based) whose gradient gets an inf; 0: none */
    int grad_reduce_16;   /* --grad-reduce 16 */
    double act_budget_mb;
    bool batch_set;       /* --batch given */
    const char *dp_shares; /* --dp-shares: micro-batches per DP replica */
    const char *pp_layers; /* --pp-layers: transformer blocks per pipeline stage */
};

/* Run totals the summary reports (train_totals.c). t_run, tok_run and
 * flops_run are one window: the n_tps steps this process timed. */
struct train_totals {
    double t_run, tok_run, flops_run, first_loss, last_loss;
    double sum_comm, sum_wait;
    long done, n_tps;  /* done: steps computed, a redone step again */
    long start_step;   /* the step the run began at (0, or the resumed one) */
    int nsaves;
    long last_save;    /* step of the last save started (0: none) */
    double ckpt_stall;
    double hist_stall; /* checkpoint stall before this process joined */
    /* one save's stall: its whale_ckpt_save call plus the optimizer's wait
     * for its deferred snapshot (known one step later) */
    double save_stall, save_stall_max;
    long save_step;    /* the save save_stall belongs to (0: none open) */
    double loop_s;     /* wall time of the training loop (the stall's share of it) */
    bool ck_deferred;  /* a due save postponed: one was still in flight (BUSY=defer) */
    bool joined;       /* history taken from the survivors (a promoted spare) */
    bool peak_raised;  /* a step beat the peak: it was raised (train_mfu) */
};

struct train {
    struct train_opts o;
    /* resolved configuration */
    struct whale_plan plan;
    bool have_plan;
    char *plan_json;          /* recorded in checkpoints */
    char plan_ckpt_dir[1024], plan_ckpt_every[32];
    char plan_ckpt_keep[16], plan_ckpt_milestone[16]; /* the plan's retention, as text */
    char plan_src[1100];      /* "--plan FILE" or "WHALE_PLAN", for messages */
    /* where the knobs the site limits bound came from (train_limits.c) */
    const char *src_zero, *src_micro, *src_ckpt;
    struct whale_model_desc md;
    long micro, accum, gbatch, seq;
    struct train_share share; /* this replica's share of the global batch */
    bool finetune;            /* --resume of weights without a train state, --init-from */
    char hf_config[4096];     /* --init-from without --model: HF_DIR/config.json */
    struct whale_engine_config ec;
    int stage_layers[TRAIN_MAX_STAGES]; /* --pp-layers / WHALE_PP_LAYERS, parsed */
    /* the ranks */
    whale_ctx *ctx;
    int rank, world;
    WHALE_GRID(grid);
    int dp_rank;
    /* what the run holds */
    whale_engine *e;
    whale_data *data;
    struct whale_data_config dc;
    whale_ckpt *ck;
    whale_ckpt_config ckc;
    int32_t *in, *tg;
    FILE *mf;                 /* rank 0's metrics file */
    struct train_elastic *te;
    /* set by the elastic area once the ranks exist (train_area_elastic.c):
     * the step is elastic; this task is a spare promoted into a failed
     * rank's place (it skips resume and the peak measurement) */
    bool elastic, promoted;
    struct train_job job;     /* what elastic recovery may rebuild */
    struct train_offload off; /* the offload area's state */
    double peak;              /* GFLOP/s for MFU */
    bool tty;                 /* live progress line on stderr */
    struct train_totals tot;
    double data_wait_s;       /* this step's wait for the data loader (observe area) */
};

/* train_cli.c */
void train_defaults(struct train *t);
int train_parse_args(struct train *t, int argc, char **argv);
void train_usage(FILE *f);
/* train_config.c */
int train_resolve_config(struct train *t);      /* flags > env > plan; the model */
int train_resolve_layout(struct train *t);      /* after whale_init: batch split, seq */
int train_engine_config(struct train *t);       /* fills t->ec (areas' configure hooks) */
/* train_limits.c: where a knob came from, and the site limits over all of them */
const char *train_source(const struct train *t, bool flag, const char *flag_name, const char *env,
                         bool plan);
/* The one resolution of a string setting, flag > env > plan ("" or NULL:
 * none): the value (NULL: unset) and, in *src, where it came from for
 * the site limits' messages. */
const char *train_pick(const struct train *t, const char *flag, const char *flag_name,
                       const char *env, const char *plan, const char **src);
int train_check_site_limits(const struct train *t);
long train_finetune_warmup(long steps);
/* Default peak learning rates without --lr: pre-training, and fine-tuning
 * (--init-from, weights without a train state): a fresh AdamW's first
 * updates move every weight by about the rate whatever its gradient, and
 * trained weights want the usual full fine-tuning rate, not 30 times it. */
#define TRAIN_PRETRAIN_LR 6e-4
#define TRAIN_FINETUNE_LR 2e-5
/* train_setup.c */
int train_setup(struct train *t);
/* deferred checkpoint snapshot unless offload or WHALE_CKPT_SNAPSHOT says
 * otherwise (train_ckpt_snap.c) */
void train_ckpt_snapshot_mode(struct train *t);
/* train_loop.c */
int train_loop(struct train *t);
bool train_stop_requested(void); /* a SIGINT/SIGTERM came */
/* train_summary.c */
int train_summary(struct train *t);
int train_teardown(struct train *t, int rc);

/* train_totals.c: rates from (work, measured seconds) of the same steps */
double train_rate(double work, double seconds);
/* flops done in seconds against t->peak, raising the peak to what was
 * achieved when a step beats it: never above 1 */
double train_mfu(struct train *t, double flops, double seconds);
void train_account(struct train *t, bool timed, const struct whale_step_stats *st,
                   double tokens);
/* every rank gets rank 0's peak (collective over the working ranks) */
int train_share_peak(struct train *t);
/* after a recovery, every member of the new world (joined: a promoted
 * spare): the run's history from the survivors, rank 0's metrics file */
int train_history_agree(struct train *t, bool joined);

/* Shared helpers (train_loop.c). */
json_t *train_json_num(double v); /* null where not finite: JSON has no NaN */
double train_peak_rss_mb(void);

#endif
