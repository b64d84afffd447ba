/* whale-train: train a GPT model from a preset on token data, data-parallel
 * over the ranks the plugin (srun --whale-...) or whale-run started. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "whale/ckpt.h"
#include "whale/comm.h"
#include "whale/data.h"
#include "whale/engine.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/envnum.h"
#include "whale/outfile.h"
#include "whale/modeldesc.h"
#include "whale/parallel.h"
#include "whale/planfile.h"
#include "whale_config.h"
#include "train_elastic.h"

#include "offload_opts.h"
#include "train_data.h"

struct opts {
    const char *model, *data, *metrics, *plan;
    const char *resume, *ckpt_dir, *ckpt_every; /* checkpoints */
    long ckpt_keep;
    long steps, batch, micro, accum, seq, seed, warmup, zero, threads, log_every;
    double lr, min_lr, wd, clip, bucket_mb, peak_gflops;
    int overlap; /* -1: unset */
    int loss_scale;
    int format;
    int progress; /* -1 auto */
    const char *schedule, *recompute, *precision;
    long interleave;
    long inject_overflow; /* step (1-based) whose gradient gets an inf; 0: none */
    int grad_reduce_16;   /* --grad-reduce 16 */
    double act_budget_mb;
};

static void usage(FILE *f)
{
    fprintf(f,
"Usage: whale-train --model NAME|FILE --data FILE[,FILE...] [options]\n"
"Train a GPT model on CPU (fp32, or bf16/fp16 mixed precision) with tensor, pipeline\n"
"and data parallelism and ZeRO over the ranks started by srun --whale-* or whale-run\n"
"(a plain start is one rank).\n"
"\n"
"  --model NAME|FILE    preset (config/models/NAME.conf) or .conf file\n"
"  --data FILES         llm.c token shards (.bin) or raw byte files, comma-separated\n"
"  --format auto|llmc|bytes   data format (auto: .bin or magic = llmc)\n"
"  --steps N            optimizer steps (default 100)\n"
"  --batch N            global batch in samples per step (default 8)\n"
"  --micro-batch N      samples per micro-batch per rank (default batch/(DP*accum))\n"
"  --grad-accum N       micro-batches per step (default 1)\n"
"  --seq N              sequence length (default: the model's Seq, at most 1024)\n"
"  --lr X --min-lr X    peak and final learning rate (6e-4, lr/10)\n"
"  --warmup N           warmup steps (default steps/20)\n"
"  --weight-decay X     AdamW decoupled weight decay (0.1)\n"
"  --grad-clip X        global-norm clip, 0 disables (1.0)\n"
"  --seed N             model and data seed (1337)\n"
"  --plan FILE          plan JSON (default: $WHALE_PLAN from the plugin or whale-run)\n"
"  --schedule S         pipeline schedule: 1f1b, interleaved, gpipe (plan or 1f1b)\n"
"  --interleave V       model chunks per pipeline rank with the interleaved schedule\n"
"  --recompute P        none, selective, full or auto (plan or none)\n"
"  --act-budget-mb X    activation budget per rank for --recompute=auto (default: what\n"
"                       a planner's plan leaves for activations, else half of what no\n"
"                       recomputation keeps)\n"
"  --zero 0..3          ZeRO stage (default WHALE_ZERO or 0)\n"
"  --bucket-mb X        gradient bucket size in MiB (4)\n"
"  --no-overlap         reduce gradients after backward instead of during it\n"
"  --precision P        fp32, bf16 or fp16 (plan or fp32): 16-bit weights in compute,\n"
"                       activations and gradient stream; fp32 master weights, AdamW\n"
"                       moments, accumulation, LayerNorm/softmax/loss/norm\n"
"  --loss-scale         dynamic loss scaling (default on with fp16, off otherwise)\n"
"  --no-loss-scale      no loss scaling, even with fp16\n"
"  --grad-reduce fp32|16  bf16/fp16: reduce gradients over DP in fp32 (default) or in\n"
"                       the 16-bit dtype (half the bytes; the sum accumulates in fp32)\n"
"  --inject-overflow N  testing: put an inf into one gradient of step N (the step is\n"
"                       skipped and, with loss scaling, the scale backs off)\n"
);
    train_offload_usage(f);
    train_data_usage(f);
    fprintf(f,
"  --threads N          compute threads per rank (default CPUs / ranks on the node)\n"
"  --metrics FILE       JSON-lines metrics (default whale-train-metrics.jsonl)\n"
"  --log-every N        print a line every N steps when not on a terminal (10)\n"
"  --peak-gflops X      peak for MFU (default: measured OpenBLAS sgemm)\n"
"  --no-progress        no live progress line\n"
"  --whale-ckpt-dir DIR checkpoint root (default: WHALE_CKPT_DIR, the plan's ckpt_dir)\n"
"  --whale-ckpt-every N|Ts  checkpoint every N steps or every T (30s, 10m, 2h)\n"
"                       (default: WHALE_CKPT_EVERY, the plan's ckpt_every)\n"
"  --ckpt-keep K        keep the last K checkpoints (3; 0 keeps all)\n"
"  --resume DIR|latest  continue exactly from a checkpoint: a step directory, a root,\n"
"                       or `latest` under the checkpoint root (none yet: start fresh)\n"
"  -h, --help           this help;  -V, --version  version\n"
"\n"
"Environment: WHALE_TP/PP/DP and ranks from the plugin or whale-run; WHALE_PLAN\n"
"(degrees, zero, micro_batch, num_micro_batches, global_batch, model, schedule,\n"
"interleave, stage_layers, recompute, recompute_layers); WHALE_TRACE=FILE writes\n"
"a Chrome/Perfetto trace per rank (FILE-rank<R>.json); WHALE_ZERO,\n"
"WHALE_MICRO_BATCH, WHALE_GRAD_ACCUM override the plan; flags override both.\n"
"Checkpoint knobs: WHALE_CKPT_ASYNC, _WEIGHTS (exact|bf16|fp16), _MOMENTS (exact|int8),\n"
"_ZSTD, _INCREMENTAL, _BUSY (wait|skip), _PRIVATE (see whale-ckpt(1) and the README).\n"
"Elastic steps (hot spares: srun --whale-spares=N, whale-run --spares N; or\n"
"WHALE_ELASTIC=1): a failed rank's place goes to a spare inside the step, state\n"
"from an in-memory copy, every survivor rolls back to the last step completed\n"
"everywhere and redoes it (see whale-train(1)). WHALE_REDUNDANCY_EVERY=K copies\n"
"every K steps (1; 0: local rollback images only). Fault injection:\n"
"WHALE_FAULT=\"kill|hang:rank=R:step=S[:phase=start|forward|backward|collective|\n"
"optimizer|ckpt][;...]\" (hang = SIGSTOP itself).\n"
"Files it writes (metrics, traces) are never group/world-writable; WHALE_CKPT_PRIVATE=1\n"
"makes them owner-only too. Numeric WHALE_* variables must be integers in range.\n");
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "whale-train: %s=%s: expected an integer in %ld..%ld\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "whale-train: %s=%s: expected a number in %g..%g\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}


/* A number for JSON: null where it is not finite (a diverged or absent
 * loss), since json_real() refuses NaN and infinities. */
static json_t *train_json_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static void fmt_eta(char *buf, size_t n, double s)
{
    if (s < 0 || !isfinite(s))
        snprintf(buf, n, "--");
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

static int64_t clock_gettime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* recompute=auto's budget from a planner's plan: the device memory the
 * prediction leaves for activations (usable capacity minus everything
 * else it counted). 0 when the plan carries no such prediction. */
static int64_t plan_act_budget(const struct whale_plan *p)
{
    if (!p->prediction_json)
        return 0;
    json_t *j = json_loads(p->prediction_json, 0, NULL);
    json_t *mb = j ? json_object_get(j, "memory_bytes") : NULL;
    double cap = json_number_value(json_object_get(mb, "capacity"));
    double tot = json_number_value(json_object_get(mb, "total"));
    double act = json_number_value(json_object_get(mb, "activations"));
    json_decref(j);
    double left = cap - (tot - act);
    return mb && cap > 0 && left > 0 ? (int64_t)left : 0;
}

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* libgomp reads OMP_WAIT_POLICY once, when it is loaded (before main). Its
 * default spinning workers burn the cores that OpenBLAS, the data thread,
 * the progress engine and other ranks on the node need: measured 4-5x
 * slower steps on a loaded 2-core machine. Re-exec once with passive
 * waiting unless the user chose a policy. */
static void ensure_passive_omp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("WHALE_TRAIN_REEXEC"))
        return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("WHALE_TRAIN_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default policy */
}

int main(int argc, char **argv)
{
    ensure_passive_omp(argv);
    struct opts o = { .steps = 100, .batch = 8, .micro = 0, .accum = 0, .seq = 0, .seed = 1337,
                      .warmup = -1, .zero = -1, .threads = 0, .log_every = 10, .lr = 6e-4,
                      .min_lr = -1, .wd = 0.1, .clip = 1.0, .bucket_mb = 4, .overlap = -1,
                      .loss_scale = -1, .progress = -1, .metrics = "whale-train-metrics.jsonl", .ckpt_keep = -1 };
    enum { O_MICRO = 256, O_ACCUM, O_MINLR, O_WARM, O_WD, O_CLIP, O_ZERO, O_BUCKET, O_NOOVL,
           O_LS, O_THREADS, O_METRICS, O_LOGEVERY, O_PEAK, O_NOPROG, O_FORMAT, O_SCHED,
           O_INTERLEAVE, O_RECOMPUTE, O_ACTBUDGET, O_RESUME, O_CKDIR, O_CKEVERY, O_CKKEEP,
           O_PREC, O_NOLS, O_INJECT, O_GRED,
           O_OFFLOAD /* .. O_OFFLOAD + TRAIN_OFF_N_ - 1 */, O_TD = 512 /* .. + TRAIN_DATA_N_ */ };
    struct train_data td = { 0 };
    struct train_offload off = { 0 };
    static const struct option lo[] = {
        { "model", required_argument, 0, 'm' }, { "data", required_argument, 0, 'd' },
        { "steps", required_argument, 0, 's' }, { "batch", required_argument, 0, 'b' },
        { "seq", required_argument, 0, 't' }, { "lr", required_argument, 0, 'l' },
        { "seed", required_argument, 0, 'S' }, { "micro-batch", required_argument, 0, O_MICRO },
        { "grad-accum", required_argument, 0, O_ACCUM }, { "min-lr", required_argument, 0, O_MINLR },
        { "warmup", required_argument, 0, O_WARM }, { "weight-decay", required_argument, 0, O_WD },
        { "grad-clip", required_argument, 0, O_CLIP }, { "zero", required_argument, 0, O_ZERO },
        { "bucket-mb", required_argument, 0, O_BUCKET }, { "no-overlap", no_argument, 0, O_NOOVL },
        { "loss-scale", no_argument, 0, O_LS }, { "threads", required_argument, 0, O_THREADS },
        { "metrics", required_argument, 0, O_METRICS },
        { "log-every", required_argument, 0, O_LOGEVERY },
        { "peak-gflops", required_argument, 0, O_PEAK }, { "no-progress", no_argument, 0, O_NOPROG },
        { "format", required_argument, 0, O_FORMAT },
        { "resume", required_argument, 0, O_RESUME },
        { "whale-ckpt-dir", required_argument, 0, O_CKDIR },
        { "whale-ckpt-every", required_argument, 0, O_CKEVERY },
        { "ckpt-keep", required_argument, 0, O_CKKEEP },
        { "schedule", required_argument, 0, O_SCHED },
        { "interleave", required_argument, 0, O_INTERLEAVE },
        { "recompute", required_argument, 0, O_RECOMPUTE },
        { "act-budget-mb", required_argument, 0, O_ACTBUDGET },
        { "offload", required_argument, 0, O_OFFLOAD + TRAIN_OFF_MODE },
        { "whale-offload-target", required_argument, 0, O_OFFLOAD + TRAIN_OFF_TARGET },
        { "device-mem", required_argument, 0, O_OFFLOAD + TRAIN_OFF_DEVMEM },
        { "offload-prefetch", required_argument, 0, O_OFFLOAD + TRAIN_OFF_PREFETCH },
        { "precision", required_argument, 0, O_PREC }, { "no-loss-scale", no_argument, 0, O_NOLS },
        { "inject-overflow", required_argument, 0, O_INJECT },
        { "grad-reduce", required_argument, 0, O_GRED },
        { "val-data", required_argument, 0, O_TD + TRAIN_DATA_VAL },
        { "eval-every", required_argument, 0, O_TD + TRAIN_DATA_EVERY },
        { "eval-batches", required_argument, 0, O_TD + TRAIN_DATA_BATCHES },
        { "vocab", required_argument, 0, O_TD + TRAIN_DATA_VOCAB },
        { "tokenizer", required_argument, 0, O_TD + TRAIN_DATA_TOKENIZER },
        { "plan", required_argument, 0, 'p' }, { "help", no_argument, 0, 'h' }, { "version", no_argument, 0, 'V' }, { 0, 0, 0, 0 },
    };
    int c, bad = 0, batch_set = 0;
    while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; break;
        case 'd': o.data = optarg; break;
        case 's': bad |= parse_long("--steps", optarg, 0, 1L << 40, &o.steps); break;
        case 'b': bad |= parse_long("--batch", optarg, 1, 1 << 20, &o.batch); batch_set = 1; break;
        case 'p': o.plan = optarg; break;
        case 't': bad |= parse_long("--seq", optarg, 1, 1 << 20, &o.seq); break;
        case 'l': bad |= parse_double("--lr", optarg, 0, 10, &o.lr); break;
        case 'S': bad |= parse_long("--seed", optarg, 0, LONG_MAX, &o.seed); break;
        case O_MICRO: bad |= parse_long("--micro-batch", optarg, 1, 1 << 20, &o.micro); break;
        case O_ACCUM: bad |= parse_long("--grad-accum", optarg, 1, 1 << 20, &o.accum); break;
        case O_MINLR: bad |= parse_double("--min-lr", optarg, 0, 10, &o.min_lr); break;
        case O_WARM: bad |= parse_long("--warmup", optarg, 0, 1L << 40, &o.warmup); break;
        case O_WD: bad |= parse_double("--weight-decay", optarg, 0, 10, &o.wd); break;
        case O_CLIP: bad |= parse_double("--grad-clip", optarg, 0, 1e9, &o.clip); break;
        case O_ZERO: bad |= parse_long("--zero", optarg, 0, 3, &o.zero); break;
        case O_BUCKET: bad |= parse_double("--bucket-mb", optarg, 0.001, 65536, &o.bucket_mb); break;
        case O_NOOVL: o.overlap = 0; break;
        case O_LS: o.loss_scale = 1; break;
        case O_NOLS: o.loss_scale = 0; break;
        case O_PREC: {
            enum whale_precision pr;
            if (whale_precision_parse(optarg, &pr)) {
                fprintf(stderr, "whale-train: --precision=%s: expected fp32, bf16 or fp16\n",
                        optarg);
                bad = 1;
            }
            o.precision = optarg;
            break;
        }
        case O_GRED:
            if (!strcmp(optarg, "16") || !strcmp(optarg, "fp32")) {
                o.grad_reduce_16 = !strcmp(optarg, "16");
            } else {
                fprintf(stderr, "whale-train: --grad-reduce=%s: expected fp32 or 16\n", optarg);
                bad = 1;
            }
            break;
        case O_INJECT: bad |= parse_long("--inject-overflow", optarg, 1, 1L << 40, &o.inject_overflow); break;
        case O_THREADS: bad |= parse_long("--threads", optarg, 1, 4096, &o.threads); break;
        case O_METRICS: o.metrics = optarg; break;
        case O_LOGEVERY: bad |= parse_long("--log-every", optarg, 1, 1L << 30, &o.log_every); break;
        case O_PEAK: bad |= parse_double("--peak-gflops", optarg, 0.001, 1e9, &o.peak_gflops); break;
        case O_NOPROG: o.progress = 0; break;
        case O_RESUME: o.resume = optarg; break;
        case O_CKDIR: o.ckpt_dir = optarg; break;
        case O_CKEVERY: o.ckpt_every = optarg; break;
        case O_CKKEEP: bad |= parse_long("--ckpt-keep", optarg, 0, 1000000, &o.ckpt_keep); break;
        case O_SCHED: {
            enum whale_schedule k;
            if (whale_schedule_parse(optarg, &k)) {
                fprintf(stderr, "whale-train: --schedule=%s: expected 1f1b, interleaved or gpipe\n",
                        optarg);
                bad = 1;
            }
            o.schedule = optarg;
            break;
        }
        case O_INTERLEAVE: bad |= parse_long("--interleave", optarg, 1, 64, &o.interleave); break;
        case O_RECOMPUTE: {
            enum whale_recompute k;
            if (whale_recompute_parse(optarg, &k) || k == WHALE_RECOMPUTE_LAYERS) {
                fprintf(stderr, "whale-train: --recompute=%s: expected none, selective, full or "
                        "auto (a per-layer set comes from the plan)\n", optarg);
                bad = 1;
            }
            o.recompute = optarg;
            break;
        }
        case O_ACTBUDGET: bad |= parse_double("--act-budget-mb", optarg, 0.001, 1e9, &o.act_budget_mb); break;
        case O_FORMAT:
            if (!strcmp(optarg, "auto")) o.format = WHALE_DATA_AUTO;
            else if (!strcmp(optarg, "llmc")) o.format = WHALE_DATA_LLMC;
            else if (!strcmp(optarg, "bytes")) o.format = WHALE_DATA_BYTES;
            else {
                fprintf(stderr, "whale-train: --format=%s: expected auto, llmc or bytes\n", optarg);
                bad = 1;
            }
            break;
        case O_OFFLOAD + TRAIN_OFF_MODE: case O_OFFLOAD + TRAIN_OFF_TARGET:
        case O_OFFLOAD + TRAIN_OFF_DEVMEM: case O_OFFLOAD + TRAIN_OFF_PREFETCH:
            train_offload_opt(&off, c - O_OFFLOAD, optarg);
            break;
        case O_TD ... O_TD + TRAIN_DATA_N_ - 1: train_data_opt(&td, c - O_TD, optarg); break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("whale-train %s\n", WHALE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (bad || td.bad)
        return 2;
    if (optind < argc) {
        fprintf(stderr, "whale-train: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    /* knobs: flags > WHALE_* variables > the plan */
    struct whale_plan plan;
    whale_plan_init(&plan);
    bool have_plan = false;
    {
        const char *pv = getenv("WHALE_PLAN");
        int prc = 0;
        if (o.plan) {
            prc = whale_plan_load_file(o.plan, &plan);
            have_plan = true;
        } else if (pv && *pv) {
            prc = whale_plan_from_env_value(pv, &plan);
            have_plan = true;
        }
        if (prc)
            return 1;
    }
    /* strict: WHALE_ZERO=abc is an error, not ZeRO 0 (whale/envnum.h) */
    if (o.zero < 0 && whale_env_long("WHALE_ZERO", 0, 3, have_plan ? plan.zero : -1, &o.zero))
        return 2;
    if (!o.micro && whale_env_long("WHALE_MICRO_BATCH", 1, 1L << 20,
                                   have_plan && o.accum == 0 && !batch_set ? plan.micro_batch : 0,
                                   &o.micro))
        return 2;
    if (!o.accum && whale_env_long("WHALE_GRAD_ACCUM", 1, 1L << 20,
                                   have_plan ? plan.num_micro_batches : 0, &o.accum))
        return 2;
    if (!batch_set && have_plan && plan.global_batch > 0)
        o.batch = plan.global_batch;
    if (!o.model && have_plan && plan.model[0])
        o.model = plan.model;
    /* checkpoints: flags > WHALE_CKPT_* > the plan (the plugin puts them there) */
    char plan_ckpt_dir[1024] = "", plan_ckpt_every[32] = "";
    char *plan_json = have_plan ? whale_plan_to_json(&plan, 0) : NULL;
    if (have_plan && plan.ckpt_dir[0])
        snprintf(plan_ckpt_dir, sizeof plan_ckpt_dir, "%s", plan.ckpt_dir);
    if (have_plan && plan.ckpt_every > 0)
        snprintf(plan_ckpt_every, sizeof plan_ckpt_every, "%d", plan.ckpt_every);
    if (have_plan) {
        const char *why = NULL; /* every plan knob runs now */
        if (why) {
            fprintf(stderr, "whale-train: the plan asks for %s, which this engine does not run "
                    "yet; refusing before any step\n", why);
            whale_plan_free(&plan);
            return 1;
        }
    }
    if (!o.model || !o.data) {
        fprintf(stderr, "whale-train: --model and --data are required (see --help)\n");
        return 2;
    }
    if (o.zero > 3 || o.zero < -1) {
        fprintf(stderr, "whale-train: WHALE_ZERO=%ld: expected 0..3\n", o.zero);
        return 2;
    }
    whale_log_set_level(WHALE_LOG_INFO);
    whale_log_init_from_env();

    struct whale_model_desc md;
    if (whale_model_desc_load(o.model, &md) || train_data_model(&td, o.model, o.data, &md))
        return 1;
    {   /* the planner describes Llama-style blocks; the engine runs GPT-2 ones */
        char why[512];
        if (whale_model_desc_gpt2_check(&md, why, sizeof why)) {
            fprintf(stderr, "whale-train: %s\n", why);
            return 1;
        }
    }

    whale_ctx *ctx = NULL;
    int rank = 0, dp = 1, dp_rank = 0, tp = 1, pp = 1, world = 1;
    int rc = 1;
    whale_engine *e = NULL;
    whale_data *data = NULL;
    whale_ckpt *ck = NULL;
    int nsaves = 0;
    double ckpt_stall = 0;
    int32_t *in = NULL, *tg = NULL;
    FILE *mf = NULL;

    struct train_elastic *te = NULL;
    if (whale_init(&ctx))
        return 1;
    if ((rc = te_init(&te, ctx))) /* WHALE_FAULT, WHALE_REDUNDANCY_EVERY */
        goto out;
    rc = 1;
    if (whale_is_spare(ctx) && te_elastic(te)) {
        int src = te_spare(te, ctx); /* 0: promoted into a failed rank's place */
        if (src) {
            rc = src > 0 ? 0 : 1;
            goto out;
        }
    }
    {
        int tpr, ppr;
        whale_degrees(ctx, &tp, &pp, &dp);
        whale_coords(ctx, &tpr, &ppr, &dp_rank);
        world = whale_world_size(ctx);
        rank = whale_rank(ctx);
        if (whale_is_spare(ctx)) {
            whale_info("hot spare: idle (promotion needs the elastic module)");
            rc = train_offload_spare(&off, ctx) ? 1 : 0; /* lends memory when asked */
            goto out;
        }
    }
    if (have_plan) {
        if (whale_plan_validate(&plan, 0, md.layers, o.plan ? o.plan : "WHALE_PLAN")) {
            whale_plan_free(&plan);
            goto out;
        }
        for (int i = 1; i < plan.n_dp_batch; i++)
            if (plan.dp_batch[i] != plan.dp_batch[0]) {
                whale_error("the plan gives the DP replicas different batches (dp_batch); this "
                            "engine splits the global batch evenly; refusing before any step");
                goto out;
            }
        if (plan.dp != dp || plan.tp != tp || plan.pp != pp) {
            whale_error("the plan says TP=%d PP=%d DP=%d but this step runs TP=%d PP=%d DP=%d; "
                        "refusing before any step", plan.tp, plan.pp, plan.dp, tp, pp, dp);
            goto out;
        }
    }

    long accum = o.accum > 0 ? o.accum : 1;
    long micro = o.micro;
    if (!micro) {
        if (o.batch % (dp * accum)) {
            whale_error("--batch=%ld is not divisible by DP (%d) x grad-accum (%ld)", o.batch, dp,
                        accum);
            goto out;
        }
        micro = o.batch / (dp * accum);
    }
    long gbatch = micro * accum * dp;
    long seq = o.seq ? o.seq : (md.seq < 1024 ? md.seq : 1024);
    if (seq > md.seq) {
        whale_error("--seq=%ld exceeds the model's Seq=%d (%s)", seq, md.seq, md.name);
        goto out;
    }

    struct whale_engine_config ec;
    whale_engine_config_defaults(&ec);
    ec.model = md;
    ec.seq = (int)seq;
    ec.micro_batch = (int)micro;
    ec.grad_accum = (int)accum;
    ec.seed = (uint64_t)o.seed;
    ec.lr = (float)o.lr;
    ec.min_lr = (float)(o.min_lr >= 0 ? o.min_lr : o.lr / 10);
    ec.warmup_steps = o.warmup >= 0 ? o.warmup : o.steps / 20;
    ec.total_steps = o.steps;
    ec.weight_decay = (float)o.wd;
    ec.grad_clip = (float)o.clip;
    ec.zero_stage = o.zero >= 0 ? (int)o.zero : 0;
    ec.bucket_bytes = (size_t)(o.bucket_mb * 1048576.0);
    ec.overlap = o.overlap != 0;
    /* precision: flag > plan > fp32; fp16 needs the loss scaler unless told not to */
    ec.precision = have_plan ? plan.precision : WHALE_PREC_FP32;
    if (o.precision)
        whale_precision_parse(o.precision, &ec.precision);
    ec.loss_scaling = o.loss_scale >= 0 ? o.loss_scale : ec.precision == WHALE_PREC_FP16;
    ec.grad_reduce_16 = o.grad_reduce_16;
    ec.threads = (int)o.threads;
    /* tensor / pipeline parallelism and recomputation: flags > plan */
    ec.tp = tp;
    ec.pp = pp;
    ec.schedule = have_plan ? plan.schedule : WHALE_SCHED_1F1B;
    ec.interleave = have_plan ? plan.interleave : 1;
    if (o.schedule)
        whale_schedule_parse(o.schedule, &ec.schedule);
    if (o.interleave > 0)
        ec.interleave = (int)o.interleave;
    if (o.schedule && ec.schedule != WHALE_SCHED_INTERLEAVED && !o.interleave)
        ec.interleave = 1;
    if (have_plan && plan.n_stage_layers > 0 && ec.interleave == plan.interleave) {
        ec.stage_layers = plan.stage_layers;
        ec.n_stage_layers = plan.n_stage_layers;
    }
    ec.recompute = have_plan ? plan.recompute : WHALE_RECOMPUTE_NONE;
    if (o.recompute)
        whale_recompute_parse(o.recompute, &ec.recompute);
    if (ec.recompute == WHALE_RECOMPUTE_LAYERS) {
        ec.recompute_layers = plan.recompute_layers;
        ec.n_recompute_layers = plan.n_recompute_layers;
    }
    ec.act_budget_bytes = (int64_t)(o.act_budget_mb * 1048576.0);
    if (!ec.act_budget_bytes && have_plan && ec.recompute == WHALE_RECOMPUTE_AUTO)
        ec.act_budget_bytes = plan_act_budget(&plan);
    if (train_offload_apply(&off, have_plan ? &plan : NULL, &ec)) {
        rc = 2;
        goto out;
    }
    /* the engine refuses layouts that cannot run (divisibility, stage split,
     * schedule vs micro-batches, a device-memory budget too small) with the
     * reason, before any step */
    if (whale_engine_create(&ec, ctx, &e))
        goto out;
    if (whale_trace_init(rank, world) || train_offload_open(&off, ctx, e))
        goto out;

    struct whale_data_config dc = { .paths = o.data, .format = o.format, .vocab = md.vocab,
                                    .seq = (int)seq, .local_batch = (int)(micro * accum),
                                    .dp_rank = dp_rank, .dp_size = dp, .prefetch = true };
    if (whale_data_open(&dc, &data) || train_data_val_open(&td, &dc, gbatch))
        goto out;

    /* ---- checkpoints: settings, resume, the saver ---- */
    whale_ckpt_config ckc;
    whale_ckpt_config_default(&ckc);
    if (!o.ckpt_dir && !getenv("WHALE_CKPT_DIR") && plan_ckpt_dir[0])
        ckc.root = plan_ckpt_dir;
    if (!o.ckpt_every && !getenv("WHALE_CKPT_EVERY") && plan_ckpt_every[0])
        setenv("WHALE_CKPT_EVERY", plan_ckpt_every, 1);
    if (o.ckpt_every)
        setenv("WHALE_CKPT_EVERY", o.ckpt_every, 1);
    if (whale_ckpt_config_from_env(&ckc))
        goto out;
    if (o.ckpt_dir)
        ckc.root = o.ckpt_dir;
    if (o.ckpt_keep >= 0)
        ckc.keep = (int)o.ckpt_keep;
    ckc.rank = rank;
    ckc.world = ctx ? whale_world_size(ctx) : 1;
    if ((ckc.every_steps > 0 || ckc.every_seconds > 0) && !ckc.root) {
        whale_error("--whale-ckpt-every needs a checkpoint directory (--whale-ckpt-dir or "
                    "WHALE_CKPT_DIR)");
        goto out;
    }
    if (o.resume && !te_promoted(te)) {
        bool latest = !strcmp(o.resume, "latest");
        if (latest && !ckc.root) {
            whale_error("--resume latest needs a checkpoint directory (--whale-ckpt-dir or "
                        "WHALE_CKPT_DIR)");
            goto out;
        }
        char *dir = NULL;
        int lrc = latest ? whale_ckpt_resolve(ckc.root, "latest", &dir)
                         : whale_ckpt_resolve(o.resume, "latest", &dir);
        if (lrc == WHALE_ENOENT && latest) {
            if (rank == 0)
                whale_info("--resume latest: no checkpoint under %s yet, starting at step 0",
                           ckc.root);
        } else if (lrc) {
            goto out;
        } else {
            whale_ckpt_reader *rd = NULL;
            lrc = whale_ckpt_reader_open(dir, &rd);
            if (!lrc)
                lrc = whale_ckpt_load_engine(rd, e);
            whale_ckpt_reader_close(rd);
            free(dir);
            if (lrc)
                goto out;
        }
    }
    if (ckc.root && (ckc.every_steps > 0 || ckc.every_seconds > 0) &&
        (whale_ckpt_open(&ckc, &ck) || train_data_ckpt(&td, ck)))
        goto out;
    if (ck && !plan_json) { /* no plan from the plugin: record the layout this run used */
        json_t *pj = json_pack("{sssisisisisisisIsI}", "model", md.name, "tp", tp, "pp", pp,
                               "dp", dp, "zero", ec.zero_stage, "micro_batch", (int)micro,
                               "num_micro_batches", (int)accum, "global_batch", (json_int_t)gbatch,
                               "seed", (json_int_t)o.seed);
        plan_json = json_dumps(pj, JSON_COMPACT);
        json_decref(pj);
    }

    size_t bt = (size_t)micro * accum * seq; /* each <= 2^20: no overflow */
    in = malloc(bt * sizeof(int32_t));
    tg = malloc(bt * sizeof(int32_t));
    if (!in || !tg) {
        whale_error("out of memory for the batch: micro-batch %ld x %ld micro-batches x seq %ld "
                    "tokens", (long)micro, (long)accum, seq);
        rc = 1;
        goto out;
    }
    /* never world-writable; owner-only with WHALE_CKPT_PRIVATE=1; a spare that
     * took rank 0's place appends to the file rank 0 began */
    if (rank == 0 && o.metrics && *o.metrics &&
        !(mf = te_promoted(te) ? fopen(o.metrics, "a")
                               : whale_fopen_output(o.metrics, whale_output_private()))) {
        whale_error("cannot write metrics file %s: %s", o.metrics, strerror(errno));
        goto out;
    }
    struct train_job job = { .e = &e, .ec = &ec, .data = &data, .dc = &dc, .in = &in, .tg = &tg,
                             .accum = &accum, .rank = &rank, .world = &world, .tp = &tp,
                             .pp = &pp, .dp = &dp, .dp_rank = &dp_rank, .metrics = &mf,
                             .metrics_path = o.metrics, .ckpt_root = ckc.root, .ck = &ck,
                             .ckc = &ckc };
    if (te_start(te, ctx, &job))
        goto out;
    /* MFU is reported by rank 0 only: the other ranks skip the measurement
     * (seconds on a loaded machine; a promoted spare would stall the redo) */
    double peak = o.peak_gflops > 0 ? o.peak_gflops : rank == 0 ? whale_sgemm_peak_gflops(e) : 1;
    struct whale_engine_memory mem;
    whale_engine_memory(e, &mem);
    bool tty = o.progress != 0 && rank == 0 && isatty(STDERR_FILENO);
    if (rank == 0)
        whale_info("model %s: %lld parameters, %d layers, seq %ld, global batch %ld (%ld x %ld "
                   "micro x DP %d), ZeRO %d, data %lld tokens, MFU peak %.0f GFLOP/s per rank",
                   md.name, (long long)mem.num_params, md.layers, seq, gbatch, micro, accum, dp,
                   ec.zero_stage, (long long)whale_data_tokens(data), peak);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    struct whale_train_state ts;
    whale_engine_get_state(e, &ts);
    const int64_t first_step = ts.step;
    double t_run = 0, tok_run = 0, first_loss = NAN, last_loss = NAN, sum_tps = 0;
    double sum_comm = 0, sum_wait = 0, sum_flops = 0;
    long done = 0, n_tps = 0;
    for (long step = first_step; step < o.steps && !stop_requested; step++) {
        whale_engine_get_state(e, &ts);
        if ((rc = whale_data_next(data, ts.samples, in, tg))) {
            rc = 1;
            goto out;
        }
        struct whale_step_stats st;
        if (ck && (whale_ckpt_fence(ck) || whale_ckpt_poll(ck))) {
            whale_error("stopping: a checkpoint failed (the previous ones are intact)");
            rc = 1;
            goto out;
        }
        struct timespec cpu0, cpu1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
        te_step_begin(te, step + 1);
        if (o.inject_overflow == step + 1)
            whale_engine_inject_overflow(e);
        int src = whale_engine_step(e, in, tg, &st);
        if (src) {
            int64_t redo;
            int trc = te_recover(te, ctx, &job, src, step + 1, &redo);
            if (trc) {
                rc = trc > 0 ? 0 : 1;
                goto out;
            }
            step = (long)redo - 1; /* the loop's step++ makes it redo */
            continue;
        }
        if (te_step_done(te, e)) {
            rc = 1;
            goto out;
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
        double cpu_s = (cpu1.tv_sec - cpu0.tv_sec) + (cpu1.tv_nsec - cpu0.tv_nsec) * 1e-9;
        done++;
        double t_ck = 0;
        if (ck) {
            int due = whale_ckpt_due(ck, step + 1);
            /* a time-based interval is decided on rank 0 (clocks differ) */
            if (ckc.every_seconds > 0 && ctx && whale_world_size(ctx) > 1 &&
                whale_broadcast(whale_world(ctx), &due, 1, WHALE_INT32, 0)) {
                rc = 1;
                goto out;
            }
            if (due) {
                double t0 = (double)clock_gettime_ns() * 1e-9;
                bool skipped = false;
                int sv = whale_ckpt_save_engine(ck, e, plan_json, &skipped);
                te_ckpt_started(te, step + 1); /* WHALE_FAULT phase=ckpt: save in flight */
                if (sv) {
                    whale_error("stopping: checkpoint of step %ld failed (the previous ones "
                                "are intact)", step + 1);
                    rc = 1;
                    goto out;
                }
                t_ck = (double)clock_gettime_ns() * 1e-9 - t0;
                if (!skipped) {
                    nsaves++;
                    ckpt_stall += t_ck;
                }
            }
        }
        double tokens = (double)gbatch * seq;
        double tps = tokens / st.t_total;
        double mfu = st.flops / st.t_total / (peak * 1e9);
        if (step > first_step || o.steps - first_step == 1) { /* the first step warms caches */
            t_run += st.t_total;
            tok_run += tokens;
            sum_tps += tps;
            n_tps++;
        }
        sum_comm += st.t_comm;
        sum_wait += st.t_wait;
        train_offload_account(&off, &st);
        sum_flops += st.flops;
        if (isnan(first_loss))
            first_loss = st.loss;
        last_loss = st.loss;
        if (train_data_eval(&td, e, step + 1, o.steps)) { /* --val-data, all ranks */
            rc = 1;
            goto out;
        }
        if (mf) {
            json_t *j = json_pack("{sIsososfsfsfsfsfsfsfsfsfsbsf}",
                                  "step", (json_int_t)(step + 1), "loss", train_json_num(st.loss),
                                  /* JSON has no inf/NaN: null for a skipped step's */
                                  "grad_norm", train_json_num(st.grad_norm), "lr", (double)st.lr,
                                  "tokens_per_s", tps, "step_s", st.t_total,
                                  "compute_s", st.t_compute, "comm_s", st.t_comm,
                                  "wait_s", st.t_wait, "overlap", st.overlap, "mfu", mfu,
                                  "loss_scale", (double)st.loss_scale, "skipped", st.skipped,
                                  "peak_rss_mb", peak_rss_mb());
            if (!isfinite(st.grad_norm))
                json_object_set_new(j, "grad_norm", json_null());
            if (t_ck > 0)
                json_object_set_new(j, "ckpt_stall_s", json_real(t_ck));
            json_object_set_new(j, "pipe_wait_s", json_real(st.t_pipe_wait));
            json_object_set_new(j, "cpu_s", json_real(cpu_s)); /* CPU time of this process */
            json_object_set_new(j, "recompute_s", json_real(st.t_recompute));
            json_object_set_new(j, "act_peak_mb", json_real(st.act_peak_bytes / 1048576.0));
            double red_s, red_b;
            te_step_metrics(te, &red_s, &red_b);
            if (red_s > 0) { /* the in-memory copy of this step (elastic steps) */
                json_object_set_new(j, "redundancy_s", json_real(red_s));
                json_object_set_new(j, "redundancy_bytes", json_real(red_b));
            }
            json_object_set_new(j, "precision", json_string(whale_precision_name(ec.precision)));
            {
                struct whale_train_state ts2;
                whale_engine_get_state(e, &ts2);
                json_object_set_new(j, "skipped_steps", json_integer(ts2.scaler_skipped));
            }
            train_offload_step(j, &st);
            train_data_metrics(&td, j);
            json_dumpf(j, mf, JSON_COMPACT);
            fputc('\n', mf);
            fflush(mf);
            json_decref(j);
        }
        if (rank == 0) {
            double avg = n_tps ? t_run / n_tps : st.t_total;
            char eta[32], vbuf[48];
            fmt_eta(eta, sizeof eta, avg * (o.steps - step - 1));
            if (tty)
                fprintf(stderr, "\rstep %ld/%ld  loss %.4f%s  %.0f tok/s  MFU %.0f%%  ETA %s   ",
                        step + 1, o.steps, st.loss, train_data_progress(&td, vbuf, sizeof vbuf),
                        tps, 100 * mfu, eta);
            else if ((step + 1) % o.log_every == 0 || step + 1 == o.steps || step == first_step ||
                     td.fresh)
                fprintf(stderr, "step %ld/%ld loss %.4f%s grad_norm %.3f lr %.2e %.0f tok/s MFU "
                        "%.0f%% ETA %s\n", step + 1, o.steps, st.loss,
                        train_data_progress(&td, vbuf, sizeof vbuf), st.grad_norm,
                        (double)st.lr, tps, 100 * mfu, eta);
        }
    }
    if (tty)
        fputc('\n', stderr);
    if (ck) { /* the last save in flight must land */
        int crc = whale_ckpt_close(ck);
        ck = NULL;
        if (crc) {
            whale_error("the last checkpoint failed (the previous ones are intact)");
            rc = 1;
            goto out;
        }
    }
    if (stop_requested)
        whale_warn("stopped by a signal after %ld steps", done);
    if (rank == 0) {
        double tps = t_run > 0 ? tok_run / t_run : 0;
        double mfu = t_run > 0 ? (sum_flops / done) * n_tps / t_run / (peak * 1e9) : 0;
        double ovl = sum_comm > 0 ? 1 - sum_wait / sum_comm : 0;
        /* no step run (--steps 0, resumed at the end): the losses are NaN,
         * which JSON cannot hold: null (json_real(NaN) fails) */
        json_t *j = json_pack("{s{sIsososfsfsfsfsfsisisi}}", "summary",
                              "steps", (json_int_t)done, "first_loss", train_json_num(first_loss),
                              "final_loss", train_json_num(last_loss), "tokens_per_s", tps, "mfu", mfu,
                              "comm_overlap", ovl < 0 ? 0.0 : ovl, "peak_rss_mb", peak_rss_mb(),
                              "peak_gflops", peak, "dp", dp, "zero", ec.zero_stage,
                              "global_batch", (int)gbatch);
        json_t *sm = json_object_get(j, "summary");
        if (!isfinite(first_loss) || !isfinite(last_loss)) {
            json_object_set_new(sm, "first_loss", json_null());
            json_object_set_new(sm, "final_loss", json_null());
        }
        json_object_set_new(sm, "tp", json_integer(tp));
        json_object_set_new(sm, "pp", json_integer(pp));
        json_object_set_new(sm, "schedule", json_string(whale_schedule_name(ec.schedule)));
        json_object_set_new(sm, "interleave", json_integer(ec.interleave));
        json_object_set_new(sm, "recompute", json_string(whale_recompute_name(ec.recompute)));
        json_object_set_new(sm, "precision", json_string(whale_precision_name(ec.precision)));
        {
            struct whale_engine_memory emem;
            struct whale_train_state ts2;
            whale_engine_memory(e, &emem);
            whale_engine_get_state(e, &ts2);
            json_object_set_new(sm, "skipped_steps", json_integer(ts2.scaler_skipped));
            json_object_set_new(sm, "loss_scale", json_real(ts2.loss_scale));
            json_object_set_new(sm, "act_mb", json_real(emem.act_bytes / 1048576.0));
            json_object_set_new(sm, "param_mb", json_real(emem.param_bytes / 1048576.0));
        }
        train_offload_summary(&off, sm, e, &ec);
        train_data_summary(&td, sm);
        if (nsaves)
            json_object_set_new(sm, "checkpoints",
                                json_pack("{sisf}", "saves", nsaves, "stall_s", ckpt_stall));
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (!s) {
            whale_error("cannot build the summary (out of memory)");
            rc = 1;
            json_decref(j);
            goto out;
        }
        printf("%s\n", s);
        if (mf)
            fprintf(mf, "%s\n", s);
        free(s);
        json_decref(j);
    }
    rc = stop_requested ? 1 : 0;
out:
    if (off.tgt && train_offload_close(&off)) /* spares lending memory wait for this */
        rc = 1;
    if (rc && ctx && !whale_is_spare(ctx))
        train_offload_fail(&off, ctx); /* spares waiting for the setup stop too */
    if (ck && whale_ckpt_close(ck))
        rc = 1;
    free(plan_json);
    whale_trace_close();
    whale_plan_free(&plan);
    if (mf)
        fclose(mf);
    free(in);
    free(tg);
    whale_data_close(data);
    train_data_close(&td);
    te_free(te, rc == 0);
    whale_engine_destroy(e);
    if (ctx)
        whale_finalize(ctx);
    return rc;
}
