/* whale-train's observability: system metrics per rank, the
 * closing summary for people, Prometheus output and the cost of the run.
 * whale-train calls these hooks; everything else lives in train_observe.c,
 * train_sysmon.c, train_nvml.c, train_prom.c and train_cost.c. */
#ifndef WHALE_TRAIN_OBSERVE_H
#define WHALE_TRAIN_OBSERVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "train_sysmon.h"

struct whale_ctx;

enum train_obs_opt {
    TRAIN_OBS_PROM_FILE, TRAIN_OBS_PROM_EVERY, TRAIN_OBS_PROM_PORT, TRAIN_OBS_PROM_BIND,
    TRAIN_OBS_PRICE_NODE, TRAIN_OBS_PRICE_GPU, TRAIN_OBS_RANK_METRICS, TRAIN_OBS_N_
};

/* One step as the hooks see it. */
struct train_obs_step {
    long step;                /* 1-based */
    double loss, grad_norm, lr, tokens, tokens_per_s, mfu;
    double step_s, compute_s, comm_s, wait_s, pipe_wait_s, recompute_s, data_wait_s, ckpt_s;
};

struct train_prom_server;

struct train_observe {
    /* options */
    const char *prom_file, *prom_bind;
    long prom_every, prom_port;  /* port -1: no endpoint */
    double price_node_hour, price_gpu_hour; /* < 0: not given */
    bool rank_metrics;
    /* the run */
    int rank, world, nnodes;
    char node[256], job[64], stepid[64], prom_path[4096], labels[512];
    double t0;                   /* CLOCK_MONOTONIC at start */
    double usd_per_hour;         /* < 0: no price known */
    char price_src[160];
    struct train_sysmon sys;
    FILE *rank_mf;               /* --rank-metrics file of this rank */
    struct train_prom_server *srv;
    /* totals */
    long steps;
    double tokens, ckpt_s, data_wait_s, first_loss, last_loss;
    struct train_obs_step last;
};

void train_observe_usage(FILE *f);
void train_observe_defaults(struct train_observe *o);
/* One option; 0, or 1 after printing what is wrong. */
int train_observe_opt(struct train_observe *o, enum train_obs_opt which, const char *arg);
/* After the ranks are known. metrics_path: --metrics (for the per-rank
 * file names). 0, or 1 after logging the reason (a file or port that
 * cannot be opened). */
/* Options that only make sense together (after all flags): 0, or 1 said. */
int train_observe_check(const struct train_observe *o);
int train_observe_start(struct train_observe *o, int rank, int world, int nnodes,
                        const char *metrics_path);
/* After each completed step: adds system metrics and data_wait_s to j (rank
 * 0's metrics record; NULL on other ranks), writes this rank's record with
 * --rank-metrics and the Prometheus text every --prom-every steps. */
void train_observe_step(struct train_observe *o, json_t *j, const struct train_obs_step *s);
/* Rank 0 at the end: adds wall_s, tokens, nodes, validation losses and
 * recoveries found in the metrics file, and the cost to the summary object;
 * prints the summary for people on stderr. */
void train_observe_summary(struct train_observe *o, json_t *sm, const char *metrics_path,
                           double mfu, double overlap, int ckpt_saves, double ckpt_stall);
void train_observe_close(struct train_observe *o);

/* train_cost.c: the run's price and its figures. */
struct train_cost {
    double usd, usd_per_mtok, usd_per_01_loss; /* < 0: not defined (no tokens, loss did not drop) */
};
void train_cost_compute(double usd_per_hour, double wall_s, double tokens, double first_loss,
                        double last_loss, struct train_cost *c);
/* The price per hour of this step's nodes: the flags, else whale.conf
 * (WHALE_CONF or the default path) for SLURM_STEP_NODELIST / this host.
 * < 0 when nothing gives a price; src describes where it came from. */
double train_cost_price(const struct train_observe *o, char *src, size_t n);

/* Wall seconds since train_observe_start; a process that joined a running
 * job (a promoted spare) takes the survivors' figure so that the summary's
 * wall time and cost cover the whole run. */
double train_observe_elapsed(const struct train_observe *o);
void train_observe_rebase(struct train_observe *o, double elapsed);

#endif
