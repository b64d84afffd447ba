/* whale-generate: continue a prompt with a model from a whale-train
 * checkpoint (any layout it was saved in: the resharding loader puts it on
 * this one rank), using the tokenizer recorded in the checkpoint. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "encode.h"
#include "sample.h"
#include "spm.h"
#include "whale/ckpt.h"
#include "whale/engine.h"
#include "whale/error.h"
#include "whale/generate.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/modeldesc.h"
#include "whale_config.h"

#define ERR(...) (fprintf(stderr, "whale-generate: " __VA_ARGS__), fputc('\n', stderr))

static void usage(FILE *f)
{
    fprintf(f,
"Usage: whale-generate --ckpt DIR [--prompt TEXT] [options]\n"
"Print a continuation of TEXT by a model trained with whale-train.\n"
"\n"
"  --ckpt DIR           a checkpoint root (its latest step) or a step directory, saved\n"
"                       under any TP/PP/DP/ZeRO layout and precision\n"
"  --prompt TEXT        the text to continue (default: empty, i.e. a new document)\n"
"  --tokens N           tokens to generate (default 100; stops early at end of text)\n"
"  --temperature X      sampling temperature (default 0.8; 0 = greedy)\n"
"  --top-k K            sample among the K likeliest tokens (default 40; 0 = all)\n"
"  --greedy             always the likeliest token (= --temperature 0)\n"
"  --seed N             sampling seed (default 1): the same seed gives the same text\n"
"  --tokenizer FILE     SentencePiece model (default: the one recorded in the\n"
"                       checkpoint; a checkpoint without one is byte-level)\n"
"  --model NAME|FILE    model preset or .conf (default: the recorded one)\n"
"  --vocab N            vocabulary (default: the recorded one)\n"
"  --seq N              context window (default: the trained seq)\n"
"  --threads N          compute threads (default: all CPUs)\n"
"  -h, --help  -V, --version\n"
"\n"
"No KV cache yet: each new token runs the model over the whole window again.\n"
"Output: the prompt and its continuation on stdout; timing on stderr.\n");
}

static int num(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        ERR("%s=%s: expected an integer in %ld..%ld", opt, s, lo, hi);
        return 1;
    }
    *out = v;
    return 0;
}

static int check_hash(const char *path, const char *want)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        XXH64_update(st, buf, n);
    fclose(f);
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)XXH64_digest(st));
    XXH64_freeState(st);
    return strcmp(got, want) ? 1 : 0;
}

/* libgomp reads OMP_WAIT_POLICY when it is loaded: its spinning workers
 * starve each other on a busy machine (whale-train does the same). */
static void ensure_passive_omp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || whale_knob_getenv("WHALE_GENERATE_REEXEC"))
        return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("WHALE_GENERATE_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv)
{
    ensure_passive_omp(argv);
    const char *ckpt = NULL, *prompt = "", *tok_arg = NULL, *model_arg = NULL;
    long ntok = 100, topk = 40, seed = 1, vocab = 0, seq = 0, threads = 0;
    double temp = 0.8;
    int bad = 0;
    enum { O_CKPT = 256, O_PROMPT, O_TOKENS, O_TEMP, O_TOPK, O_GREEDY, O_SEED, O_TOK, O_MODEL,
           O_VOCAB, O_SEQ, O_THREADS };
    static const struct option lo[] = {
        { "ckpt", required_argument, 0, O_CKPT }, { "prompt", required_argument, 0, O_PROMPT },
        { "tokens", required_argument, 0, O_TOKENS },
        { "temperature", required_argument, 0, O_TEMP },
        { "top-k", required_argument, 0, O_TOPK }, { "greedy", no_argument, 0, O_GREEDY },
        { "seed", required_argument, 0, O_SEED }, { "tokenizer", required_argument, 0, O_TOK },
        { "model", required_argument, 0, O_MODEL }, { "vocab", required_argument, 0, O_VOCAB },
        { "seq", required_argument, 0, O_SEQ }, { "threads", required_argument, 0, O_THREADS },
        { "help", no_argument, 0, 'h' }, { "version", no_argument, 0, 'V' }, { 0, 0, 0, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
        switch (c) {
        case O_CKPT: ckpt = optarg; break;
        case O_PROMPT: prompt = optarg; break;
        case O_TOKENS: bad |= num("--tokens", optarg, 1, 1 << 20, &ntok); break;
        case O_TEMP: {
            char *end;
            errno = 0;
            temp = strtod(optarg, &end);
            if (errno || *end || end == optarg || !(temp >= 0 && temp <= 100)) {
                ERR("--temperature=%s: expected a number in 0..100", optarg);
                bad = 1;
            }
            break;
        }
        case O_TOPK: bad |= num("--top-k", optarg, 0, 1 << 24, &topk); break;
        case O_GREEDY: temp = 0; break;
        case O_SEED: bad |= num("--seed", optarg, 0, LONG_MAX, &seed); break;
        case O_TOK: tok_arg = optarg; break;
        case O_MODEL: model_arg = optarg; break;
        case O_VOCAB: bad |= num("--vocab", optarg, 1, 1 << 24, &vocab); break;
        case O_SEQ: bad |= num("--seq", optarg, 1, 1 << 20, &seq); break;
        case O_THREADS: bad |= num("--threads", optarg, 1, 4096, &threads); break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("whale-generate %s (sentencepiece %s)\n", WHALE_VERSION, wd_spm_version()); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (bad)
        return 2;
    if (optind < argc) {
        ERR("unexpected argument '%s' (see --help)", argv[optind]);
        return 2;
    }
    if (!ckpt) {
        ERR("--ckpt DIR is required (see --help)");
        return 2;
    }
    whale_log_set_level(WHALE_LOG_WARN);
    whale_log_init_from_env();

    int rc = 1;
    char *dir = NULL;
    whale_ckpt_reader *rd = NULL;
    json_t *dj = NULL, *pj = NULL;
    wd_spm *sp = NULL;
    whale_engine *e = NULL;
    struct wd_ids ids = { 0 };
    struct wg_sampler smp = { 0 };
    float *probs = NULL;
    char *text = NULL;
    char err[1024];
    if (whale_ckpt_resolve(ckpt, "latest", &dir) || whale_ckpt_reader_open(dir, &rd))
        goto out;
    const whale_ckpt_info *info = whale_ckpt_reader_info(rd);
    dj = info->data_json ? json_loads(info->data_json, 0, NULL) : NULL;
    pj = info->plan_json ? json_loads(info->plan_json, 0, NULL) : NULL;

    /* the model: flag > the record of whale-train > the plan's name */
    const char *mname = model_arg ? model_arg
                      : json_string_value(json_object_get(dj, "model"))
                          ? json_string_value(json_object_get(dj, "model"))
                          : json_string_value(json_object_get(pj, "model"));
    if (!mname) {
        ERR("%s records no model; give --model NAME|FILE", dir);
        goto out;
    }
    struct whale_model_desc md;
    if (whale_model_desc_load(mname, &md))
        goto out;
    if (vocab)
        md.vocab = (int)vocab;
    else if (json_integer_value(json_object_get(dj, "vocab")) > 0)
        md.vocab = (int)json_integer_value(json_object_get(dj, "vocab"));
    if (!seq)
        seq = json_integer_value(json_object_get(dj, "seq"));
    if (!seq)
        seq = md.seq < 1024 ? md.seq : 1024;
    if (seq > md.seq) {
        ERR("--seq %ld exceeds the model's Seq=%d (%s)", seq, md.seq, md.name);
        goto out;
    }

    /* the tokenizer: flag > recorded (hash checked) > none: byte-level */
    json_t *tj = json_object_get(dj, "tokenizer");
    const char *tpath = tok_arg ? tok_arg : json_string_value(json_object_get(tj, "path"));
    if (tpath) {
        const char *want = json_string_value(json_object_get(tj, "xxh64"));
        int h = !tok_arg && want ? check_hash(tpath, want) : 0;
        if (h < 0) {
            ERR("the checkpoint's tokenizer %s cannot be read (%s); give --tokenizer FILE", tpath,
                strerror(errno));
            goto out;
        }
        if (h > 0) {
            ERR("the tokenizer %s changed since training (xxh64 differs from the checkpoint's "
                "%s); give --tokenizer FILE to use it anyway", tpath, want);
            goto out;
        }
        if (wd_spm_load_file(tpath, &sp, err, sizeof err)) {
            ERR("tokenizer %s: %s", tpath, err);
            goto out;
        }
        if (wd_spm_vocab(sp) > md.vocab) {
            ERR("tokenizer %s has %d tokens, the model's vocabulary is %d", tpath,
                wd_spm_vocab(sp), md.vocab);
            goto out;
        }
    } else if (md.vocab < 256) {
        ERR("%s records no tokenizer and the vocabulary (%d) is too small for bytes; give "
            "--tokenizer FILE", dir, md.vocab);
        goto out;
    }

    struct whale_engine_config ec;
    whale_engine_config_defaults(&ec);
    ec.model = md;
    ec.seq = (int)seq;
    ec.micro_batch = 1;
    ec.grad_accum = 1;
    ec.total_steps = 1;
    ec.threads = (int)threads;
    ec.precision = WHALE_PREC_FP32;
    if (whale_engine_create(&ec, NULL, &e) || whale_ckpt_load_engine(rd, e))
        goto out;

    /* the context: BOS, then the prompt as whale-data encodes a document */
    if (sp) {
        if (wd_encode_doc(sp, prompt, strlen(prompt), true, &ids, err, sizeof err)) {
            ERR("encoding the prompt: %s", err);
            goto out;
        }
    } else {
        for (const unsigned char *p = (const unsigned char *)prompt; *p; p++) {
            if (ids.n == ids.cap) {
                ids.cap = ids.cap ? ids.cap * 2 : 256;
                int32_t *q = realloc(ids.ids, ids.cap * sizeof *q);
                if (!q)
                    goto out;
                ids.ids = q;
            }
            ids.ids[ids.n++] = *p;
        }
    }
    size_t nprompt = ids.n;
    if (nprompt == 0) {
        ERR("an empty prompt needs a tokenizer with a BOS token; give --prompt TEXT");
        goto out;
    }
    int V = whale_engine_vocab(e);
    probs = malloc(sizeof(float) * V);
    if (!probs || wg_sampler_init(&smp, temp, (int)topk, (uint64_t)seed, V))
        goto out;
    ids.cap = ids.n + ntok;
    int32_t *grown = realloc(ids.ids, ids.cap * sizeof(int32_t));
    if (!grown)
        goto out;
    ids.ids = grown;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long made = 0;
    const int stop1 = sp ? wd_spm_eos(sp) : -1, stop2 = sp ? wd_spm_bos(sp) : -1;
    for (; made < ntok; made++) {
        /* the last `seq` tokens: the window slides once the text is longer */
        size_t n = ids.n < (size_t)seq ? ids.n : (size_t)seq;
        int erc = whale_engine_next_probs(e, ids.ids + ids.n - n, (int)n, probs);
        if (erc) {
            ERR("forward failed: %s", whale_strerror(erc));
            goto out;
        }
        int t = wg_sample(&smp, probs, V);
        if (t == stop1 || t == stop2) /* the end of the text, or a new document */
            break;
        if (sp && t >= wd_spm_vocab(sp)) /* a row the tokenizer does not use */
            continue;
        ids.ids[ids.n++] = t;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (sp) {
        if (wd_spm_decode(sp, ids.ids, ids.n, &text, err, sizeof err)) {
            ERR("decoding: %s", err);
            goto out;
        }
    } else {
        text = malloc(ids.n + 1);
        if (!text)
            goto out;
        for (size_t i = 0; i < ids.n; i++)
            text[i] = (char)(ids.ids[i] < 256 ? ids.ids[i] : '?');
        text[ids.n] = 0;
    }
    printf("%s\n", text);
    fflush(stdout);
    fprintf(stderr, "whale-generate: step %lld of %s (%s, vocabulary %d, window %ld): %zu prompt "
            "tokens, %zu generated in %.2f s (%.1f tokens/s, %s)\n", (long long)info->step, dir,
            md.name, V, seq, nprompt, ids.n - nprompt, dt, dt > 0 ? (ids.n - nprompt) / dt : 0.0,
            temp <= 0 ? "greedy" : "sampled");
    rc = 0;
out:
    free(text);
    free(probs);
    wg_sampler_free(&smp);
    free(ids.ids);
    whale_engine_destroy(e);
    wd_spm_free(sp);
    json_decref(dj);
    json_decref(pj);
    whale_ckpt_reader_close(rd);
    free(dir);
    return rc;
}
