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
#include "whale/envnum.h"
#include "whale/readfile.h"
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
"  --top-p P            then among the likeliest of those holding share P of their\n"
"                       tempered probability (nucleus sampling; default 1 = all)\n"
"  --greedy             always the likeliest token (= --temperature 0)\n"
"  --seed N             sampling seed (default 1): the same seed gives the same text\n"
"  --print-ids          print the token ids of the prompt and continuation (one line,\n"
"                       space-separated) instead of the decoded text\n"
"  --tokenizer FILE     SentencePiece model or tokenizer.json (default: the one recorded in the\n"
"                       checkpoint; a checkpoint without one is byte-level)\n"
"  --model NAME|FILE    model preset or .conf (default: the recorded one)\n"
"  --vocab N            vocabulary (default: the recorded one)\n"
"  --seq N              context window (default: the trained seq)\n"
"  --threads N          compute threads (default: all CPUs)\n"
"  --no-kv-cache        run the whole window again for every new token instead of\n"
"                       keeping the keys and values of earlier positions (slower; the\n"
"                       same tokens)\n"
"  --bench              generate twice, with and without the KV cache, and print both\n"
"                       rates, their ratio and whether the tokens agree on stderr\n"
"  -h, --help  -V, --version\n"
"\n"
"The prompt runs through the model once and each new token one position, attending\n"
"over cached keys and values; once the text outgrows the window, or on a backend\n"
"without the cache's operations (cuda), each token runs the whole window again.\n"
"Output: the prompt and its continuation on stdout; timing on stderr.\n");
}

static int check_hash(const char *buf, size_t len, const char *want)
{
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)XXH64(buf, len, 0));
    return strcmp(got, want) ? 1 : 0;
}

/* libgomp reads OMP_WAIT_POLICY when it is loaded: its spinning workers
 * starve each other on a busy machine (whale-train does the same). */
static void ensure_passive_omp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || whale_knob_getenv("WHALE_GENERATE_REEXEC"))
        return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("WHALE_GENERATE_REEXEC", "1", 1); /* tells the re-exec'd child not to re-exec */
    execv("/proc/self/exe", argv);
}

/* What the command line says. */
struct gen_opts {
    const char *ckpt, *prompt, *tok_arg, *model_arg;
    long ntok, topk, seed, vocab, seq, threads;
    double temp, top_p;
    bool print_ids, no_kv, bench;
};

/* What one run holds, released by gen_free(). */
struct gen_run {
    char *dir;
    whale_ckpt_reader *rd;
    const whale_ckpt_info *info;
    json_t *dj, *pj; /* the checkpoint's data and plan records */
    wd_spm *sp;
    struct whale_model_desc md;
    whale_engine *e;
    struct wd_ids ids;
    size_t nprompt;
    struct wg_sampler smp;
    float *probs;
    int V;
    double dt; /* seconds spent generating */
    bool cached; /* the KV cache was used (else every token recomputed the window) */
    char *text;
};

/* --temperature X. 0, or 1 (a message printed). */
static int parse_temp(const char *s, double *temp)
{
    return whale_opt_double("whale-generate", "--temperature", s, 0, 100, temp) ? 1 : 0;
}

/* The command line into o. -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct gen_opts *o)
{
    *o = (struct gen_opts){ .prompt = "", .ntok = 100, .topk = 40, .seed = 1, .temp = 0.8,
                             .top_p = 1 };
    int bad = 0;
    enum { O_CKPT = 256, O_PROMPT, O_TOKENS, O_TEMP, O_TOPK, O_TOPP, O_GREEDY, O_SEED, O_TOK, O_MODEL,
           O_VOCAB, O_SEQ, O_THREADS, O_PRINT_IDS, O_NO_KV, O_BENCH };
    static const struct option lo[] = {
        { "ckpt", required_argument, 0, O_CKPT }, { "prompt", required_argument, 0, O_PROMPT },
        { "tokens", required_argument, 0, O_TOKENS },
        { "temperature", required_argument, 0, O_TEMP },
        { "top-k", required_argument, 0, O_TOPK }, { "top-p", required_argument, 0, O_TOPP },
        { "greedy", no_argument, 0, O_GREEDY }, { "print-ids", no_argument, 0, O_PRINT_IDS },
        { "seed", required_argument, 0, O_SEED }, { "tokenizer", required_argument, 0, O_TOK },
        { "model", required_argument, 0, O_MODEL }, { "vocab", required_argument, 0, O_VOCAB },
        { "seq", required_argument, 0, O_SEQ }, { "threads", required_argument, 0, O_THREADS },
        { "no-kv-cache", no_argument, 0, O_NO_KV }, { "bench", no_argument, 0, O_BENCH },
        { "help", no_argument, 0, 'h' }, { "version", no_argument, 0, 'V' }, { 0, 0, 0, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
        switch (c) {
        case O_CKPT: o->ckpt = optarg; break;
        case O_PROMPT: o->prompt = optarg; break;
        case O_TOKENS: bad |= whale_opt_long("whale-generate", "--tokens", optarg, 1, 1 << 20, &o->ntok); break;
        case O_TEMP: bad |= parse_temp(optarg, &o->temp); break;
        case O_TOPK: bad |= whale_opt_long("whale-generate", "--top-k", optarg, 0, 1 << 24, &o->topk); break;
        case O_TOPP: bad |= whale_opt_double("whale-generate", "--top-p", optarg, 1e-6, 1, &o->top_p) ? 1 : 0; break;
        case O_GREEDY: o->temp = 0; break;
        case O_PRINT_IDS: o->print_ids = true; break;
        case O_NO_KV: o->no_kv = true; break;
        case O_BENCH: o->bench = true; break;
        case O_SEED: bad |= whale_opt_long("whale-generate", "--seed", optarg, 0, LONG_MAX, &o->seed); break;
        case O_TOK: o->tok_arg = optarg; break;
        case O_MODEL: o->model_arg = optarg; break;
        case O_VOCAB: bad |= whale_opt_long("whale-generate", "--vocab", optarg, 1, 1 << 24, &o->vocab); break;
        case O_SEQ: bad |= whale_opt_long("whale-generate", "--seq", optarg, 1, 1 << 20, &o->seq); break;
        case O_THREADS: bad |= whale_opt_long("whale-generate", "--threads", optarg, 1, 4096, &o->threads); break;
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
    if (!o->ckpt) {
        ERR("--ckpt DIR is required (see --help)");
        return 2;
    }
    return -1;
}

/* The checkpoint and the model: flag > the record of whale-train > the
 * plan's name; the vocabulary and window likewise. 0 or -1 (said). */
static int open_model(struct gen_opts *o, struct gen_run *r)
{
    if (whale_ckpt_resolve(o->ckpt, "latest", &r->dir) || whale_ckpt_reader_open(r->dir, &r->rd))
        return -1;
    r->info = whale_ckpt_reader_info(r->rd);
    r->dj = r->info->data_json ? json_loads(r->info->data_json, 0, NULL) : NULL;
    r->pj = r->info->plan_json ? json_loads(r->info->plan_json, 0, NULL) : NULL;
    const char *mname = o->model_arg ? o->model_arg
                      : json_string_value(json_object_get(r->dj, "model"))
                          ? json_string_value(json_object_get(r->dj, "model"))
                          : json_string_value(json_object_get(r->pj, "model"));
    if (!mname) {
        ERR("%s records no model; give --model NAME|FILE", r->dir);
        return -1;
    }
    struct whale_model_desc *md = &r->md;
    if (whale_model_desc_load(mname, md))
        return -1;
    if (o->vocab)
        md->vocab = (int)o->vocab;
    else if (json_integer_value(json_object_get(r->dj, "vocab")) > 0)
        md->vocab = (int)json_integer_value(json_object_get(r->dj, "vocab"));
    if (!o->seq)
        o->seq = json_integer_value(json_object_get(r->dj, "seq"));
    if (!o->seq)
        o->seq = md->seq < 1024 ? md->seq : 1024;
    if (o->seq > md->seq) {
        ERR("--seq %ld exceeds the model's Seq=%d (%s)", o->seq, md->seq, md->name);
        return -1;
    }
    return 0;
}

/* The tokenizer: flag > recorded (hash checked) > none: byte-level.
 * 0 or -1 (said). */
static int open_tokenizer(const struct gen_opts *o, struct gen_run *r)
{
    char err[1024];
    json_t *tj = json_object_get(r->dj, "tokenizer");
    const char *tpath = o->tok_arg ? o->tok_arg : json_string_value(json_object_get(tj, "path"));
    if (!tpath) {
        if (r->md.vocab >= 256)
            return 0;
        ERR("%s records no tokenizer and the vocabulary (%d) is too small for bytes; give "
            "--tokenizer FILE", r->dir, r->md.vocab);
        return -1;
    }
    const char *want = json_string_value(json_object_get(tj, "xxh64"));
    /* read once, bounded and non-blocking (whale/readfile.h): /dev/zero or
     * a FIFO is refused with the reason instead of growing or hanging */
    char *model = NULL;
    size_t mlen = 0;
    if (whale_read_file(tpath, WHALE_READ_MAX_TOKENIZER, 0, &model, &mlen)) {
        if (o->tok_arg)
            ERR("--tokenizer %s: cannot use it (see the line above)", tpath);
        else
            ERR("the checkpoint's tokenizer %s cannot be read (see the line above); give "
                "--tokenizer FILE", tpath);
        return -1;
    }
    if (!o->tok_arg && want && check_hash(model, mlen, want)) {
        ERR("the tokenizer %s changed since training (xxh64 differs from the checkpoint's "
            "%s); give --tokenizer FILE to use it anyway", tpath, want);
        free(model);
        return -1;
    }
    int lrc = wd_spm_load_bytes(model, mlen, &r->sp, err, sizeof err);
    free(model);
    if (lrc) {
        ERR("tokenizer %s: %s", tpath, err);
        return -1;
    }
    if (wd_spm_vocab(r->sp) > r->md.vocab) {
        ERR("tokenizer %s has %d tokens, the model's vocabulary is %d", tpath,
            wd_spm_vocab(r->sp), r->md.vocab);
        return -1;
    }
    return 0;
}

/* One fp32 rank with the checkpoint's weights. 0 or -1 (said). */
static int open_engine(const struct gen_opts *o, struct gen_run *r)
{
    struct whale_engine_config ec;
    whale_engine_config_defaults(&ec);
    ec.model = r->md;
    ec.seq = (int)o->seq;
    ec.micro_batch = 1;
    ec.grad_accum = 1;
    ec.total_steps = 1;
    ec.threads = (int)o->threads;
    ec.precision = WHALE_PREC_FP32;
    if (whale_engine_create(&ec, NULL, &r->e) || whale_ckpt_load_engine(r->rd, r->e))
        return -1;
    return 0;
}

/* The context: BOS, then the prompt as whale-data encodes a document
 * (bytes without a tokenizer). 0 or -1 (said). */
static int encode_prompt(const struct gen_opts *o, struct gen_run *r)
{
    char err[1024];
    struct wd_ids *ids = &r->ids;
    if (r->sp) {
        if (wd_encode_doc(r->sp, o->prompt, strlen(o->prompt), true, ids, err, sizeof err)) {
            ERR("encoding the prompt: %s", err);
            return -1;
        }
    } else {
        for (const unsigned char *p = (const unsigned char *)o->prompt; *p; p++) {
            if (ids->n == ids->cap) {
                ids->cap = ids->cap ? ids->cap * 2 : 256;
                int32_t *q = realloc(ids->ids, ids->cap * sizeof *q);
                if (!q)
                    return -1;
                ids->ids = q;
            }
            ids->ids[ids->n++] = *p;
        }
    }
    r->nprompt = ids->n;
    if (r->nprompt == 0) {
        ERR("an empty prompt needs a tokenizer with a BOS token; give --prompt TEXT");
        return -1;
    }
    return 0;
}

/* Up to --tokens sampled tokens appended to the context, timed.
 * 0 or -1 (said). */
static int generate(const struct gen_opts *o, struct gen_run *r, bool use_kv)
{
    struct wd_ids *ids = &r->ids;
    r->V = whale_engine_vocab(r->e);
    free(r->probs);
    wg_sampler_free(&r->smp);
    r->probs = malloc(sizeof(float) * r->V);
    if (!r->probs || wg_sampler_init(&r->smp, o->temp, (int)o->topk, o->top_p,
                                        (uint64_t)o->seed, r->V))
        return -1;
    whale_kv_cache *kv = NULL;
    if (use_kv) {
        int krc = whale_kv_cache_create(r->e, &kv);
        if (krc == WHALE_ENOTSUP)
            ERR("note: this backend has no KV-cache operations; every token runs the whole "
                "window");
        else if (krc) {
            ERR("KV cache: %s", whale_strerror(krc));
            return -1;
        }
    }
    r->cached = kv != NULL;
    ids->cap = ids->n + o->ntok;
    int32_t *grown = realloc(ids->ids, ids->cap * sizeof(int32_t));
    if (!grown)
        return -1;
    ids->ids = grown;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int stop1 = r->sp ? wd_spm_eos(r->sp) : -1, stop2 = r->sp ? wd_spm_bos(r->sp) : -1;
    for (long made = 0; made < o->ntok; made++) {
        /* the last `seq` tokens: the window slides once the text is longer */
        size_t n = ids->n < (size_t)o->seq ? ids->n : (size_t)o->seq;
        int erc = 0;
        if (kv && ids->n <= (size_t)o->seq) {
            /* the same context as last time (a skipped token): the same probs */
            if ((int)n > whale_kv_cache_len(kv))
                erc = whale_engine_kv_next_probs(r->e, kv, ids->ids, (int)n, r->probs);
        } else {
            /* no cache, or the window slid: every position moved, recompute */
            erc = whale_engine_next_probs(r->e, ids->ids + ids->n - n, (int)n, r->probs);
        }
        if (erc) {
            ERR("forward failed: %s", whale_strerror(erc));
            whale_kv_cache_destroy(kv);
            return -1;
        }
        int t = wg_sample(&r->smp, r->probs, r->V);
        if (t == stop1 || t == stop2) /* the end of the text, or a new document */
            break;
        if (r->sp && t >= wd_spm_vocab(r->sp)) /* a row the tokenizer does not use */
            continue;
        ids->ids[ids->n++] = t;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->dt = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    whale_kv_cache_destroy(kv);
    return 0;
}

/* --bench: the same generation with and without the KV cache, timed; the
 * cached run's tokens stay for the report. 0 or -1 (said). */
static int bench(const struct gen_opts *o, struct gen_run *r)
{
    size_t np = r->ids.n;
    if (generate(o, r, false))
        return -1;
    size_t n_full = r->ids.n;
    double dt_full = r->dt;
    int32_t *full = malloc(sizeof(int32_t) * (n_full ? n_full : 1));
    if (!full)
        return -1;
    memcpy(full, r->ids.ids, sizeof(int32_t) * n_full);
    r->ids.n = np;
    if (generate(o, r, true)) {
        free(full);
        return -1;
    }
    bool same = r->ids.n == n_full && !memcmp(full, r->ids.ids, sizeof(int32_t) * n_full);
    free(full);
    double tf = dt_full > 0 ? (n_full - np) / dt_full : 0;
    double tc = r->dt > 0 ? (r->ids.n - np) / r->dt : 0;
    fprintf(stderr, "whale-generate: bench: %zu prompt tokens, %zu generated: KV cache %.1f "
            "tokens/s%s, recompute %.1f tokens/s, ratio %.2f, same tokens: %s\n", np,
            r->ids.n - np, tc, r->cached ? "" : " (unavailable: recomputed)", tf,
            tf > 0 ? tc / tf : 0.0, same ? "yes" : "NO");
    return same ? 0 : -1;
}

/* The text on stdout, the figures on stderr. 0 or -1 (said). */
static int report(const struct gen_opts *o, struct gen_run *r)
{
    char err[1024];
    const struct wd_ids *ids = &r->ids;
    if (o->print_ids) {
        for (size_t i = 0; i < ids->n; i++)
            printf(i ? " %d" : "%d", (int)ids->ids[i]);
        printf("\n");
    } else if (r->sp) {
        if (wd_spm_decode(r->sp, ids->ids, ids->n, &r->text, err, sizeof err)) {
            ERR("decoding: %s", err);
            return -1;
        }
    } else {
        r->text = malloc(ids->n + 1);
        if (!r->text)
            return -1;
        for (size_t i = 0; i < ids->n; i++)
            r->text[i] = (char)(ids->ids[i] < 256 ? ids->ids[i] : '?');
        r->text[ids->n] = 0;
    }
    if (!o->print_ids)
        printf("%s\n", r->text);
    fflush(stdout);
    double dt = r->dt;
    fprintf(stderr, "whale-generate: step %lld of %s (%s, vocabulary %d, window %ld): %zu prompt "
            "tokens, %zu generated in %.2f s (%.1f tokens/s, %s, %s)\n", (long long)r->info->step, r->dir,
            r->md.name, r->V, o->seq, r->nprompt, ids->n - r->nprompt, dt,
            dt > 0 ? (ids->n - r->nprompt) / dt : 0.0, o->temp <= 0 ? "greedy" : "sampled",
            r->cached ? "KV cache" : "recomputing the window");
    return 0;
}

static void gen_free(struct gen_run *r)
{
    free(r->text);
    free(r->probs);
    wg_sampler_free(&r->smp);
    free(r->ids.ids);
    whale_engine_destroy(r->e);
    wd_spm_free(r->sp);
    json_decref(r->dj);
    json_decref(r->pj);
    whale_ckpt_reader_close(r->rd);
    free(r->dir);
}

int main(int argc, char **argv)
{
    ensure_passive_omp(argv);
    struct gen_opts o;
    int st = parse_args(argc, argv, &o);
    if (st >= 0)
        return st;
    whale_log_set_level(WHALE_LOG_WARN);
    whale_log_init_from_env();

    struct gen_run r = { 0 };
    int rc = open_model(&o, &r) || open_tokenizer(&o, &r) || open_engine(&o, &r) ||
             encode_prompt(&o, &r) ||
                     (o.bench ? bench(&o, &r) : generate(&o, &r, !o.no_kv)) || report(&o, &r)
                 ? 1 : 0;
    gen_free(&r);
    return rc;
}
