/* whale-ckpt import / export --hf: Hugging Face directories in and out
 * (whale/ckpt_hf.h does the work). */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "whale/ckpt_hf.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/comm.h"

#include "ckpt_tool.h"

static int hf_usage(void)
{
    fprintf(stderr,
            "usage: whale-ckpt import HF_DIR [-o OUT_DIR]\n"
            "       whale-ckpt export --hf OUT_DIR CKPT_DIR --model CONF [--hf-config JSON]\n"
            "                         [--max-shard-mb N] [--dtype f32|bf16|fp16]\n");
    return 2;
}

int ckpt_tool_hf(int argc, char **argv)
{
    const char *cmd = argv[1];
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"hf", required_argument, 0, 'H'},
        {"model", required_argument, 0, 'M'},  {"hf-config", required_argument, 0, 'C'},
        {"max-shard-mb", required_argument, 0, 'S'}, {"dtype", required_argument, 0, 'd'},
        {"verbose", no_argument, 0, 'v'},      {0, 0, 0, 0}};
    const char *out = NULL, *hf = NULL, *model = NULL, *hfc = NULL;
    double shard_mb = 5000; /* transformers' default max_shard_size (5 GB) */
    int dtype = -1, o;
    optind = 2;
    while ((o = getopt_long(argc, argv, "o:v", opts, NULL)) != -1) {
        char *end;
        switch (o) {
        case 'o': out = optarg; break;
        case 'H': hf = optarg; break;
        case 'M': model = optarg; break;
        case 'C': hfc = optarg; break;
        case 'v': whale_log_set_level(WHALE_LOG_DEBUG); break;
        case 'S':
            shard_mb = strtod(optarg, &end);
            if (*end || !(shard_mb >= 0.001 && shard_mb <= 1e7)) {
                fprintf(stderr, "whale-ckpt: --max-shard-mb %s: expected 0.001..1e7\n", optarg);
                return 2;
            }
            break;
        case 'd':
            if (!strcasecmp(optarg, "f32") || !strcasecmp(optarg, "fp32"))
                dtype = WHALE_FLOAT32;
            else if (!strcasecmp(optarg, "bf16"))
                dtype = WHALE_BFLOAT16;
            else if (!strcasecmp(optarg, "fp16") || !strcasecmp(optarg, "f16"))
                dtype = WHALE_FLOAT16;
            else {
                fprintf(stderr, "whale-ckpt: --dtype %s: expected f32, bf16 or fp16\n", optarg);
                return 2;
            }
            break;
        default: return hf_usage();
        }
    }
    int npos = argc - optind;
    if (!strcmp(cmd, "import")) {
        if (npos != 1)
            return hf_usage();
        char def[4096];
        if (!out) { /* HF_DIR/whale next to the weights */
            snprintf(def, sizeof def, "%s/whale", argv[optind]);
            out = def;
        }
        if (whale_hf_import(argv[optind], out))
            return 1;
        printf("%s -> %s (model %s/model.conf; whale-train --model %s/model.conf --resume %s)\n",
               argv[optind], out, out, out, out);
        return 0;
    }
    if (!hf || !model || npos != 1) {
        fprintf(stderr, "whale-ckpt: export needs --hf OUT_DIR, --model CONF and one "
                        "checkpoint directory\n");
        return hf_usage();
    }
    if (whale_hf_export(argv[optind], model, hfc, hf, (uint64_t)(shard_mb * 1e6), dtype))
        return 1;
    printf("%s -> %s\n", argv[optind], hf);
    return 0;
}
