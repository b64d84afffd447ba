/* whale-ckpt: inspect, verify, convert and benchmark Whale checkpoints. */
#define _GNU_SOURCE
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "whale/ckpt.h"
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale_config.h"

#include "ckpt_tool.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: whale-ckpt COMMAND [options]\n"
        "\n"
        "  inspect DIR [--which W] [--tensors] [--json]\n"
        "      step, samples, ranks, encoding, sizes, plan; --tensors lists every tensor\n"
        "  verify DIR [--which W]\n"
        "      check every file and chunk checksum; names the file and tensor of each problem\n"
        "  convert DIR OUT.safetensors [--which W] [--dtype f32|bf16|fp16] [--params-only]\n"
        "      consolidate into one plain safetensors file (whole, decoded tensors)\n"
        "  convert --from-safetensors IN.safetensors ROOT --model M [--step N]\n"
        "      make a one-rank checkpoint from a safetensors file of model M's weights (to\n"
        "      fine-tune it): every tensor must be a parameter of M by whale's names (as\n"
        "      convert --params-only writes them), with M's shape and a float dtype, and\n"
        "      none may be missing; --any-names instead of --model stores any tensors\n"
        "      unchecked (for programs of your own; whale-train cannot resume from them)\n"
        "  import HF_DIR [-o OUT_DIR]\n"
        "      Hugging Face config.json + safetensors (GPT-2, Llama, Mistral, Qwen2, Mixtral) ->\n"
        "      model.conf\n"
        "      and a checkpoint to --resume from (refuses what whale cannot compute exactly)\n"
        "  export --hf OUT_DIR DIR --model CONF [--hf-config JSON] [--max-shard-mb N] [--dtype D]\n"
        "      a checkpoint (any layout) as a Hugging Face directory for from_pretrained\n"
        "  bench --dir DIR [--mb N] [--repeat R] [--compute-ms T] [--part stall|persist|load|incremental|compression]\n"
        "      synthetic checkpoint benchmark: sync vs async stall (copy, deferred), the\n"
        "      background persist bandwidth of an async save (share written in place),\n"
        "      incremental bytes with half the layers frozen, size and error per compression;\n"
        "      load: the read-back rate of a saved checkpoint (page cache dropped)\n"
        "\n"
        "DIR is a checkpoint root (the newest checkpoint, via `latest`) or one step directory;\n"
        "W selects another: latest (default), a step number, step-N, or a path.\n"
        "Options everywhere: -h/--help, -V/--version, -v/--verbose.\n"
        "Exit status: 0 ok, 1 failure (e.g. a bad checksum), 2 usage.\n");
}

static int parse_dtype(const char *s, int *out)
{
    if (!strcasecmp(s, "f32") || !strcasecmp(s, "fp32"))
        *out = WHALE_FLOAT32;
    else if (!strcasecmp(s, "bf16"))
        *out = WHALE_BFLOAT16;
    else if (!strcasecmp(s, "fp16") || !strcasecmp(s, "f16"))
        *out = WHALE_FLOAT16;
    else
        return -1;
    return 0;
}

static const char *human(double b, char *buf, size_t n)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", b, u[i]);
    return buf;
}

static int open_reader(const char *dir, const char *which, whale_ckpt_reader **r)
{
    char *path;
    int rc = whale_ckpt_resolve(dir, which, &path);
    if (rc)
        return rc;
    rc = whale_ckpt_reader_open(path, r);
    free(path);
    return rc;
}

static int cmd_inspect(const char *dir, const char *which, bool tensors, bool as_json)
{
    whale_ckpt_reader *r;
    int rc = open_reader(dir, which, &r);
    if (rc)
        return 1;
    const whale_ckpt_info *in = whale_ckpt_reader_info(r);
    char mp[4096];
    snprintf(mp, sizeof mp, "%s/manifest.json", in->dir);
    json_t *m = json_load_file(mp, 0, NULL);
    if (as_json) {
        json_dumpf(m, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(m);
        whale_ckpt_reader_close(r);
        return 0;
    }
    char a[32], b[32], c[32], d[32];
    json_t *by = json_object_get(m, "bytes"), *enc = json_object_get(m, "encoding");
    json_t *files = json_object_get(m, "files");
    size_t nlinked = 0;
    const char *k;
    json_t *v;
    json_object_foreach(files, k, v)
        nlinked += json_is_true(json_object_get(v, "linked"));
    printf("checkpoint  %s\n", in->dir);
    printf("step        %lld    samples %lld    loss scale %g\n", (long long)in->step,
           (long long)in->samples, in->loss_scale);
    printf("saved by    %d rank%s (run %s), %s\n", in->world, in->world == 1 ? "" : "s",
           json_string_value(json_object_get(m, "run")),
           json_string_value(json_object_get(m, "created")));
    printf("encoding    weights %s, moments %s (block %lld), zstd %lld, chunks %s\n",
           json_string_value(json_object_get(enc, "weights")),
           json_string_value(json_object_get(enc, "moments")),
           (long long)json_integer_value(json_object_get(enc, "quant_block")),
           (long long)json_integer_value(json_object_get(enc, "zstd")),
           human((double)json_integer_value(json_object_get(enc, "chunk_bytes")), d, sizeof d));
    printf("bytes       tensors %s, on disk %s, written by this save %s, linked from the "
           "previous %s\n",
           human((double)json_integer_value(json_object_get(by, "logical")), a, sizeof a),
           human((double)json_integer_value(json_object_get(by, "stored")), b, sizeof b),
           human((double)json_integer_value(json_object_get(by, "written")), c, sizeof c),
           human((double)json_integer_value(json_object_get(by, "linked")), d, sizeof d));
    printf("files       %zu (%zu hard-linked, unchanged)\n", json_object_size(files), nlinked);
    printf("tensors     %zu\n", in->ntensors);
    if (in->plan_json)
        printf("plan        %s\n", in->plan_json);
    if (in->data_json)
        printf("data        %s\n", in->data_json);
    if (in->extra_json)
        printf("extra       %s\n", in->extra_json);
    if (tensors) {
        printf("\n%-44s %-5s %-22s %6s %12s\n", "tensor", "dtype", "shape", "chunks", "stored");
        json_object_foreach(json_object_get(m, "tensors"), k, v) {
            char shape[64] = "[";
            size_t i;
            json_t *x;
            json_array_foreach(json_object_get(v, "shape"), i, x) {
                size_t l = strlen(shape);
                snprintf(shape + l, sizeof shape - l, i ? ", %lld" : "%lld",
                         (long long)json_integer_value(x));
            }
            strncat(shape, "]", sizeof shape - strlen(shape) - 1);
            json_int_t st = 0;
            json_array_foreach(json_object_get(v, "chunks"), i, x)
                st += json_integer_value(json_object_get(x, "nbytes"));
            printf("%-44s %-5s %-22s %6zu %12s\n", k,
                   json_string_value(json_object_get(v, "dtype")), shape,
                   json_array_size(json_object_get(v, "chunks")), human((double)st, a, sizeof a));
        }
    }
    json_decref(m);
    whale_ckpt_reader_close(r);
    return 0;
}

static int cmd_verify(const char *dir, const char *which)
{
    whale_ckpt_reader *r;
    char *path;
    /* strict: a newer step whose manifest is damaged is a problem here,
     * not a reason to report on an older step */
    if (whale_ckpt_resolve_strict(dir, which, &path))
        return 1;
    int orc = whale_ckpt_reader_open_all(path, &r);
    free(path);
    if (orc)
        return 1;
    int bad = 0;
    int rc = whale_ckpt_verify(r, &bad);
    const whale_ckpt_info *in = whale_ckpt_reader_info(r);
    if (rc)
        fprintf(stderr, "whale-ckpt: %s: %d problem%s found\n", in->dir, bad, bad == 1 ? "" : "s");
    else
        printf("%s: ok (step %lld, %zu tensors, all checksums match)\n", in->dir,
               (long long)in->step, in->ntensors);
    whale_ckpt_reader_close(r);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    whale_log_init_from_env();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        printf("whale-ckpt %s\n", WHALE_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "import") || !strcmp(cmd, "export"))
        return ckpt_tool_hf(argc, argv);
    static const struct option opts[] = {
        {"help", no_argument, 0, 'h'},       {"version", no_argument, 0, 'V'},
        {"verbose", no_argument, 0, 'v'},    {"which", required_argument, 0, 'w'},
        {"tensors", no_argument, 0, 't'},    {"json", no_argument, 0, 'j'},
        {"dtype", required_argument, 0, 'd'}, {"params-only", no_argument, 0, 'p'},
        {"from-safetensors", no_argument, 0, 'f'}, {"step", required_argument, 0, 's'},
        {"dir", required_argument, 0, 'D'},  {"mb", required_argument, 0, 'm'},
        {"repeat", required_argument, 0, 'r'}, {"compute-ms", required_argument, 0, 'c'},
        {"part", required_argument, 0, 'P'},
        {"model", required_argument, 0, 'M'}, {"any-names", no_argument, 0, 'A'},
        {0, 0, 0, 0}};
    const char *which = "latest", *bdir = NULL, *part = NULL, *model = NULL;
    bool tensors = false, as_json = false, params_only = false, from_st = false;
    bool any_names = false;
    int dtype = -1, repeat = 3;
    long long step = 0;
    long lv;
    double mb = 256, compute_ms = 300;
    optind = 2;
    int o;
    while ((o = getopt_long(argc, argv, "hVvw:tjd:pfs:D:m:r:c:P:M:A", opts, NULL)) != -1) {
        switch (o) {
        case 'h': usage(stdout); return 0;
        case 'V': printf("whale-ckpt %s\n", WHALE_VERSION); return 0;
        case 'v': whale_log_set_level(WHALE_LOG_DEBUG); break;
        case 'w': which = optarg; break;
        case 't': tensors = true; break;
        case 'j': as_json = true; break;
        case 'p': params_only = true; break;
        case 'f': from_st = true; break;
        case 'D': bdir = optarg; break;
        case 'M': model = optarg; break;
        case 'A': any_names = true; break;
        case 'P':
            if (strcmp(optarg, "stall") && strcmp(optarg, "incremental") &&
                strcmp(optarg, "compression") && strcmp(optarg, "persist") &&
                strcmp(optarg, "load") && strcmp(optarg, "none")) {
                fprintf(stderr, "whale-ckpt: --part %s: expected stall, persist, load, "
                        "incremental or compression\n", optarg);
                return 2;
            }
            part = optarg;
            break;
        case 'd':
            if (parse_dtype(optarg, &dtype)) {
                fprintf(stderr, "whale-ckpt: --dtype %s: expected f32, bf16 or fp16\n", optarg);
                return 2;
            }
            break;
        case 's':
            if (whale_parse_long(optarg, 0, LONG_MAX, &lv)) {
                fprintf(stderr, "whale-ckpt: --step %s: expected an integer >= 0\n", optarg);
                return 2;
            }
            step = lv;
            break;
        case 'm': /* the checked parser: NaN, inf and trailing junk are refused */
            if (whale_parse_double(optarg, 1, 65536, &mb)) {
                fprintf(stderr, "whale-ckpt: --mb %s: expected a number in 1..65536\n", optarg);
                return 2;
            }
            break;
        case 'r': {
            long v;
            if (whale_parse_long(optarg, 1, 100, &v)) {
                fprintf(stderr, "whale-ckpt: --repeat %s: expected an integer in 1..100\n",
                        optarg);
                return 2;
            }
            repeat = (int)v;
            break;
        }
        case 'c':
            if (whale_parse_double(optarg, 0, 600000, &compute_ms)) {
                fprintf(stderr, "whale-ckpt: --compute-ms %s: expected a number in 0..600000\n",
                        optarg);
                return 2;
            }
            break;
        default:
            usage(stderr);
            return 2;
        }
    }
    int npos = argc - optind;
    char **pos = argv + optind;
    if (!strcmp(cmd, "inspect") && npos == 1)
        return cmd_inspect(pos[0], which, tensors, as_json);
    if (!strcmp(cmd, "verify") && npos == 1)
        return cmd_verify(pos[0], which);
    if (!strcmp(cmd, "convert") && npos == 2) {
        if (from_st) {
            if (!model == !any_names) {
                fprintf(stderr, "whale-ckpt: convert --from-safetensors needs --model M (the "
                        "model whose weights %s holds: its tensors are checked against it) "
                        "or --any-names (store them unchecked), not %s\n", pos[0],
                        model ? "both" : "neither");
                return 2;
            }
            if (ckpt_tool_import(pos[0], pos[1], step, model))
                return 1;
            printf("%s -> %s/step-%08lld\n", pos[0], pos[1], step);
            return 0;
        }
        if (model || any_names) {
            fprintf(stderr, "whale-ckpt: --model and --any-names go with convert "
                    "--from-safetensors\n");
            return 2;
        }
        whale_ckpt_reader *r;
        if (open_reader(pos[0], which, &r))
            return 1;
        int rc = whale_ckpt_consolidate(r, pos[1], dtype, params_only);
        if (!rc)
            printf("%s -> %s\n", whale_ckpt_reader_info(r)->dir, pos[1]);
        whale_ckpt_reader_close(r);
        return rc ? 1 : 0;
    }
    if (!strcmp(cmd, "bench") && npos == 0) {
        if (!bdir || !*bdir) {
            fprintf(stderr, "whale-ckpt: bench needs --dir DIR (a scratch directory, not empty)\n");
            return 2;
        }
        return ckpt_tool_bench(bdir, mb, repeat, compute_ms, part) ? 1 : 0;
    }
    if (strcmp(cmd, "inspect") && strcmp(cmd, "verify") && strcmp(cmd, "convert") &&
        strcmp(cmd, "bench"))
        fprintf(stderr, "whale-ckpt: unknown command '%s'\n", cmd);
    else
        fprintf(stderr, "whale-ckpt: %s: wrong number of arguments\n", cmd);
    usage(stderr);
    return 2;
}
