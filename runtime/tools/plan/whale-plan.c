/* whale-plan: find the fastest parallel plan that fits, or predict a given
 * one, for a GPT model on a real or hypothetical cluster.
 *
 *   whale-plan --model gpt-1t --batch 3072 --nodes 384 --gpu A100-80GB
 *   whale-plan --model gpt-39.1b --batch 1536 --nodes 64 --gpu A100-80GB \
 *              --tp 8 --pp 2 --recompute full --evaluate
 *   whale-plan --model gpt-3.6b --batch 512 --nodes 2 --gpu H100-80GB \
 *              --group 2:8:A100-80GB --json plan.json
 */
#include "whale/error.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale/plan.h"
#include "whale/envnum.h"
#include "whale/planfile.h"
#include "whale_config.h"
#include "plan_cost.h"
#include "plan_offload.h"
#include "whale/conf.h"
#include "whale/topo.h"
#include "whale/outfile.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void usage(FILE *f)
{
    fprintf(f,
"usage: whale-plan --model NAME|FILE (--batch SEQS | --tokens N) CLUSTER [CONSTRAINTS] [OUTPUT]\n"
"\n"
"Searches TP x PP x DP x micro-batch x interleave x sequence parallelism x ZeRO x\n"
"recompute x offload with a memory + time model and prints the fastest plan that\n"
"fits, the best alternatives, and why faster plans were rejected.\n"
"\n"
"model and batch:\n"
"  -m, --model NAME|FILE      preset (config/models/NAME.conf) or model file; files may\n"
"                             describe Llama-style blocks: MLP=swiglu KVHeads=8\n"
"                             Norm=rmsnorm Position=rotary Bias=no Attention=flash\n"
"                             Precision=bf16 (see whale-plan(1))\n"
"  -b, --batch N              global batch in sequences per step\n"
"      --tokens N             global batch in tokens (rounded down to sequences)\n"
"cluster (hypothetical, or what an allocation holds):\n"
"  -N, --nodes N              nodes of the first group (required)\n"
"  -g, --gpus-per-node N      GPUs (or CPU ranks) per node (default 8)\n"
"  -G, --gpu TYPE             device type (default A100-80GB; --list-gpus)\n"
"      --group N:G:TYPE       add a node group (mixed clusters); repeatable\n"
"      --nvlink-domain N      GPUs per NVLink domain (default: node, or 72 for GB200)\n"
"      --nodes-per-leaf N     nodes under one leaf switch (default 32; 0 = one switch)\n"
"      --spine-oversub X      bandwidth divisor across leaf switches (default 1)\n"
"      --sharp                all-reduces reduce in the network (NVLink SHARP / NVLS\n"
"                             inside the NVLink domain, InfiniBand SHARP across it):\n"
"                             each GPU sends and receives its bytes once\n"
"      --grad-reduce-fp32     the data-parallel gradient reduction moves fp32 (4 bytes\n"
"                             per parameter), as Megatron-LM does for bf16 training\n"
"                             unless --grad-reduce-in-bf16 (default: the gradient's\n"
"                             own precision, 2 bytes in bf16)\n"
"      --conf FILE --nodelist HOSTS\n"
"                             the cluster as the plugin sees it: whale.conf (+ its\n"
"                             topology.conf) and a Slurm hostlist (instead of -N/-G)\n"
"      --calib FILE           calibration profile written by whale-bench\n"
"      --cores-per-node N --threads N\n"
"                             CPU ranks (-G cpu): the ranks of a node share its N\n"
"                             cores; a profile's PeakTFLOPS measured with Threads=T\n"
"                             becomes peak/T x min(threads, cores/ranks) per rank\n"
"                             (default: the profile's CoresPerNode, whale-train's\n"
"                             threads = cores/ranks)\n"
"      --fit-step SECONDS --calib-out FILE\n"
"                             scale the compute efficiency so that the configuration\n"
"                             given by the constraints predicts SECONDS per step (a\n"
"                             measured whale-train step), write the profile to FILE\n"
"constraints (fix a knob; all fixed = evaluate that configuration):\n"
"      --tp N --pp N --dp N --microbatch N --interleave N --zero 0..3\n"
"      --ep N                 expert parallelism of a MoE model (Experts=): the experts\n"
"                             sharded over N consecutive DP ranks; N divides DP and the\n"
"                             experts (default: the search chooses; dense models: 1)\n"
"      --recompute none|selective|full|auto  --offload none|optimizer|params\n"
"      --seqpar yes|no|auto   Megatron sequence parallelism (default auto: the search\n"
"                             chooses, as the Whale engine runs it with tp >= 2;\n"
"                             whale-train honours the plan's choice); yes needs tp >= 2\n"
"      --precision auto|fp32|bf16|fp16\n"
"                             training precision of the time and memory model\n"
"                             (default auto: the model file's Precision=, else fp32\n"
"                             on CPU ranks and bf16 on GPUs; fp32 on GPUs runs at\n"
"                             the TF32 tensor-core rate)\n"
"      --max-microbatch N     largest micro-batch tried (default 16)\n"
"      --max-idle FRAC        allow plans that leave up to FRAC of the GPUs idle\n"
"                             (e.g. 0.05 on 100,000 GPUs; default 0: use all)\n"
"output:\n"
"  -p, --plan FILE            predict the plan in FILE (WHALE_PLAN JSON, e.g. from\n"
"                             --json or a hand-written one) instead of searching\n"
"  -e, --evaluate             print the full prediction of the constrained best and\n"
"                             compare it with the planner's unconstrained pick; when\n"
"                             nothing fits, the whole prediction of the closest\n"
"                             candidate and by how much it is over\n"
"  -t, --top N                alternatives shown (default 8, max %d)\n"
"  -j, --json FILE            write the plan (WHALE_PLAN format) to FILE ('-' = stdout)\n"
"      --exhaustive           no pruning (baseline for benchmarks)\n"
"      --list-gpus            list the known device types\n"
"      --explain-model        print the efficiency constants in force (of --gpu when\n"
"                             no cluster is given)\n"
"  -q, --quiet                only the winner's line\n"
"cost (of the chosen plan):\n"
"      --train-tokens N       print what training on N tokens costs with the plan\n"
"                             (steps x predicted step time x price per hour)\n"
"      --price-per-node-hour X  dollars per node-hour (every node of the cluster)\n"
"      --price-per-gpu-hour X   dollars per GPU-hour; default: PricePerNodeHour= /\n"
"                             PricePerGPUHour= of --conf for --nodelist (whale.conf(5))\n"
"  -h, --help, -V, --version\n"
"\n"
"\n"
"Rates are labelled: \"hw TF/s\" counts recomputed FLOPs (Megatron-LM's TFLOP/s per\n"
"GPU, HFU), \"model TF/s\" does not (6N + attention per token: the MFU numerator of\n"
"the MosaicML, NeMo and Llama 3 tables).\n"
"\n"
"Exit status: 0 plan found, 1 nothing fits or an error, 2 usage error.\n",
        WHALE_PLAN_TOPK);
}

enum {
    O_TOKENS = 256, O_SHARP, O_GROUP, O_DOMAIN, O_LEAF, O_OVERSUB, O_CALIB, O_TP, O_PP, O_DP, O_EP, O_MB,
    O_V, O_IDLE, O_CONF, O_NODELIST, O_FIT, O_CALOUT, O_ZERO, O_RC, O_OFF, O_SP, O_MAXMB, O_EXH, O_LIST, O_EXPLAIN_MODEL,
    O_PREC, O_TRAIN_TOKENS, O_PRICE_NODE, O_PRICE_GPU, O_CORES, O_THREADS, O_GRAD32
};

static const struct option longopts[] = {
    { "model", required_argument, 0, 'm' },
    { "batch", required_argument, 0, 'b' },
    { "tokens", required_argument, 0, O_TOKENS },
    { "nodes", required_argument, 0, 'N' },
    { "gpus-per-node", required_argument, 0, 'g' },
    { "gpu", required_argument, 0, 'G' },
    { "group", required_argument, 0, O_GROUP },
    { "nvlink-domain", required_argument, 0, O_DOMAIN },
    { "nodes-per-leaf", required_argument, 0, O_LEAF },
    { "spine-oversub", required_argument, 0, O_OVERSUB },
    { "sharp", no_argument, 0, O_SHARP },
    { "grad-reduce-fp32", no_argument, 0, O_GRAD32 },
    { "calib", required_argument, 0, O_CALIB },
    { "cores-per-node", required_argument, 0, O_CORES },
    { "threads", required_argument, 0, O_THREADS },
    { "conf", required_argument, 0, O_CONF },
    { "fit-step", required_argument, 0, O_FIT },
    { "calib-out", required_argument, 0, O_CALOUT },
    { "nodelist", required_argument, 0, O_NODELIST },
    { "tp", required_argument, 0, O_TP },
    { "pp", required_argument, 0, O_PP },
    { "dp", required_argument, 0, O_DP },
    { "ep", required_argument, 0, O_EP },
    { "microbatch", required_argument, 0, O_MB },
    { "interleave", required_argument, 0, O_V },
    { "zero", required_argument, 0, O_ZERO },
    { "recompute", required_argument, 0, O_RC },
    { "offload", required_argument, 0, O_OFF },
    { "seqpar", required_argument, 0, O_SP },
    { "precision", required_argument, 0, O_PREC },
    { "max-microbatch", required_argument, 0, O_MAXMB },
    { "max-idle", required_argument, 0, O_IDLE },
    { "evaluate", no_argument, 0, 'e' },
    { "plan", required_argument, 0, 'p' },
    { "top", required_argument, 0, 't' },
    { "json", required_argument, 0, 'j' },
    { "exhaustive", no_argument, 0, O_EXH },
    { "list-gpus", no_argument, 0, O_LIST },
    { "explain-model", no_argument, 0, O_EXPLAIN_MODEL },
    { "quiet", no_argument, 0, 'q' },
    { "train-tokens", required_argument, 0, O_TRAIN_TOKENS },
    { "price-per-node-hour", required_argument, 0, O_PRICE_NODE },
    { "price-per-gpu-hour", required_argument, 0, O_PRICE_GPU },
    { "help", no_argument, 0, 'h' },
    { "version", no_argument, 0, 'V' },
    { 0, 0, 0, 0 },
};

struct group_arg {
    int nodes, gpn;
    char type[32];
};

/* A plan that splits the batch unevenly over DP (dp_batch) is written as
 * planned when whale-train runs it: at ZeRO 0/1 every share a multiple of
 * the micro-batch (replica r runs dp_batch[r] / micro_batch micro-batches),
 * at ZeRO 2/3 of num_micro_batches (the same count on every replica, the
 * micro-batch sizes differ). Otherwise the file gets the even split of the
 * same global batch, and a note says what the uneven one was worth; a batch
 * that does not split evenly either is not written at all (never a plan
 * whale-train refuses). */
static int batch_for_train(struct whale_plan *p)
{
    bool uneven = false, runs = true;
    for (int i = 1; i < p->n_dp_batch; i++)
        uneven |= p->dp_batch[i] != p->dp_batch[0];
    if (!uneven)
        return 0;
    long gb = 0;
    int unit = p->zero < 2 ? p->micro_batch : p->num_micro_batches;
    for (int i = 0; i < p->n_dp_batch; i++) {
        gb += p->dp_batch[i];
        runs &= unit > 0 && p->dp_batch[i] % unit == 0;
    }
    if (runs) {
        p->global_batch = (int)gb;
        fprintf(stderr, "whale-plan: note: the plan file splits the batch unevenly over DP "
                "(dp_batch, samples per replica):");
        for (int i = 0; i < p->n_dp_batch; i++)
            fprintf(stderr, "%s%d", i ? "," : " ", p->dp_batch[i]);
        fprintf(stderr, "\n");
        return 0;
    }
    if (gb % p->dp || (gb / p->dp) % p->micro_batch) {
        fprintf(stderr, "whale-plan: the chosen plan splits the batch unevenly over DP "
                "(dp_batch) in shares whale-train cannot run at ZeRO %d, and %ld sequences do "
                "not split evenly into %d replicas of micro-batch %d: not writing the plan "
                "file\n", p->zero, gb, p->dp, p->micro_batch);
        return WHALE_EINVAL;
    }
    fprintf(stderr, "whale-plan: note: the plan file gets the even batch split (%ld per replica): "
            "at ZeRO %d whale-train needs every share a multiple of %s = %d\n", gb / p->dp,
            p->zero, p->zero < 2 ? "micro_batch" : "num_micro_batches", unit);
    free(p->dp_batch);
    p->dp_batch = NULL;
    p->n_dp_batch = 0;
    p->num_micro_batches = (int)(gb / p->dp / p->micro_batch);
    p->global_batch = (int)gb;
    return 0;
}

static int write_json(const char *path, const struct whale_model_desc *m, long batch,
                      const struct whale_cluster *c, const struct whale_plan_candidate *cd)
{
    struct whale_plan p;
    int rc = whale_plan_to_planfile(m, batch, c, cd, &p);
    if (rc)
        return rc;
    if ((rc = batch_for_train(&p))) {
        whale_plan_free(&p);
        return rc;
    }
    char *js = whale_plan_to_json(&p, 2);
    whale_plan_free(&p);
    if (!js)
        return WHALE_ENOMEM;
    FILE *f = strcmp(path, "-") ? whale_fopen_output(path, whale_output_private()) : stdout;
    if (!f) {
        fprintf(stderr, "whale-plan: cannot write %s: %s\n", path, whale_output_strerror(errno));
        free(js);
        return WHALE_EIO;
    }
    fprintf(f, "%s\n", js);
    free(js);
    if (f != stdout && whale_output_close(f)) {
        fprintf(stderr, "whale-plan: writing %s failed\n", path);
        return WHALE_EIO;
    }
    return 0;
}

static void print_model_constants(const struct whale_cluster *c)
{
    const struct whale_eff_model *e = &c->eff;
    printf("efficiency model in force:\n");
    if (e->gemm_eff > 0 || e->gemm_half_dim > 0)
        printf("  GEMM (calibrated): time = 2MNK / (peak x E x f(M) f(N) f(K)), f(d) = d / (d + half),"
               " E %s, half %s\n", e->gemm_eff > 0 ? "set" : "the device's",
               e->gemm_half_dim > 0 ? "set" : "the device's");
    else
        printf("  GEMM: time = 2MNK / (peak x E x f(M) f(N) f(K)), f(d) = d / (d + half), E and half\n"
               "  per device type (measured sustained GEMM efficiency, below); GPU types instead:\n"
               "  2MNK / (peak x E x s x T / (T + SMs/2) x f(K)), T = output tiles of the GEMM,\n"
               "  E the best-shape rate at the sustained clock, s the stack's share of it (%s)\n",
               e->gemm_scale > 0 ? "set" : "gemm_scale, fitted on published runs: docs/planning.md");
    if (e->gemm_eff > 0)
        printf("    E = %.4g\n", e->gemm_eff);
    if (e->gemm_half_dim > 0)
        printf("    half = %.4g\n", e->gemm_half_dim);
    printf("  flash attention at the device's fused-kernel efficiency on the FLOPs it executes\n"
           "  (causal half, backward 2.5x forward; a device without one, as the CPU, runs its\n"
           "  64 x 64 blocks on or below the diagonal as GEMMs + their softmax traffic); plain\n"
           "  attention as GEMMs + softmax traffic\n"
           "  memory-bound kernels at %.3g x HBM bandwidth; %.3g us overhead per layer pass\n"
           "  collectives at %.3g x link rate; DP/ZeRO overlap %.3g, ZeRO-3 gathers hidden behind\n"
           "  up to %.3g of compute, %s per layer and pass (hidden traffic costs %.3g)\n"
           "  host Adam %.3g params/s; runtime overhead %.2f GiB; fragmentation %.0f%%\n",
           e->mem_eff, e->kernel_overhead * 1e6, e->coll_eff, e->dp_overlap, e->zero3_overlap,
           e->zero3_msgs >= 1 ? (e->zero3_msgs < 2 ? "one collective" : "several collectives")
                              : "one collective per parameter tensor",
           e->overlap_cost, e->host_adam_rate,
           c->overhead_bytes / 1073741824.0, 100 * c->frag);
    for (int k = 0; k < WHALE_PLAN_NLINK; k++)
        printf("  link %-6s alpha %.3g us, bandwidth %s\n", whale_plan_link_name(k),
               c->link[k].alpha * 1e6, c->link[k].bw > 0 ? "calibrated" : "from the device type");
    for (int i = 0; i < c->ngroups; i++) {
        const struct whale_plan_device *g = &c->group[i].gpu;
        printf("  %-10s peak %.4g TFLOP/s, %.4g GiB, HBM %.4g GB/s, NVLink %.4g GB/s, NIC %.4g GB/s\n"
               "  %-10s GEMM efficiency %.3g (half %.4g), flash attention %.3g, fp32 %.3g x peak\n",
               g->name, g->peak_flops / 1e12, g->mem_bytes / 1073741824.0, g->hbm_bw / 1e9,
               g->nvlink_bw / 1e9, g->nic_bw / 1e9, "", g->gemm_eff, g->gemm_half, g->flash_eff,
               g->fp32_ratio);
        if (g->sms > 0)
            printf("  %-10s %d SMs, %gx%g output tiles\n", "", g->sms, g->tile_m, g->tile_n);
        if (g->spill > 0)
            printf("  %-10s memory-bound kernels of a layer whose activations W outgrow"
                   " %.4g MiB of cache: 1 + %.3g x (1 - C/W) times as long\n",
                   "", g->cache_bytes / 1048576.0, g->spill);
    }
}

/* --conf/--nodelist: the cluster the plugin would plan on. Returns 0, 1
 * (config error, logged) or 2 (unsupported build). */
static int cluster_from_conf(const char *conf_path, const char *nodelist, int ranks_per_node,
                             struct whale_cluster *cl)
{
    struct whale_conf *conf = NULL;
    struct whale_topo *topo = NULL;
    char **names = NULL;
    int n = 0, rc = 1, *idx = NULL;
    if (whale_conf_load(conf_path, &conf) || whale_conf_build_topo(conf, getenv("SLURM_CONF"), &topo))
        goto out;
    if (whale_hostlist_expand(nodelist, &names, &n) || n < 1) {
        fprintf(stderr, "whale-plan: --nodelist=%s: not a hostlist expression\n", nodelist);
        goto out;
    }
    idx = malloc(sizeof *idx * (size_t)n);
    if (!idx)
        goto out;
    for (int i = 0; i < n; i++)
        if ((idx[i] = whale_conf_topo_ensure_node(conf, topo, names[i])) < 0)
            goto out;
    if (whale_topo_finalize(topo) || whale_cluster_from_topo(topo, idx, n, ranks_per_node, cl))
        goto out;
    rc = 0;
out:
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(idx);
    whale_topo_free(topo);
    whale_conf_free(conf);
    return rc;
}

/* --plan FILE: the prediction of a given plan. */
static int predict_file(const char *path, const struct whale_model_desc *md,
                        const struct whale_cluster *cl)
{
    struct whale_plan p;
    if (whale_plan_load_file(path, &p))
        return 1;
    struct whale_plan_candidate *cd = malloc(sizeof *cd);
    char why[512], *buf = malloc(4096);
    int rc = cd && buf ? whale_plan_predict(md, cl, &p, cd, why, sizeof why) : WHALE_ENOMEM;
    if (rc == 0 || rc == WHALE_ENOFIT) {
        whale_plan_format_config(&cd->cfg, buf, 4096);
        printf("plan %s: %s\n", path, buf);
        whale_plan_format_breakdown(cd, buf, 4096);
        fputs(buf, stdout);
    }
    if (rc == WHALE_ENOFIT)
        fprintf(stderr, "whale-plan: %s does not fit: %s\n", path, why);
    else if (rc == WHALE_EINVAL)
        fprintf(stderr, "whale-plan: %s: %s\n", path, why);
    whale_plan_free(&p);
    free(cd);
    free(buf);
    return rc ? 1 : 0;
}

/* --evaluate of a configuration that does not fit: the whole prediction
 * of the candidate closest to fitting and how far over it is (an
 * exhaustive search evaluates what pruning skipped). */
static void evaluate_nofit(const struct whale_plan_request *rq, struct whale_plan_result *res,
                           char *buf, size_t len, FILE *out)
{
    if (res->nrejected < 1) {
        struct whale_plan_request ex = *rq;
        ex.exhaustive = true;
        int rc = whale_plan_search(&ex, res);
        if (rc != WHALE_ENOFIT || res->nrejected < 1)
            return;
    }
    const struct whale_plan_candidate *cd = &res->rejected[0];
    whale_plan_format_config(&cd->cfg, buf, len);
    fprintf(out, "\nevaluated (does not fit): %s\n", buf);
    whale_plan_format_breakdown(cd, buf, len);
    fputs(buf, out);
}

/* --list: the device types the planner knows. */
static int print_devices(void)
{
    int n;
    const struct whale_plan_device *t = whale_plan_devices(&n);
    printf("%-10s %10s %9s %10s %11s %8s %7s %5s %6s\n", "type", "TFLOP/s", "mem GiB", "HBM GB/s",
           "NVLink GB/s", "NIC GB/s", "domain", "GEMM", "flash");
    for (int i = 0; i < n; i++)
        printf("%-10s %10.4g %9.4g %10.4g %11.4g %8.4g %7d %5.2f %6.2f\n", t[i].name,
               t[i].peak_flops / 1e12, t[i].mem_bytes / 1073741824.0, t[i].hbm_bw / 1e9,
               t[i].nvlink_bw / 1e9, t[i].nic_bw / 1e9, t[i].domain, t[i].gemm_eff, t[i].flash_eff);
    return 0;
}

/* What the options say about the cluster. */
struct cluster_args {
    const char *conf_path, *nodelist, *gpu;
    long nodes, gpn, domain, leaf;
    bool gpn_given, constants_only; /* constants_only: --explain-model without --model */
    bool sharp, grad32;
    double oversub;
    const struct group_arg *groups;
    int ngroups;
};

/* The cluster from --conf/--nodelist or --nodes/--gpus-per-node/--gpu,
 * the --group's added, then --nvlink-domain, --nodes-per-leaf and
 * --spine-oversub. 0, or the exit status (a message printed). */
static int resolve_cluster(const struct cluster_args *a, struct whale_cluster *cl)
{
    if (a->conf_path || a->nodelist) {
        if (!a->conf_path || !a->nodelist || a->nodes || a->ngroups) {
            fprintf(stderr, "whale-plan: --conf and --nodelist go together, instead of --nodes/--group\n");
            return 2;
        }
        int rc = cluster_from_conf(a->conf_path, a->nodelist, a->gpn_given ? (int)a->gpn : 0, cl);
        if (rc)
            return rc;
    } else {
        if (!a->nodes && !a->constants_only) {
            fprintf(stderr, "whale-plan: --nodes is required (see --help)\n");
            return 2;
        }
        /* --explain-model alone: the constants of one node of --gpu */
        if (whale_cluster_init(cl, a->nodes ? (int)a->nodes : 1, (int)a->gpn, a->gpu))
            return 2;
    }
    for (int i = 0; i < a->ngroups; i++)
        if (whale_cluster_add_group(cl, a->groups[i].nodes, a->groups[i].gpn, a->groups[i].type))
            return 2;
    if (a->domain)
        cl->nvlink_domain = (int)a->domain;
    if (a->leaf >= 0)
        cl->nodes_per_leaf = (int)a->leaf;
    cl->spine_oversub = a->oversub;
    if (a->sharp)
        cl->eff.innet_reduce = 1;
    if (a->grad32)
        cl->eff.grad_reduce_bytes = 4;
    return 0;
}

/* --fit-step: fit the calibration on the constrained best configuration, on
 * top of --calib, and save it to --calib-out. The exit status. */
static int fit_and_save(const struct whale_model_desc *md, long batch,
                        const struct whale_cluster *uncalibrated, const struct whale_plan_config *cfg,
                        double fit_step, struct whale_calib *cal, const char *calib_out)
{
    if (whale_calib_fit_step(md, batch, uncalibrated, cfg, fit_step, cal) ||
        whale_calib_save(calib_out, cal))
        return 1;
    char cfgs[200];
    whale_plan_format_config(cfg, cfgs, sizeof cfgs);
    printf("fitted %s to %.4g s/step: GemmEfficiency=%.4g MemEfficiency=%.4g -> %s\n", cfgs,
           fit_step, cal->gemm_eff, cal->mem_eff, calib_out);
    return 0;
}

/* --evaluate of a configuration that fits: against what the planner
 * picks without the constraints. */
static void evaluate_fit(const struct whale_plan_request *rq, const struct whale_plan_result *res,
                         FILE *human)
{
    struct whale_plan_request free_rq;
    whale_plan_request_init(&free_rq);
    free_rq.model = rq->model;
    free_rq.global_batch = rq->global_batch;
    free_rq.cluster = rq->cluster;
    free_rq.topk = 1;
    free_rq.seqpar = rq->seqpar == 0 ? 0 : -1;
    struct whale_plan_result *pick = malloc(sizeof *pick);
    if (pick && whale_plan_search(&free_rq, pick) == 0) {
        char a[200], b[200];
        whale_plan_format_config(&res->best.cfg, a, sizeof a);
        whale_plan_format_config(&pick->best.cfg, b, sizeof b);
        fprintf(human, "\nevaluated: %s  %.4g s/step, %.1f hardware / %.1f model TFLOP/s per device\n", a,
               res->best.pred.t_step, res->best.pred.tflops_per_gpu, res->best.pred.model_tflops_per_gpu);
        fprintf(human, "planner:   %s  %.4g s/step, %.1f hardware / %.1f model TFLOP/s per device "
               "(%.2fx as fast)\n", b, pick->best.pred.t_step, pick->best.pred.tflops_per_gpu,
               pick->best.pred.model_tflops_per_gpu, res->best.pred.t_step / pick->best.pred.t_step);
    }
    free(pick);
}

/* How the search result is reported. */
struct report_args {
    const char *json, *conf_path, *nodelist;
    bool quiet, evaluate, nofit;
    double train_tokens;
    struct plan_price price;
};

/* The search result: one line (-q) or the explanation, --evaluate, the
 * cost of --train-tokens, the plan as JSON (--json). The exit status. */
static int report(const struct report_args *a, const struct whale_plan_request *rq,
                  struct whale_plan_result *res, char *buf, size_t len)
{
    const struct whale_model_desc *md = rq->model;
    const struct whale_cluster *cl = rq->cluster;
    long batch = rq->global_batch;
    int status = res->found ? 0 : 1;
    /* with --json - the plan owns stdout; the human-readable report goes to stderr */
    FILE *human = a->json && !strcmp(a->json, "-") ? stderr : stdout;
    if (a->quiet && res->found) {
        whale_plan_format_config(&res->best.cfg, buf, len);
        char range[48] = "";
        double lo, hi;
        if (!whale_plan_range(cl, &res->best.cfg, &lo, &hi))
            snprintf(range, sizeof range, "; rate %+.0f %% / %+.0f %%", 100 * lo, 100 * hi);
        fprintf(human, "%s  step %.4g s  %.1f hardware / %.1f model TFLOP/s/device (MFU %.0f%%%s)  %.1f GiB\n",
                buf, res->best.pred.t_step, res->best.pred.tflops_per_gpu,
                res->best.pred.model_tflops_per_gpu, 100 * res->best.pred.mfu, range,
                res->best.pred.mem_total / 1073741824.0);
    } else if (!a->quiet) {
        whale_plan_explain(rq, res, buf, len);
        fputs(buf, human);
        plan_offload_report(rq, res, human); /* what offload buys here */
    }
    if (a->evaluate && !res->found && a->nofit)
        evaluate_nofit(rq, res, buf, len, human);
    if (a->evaluate && res->found)
        evaluate_fit(rq, res, human);
    if (a->train_tokens > 0 && res->found) {
        struct plan_cost pc;
        struct plan_price price = a->price;
        price.conf = a->conf_path;
        price.nodelist = a->nodelist;
        if (plan_cost_compute(cl, &price, res->best.pred.t_step, batch, md->seq, a->train_tokens, &pc))
            status = 1;
        else
            plan_cost_print(human, a->train_tokens, &pc);
    }
    if (a->json && res->found && write_json(a->json, md, batch, cl, &res->best))
        status = 1;
    return status;
}

/* Everything the command line says, before anything is resolved. */
struct plan_opts {
    const char *model, *calib, *json, *gpu, *plan_file;
    const char *conf_path, *nodelist, *calib_out;
    double fit_step;
    bool gpn_given;
    long batch, tokens, nodes, gpn, domain, leaf, top;
    long cores, threads; /* CPU ranks: cores per node, threads per rank */
    double oversub;
    double train_tokens; /* --train-tokens: the cost of the whole run */
    struct plan_price price;
    bool evaluate, quiet, list, explain_model, sharp, grad32;
    struct group_arg groups[WHALE_CLUSTER_MAX_GROUPS];
    int ngroups;
    struct whale_plan_request rq; /* the search constraints (--tp, --zero, ...) */
};

static void plan_opts_init(struct plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->gpu = "A100-80GB";
    o->gpn = 8;
    o->leaf = -1;
    o->top = 8;
    o->oversub = 1;
    o->price = (struct plan_price){ .node_hour = -1, .gpu_hour = -1 };
    whale_plan_request_init(&o->rq);
    o->rq.seqpar = -1; /* auto: the engine runs sequence parallelism (--seqpar) */
}

/* --group NODES:GPUS_PER_NODE:TYPE. 0, or 2 (a message printed). */
static int parse_group(struct plan_opts *o, const char *arg)
{
    struct group_arg *g = &o->groups[o->ngroups];
    if (o->ngroups + 1 >= WHALE_CLUSTER_MAX_GROUPS ||
        sscanf(arg, "%d:%d:%31s", &g->nodes, &g->gpn, g->type) != 3 || g->nodes < 1 ||
        g->gpn < 1) {
        fprintf(stderr, "whale-plan: --group=%s: expected NODES:GPUS_PER_NODE:TYPE "
                "(at most %d groups)\n", arg, WHALE_CLUSTER_MAX_GROUPS - 1);
        return 2;
    }
    o->ngroups++;
    return 0;
}

/* --seqpar yes|no|auto. 0, or 2 (a message printed). */
static int parse_seqpar(const char *arg, int *seqpar)
{
    if (!strcasecmp(arg, "yes") || !strcmp(arg, "1") || !strcasecmp(arg, "on")) *seqpar = 1;
    else if (!strcasecmp(arg, "no") || !strcmp(arg, "0") || !strcasecmp(arg, "off")) *seqpar = 0;
    else if (!strcasecmp(arg, "auto")) *seqpar = -1;
    else {
        fprintf(stderr, "whale-plan: --seqpar=%s: expected yes, no or auto\n", arg);
        return 2;
    }
    return 0;
}

/* The named-value options: --recompute, --offload, --seqpar, --precision.
 * 0, or 2 (a message printed). */
static int parse_mode(int c, const char *arg, struct whale_plan_request *rq)
{
    switch (c) {
    case O_RC: {
        enum whale_recompute r;
        if (whale_recompute_parse(arg, &r) || r == WHALE_RECOMPUTE_LAYERS) {
            fprintf(stderr, "whale-plan: --recompute=%s: expected none, selective, full or auto\n", arg);
            return 2;
        }
        rq->recompute = (int)r;
        return 0;
    }
    case O_OFF: {
        enum whale_offload off;
        if (whale_offload_parse(arg, &off)) {
            fprintf(stderr, "whale-plan: --offload=%s: expected none, optimizer or params\n", arg);
            return 2;
        }
        rq->offload = (int)off;
        return 0;
    }
    case O_SP:
        return parse_seqpar(arg, &rq->seqpar);
    default: { /* O_PREC */
        enum whale_precision pr;
        if (!strcasecmp(arg, "auto")) {
            rq->precision = -1;
        } else if (whale_precision_parse(arg, &pr)) {
            fprintf(stderr, "whale-plan: --precision=%s: expected auto, fp32, bf16 or fp16\n", arg);
            return 2;
        } else {
            rq->precision = (int)pr;
        }
        return 0;
    }
    }
}

/* The search constraints that are integers (--tp ... --max-microbatch).
 * 0, 2 (a message printed), or -1: not one of them. */
static int parse_constraint(int c, const char *arg, struct whale_plan_request *rq)
{
    long v;
    switch (c) {
    case O_TP: if (whale_opt_long("whale-plan", "tp", arg, 1, 1024, &v)) return 2; rq->tp = (int)v; break;
    case O_PP: if (whale_opt_long("whale-plan", "pp", arg, 1, WHALE_PLAN_MAX_STAGES, &v)) return 2; rq->pp = (int)v; break;
    case O_DP: if (whale_opt_long("whale-plan", "dp", arg, 1, INT_MAX, &v)) return 2; rq->dp = (int)v; break;
    case O_EP: if (whale_opt_long("whale-plan", "ep", arg, 1, 4096, &v)) return 2; rq->ep = (int)v; break;
    case O_MB: if (whale_opt_long("whale-plan", "microbatch", arg, 1, 1 << 20, &v)) return 2; rq->microbatch = (int)v; break;
    case O_V: if (whale_opt_long("whale-plan", "interleave", arg, 1, 1024, &v)) return 2; rq->interleave = (int)v; break;
    case O_ZERO: if (whale_opt_long("whale-plan", "zero", arg, 0, 3, &v)) return 2; rq->zero = (int)v; break;
    case O_MAXMB: if (whale_opt_long("whale-plan", "max-microbatch", arg, 1, 1 << 20, &v)) return 2; rq->max_microbatch = (int)v; break;
    case O_IDLE: if (whale_opt_double("whale-plan", "max-idle", arg, 0, 0.99, &rq->max_idle)) return 2; break;
    case O_RC: case O_OFF: case O_SP: case O_PREC: return parse_mode(c, arg, rq);
    default: return -1;
    }
    return 0;
}

/* The numeric options of the cluster, batch and report. 0, 2 (a message
 * printed), or -1: not one of them. */
static int parse_number(int c, const char *arg, struct plan_opts *o)
{
    switch (c) {
    case 'b': return whale_opt_long("whale-plan", "batch", arg, 1, INT_MAX, &o->batch) ? 2 : 0;
    case O_TOKENS: return whale_opt_long("whale-plan", "tokens", arg, 1, LONG_MAX, &o->tokens) ? 2 : 0;
    case 'N': return whale_opt_long("whale-plan", "nodes", arg, 1, 10000000, &o->nodes) ? 2 : 0;
    case 'g':
        if (whale_opt_long("whale-plan", "gpus-per-node", arg, 1, 1024, &o->gpn)) return 2;
        o->gpn_given = true;
        return 0;
    case O_DOMAIN: return whale_opt_long("whale-plan", "nvlink-domain", arg, 1, 100000, &o->domain) ? 2 : 0;
    case O_LEAF: return whale_opt_long("whale-plan", "nodes-per-leaf", arg, 0, 10000000, &o->leaf) ? 2 : 0;
    case O_OVERSUB: return whale_opt_double("whale-plan", "spine-oversub", arg, 1, 1000, &o->oversub) ? 2 : 0;
    case O_SHARP: o->sharp = true; return 0;
    case O_GRAD32: o->grad32 = true; return 0;
    case O_CORES: return whale_opt_long("whale-plan", "cores-per-node", arg, 1, 65536, &o->cores) ? 2 : 0;
    case O_THREADS: return whale_opt_long("whale-plan", "threads", arg, 1, 4096, &o->threads) ? 2 : 0;
    case O_FIT: return whale_opt_double("whale-plan", "fit-step", arg, 1e-9, 1e9, &o->fit_step) ? 2 : 0;
    case 't': return whale_opt_long("whale-plan", "top", arg, 1, WHALE_PLAN_TOPK, &o->top) ? 2 : 0;
    case O_TRAIN_TOKENS: return whale_opt_double("whale-plan", "train-tokens", arg, 1, 1e18, &o->train_tokens) ? 2 : 0;
    case O_PRICE_NODE: return whale_opt_double("whale-plan", "price-per-node-hour", arg, 0, 1e6, &o->price.node_hour) ? 2 : 0;
    case O_PRICE_GPU: return whale_opt_double("whale-plan", "price-per-gpu-hour", arg, 0, 1e6, &o->price.gpu_hour) ? 2 : 0;
    default: return parse_constraint(c, arg, &o->rq);
    }
}

/* One option. -1 to go on, else the exit status (--help, --version: 0). */
static int parse_opt(int c, const char *arg, struct plan_opts *o)
{
    switch (c) {
    case 'm': o->model = arg; return -1;
    case 'G': o->gpu = arg; return -1;
    case O_GROUP: return parse_group(o, arg) ? 2 : -1;
    case O_CALIB: o->calib = arg; return -1;
    case O_CONF: o->conf_path = arg; return -1;
    case O_CALOUT: o->calib_out = arg; return -1;
    case O_NODELIST: o->nodelist = arg; return -1;
    case 'e': o->evaluate = true; return -1;
    case 'p': o->plan_file = arg; return -1;
    case 'j': o->json = arg; return -1;
    case O_EXH: o->rq.exhaustive = true; return -1;
    case O_LIST: o->list = true; return -1;
    case O_EXPLAIN_MODEL: o->explain_model = true; return -1;
    case 'q': o->quiet = true; return -1;
    case 'h': usage(stdout); return 0;
    case 'V': printf("whale-plan %s\n", WHALE_VERSION); return 0;
    case '?': usage(stderr); return 2;
    default: {
        int rc = parse_number(c, arg, o);
        if (rc < 0) { /* getopt_long returned something not in the table */
            usage(stderr);
            return 2;
        }
        return rc ? rc : -1;
    }
    }
}

/* The command line into o. -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct plan_opts *o)
{
    plan_opts_init(o);
    int c;
    while ((c = getopt_long(argc, argv, "m:b:N:g:G:ep:t:j:qhV", longopts, NULL)) != -1) {
        int st = parse_opt(c, optarg, o);
        if (st >= 0)
            return st;
    }
    if (optind < argc) {
        fprintf(stderr, "whale-plan: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (o->rq.seqpar == 1 && o->rq.tp == 1) {
        fprintf(stderr, "whale-plan: --seqpar yes needs --tp >= 2 (sequence parallelism splits the "
                "activations that tensor parallelism replicates; with --tp 1 there are none)\n");
        return 2;
    }
    return -1;
}

/* Phase 1, resolve the cluster: --conf/--nodelist, else --nodes/--gpu
 * plus --group, then the link options, the CPU shape, --calib (the
 * cluster before it kept for --fit-step) and --explain-model. -1 to go
 * on, else the exit status. */
static int setup_cluster(const struct plan_opts *o, struct whale_cluster *cl,
                         struct whale_cluster *uncalibrated, struct whale_calib *cal)
{
    struct cluster_args ca = { .conf_path = o->conf_path, .nodelist = o->nodelist, .gpu = o->gpu,
                               .nodes = o->nodes, .gpn = o->gpn, .gpn_given = o->gpn_given,
                               .domain = o->domain, .leaf = o->leaf, .oversub = o->oversub, .sharp = o->sharp,
                               .grad32 = o->grad32,
                               .groups = o->groups, .ngroups = o->ngroups,
                               .constants_only = o->explain_model && !o->model };
    int crc = resolve_cluster(&ca, cl);
    if (crc)
        return crc;
    cl->cpu_cores_per_node = (int)o->cores;
    cl->cpu_threads_per_rank = (int)o->threads;
    *uncalibrated = *cl;
    if (o->calib) {
        if (whale_calib_load(o->calib, cal))
            return 1;
        whale_calib_apply(cal, cl);
    }
    if (!o->fit_step != !o->calib_out) {
        fprintf(stderr, "whale-plan: --fit-step and --calib-out go together\n");
        return 2;
    }
    if (whale_cluster_validate(cl))
        return 2;
    if (o->explain_model) {
        print_model_constants(cl);
        if (!o->model)
            return 0;
    }
    if (!o->model) {
        fprintf(stderr, "whale-plan: --model is required (a preset such as gpt-1.7b, or a file)\n");
        return 2;
    }
    return -1;
}

/* The global batch in sequences: --batch, or --tokens over the model's
 * sequence length. -1 to go on, else the exit status. */
static int resolve_batch(struct plan_opts *o, const struct whale_model_desc *md)
{
    if (o->tokens) {
        o->batch = o->tokens / md->seq;
        if (o->batch < 1) {
            fprintf(stderr, "whale-plan: --tokens=%ld is less than one sequence of %d tokens\n",
                    o->tokens, md->seq);
            return 2;
        }
    }
    if (!o->batch) {
        fprintf(stderr, "whale-plan: --batch (sequences) or --tokens is required\n");
        return 2;
    }
    return -1;
}

/* Phase 2, run the search; 3, fit or report. The exit status. */
static int search_and_report(struct plan_opts *o, const struct whale_cluster *uncalibrated,
                             struct whale_calib *cal)
{
    struct whale_plan_result *res = malloc(sizeof *res);
    char *buf = malloc(1 << 16);
    int status = 1;
    if (!res || !buf)
        goto out;
    int rc = whale_plan_search(&o->rq, res);
    if (rc && rc != WHALE_ENOFIT)
        goto out;
    if (o->fit_step > 0 && res->found) {
        status = fit_and_save(o->rq.model, o->batch, uncalibrated, &res->best.cfg, o->fit_step,
                              cal, o->calib_out);
        goto out;
    }
    struct report_args ra = { .json = o->json, .conf_path = o->conf_path, .nodelist = o->nodelist,
                              .quiet = o->quiet, .evaluate = o->evaluate, .nofit = rc == WHALE_ENOFIT,
                              .train_tokens = o->train_tokens, .price = o->price };
    status = report(&ra, &o->rq, res, buf, 1 << 16);
out:
    free(buf);
    free(res);
    return status;
}

int main(int argc, char **argv)
{
    whale_log_init_from_env();
    struct plan_opts o;
    int st = parse_args(argc, argv, &o);
    if (st >= 0)
        return st;
    if (o.list)
        return print_devices();
    struct whale_cluster cl, uncalibrated;
    struct whale_calib cal;
    memset(&cal, 0, sizeof cal);
    if ((st = setup_cluster(&o, &cl, &uncalibrated, &cal)) >= 0)
        return st;
    struct whale_model_desc md;
    if (whale_model_desc_load(o.model, &md))
        return 1;
    if (o.plan_file)
        return predict_file(o.plan_file, &md, &cl);
    if ((st = resolve_batch(&o, &md)) >= 0)
        return st;
    o.rq.model = &md;
    o.rq.global_batch = o.batch;
    o.rq.cluster = &cl;
    o.rq.topk = (int)o.top;
    return search_and_report(&o, &uncalibrated, &cal);
}
