/* whale-train's command line: the core options (engine, data, checkpoints,
 * output) and the feature areas' options (train_areas.c), and --help. Values
 * are only recorded and range-checked here; train_config.c resolves them
 * against the environment and the plan. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/data.h"
#include "whale/engine.h"
#include "whale/envnum.h"
#include "whale/knobs.h"
#include "whale/parallel.h"
#include "whale_config.h"

#include "train.h"
#include "train_areas.h"

void train_usage(FILE *f)
{
    fprintf(f,
"Usage: whale-train --model NAME|FILE --data FILE[,FILE...] [options]\n"
"Train a GPT-2- or Llama-style model on the CPU or a GPU (--device; fp32, or bf16/fp16\n"
"mixed precision) with tensor, pipeline and data parallelism and ZeRO over the ranks\n"
"started by srun --whale-* or whale-run (a plain start is one rank).\n"
"\n"
"  --model NAME|FILE    preset (config/models/NAME.conf) or .conf file\n"
"  --data FILES         llm.c token shards (.bin) or raw byte files, comma-separated\n"
"  --format auto|llmc|bytes   data format (auto: .bin or magic = llmc)\n"
"  --loss-mask FILE[,FILE..]  loss masks, one per data file (1 byte per token,\n"
"                             0 = not a target; default: DATA.mask when it exists)\n"
"  --steps N            optimizer steps (default 100)\n"
"  --batch N            global batch in samples per step (default 8)\n"
"  --micro-batch N      samples per micro-batch per rank (default batch/(DP*accum))\n"
"  --grad-accum N       micro-batches per step (default 1; with --batch and\n"
"                       --micro-batch: batch/(DP*micro-batch))\n"
"  --dp-shares N,N,..   micro-batches of the global batch per DP replica (uneven DP;\n"
"                       ZeRO 2/3: the shares set the replicas' micro-batch sizes);\n"
"                       auto: the plan's shares or even at first, then the speeds measured\n"
"                       over the first steps set them, re-measured every step (see\n"
"                       --rebalance)\n"
"  --pp-layers N,N,..   transformer blocks per pipeline stage (uneven PP; one entry per\n"
"                       stage, per virtual stage in chunk order with --interleave; the\n"
"                       first stage also holds the embedding, the last the head)\n"
"  --seq N              sequence length (default: the model's Seq, at most 1024)\n"
"  --lr X --min-lr X    peak and final learning rate (6e-4, lr/10; fine-tuning:\n"
"                       --init-from or weights without a train state: 2e-5)\n"
"  --warmup N           warmup steps (default steps/20)\n"
"  --weight-decay X     AdamW decoupled weight decay (0.1)\n"
"  --grad-clip X        global-norm clip, 0 disables (1.0)\n"
"  --seed N             model and data seed (1337)\n"
"  --plan FILE          plan JSON (default: $WHALE_PLAN from the plugin or whale-run)\n"
"  --ep N               expert-parallel degree (default: WHALE_EP, the plan's, or 1);\n"
"                       more than 1 needs a model with MoE layers, Experts divisible\n"
"                       by it and DP a multiple of it\n"
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
    train_areas_usage(f); /* each area's options */
    fprintf(f,
"  --threads N          compute threads per rank (default CPUs / ranks on the node;\n"
"                       more time-share the cores and usually slow the step: a warning)\n"
"  --metrics FILE       JSON-lines metrics (default whale-train-metrics.jsonl)\n"
"  --log-every N        print a line every N steps when not on a terminal (10)\n"
"  --peak-gflops X      peak per rank for MFU (default: rank 0's OpenBLAS sgemm; raised\n"
"                       to what a step achieves if that is more: MFU <= 100%%)\n"
"  --no-progress        no live progress line\n"
"  --whale-ckpt-dir DIR checkpoint root (default: WHALE_CKPT_DIR, the plan's ckpt_dir)\n"
"  --whale-ckpt-every N|Ts  checkpoint every N steps or every T (30s, 10m, 2h)\n"
"                       (default: WHALE_CKPT_EVERY, the plan's ckpt_every)\n"
"  --ckpt-keep K        keep the last K checkpoints (3; 0 keeps all)\n"
"  --ckpt-milestone-every M  checkpoints of step multiples of M are milestones that\n"
"                       retention never removes (0: none; WHALE_CKPT_MILESTONE_EVERY);\n"
"                       SIGUSR2 makes the next checkpoint a milestone\n"
"  --init-from HF_DIR   fine-tune a Hugging Face model (config.json + safetensors of\n"
"                       GPT-2, Llama, Mistral, Qwen2, Mixtral): the model unless --model,\n"
"                       and the weights, each rank reading only its slices; AdamW starts\n"
"                       afresh\n"
"  --resume DIR|latest  continue exactly from a checkpoint: a step directory, a root,\n"
"                       or `latest` under the checkpoint root (none yet: start fresh)\n"
"  -h, --help           this help;  -V, --version  version\n"
"  --help-env[=markdown]  every WHALE_* variable: type, default, meaning\n"
"\n"
"Environment: WHALE_TP/PP/DP and ranks from the plugin or whale-run; WHALE_PLAN\n"
"(degrees, zero, micro_batch, num_micro_batches, global_batch, model, schedule,\n"
"interleave, stage_layers, dp_batch, recompute, recompute_layers); WHALE_TRACE=FILE writes\n"
"a Chrome/Perfetto trace per rank: \"-rank<R>\" goes before FILE's extension\n"
"(trace.json -> trace-rank0.json, trace-rank1.json, ...; a world of one rank\n"
"writes FILE itself; \"%%r\" in FILE is replaced by the rank instead); WHALE_ZERO,\n"
"WHALE_MICRO_BATCH, WHALE_GRAD_ACCUM override the plan; flags override both.\n"
"Checkpoint knobs: WHALE_CKPT_ASYNC, _WEIGHTS (exact|bf16|fp16), _MOMENTS (exact|int8),\n"
"_ZSTD, _INCREMENTAL, _BUSY (wait|skip), _PRIVATE (see whale-ckpt(1)).\n"
"Elastic steps (hot spares: srun --whale-spares=N, whale-run --spares N; or\n"
"WHALE_ELASTIC=1): a failed rank's place goes to a spare inside the step, state\n"
"from an in-memory copy, every survivor rolls back to the last step completed\n"
"everywhere and redoes it (see whale-train(1)). WHALE_REDUNDANCY_EVERY=K|auto copies\n"
"every K steps (auto, the default: K starts at 1 and is kept so that a refresh blocks\n"
"<= 5 %% of a step; 0: local rollback images only). Fault injection:\n"
"WHALE_FAULT=\"kill|hang:rank=R[,R...]:step=S[:phase=start|forward|backward|collective|\n"
"optimizer|ckpt][;...]\" (hang = SIGSTOP itself).\n"
"Files it writes (metrics, traces) are never group/world-writable; WHALE_CKPT_PRIVATE=1\n"
"makes them owner-only too. Numeric WHALE_* variables must be integers in range.\n");
}


void train_defaults(struct train *t)
{
    memset(t, 0, sizeof *t);
    t->o = (struct train_opts){ .steps = 100, .batch = 8, .micro = 0, .accum = 0, .seq = 0,
                                .seed = 1337, .warmup = -1, .zero = -1, .threads = 0,
                                .log_every = 10, .lr = -1, .min_lr = -1, .wd = 0.1,
                                .clip = 1.0, .bucket_mb = 4, .overlap = -1, .loss_scale = -1,
                                .progress = -1, .metrics = "whale-train-metrics.jsonl",
                                .ckpt_keep = -1, .ckpt_milestone = -1 };
    whale_plan_init(&t->plan);
}

#define MAX_AREA_OPTS 64

/* Returns TRAIN_GO, 0 (--help, --version) or 2 (usage error). */
int train_parse_args(struct train *t, int argc, char **argv)
{
    enum { O_MICRO = 256, O_ACCUM, O_MINLR, O_WARM, O_WD, O_CLIP, O_ZERO, O_BUCKET, O_NOOVL,
           O_LS, O_THREADS, O_METRICS, O_LOGEVERY, O_PEAK, O_NOPROG, O_FORMAT, O_SCHED,
           O_INTERLEAVE, O_RECOMPUTE, O_ACTBUDGET, O_RESUME, O_INIT_FROM, O_CKDIR, O_CKEVERY, O_CKKEEP, O_CKMILE,
           O_PREC, O_NOLS, O_INJECT, O_GRED, O_EP, O_SHARES, O_PPLAYERS,
           O_HELPENV, O_LOSSMASK,
           O_AREA /* .. the areas' options, in registry order */ };
    static const struct option core[] = {
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
        { "loss-mask", required_argument, 0, O_LOSSMASK },
        { "resume", required_argument, 0, O_RESUME },
        { "init-from", required_argument, 0, O_INIT_FROM },
        { "whale-ckpt-dir", required_argument, 0, O_CKDIR },
        { "whale-ckpt-every", required_argument, 0, O_CKEVERY },
        { "ckpt-keep", required_argument, 0, O_CKKEEP },
        { "ckpt-milestone-every", required_argument, 0, O_CKMILE },
        { "schedule", required_argument, 0, O_SCHED },
        { "interleave", required_argument, 0, O_INTERLEAVE },
        { "recompute", required_argument, 0, O_RECOMPUTE },
        { "act-budget-mb", required_argument, 0, O_ACTBUDGET },
        { "precision", required_argument, 0, O_PREC }, { "no-loss-scale", no_argument, 0, O_NOLS },
        { "inject-overflow", required_argument, 0, O_INJECT },
        { "grad-reduce", required_argument, 0, O_GRED },
        { "ep", required_argument, 0, O_EP },
        { "dp-shares", required_argument, 0, O_SHARES },
        { "pp-layers", required_argument, 0, O_PPLAYERS },
        { "help-env", optional_argument, 0, O_HELPENV },
        { "plan", required_argument, 0, 'p' }, { "help", no_argument, 0, 'h' }, { "version", no_argument, 0, 'V' },
    };
    enum { N_CORE = sizeof core / sizeof core[0] };
    struct option lo[N_CORE + MAX_AREA_OPTS + 1];
    const struct train_opt *area_opt[MAX_AREA_OPTS];
    int n_area = 0, rc = TRAIN_GO;
    memcpy(lo, core, sizeof core);
    for (int a = 0; train_areas[a]; a++)
        for (const struct train_opt *ao = train_areas[a]->opts; ao && ao->name; ao++) {
            if (n_area == MAX_AREA_OPTS) {
                fprintf(stderr, "whale-train: more than %d area options (raise "
                        "MAX_AREA_OPTS in train_cli.c)\n", MAX_AREA_OPTS);
                return 2;
            }
            /* getopt would silently take the first of two equal names */
            for (int k = 0; k < N_CORE + n_area; k++)
                if (!strcmp(lo[k].name, ao->name)) {
                    fprintf(stderr, "whale-train: option --%s of area %s is defined twice\n",
                            ao->name, train_areas[a]->name);
                    return 2;
                }
            lo[N_CORE + n_area] = (struct option){ ao->name, ao->has_arg, 0, O_AREA + n_area };
            area_opt[n_area++] = ao;
        }
    lo[N_CORE + n_area] = (struct option){ 0, 0, 0, 0 };
    int c, bad = 0;
    while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
        switch (c) {
        case 'm': t->o.model = optarg; break;
        case 'd': t->o.data = optarg; break;
        case 's': bad |= whale_opt_long("whale-train", "--steps", optarg, 0, 1L << 40, &t->o.steps); break;
        case 'b': bad |= whale_opt_long("whale-train", "--batch", optarg, 1, 1 << 20, &t->o.batch); t->o.batch_set = true; break;
        case 'p': t->o.plan = optarg; break;
        case 't': bad |= whale_opt_long("whale-train", "--seq", optarg, 1, 1 << 20, &t->o.seq); break;
        case 'l': bad |= whale_opt_double("whale-train", "--lr", optarg, 0, 10, &t->o.lr); break;
        case 'S': bad |= whale_opt_long("whale-train", "--seed", optarg, 0, LONG_MAX, &t->o.seed); break;
        case O_MICRO: bad |= whale_opt_long("whale-train", "--micro-batch", optarg, 1, 1 << 20, &t->o.micro); break;
        case O_SHARES: t->o.dp_shares = optarg; break;
        case O_PPLAYERS: t->o.pp_layers = optarg; break;
        case O_ACCUM: bad |= whale_opt_long("whale-train", "--grad-accum", optarg, 1, 1 << 20, &t->o.accum); break;
        case O_MINLR: bad |= whale_opt_double("whale-train", "--min-lr", optarg, 0, 10, &t->o.min_lr); break;
        case O_WARM: bad |= whale_opt_long("whale-train", "--warmup", optarg, 0, 1L << 40, &t->o.warmup); break;
        case O_WD: bad |= whale_opt_double("whale-train", "--weight-decay", optarg, 0, 10, &t->o.wd); break;
        case O_CLIP: bad |= whale_opt_double("whale-train", "--grad-clip", optarg, 0, 1e9, &t->o.clip); break;
        case O_ZERO: bad |= whale_opt_long("whale-train", "--zero", optarg, 0, 3, &t->o.zero); break;
        case O_BUCKET: bad |= whale_opt_double("whale-train", "--bucket-mb", optarg, 0.001, 65536, &t->o.bucket_mb); break;
        case O_NOOVL: t->o.overlap = 0; break;
        case O_LS: t->o.loss_scale = 1; break;
        case O_NOLS: t->o.loss_scale = 0; break;
        case O_PREC: {
            enum whale_precision pr;
            if (whale_precision_parse(optarg, &pr)) {
                fprintf(stderr, "whale-train: --precision=%s: expected fp32, bf16 or fp16\n",
                        optarg);
                bad = 1;
            }
            t->o.precision = optarg;
            break;
        }
        case O_GRED:
            if (!strcmp(optarg, "16") || !strcmp(optarg, "fp32")) {
                t->o.grad_reduce_16 = !strcmp(optarg, "16");
            } else {
                fprintf(stderr, "whale-train: --grad-reduce=%s: expected fp32 or 16\n", optarg);
                bad = 1;
            }
            break;
        case O_INJECT: bad |= whale_opt_long("whale-train", "--inject-overflow", optarg, 1, 1L << 40, &t->o.inject_overflow); break;
        case O_THREADS: bad |= whale_opt_long("whale-train", "--threads", optarg, 1, 4096, &t->o.threads); break;
        case O_METRICS: t->o.metrics = optarg; break;
        case O_LOGEVERY: bad |= whale_opt_long("whale-train", "--log-every", optarg, 1, 1L << 30, &t->o.log_every); break;
        case O_PEAK: bad |= whale_opt_double("whale-train", "--peak-gflops", optarg, 0.001, 1e9, &t->o.peak_gflops); break;
        case O_NOPROG: t->o.progress = 0; break;
        case O_RESUME: t->o.resume = optarg; break;
        case O_INIT_FROM: t->o.init_from = optarg; break;
        case O_CKDIR: t->o.ckpt_dir = optarg; break;
        case O_CKEVERY: t->o.ckpt_every = optarg; break;
        case O_CKKEEP: bad |= whale_opt_long("whale-train", "--ckpt-keep", optarg, 0, 1000000, &t->o.ckpt_keep); break;
        case O_CKMILE: bad |= whale_opt_long("whale-train", "--ckpt-milestone-every", optarg, 0, 1000000000, &t->o.ckpt_milestone); break;
        case O_SCHED: {
            enum whale_schedule k;
            if (whale_schedule_parse(optarg, &k)) {
                fprintf(stderr, "whale-train: --schedule=%s: expected 1f1b, interleaved or gpipe\n",
                        optarg);
                bad = 1;
            }
            t->o.schedule = optarg;
            break;
        }
        case O_INTERLEAVE: bad |= whale_opt_long("whale-train", "--interleave", optarg, 1, 64, &t->o.interleave); break;
        case O_EP: bad |= whale_opt_long("whale-train", "--ep", optarg, 1, WHALE_GRID_MAX_DP, &t->o.ep); break;
        case O_RECOMPUTE: {
            enum whale_recompute k;
            if (whale_recompute_parse(optarg, &k) || k == WHALE_RECOMPUTE_LAYERS) {
                fprintf(stderr, "whale-train: --recompute=%s: expected none, selective, full or "
                        "auto (a per-layer set comes from the plan)\n", optarg);
                bad = 1;
            }
            t->o.recompute = optarg;
            break;
        }
        case O_ACTBUDGET: bad |= whale_opt_double("whale-train", "--act-budget-mb", optarg, 0.001, 1e9, &t->o.act_budget_mb); break;
        case O_FORMAT:
            if (!strcmp(optarg, "auto")) t->o.format = WHALE_DATA_AUTO;
            else if (!strcmp(optarg, "llmc")) t->o.format = WHALE_DATA_LLMC;
            else if (!strcmp(optarg, "bytes")) t->o.format = WHALE_DATA_BYTES;
            else {
                fprintf(stderr, "whale-train: --format=%s: expected auto, llmc or bytes\n", optarg);
                bad = 1;
            }
            break;
        case O_LOSSMASK: t->o.loss_mask = optarg; break;
        case 'h': train_usage(stdout); rc = 0; goto done;
        case O_HELPENV:
            if (optarg && strcmp(optarg, "markdown")) {
                fprintf(stderr, "whale-train: --help-env=%s: expected no value or markdown\n",
                        optarg);
                rc = 2;
                goto done;
            }
            whale_knobs_print(stdout, NULL, optarg != NULL);
            rc = 0;
            goto done;
        case 'V': printf("whale-train %s\n", WHALE_VERSION); rc = 0; goto done;
        default:
            if (c >= O_AREA && c < O_AREA + n_area) {
                const struct train_opt *ao = area_opt[c - O_AREA];
                bad |= ao->set(t, optarg) ? 1 : 0;
                break;
            }
            train_usage(stderr);
            rc = 2;
            goto done;
        }
    }
    if (bad)
        return 2;
    if (optind < argc) {
        fprintf(stderr, "whale-train: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
done:
    return rc;
}
