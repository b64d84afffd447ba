/* whale-train's observability hooks (train_observe.h). */
#define _GNU_SOURCE
#include "train_observe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "whale/envnum.h"
#include "whale/log.h"
#include "whale/outfile.h"
#include "whale/clock.h"
#include "train_prom.h"

void train_observe_usage(FILE *f)
{
    fprintf(f,
"  --rank-metrics       every rank also writes FILE-rank<R>.jsonl beside --metrics:\n"
"                       its step times and system metrics (stragglers in whale-report)\n"
"  --prom-file PATH     Prometheus textfile-collector file, rewritten atomically every\n"
"                       --prom-every steps by rank 0 (every rank when PATH holds %%r)\n"
"  --prom-every N       steps between Prometheus updates (10)\n"
"  --prom-port P        serve the same text on http://127.0.0.1:P/metrics from rank 0\n"
"                       (0: any free port, logged)\n"
"  --prom-bind ADDR     IPv4 address of that endpoint (127.0.0.1; anyone who can reach it\n"
"                       reads the run's metrics)\n"
"  --price-per-node-hour X  dollars per node-hour for the cost in the summary\n"
"                       (default: PricePerNodeHour/PricePerGPUHour in whale.conf)\n"
"  --price-per-gpu-hour X   dollars per GPU-hour (one GPU per rank)\n");
}

void train_observe_defaults(struct train_observe *o)
{
    memset(o, 0, sizeof *o);
    o->prom_every = 10;
    o->prom_port = -1;
    o->price_node_hour = o->price_gpu_hour = -1;
    o->usd_per_hour = -1;
    o->first_loss = o->last_loss = NAN;
}

int train_observe_opt(struct train_observe *o, enum train_obs_opt which, const char *arg)
{
    switch (which) {
    case TRAIN_OBS_PROM_FILE:
        if (!*arg) {
            fprintf(stderr, "whale-train: --prom-file: expected a path\n");
            return 1;
        }
        o->prom_file = arg;
        return 0;
    case TRAIN_OBS_PROM_EVERY:
        return whale_opt_long("whale-train", "--prom-every", arg, 1, 1000000000, &o->prom_every)
                   ? 1 : 0;
    case TRAIN_OBS_PROM_PORT:
        /* decimal only: strtod read 0x10 as port 16 */
        if (whale_parse_long(arg, 0, 65535, &o->prom_port)) {
            fprintf(stderr, "whale-train: --prom-port=%s: expected a number in 0..65535 (decimal; "
                    "0: any free port)\n", arg);
            return 1;
        }
        return 0;
    case TRAIN_OBS_PROM_BIND: {
        struct in_addr a;
        if (inet_pton(AF_INET, arg, &a) != 1) {
            fprintf(stderr, "whale-train: --prom-bind=%s: expected an IPv4 address such as "
                    "127.0.0.1 or 0.0.0.0 (the port is --prom-port)\n", arg);
            return 1;
        }
        o->prom_bind = arg;
        return 0;
    }
    case TRAIN_OBS_PRICE_NODE:
        return whale_opt_double("whale-train", "--price-per-node-hour", arg, 0, 1e6,
                                &o->price_node_hour) ? 1 : 0;
    case TRAIN_OBS_PRICE_GPU:
        return whale_opt_double("whale-train", "--price-per-gpu-hour", arg, 0, 1e6,
                                &o->price_gpu_hour) ? 1 : 0;
    case TRAIN_OBS_RANK_METRICS:
        o->rank_metrics = true;
        return 0;
    default:
        return 1;
    }
}

/* "run.jsonl" -> "run-rank3.jsonl" (the trace files' naming) */
static void rank_path(char *out, size_t n, const char *metrics, int rank)
{
    const char *dot = strrchr(metrics, '.'), *slash = strrchr(metrics, '/');
    size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - metrics) : strlen(metrics);
    snprintf(out, n, "%.*s-rank%d%s", (int)stem, metrics, rank, metrics + stem);
}

/* PATH with %r -> rank, %h -> host, %% -> % */
static int expand_prom(char *out, size_t n, const char *p, int rank, const char *host, bool *per)
{
    size_t k = 0;
    *per = false;
    for (; *p; p++) {
        char tmp[300];
        const char *add = NULL;
        if (p[0] == '%' && p[1] == 'r') {
            snprintf(tmp, sizeof tmp, "%d", rank);
            add = tmp;
            *per = true;
            p++;
        } else if (p[0] == '%' && p[1] == 'h') {
            add = host;
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            add = "%";
            p++;
        } else {
            tmp[0] = *p;
            tmp[1] = '\0';
            add = tmp;
        }
        size_t l = strlen(add);
        if (k + l >= n)
            return -1;
        memcpy(out + k, add, l);
        k += l;
    }
    out[k] = '\0';
    return 0;
}

int train_observe_check(const struct train_observe *o)
{
    if (o->prom_bind && o->prom_port < 0) {
        fprintf(stderr, "whale-train: --prom-bind=%s needs --prom-port P (it is the address of "
                "that endpoint)\n", o->prom_bind);
        return 1;
    }
    return 0;
}

int train_observe_start(struct train_observe *o, int rank, int world, int nnodes,
                        const char *metrics_path)
{
    o->rank = rank;
    o->world = world;
    const char *sn = getenv("SLURM_STEP_NUM_NODES");
    long v = sn ? strtol(sn, NULL, 10) : 0;
    o->nnodes = v > 0 && v < INT_MAX ? (int)v : nnodes > 0 ? nnodes : 1;
    gethostname(o->node, sizeof o->node - 1);
    const char *job = getenv("SLURM_JOB_ID"), *st = getenv("SLURM_STEP_ID");
    snprintf(o->job, sizeof o->job, "%s", job ? job : "");
    snprintf(o->stepid, sizeof o->stepid, "%s", st ? st : "");
    train_prom_labels(o->labels, sizeof o->labels, o->job, o->stepid, rank, o->node);
    o->t0 = whale_now_s();
    train_sysmon_init(&o->sys);
    if (rank == 0)
        o->usd_per_hour = train_cost_price(o, o->price_src, sizeof o->price_src);
    if (o->rank_metrics && metrics_path && *metrics_path && rank > 0) {
        char p[4096];
        rank_path(p, sizeof p, metrics_path, rank);
        if (!(o->rank_mf = whale_fopen_output(p, whale_output_private()))) {
            whale_error("--rank-metrics: cannot write %s: %s", p, whale_output_strerror(errno));
            return 1;
        }
    }
    if (o->prom_file) {
        bool per;
        if (expand_prom(o->prom_path, sizeof o->prom_path, o->prom_file, rank, o->node, &per)) {
            whale_error("--prom-file=%s: the path is too long", o->prom_file);
            return 1;
        }
        if (!per && rank != 0)
            o->prom_path[0] = '\0'; /* one writer per file */
    }
    if (o->prom_port >= 0 && rank == 0) {
        int port = 0;
        int rc = train_prom_server_start(o->prom_bind, (int)o->prom_port, &o->srv, &port);
        if (rc) {
            whale_error("--prom-port=%ld --prom-bind=%s: cannot listen: %s", o->prom_port,
                        o->prom_bind ? o->prom_bind : "127.0.0.1", strerror(-rc));
            return 1;
        }
        whale_info("prometheus metrics on http://%s:%d/metrics",
                   o->prom_bind ? o->prom_bind : "127.0.0.1", port);
    }
    return 0;
}

static void prom_update(struct train_observe *o, const struct train_sys *sys)
{
    if (!o->prom_path[0] && !o->srv)
        return;
    struct train_prom_text t = { 0 };
    const struct train_obs_step *s = &o->last;
    const char *L = o->labels;
    train_prom_metric(&t, "whale_steps_total", "counter", "Optimizer steps completed by this run.", L, (double)o->steps);
    train_prom_metric(&t, "whale_last_step", "gauge", "Number (1-based) of the last completed step.", L, (double)s->step);
    train_prom_metric(&t, "whale_tokens_total", "counter", "Tokens trained on by this run.", L, o->tokens);
    train_prom_metric(&t, "whale_loss", "gauge", "Training loss of the last step.", L, s->loss);
    train_prom_metric(&t, "whale_grad_norm", "gauge", "Global gradient norm of the last step.", L, s->grad_norm);
    train_prom_metric(&t, "whale_learning_rate", "gauge", "Learning rate of the last step.", L, s->lr);
    train_prom_metric(&t, "whale_tokens_per_second", "gauge", "Training throughput of the last step.", L, s->tokens_per_s);
    train_prom_metric(&t, "whale_mfu_ratio", "gauge", "Model FLOPs utilization of the last step (0..1).", L, s->mfu);
    train_prom_metric(&t, "whale_step_seconds", "gauge", "Wall time of the last step.", L, s->step_s);
    train_prom_metric(&t, "whale_compute_seconds", "gauge", "Compute time of the last step.", L, s->compute_s);
    train_prom_metric(&t, "whale_comm_wait_seconds", "gauge", "Exposed (not overlapped) gradient communication of the last step.", L, s->wait_s);
    train_prom_metric(&t, "whale_pipeline_bubble_seconds", "gauge", "Pipeline wait of the last step.", L, s->pipe_wait_s);
    train_prom_metric(&t, "whale_data_wait_seconds_total", "counter", "Time the step loop waited for the data loader.", L, o->data_wait_s);
    train_prom_metric(&t, "whale_checkpoint_stall_seconds_total", "counter", "Time the step loop stood still for checkpoints.", L, o->ckpt_s);
    if (sys->cpu_util >= 0)
        train_prom_metric(&t, "whale_cpu_utilization_cores", "gauge", "CPU cores this rank kept busy since the last update.", L, sys->cpu_util);
    if (sys->rss_mb >= 0)
        train_prom_metric(&t, "whale_resident_memory_bytes", "gauge", "Resident set size of this rank.", L, sys->rss_mb * 1048576.0);
    if (sys->have_node)
        train_prom_metric(&t, "whale_node_iowait_ratio", "gauge", "Share of the node's CPU time in I/O wait since the last update.", L, sys->iowait);
    if (sys->have_gpu) {
        train_prom_metric(&t, "whale_gpu_utilization_ratio", "gauge", "NVML utilization of this rank's GPU (0..1).", L, sys->gpu_util);
        train_prom_metric(&t, "whale_gpu_memory_used_bytes", "gauge", "Device memory used on this rank's GPU.", L, sys->gpu_mem_mb * 1048576.0);
    }
    if (o->usd_per_hour >= 0)
        train_prom_metric(&t, "whale_cost_dollars", "gauge", "Cost of the run so far (price per hour x wall time).", L, o->usd_per_hour * (whale_now_s() - o->t0) / 3600.0);
    if (t.oom || !t.buf) {
        free(t.buf);
        return;
    }
    if (o->prom_path[0]) {
        int rc = train_prom_write_file(o->prom_path, t.buf, t.len);
        if (rc)
            whale_warn("--prom-file: cannot write %s: %s (training goes on)", o->prom_path,
                       strerror(-rc));
    }
    train_prom_server_set(o->srv, t.buf, t.len);
    free(t.buf);
}

void train_observe_step(struct train_observe *o, json_t *j, const struct train_obs_step *s)
{
    struct train_sys sys;
    train_sysmon_sample(&o->sys, &sys);
    o->steps++;
    o->tokens += s->tokens;
    o->ckpt_s += s->ckpt_s;
    o->data_wait_s += s->data_wait_s;
    if (isnan(o->first_loss))
        o->first_loss = s->loss;
    o->last_loss = s->loss;
    o->last = *s;
    if (j) {
        json_object_set_new(j, "data_wait_s", json_real(s->data_wait_s));
        train_sys_json(&sys, j);
    }
    if (o->rank_mf) {
        json_t *r = json_pack("{sIsisfsfsfsfsfsfsf}", "step", (json_int_t)s->step, "rank", o->rank,
                              "step_s", s->step_s, "compute_s", s->compute_s, "comm_s", s->comm_s,
                              "wait_s", s->wait_s, "pipe_wait_s", s->pipe_wait_s, "recompute_s",
                              s->recompute_s, "data_wait_s", s->data_wait_s);
        if (r) {
            json_object_set_new(r, "node", json_string(o->node));
            train_sys_json(&sys, r);
            json_dumpf(r, o->rank_mf, JSON_COMPACT);
            fputc('\n', o->rank_mf);
            whale_output_flush(o->rank_mf);
            json_decref(r);
        }
    }
    if (o->steps % o->prom_every == 0)
        prom_update(o, &sys);
}

/* Validation losses (written by the data side as "val_loss" in any record)
 * and recovery events, read back from the metrics file: it holds the
 * whole run even when a promoted spare took rank 0's place. */
struct scan {
    double best_val, last_val;
    long best_val_step;
    int recoveries;
};

static void scan_metrics(const char *path, struct scan *sc)
{
    sc->best_val = sc->last_val = NAN;
    sc->best_val_step = 0;
    sc->recoveries = 0;
    /* only a regular file is read back: a device (/dev/full reads zeros
     * forever) or a FIFO named as --metrics would never end, or block */
    int fd = path && *path ? open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY) : -1;
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!strstr(line, "val_loss") && !strstr(line, "\"recovery\""))
            continue; /* most lines: no need to parse */
        json_t *j = json_loads(line, 0, NULL);
        if (!j)
            continue;
        const char *ev = json_string_value(json_object_get(j, "event"));
        if (ev && !strcmp(ev, "recovery"))
            sc->recoveries++;
        json_t *v = json_object_get(j, "val_loss");
        if (json_is_number(v)) {
            double x = json_number_value(v);
            sc->last_val = x;
            if (isnan(sc->best_val) || x < sc->best_val) {
                sc->best_val = x;
                sc->best_val_step = (long)json_integer_value(json_object_get(j, "step"));
            }
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
}

static void fmt_dur(char *b, size_t n, double s)
{
    if (s < 60)
        snprintf(b, n, "%.1f s", s);
    else if (s < 3600)
        snprintf(b, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(b, n, "%dh%02dm%02ds", (int)s / 3600, ((int)s % 3600) / 60, (int)s % 60);
}

static void fmt_count(char *b, size_t n, double v)
{
    if (v >= 1e9)
        snprintf(b, n, "%.2fG", v / 1e9);
    else if (v >= 1e6)
        snprintf(b, n, "%.2fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(b, n, "%.1fk", v / 1e3);
    else
        snprintf(b, n, "%.0f", v);
}

void train_observe_summary(struct train_observe *o, json_t *sm, const char *metrics_path,
                           double mfu, double overlap, int ckpt_saves, double ckpt_stall)
{
    double wall = whale_now_s() - o->t0;
    /* the run's figures are the summary's (whale-train's totals, which a
     * promoted spare or a renumbered rank 0 took from the survivors), not
     * what this process saw: steps it computed, its first loss */
    long steps = (long)json_integer_value(json_object_get(sm, "steps"));
    json_t *fl = json_object_get(sm, "first_loss"), *ll = json_object_get(sm, "final_loss");
    double first_loss = json_is_number(fl) ? json_number_value(fl) : NAN;
    double last_loss = json_is_number(ll) ? json_number_value(ll) : NAN;
    double tokens = steps > 0 ? steps * o->last.tokens : 0; /* global batch x seq per step */
    struct scan sc;
    scan_metrics(metrics_path, &sc);
    struct train_sys sys;
    train_sysmon_sample(&o->sys, &sys);
    prom_update(o, &sys); /* the final figures */
    json_object_set_new(sm, "wall_s", json_real(wall));
    json_object_set_new(sm, "tokens", json_real(tokens));
    json_object_set_new(sm, "nodes", json_integer(o->nnodes));
    json_object_set_new(sm, "ranks", json_integer(o->world));
    json_object_set_new(sm, "data_wait_s", json_real(o->data_wait_s));
    json_object_set_new(sm, "recoveries", json_integer(sc.recoveries));
    /* the data side may have put its own best_val_loss / best_val_step there:
     * the same figures, kept as they are */
    json_t *bv = json_object_get(sm, "best_val_loss");
    if (json_is_number(bv)) {
        sc.best_val = json_number_value(bv);
        json_t *bs = json_object_get(sm, "best_val_step");
        if (json_is_integer(bs))
            sc.best_val_step = (long)json_integer_value(bs);
    }
    if (!isnan(sc.best_val)) {
        if (!json_is_number(bv))
            json_object_set_new(sm, "best_val_loss", json_real(sc.best_val));
        json_object_set_new(sm, "final_val_loss", json_real(sc.last_val));
    }
    struct train_cost c;
    train_cost_compute(o->usd_per_hour, wall, tokens, first_loss, last_loss, &c);
    if (c.usd >= 0) {
        json_t *cj = json_pack("{sfsfss}", "usd", c.usd, "usd_per_hour", o->usd_per_hour,
                               "price", o->price_src);
        if (c.usd_per_mtok >= 0)
            json_object_set_new(cj, "usd_per_mtok", json_real(c.usd_per_mtok));
        if (c.usd_per_01_loss >= 0)
            json_object_set_new(cj, "usd_per_0.1_loss", json_real(c.usd_per_01_loss));
        json_object_set_new(sm, "cost", cj);
    }
    /* for people: aligned lines on stderr, before the JSON line; none
     * after zero steps (train_loop said why), whose losses would read nan */
    if (steps == 0)
        return;
    char a[64], b[64], d[64];
    fmt_dur(a, sizeof a, wall);
    fmt_count(b, sizeof b, tokens);
    fprintf(stderr, "\nwhale-train summary\n");
    fprintf(stderr, "  %-20s %ld on %d rank%s, %d node%s\n", "steps", steps, o->world,
            o->world == 1 ? "" : "s", o->nnodes, o->nnodes == 1 ? "" : "s");
    fprintf(stderr, "  %-20s %s\n", "wall time", a);
    fprintf(stderr, "  %-20s %s: %.0f tokens/s over the timed steps, %.0f over the wall time\n",
            "tokens", b, json_number_value(json_object_get(sm, "tokens_per_s")),
            wall > 0 ? tokens / wall : 0.0);
    fprintf(stderr, "  %-20s first %.4f, final %.4f\n", "loss", first_loss, last_loss);
    if (!isnan(sc.best_val))
        fprintf(stderr, "  %-20s best %.4f (step %ld), final %.4f\n", "validation loss",
                sc.best_val, sc.best_val_step, sc.last_val);
    fprintf(stderr, "  %-20s MFU %.1f%%, gradient communication hidden %.0f%%\n", "efficiency",
            100 * mfu, 100 * (overlap < 0 ? 0 : overlap));
    fmt_dur(d, sizeof d, o->data_wait_s);
    fprintf(stderr, "  %-20s %s\n", "data loader wait", d);
    if (ckpt_saves) {
        fmt_dur(d, sizeof d, ckpt_stall);
        fprintf(stderr, "  %-20s %d saved, training stalled %s\n", "checkpoints", ckpt_saves, d);
    } else {
        fprintf(stderr, "  %-20s none\n", "checkpoints");
    }
    fprintf(stderr, "  %-20s %d\n", "failures recovered", sc.recoveries);
    if (c.usd >= 0) {
        fprintf(stderr, "  %-20s $%.4f (%s)\n", "cost", c.usd, o->price_src);
        if (c.usd_per_mtok >= 0)
            fprintf(stderr, "  %-20s $%.4f\n", "per million tokens", c.usd_per_mtok);
        if (c.usd_per_01_loss >= 0)
            fprintf(stderr, "  %-20s $%.4f\n", "per 0.1 of loss", c.usd_per_01_loss);
    } else {
        fprintf(stderr, "  %-20s no price (--price-per-node-hour, or PricePerNodeHour in "
                "whale.conf)\n", "cost");
    }
}

double train_observe_elapsed(const struct train_observe *o)
{
    return o->t0 > 0 ? whale_now_s() - o->t0 : 0;
}

void train_observe_rebase(struct train_observe *o, double elapsed)
{
    if (elapsed > 0 && isfinite(elapsed))
        o->t0 = whale_now_s() - elapsed;
}

void train_observe_close(struct train_observe *o)
{
    if (o->rank_mf)
        whale_output_close(o->rank_mf);
    o->rank_mf = NULL;
    if (o->prom_path[0] && o->steps % o->prom_every) /* ranks > 0: their last figures */
        prom_update(o, &(struct train_sys){ .cpu_util = -1, .rss_mb = -1 });
    o->prom_path[0] = '\0';
    train_prom_server_stop(o->srv);
    o->srv = NULL;
    train_sysmon_free(&o->sys);
}
