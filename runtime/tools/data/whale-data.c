/* whale-data: text files -> a SentencePiece tokenizer and llm.c token
 * shards (train / validation) that whale-train reads, plus whale-data.json
 * describing them. See whale-data(1). */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "corpus.h"
#include "encode.h"
#include "instruct.h"
#include "outdir.h"
#include "spm.h"
#include "whale/clock.h"
#include "whale/envnum.h"
#include "whale/readfile.h"
#include "whale_config.h"

#define ERR(...) (fprintf(stderr, "whale-data: " __VA_ARGS__), fputc('\n', stderr))
#define META_NAME "whale-data.json"
#define TOK_NAME "tokenizer.model"

struct opts {
    const char *out, *jsonl, *tokenizer, *model_type;
    /* instruction data: the chat template (NULL: plain text), the
     * tokenizer_config.json `auto` reads, a default system turn */
    const char *chat_template, *tokenizer_config, *system_prompt;
    long max_tokens;
    enum wd_overlong overlong;
    long vocab, val_docs, threads, shard_tokens, train_sentences;
    double val_fraction, coverage;
    int progress, verbose, force;
    long shuffle; /* seed of the document order in the shards; -1: input order */
    char **inputs; /* the INPUT operands */
    int ninputs;
};

static void usage(FILE *f)
{
    fprintf(f,
"Usage: whale-data -o DIR [options] INPUT...\n"
"Turn UTF-8 text into llm.c token shards for whale-train, with a train / validation\n"
"split and a SentencePiece tokenizer trained on the corpus (or loaded).\n"
"INPUT: files, directories (read recursively, in name order) or quoted glob patterns.\n"
"\n"
"  -o, --out DIR          output directory (created): tokenizer.model, train_NNNNNN.bin,\n"
"                         val_NNNNNN.bin, whale-data.json\n"
"  --jsonl FIELD          inputs are JSON lines; each record's string FIELD is one\n"
"                         document (default: each file is one document)\n"
"\n"
"Instruction data (fine-tuning; needs --tokenizer): inputs are JSON lines, each\n"
"{\"prompt\": P, \"response\": R} (optional \"system\") or {\"messages\": [{\"role\":\n"
"\"system\"|\"user\"|\"assistant\", \"content\": C}, ..]}; every shard gets SHARD.mask\n"
"beside it (1 byte per token, 1 = response token: what whale-train's loss counts)\n"
"  --instruct             records are instruction data (template: --chat-template auto)\n"
"  --chat-template NAME   chatml, qwen2 (ChatML + Qwen2's default system turn), llama3,\n"
"                         llama2, mistral (v0.1), or auto (default): recognise the\n"
"                         chat_template of the tokenizer_config.json beside --tokenizer\n"
"  --tokenizer-config F   the tokenizer_config.json auto reads\n"
"  --system-prompt TEXT   the system turn of records without one\n"
"  --max-tokens N         tokens of one record at most (default 0: no limit)\n"
"  --overlong P           a longer record: refuse (default: stop, naming file:line),\n"
"                         truncate (keep its first N tokens) or drop (leave it out);\n"
"                         truncated and dropped records are counted in the summary\n"
"\n"
"  --tokenizer FILE       use this SentencePiece .model, or a Hugging Face tokenizer.json\n"
"                         (byte-level BPE: GPT-2, Llama 3, Qwen2), instead of training one\n"
"  --vocab-size N         tokens of the trained tokenizer (default 4096; 64..65536:\n"
"                         shards hold uint16 ids)\n"
"  --model-type T         bpe (default) or unigram\n"
"  --character-coverage X share of characters the tokenizer must cover (0.9995; 1.0 for\n"
"                         small alphabets); rarer ones become byte pieces\n"
"  --train-sentences N    lines sampled to train the tokenizer (default 2000000; 0: all)\n"
"  --val-fraction X       share of documents held out for validation (default 0.05;\n"
"                         0..0.5; spread evenly over the corpus, the same every run)\n"
"  --val-docs N           hold out exactly N documents instead\n"
"  --shard-tokens N       tokens per shard at most (default 100000000)\n"
"  --shuffle SEED         document order in the shards: a permutation from SEED\n"
"                         (default 1), so consecutive training steps see different\n"
"                         documents; --no-shuffle keeps the sorted input order\n"
"  --threads N            encoding (and tokenizer training) threads (default: CPUs)\n"
"  --force                replace an existing whale-data output in DIR\n"
"  --no-progress          no live progress line\n"
"  --verbose              show SentencePiece's own training log\n"
"  -h, --help  -V, --version\n"
"\n"
"Every document starts with the tokenizer's BOS id; newlines are kept as the piece\n"
"<n>. Files are written under temporary names and renamed into place at the end,\n"
"so a failed run leaves no half-written shard. Then:\n"
"  whale-train --model M.conf --vocab N --data DIR/train_000000.bin \\\n"
"      --val-data DIR/val_000000.bin --eval-every 50\n"
"Tokenizer library: SentencePiece %s (C++ API).\n", wd_spm_version());
}

/* the training sentences: non-empty lines of the training documents */
struct sent_it {
    const struct wd_corpus *c;
    size_t doc, pos;
};

static int next_sentence(void *user, const char **s, size_t *len)
{
    struct sent_it *it = user;
    while (it->doc < it->c->ndocs) {
        const struct wd_doc *d = &it->c->docs[it->doc];
        if (d->val || it->pos >= d->len) {
            it->doc++;
            it->pos = 0;
            continue;
        }
        const char *t = d->text + it->pos;
        const char *e = memchr(t, '\n', d->len - it->pos);
        size_t l = e ? (size_t)(e - t) : d->len - it->pos;
        it->pos += l + 1;
        if (l && t[l - 1] == '\r')
            l--;
        if (!l)
            continue;
        *s = t;
        *len = l;
        return 0;
    }
    return 1;
}

/* Bounded and non-blocking (whale/readfile.h): a FIFO or /dev/zero named
 * as the tokenizer is refused with the reason instead of hanging. */
static char *slurp(const char *path, size_t *len)
{
    char *b = NULL;
    if (whale_read_file(path, WHALE_READ_MAX_TOKENIZER, 0, &b, len)) {
        ERR("--tokenizer %s: cannot use it (see the line above)", path);
        return NULL;
    }
    return b;
}

/* The order documents are written in: a Fisher-Yates permutation from
 * seed (splitmix64; the same seed, the same order), or the input order. */
static size_t *doc_order(size_t n, long seed)
{
    size_t *p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++)
        p[i] = i;
    uint64_t x = (uint64_t)seed;
    for (size_t i = n; seed >= 0 && i > 1; i--) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        size_t j = (size_t)(z % i), t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    return p;
}

/* SHARD.mask beside a shard of instruction data: its tokens' loss-mask
 * bytes, which whale-train reads beside the data file. */
static int write_mask(struct wd_out *o, const char *shard, const uint8_t *const *parts,
                      const size_t *lens, size_t np, bool masks)
{
    if (!masks)
        return 0;
    char nm[80];
    snprintf(nm, sizeof nm, "%s.mask", shard);
    FILE *f = wd_out_open(o, nm);
    if (!f)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < np && !rc; i++)
        rc = lens[i] && fwrite(parts[i], 1, lens[i], f) != lens[i] ? -1 : 0;
    if (rc) {
        ERR("writing %s/%s failed: %s", o->dir, nm, strerror(errno));
        fclose(f);
        return -1;
    }
    return wd_out_close(o, f);
}

/* Write one split's shards (documents in `order`); names appended to arr. */
static int write_split(struct wd_out *o, const char *split, const struct wd_corpus *c,
                       const struct wd_ids *enc, const size_t *order, bool val, bool masks,
                       bool wide, long shard_tokens, json_t *arr,
                       size_t *ntok, size_t *ndocs, size_t *nbytes)
{
    size_t cap = 64, np = 0, cur = 0;
    int shard = 0, rc = 0;
    const int32_t **parts = malloc(cap * sizeof *parts);
    const uint8_t **mparts = malloc(cap * sizeof *mparts);
    size_t *lens = malloc(cap * sizeof *lens);
    if (!parts || !lens || !mparts)
        rc = -1;
    *ntok = *ndocs = *nbytes = 0;
    for (size_t i = 0; i <= c->ndocs && !rc; i++) {
        bool last = i == c->ndocs;
        const size_t di = last ? 0 : order[i];
        size_t off = 0;
        while (!last && !rc && off < enc[di].n && c->docs[di].val == val) {
            size_t take = enc[di].n - off;
            if (take > (size_t)shard_tokens - cur)
                take = (size_t)shard_tokens - cur;
            if (np == cap) {
                cap *= 2;
                const int32_t **p2 = realloc(parts, cap * sizeof *parts);
                size_t *l2 = p2 ? realloc(lens, cap * sizeof *lens) : NULL;
                const uint8_t **m2 = l2 ? realloc(mparts, cap * sizeof *mparts) : NULL;
                if (p2)
                    parts = p2;
                if (l2)
                    lens = l2;
                if (m2)
                    mparts = m2;
                if (!p2 || !l2 || !m2) {
                    rc = -1;
                    break;
                }
            }
            parts[np] = enc[di].ids + off;
            mparts[np] = enc[di].mask ? enc[di].mask + off : NULL;
            lens[np++] = take;
            cur += take;
            off += take;
            if (cur == (size_t)shard_tokens) { /* a full shard: write it */
                char nm[64];
                snprintf(nm, sizeof nm, "%s_%06d.bin", split, shard++);
                rc = wd_write_shard(o, nm, parts, lens, np, wide) ||
                     write_mask(o, nm, mparts, lens, np, masks);
                json_array_append_new(arr, json_string(nm));
                *ntok += cur;
                np = cur = 0;
            }
        }
        if (!last && c->docs[di].val == val) {
            (*ndocs)++;
            *nbytes += c->docs[di].len;
        }
        if (last && cur && !rc) {
            char nm[64];
            snprintf(nm, sizeof nm, "%s_%06d.bin", split, shard++);
            rc = wd_write_shard(o, nm, parts, lens, np, wide) ||
                 write_mask(o, nm, mparts, lens, np, masks);
            json_array_append_new(arr, json_string(nm));
            *ntok += cur;
        }
    }
    free(mparts);
    free(parts);
    free(lens);
    return rc;
}

/* after --force: shards of the previous output that this one did not
 * write, and masks beside shards that have none now (whale-train would
 * read an earlier run's mask with new plain-text tokens) */
static void remove_stale(const char *dir, json_t *tr, json_t *va, bool masks)
{
    const char *pat[4] = { "train_*.bin", "val_*.bin", "train_*.bin.mask", "val_*.bin.mask" };
    for (int k = 0; k < 4; k++) {
        char *g;
        if (asprintf(&g, "%s/%s", dir, pat[k]) < 0)
            return;
        glob_t gl;
        if (glob(g, 0, NULL, &gl) == 0) {
            for (size_t i = 0; i < gl.gl_pathc; i++) {
                const char *base = strrchr(gl.gl_pathv[i], '/') + 1;
                size_t bl = strlen(base) - (k >= 2 ? 5 : 0); /* the shard of a mask */
                bool keep = false;
                size_t j;
                json_t *v;
                json_array_foreach(k % 2 ? va : tr, j, v) keep |=
                    (k < 2 || masks) && strlen(json_string_value(v)) == bl &&
                    !strncmp(json_string_value(v), base, bl);
                if (!keep)
                    unlink(gl.gl_pathv[i]);
            }
            globfree(&gl);
        }
        free(g);
    }
}

/* The command line into o. -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (struct opts){ .model_type = "bpe", .vocab = 4096, .val_fraction = 0.05,
                        .threads = ncpu > 0 ? ncpu : 1, .shard_tokens = 100000000,
                        .train_sentences = 2000000, .coverage = 0.9995, .progress = -1,
                        .shuffle = 1 };
    enum { O_INSTR = 200, O_TMPL, O_TCFG, O_SYS, O_MAXT, O_OVL, O_JSONL = 256, O_TOK, O_VOCAB, O_TYPE, O_COV, O_TRS, O_VF, O_VD, O_ST, O_TH, O_FORCE,
           O_NOPROG, O_VERB, O_SHUF, O_NOSHUF };
    static const struct option lo[] = {
        { "out", required_argument, 0, 'o' }, { "jsonl", required_argument, 0, O_JSONL },
        { "instruct", no_argument, 0, O_INSTR }, { "chat-template", required_argument, 0, O_TMPL },
        { "tokenizer-config", required_argument, 0, O_TCFG },
        { "system-prompt", required_argument, 0, O_SYS },
        { "max-tokens", required_argument, 0, O_MAXT },
        { "overlong", required_argument, 0, O_OVL },
        { "tokenizer", required_argument, 0, O_TOK },
        { "vocab-size", required_argument, 0, O_VOCAB },
        { "model-type", required_argument, 0, O_TYPE },
        { "character-coverage", required_argument, 0, O_COV },
        { "train-sentences", required_argument, 0, O_TRS },
        { "val-fraction", required_argument, 0, O_VF }, { "val-docs", required_argument, 0, O_VD },
        { "shard-tokens", required_argument, 0, O_ST }, { "threads", required_argument, 0, O_TH },
        { "force", no_argument, 0, O_FORCE }, { "no-progress", no_argument, 0, O_NOPROG },
        { "verbose", no_argument, 0, O_VERB }, { "shuffle", required_argument, 0, O_SHUF },
        { "no-shuffle", no_argument, 0, O_NOSHUF }, { "help", no_argument, 0, 'h' },
        { "version", no_argument, 0, 'V' }, { 0, 0, 0, 0 },
    };
    int c, bad = 0, vocab_set = 0;
    while ((c = getopt_long(argc, argv, "o:hV", lo, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case O_JSONL:
            if (!*optarg) {
                ERR("--jsonl needs a field name");
                bad = 1;
            }
            o->jsonl = optarg;
            break;
        case O_TOK: o->tokenizer = optarg; break;
        case O_INSTR:
            if (!o->chat_template)
                o->chat_template = "auto";
            break;
        case O_TMPL: o->chat_template = optarg; break;
        case O_TCFG: o->tokenizer_config = optarg; break;
        case O_SYS: o->system_prompt = optarg; break;
        case O_MAXT: bad |= whale_opt_long("whale-data", "--max-tokens", optarg, 0, INT32_MAX, &o->max_tokens); break;
        case O_OVL:
            if (!strcmp(optarg, "refuse"))
                o->overlong = WD_OVERLONG_REFUSE;
            else if (!strcmp(optarg, "truncate"))
                o->overlong = WD_OVERLONG_TRUNCATE;
            else if (!strcmp(optarg, "drop"))
                o->overlong = WD_OVERLONG_DROP;
            else {
                ERR("--overlong=%s: expected refuse, truncate or drop", optarg);
                bad = 1;
            }
            break;
        case O_VOCAB: bad |= whale_opt_long("whale-data", "--vocab-size", optarg, 64, 65536, &o->vocab); vocab_set = 1; break;
        case O_TYPE:
            if (strcmp(optarg, "bpe") && strcmp(optarg, "unigram")) {
                ERR("--model-type=%s: expected bpe or unigram", optarg);
                bad = 1;
            }
            o->model_type = optarg;
            break;
        case O_COV: bad |= whale_opt_double("whale-data", "--character-coverage", optarg, 0.98, 1.0, &o->coverage); break;
        case O_TRS: bad |= whale_opt_long("whale-data", "--train-sentences", optarg, 0, 1L << 40, &o->train_sentences); break;
        case O_VF: bad |= whale_opt_double("whale-data", "--val-fraction", optarg, 0, 0.5, &o->val_fraction); break;
        case O_VD: bad |= whale_opt_long("whale-data", "--val-docs", optarg, 1, 1L << 40, &o->val_docs); break;
        case O_ST: bad |= whale_opt_long("whale-data", "--shard-tokens", optarg, 1024, INT32_MAX, &o->shard_tokens); break;
        case O_TH: bad |= whale_opt_long("whale-data", "--threads", optarg, 1, 1024, &o->threads); break;
        case O_FORCE: o->force = 1; break;
        case O_NOPROG: o->progress = 0; break;
        case O_VERB: o->verbose = 1; break;
        case O_SHUF: bad |= whale_opt_long("whale-data", "--shuffle", optarg, 0, LONG_MAX, &o->shuffle); break;
        case O_NOSHUF: o->shuffle = -1; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("whale-data %s (sentencepiece %s)\n", WHALE_VERSION, wd_spm_version()); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (bad)
        return 2;
    if (!o->out) {
        ERR("--out DIR is required (see --help)");
        return 2;
    }
    if (o->chat_template && (!o->tokenizer || o->jsonl)) {
        ERR("%s", o->jsonl ? "--jsonl FIELD reads plain text; instruction records (--instruct, "
                             "--chat-template) are read whole: give one of them"
                           : "instruction data (--instruct, --chat-template) needs the model's "
                             "--tokenizer (its template's special tokens)");
        return 2;
    }
    if (!o->chat_template && (o->tokenizer_config || o->system_prompt || o->max_tokens)) {
        ERR("--tokenizer-config, --system-prompt and --max-tokens are for instruction data "
            "(--instruct)");
        return 2;
    }
    if (o->tokenizer && vocab_set) {
        ERR("--vocab-size trains a tokenizer; --tokenizer loads one: give one of them");
        return 2;
    }
    return -1;
}

/* An earlier output is replaced only with --force. 0, or 1 (said). */
static int check_out(const struct opts *o)
{
    char *meta;
    struct stat sb;
    if (asprintf(&meta, "%s/%s", o->out, META_NAME) < 0)
        return 1;
    int exists = stat(meta, &sb) == 0;
    free(meta);
    if (exists && !o->force) {
        ERR("%s already holds a whale-data output (%s); --force replaces it", o->out, META_NAME);
        return 1;
    }
    return 0;
}

/* What one run holds, released by data_free(). */
struct data_run {
    struct wd_corpus corp;
    struct wd_out out;
    struct wd_ids *enc; /* one per document */
    size_t *order;      /* the documents in shard order */
    wd_spm *sp;
    char *model; /* the tokenizer's bytes */
    size_t model_len;
    int V;
    double t_train, t_enc; /* seconds training the tokenizer, encoding */
    json_t *tr, *va;       /* the shard names of each split */
    size_t tt, td, tb, vt, vd, vb; /* tokens, documents, bytes of train / val */
    json_t *meta;
    struct wd_tmpl tmpl;            /* instruction data */
    struct wd_instruct_stats inst;
};

/* The tokenizer: loaded, or trained on the training documents only (so
 * validation text never shapes it). 0 or -1 (said). */
static int make_tokenizer(const struct opts *o, bool progress, struct data_run *r)
{
    char err[1024];
    if (o->tokenizer) {
        if (!(r->model = slurp(o->tokenizer, &r->model_len)))
            return -1;
        if (wd_spm_load_bytes(r->model, r->model_len, &r->sp, err, sizeof err)) {
            ERR("--tokenizer %s: not a SentencePiece model: %s", o->tokenizer, err);
            return -1;
        }
    } else {
        struct sent_it it = { &r->corp, 0, 0 };
        struct wd_spm_train_opts to = { .vocab_size = (int)o->vocab, .model_type = o->model_type,
                                        .threads = (int)o->threads,
                                        .max_sentences = o->train_sentences,
                                        .character_coverage = o->coverage, .verbose = o->verbose,
                                        .next = next_sentence, .user = &it };
        if (progress)
            fprintf(stderr, "training a %s tokenizer of %ld tokens...", o->model_type, o->vocab);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int trc = wd_spm_train(&to, &r->model, &r->model_len, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &b);
        r->t_train = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
        if (progress)
            fputc('\n', stderr);
        if (trc) {
            ERR("training the tokenizer (--vocab-size %ld, --model-type %s) failed: %s", o->vocab,
                o->model_type, err);
            return -1;
        }
        if (wd_spm_load_bytes(r->model, r->model_len, &r->sp, err, sizeof err)) {
            ERR("the trained tokenizer does not load: %s", err);
            return -1;
        }
    }
    r->V = wd_spm_vocab(r->sp);
    if (r->V > 65536) /* Llama 3, Qwen2: uint32 shards (version 2), which whale-train reads */
        fprintf(stderr, "whale-data: the tokenizer has %d tokens, over uint16: the shards hold "
                "uint32 ids (llm.c shard version 2)\n", r->V);
    return 0;
}

/* The tokenizer file and the shards of both splits, into the staging
 * directory. 0 or -1. */
static int write_shards(const struct opts *o, struct data_run *r)
{
    if (!(r->order = doc_order(r->corp.ndocs, o->shuffle)) || wd_out_init(&r->out, o->out))
        return -1;
    json_t *tr = json_array(), *va = json_array();
    if (wd_out_write(&r->out, TOK_NAME, r->model, r->model_len) ||
        write_split(&r->out, "train", &r->corp, r->enc, r->order, false, o->chat_template,
                    r->V > 65536, o->shard_tokens, tr, &r->tt, &r->td, &r->tb) ||
        write_split(&r->out, "val", &r->corp, r->enc, r->order, true, o->chat_template,
                    r->V > 65536, o->shard_tokens, va, &r->vt, &r->vd, &r->vb)) {
        json_decref(tr);
        json_decref(va);
        return -1;
    }
    r->tr = tr;
    r->va = va;
    return 0;
}

/* whale-data.json: what was written, from what, how. NULL: out of memory.
 * Takes the shard lists r->tr, r->va. */
static json_t *build_meta(const struct opts *o, struct data_run *r)
{
    const struct wd_corpus *corp = &r->corp;
    json_t *src = json_array();
    for (int i = 0; i < corp->nfiles; i++) {
        char *rp = realpath(corp->files[i], NULL);
        json_array_append_new(src, json_string(rp ? rp : corp->files[i]));
        free(rp);
    }
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)XXH64(r->model, r->model_len, 0));
    json_t *meta = json_pack("{sssisssssIsssisisisi s{s{sosIsIsI} s{sosIsIsI}} sosssf sfsfsisf}",
        "format", "whale-data", "version", 1,
        "tokenizer", TOK_NAME, "tokenizer_xxh64", hash, "tokenizer_bytes", (json_int_t)r->model_len,
        "tokenizer_type", o->tokenizer ? "loaded" : o->model_type,
        "vocab_size", r->V, "bos_id", wd_spm_bos(r->sp), "eos_id", wd_spm_eos(r->sp),
        "newline_id", wd_spm_newline(r->sp),
        "splits",
        "train", "shards", r->tr, "tokens", (json_int_t)r->tt, "documents", (json_int_t)r->td,
        "bytes", (json_int_t)r->tb,
        "val", "shards", r->va, "tokens", (json_int_t)r->vt, "documents", (json_int_t)r->vd,
        "bytes", (json_int_t)r->vb,
        "sources", src, "library", "sentencepiece", "val_fraction",
        o->val_docs ? (double)r->vd / corp->ndocs : o->val_fraction,
        "encode_s", r->t_enc, "train_tokenizer_s", r->t_train, "threads", (int)o->threads,
        "encode_mb_per_s", r->t_enc > 0 ? corp->bytes / 1048576.0 / r->t_enc : 0.0);
    r->tr = r->va = NULL; /* json_pack's "o" took them */
    if (!meta)
        return NULL;
    json_object_set_new(meta, "library_version", json_string(wd_spm_version()));
    json_object_set_new(meta, "shuffle", o->shuffle >= 0 ? json_integer(o->shuffle) : json_null());
    json_object_set_new(meta, "token_bytes", json_integer(r->V > 65536 ? 4 : 2));
    if (o->jsonl)
        json_object_set_new(meta, "jsonl_field", json_string(o->jsonl));
    if (o->chat_template) {
        const struct wd_instruct_stats *s = &r->inst;
        json_t *in = json_pack("{sssssIsIsIsIsIsIsIsI}",
            "chat_template", r->tmpl.name, "masks", "SHARD.mask: 1 byte per token, 1 = response",
            "records", (json_int_t)s->records, "tokens", (json_int_t)s->tokens,
            "target_tokens", (json_int_t)s->targets,
            "max_tokens", (json_int_t)o->max_tokens, "truncated", (json_int_t)s->truncated,
            "dropped", (json_int_t)s->dropped, "truncated_without_target",
            (json_int_t)s->no_target, "split_encodings", (json_int_t)s->split_runs);
        if (in && o->system_prompt)
            json_object_set_new(in, "system_prompt", json_string(o->system_prompt));
        json_object_set_new(meta, "instruct", in);
    }
    if (o->tokenizer) {
        char *rp = realpath(o->tokenizer, NULL);
        json_object_set_new(meta, "tokenizer_source", json_string(rp ? rp : o->tokenizer));
        free(rp);
    }
    return meta;
}

/* whale-data.json written, the output committed, with --force the shards
 * of the previous output it replaced removed. 0 or -1 (said). */
static int commit_output(const struct opts *o, struct data_run *r)
{
    if (!(r->meta = build_meta(o, r))) {
        ERR("cannot build %s (out of memory)", META_NAME);
        return -1;
    }
    char *txt = json_dumps(r->meta, JSON_INDENT(2));
    int wrc = !txt || wd_out_write(&r->out, META_NAME, txt, strlen(txt));
    free(txt);
    if (wrc || wd_out_commit(&r->out))
        return -1;
    json_t *splits = json_object_get(r->meta, "splits");
    if (o->force)
        remove_stale(o->out, json_object_get(json_object_get(splits, "train"), "shards"),
                     json_object_get(json_object_get(splits, "val"), "shards"),
                     o->chat_template != NULL);
    return 0;
}

/* The template (named, or recognised in tokenizer_config.json), checked
 * against the tokenizer; the records into ids and masks (one thread: a
 * record is small, and its template segments are encoded in order). 0 or
 * -1 (said). */
static int instruct_encode(const struct opts *o, struct data_run *r)
{
    char err[1024], *cfg = NULL;
    int rc;
    if (!strcmp(o->chat_template, "auto")) {
        if (o->tokenizer_config) {
            cfg = strdup(o->tokenizer_config);
        } else { /* beside the tokenizer, as in a Hugging Face model directory */
            const char *sl = strrchr(o->tokenizer, '/');
            if (asprintf(&cfg, "%.*stokenizer_config.json", sl ? (int)(sl - o->tokenizer + 1) : 0,
                         o->tokenizer) < 0)
                cfg = NULL;
        }
        rc = cfg ? wd_tmpl_auto(cfg, &r->tmpl, err, sizeof err) : -1;
        if (!rc)
            fprintf(stderr, "whale-data: %s: chat template %s\n", cfg, r->tmpl.name);
        free(cfg);
    } else {
        rc = wd_tmpl_named(o->chat_template, &r->tmpl, err, sizeof err);
    }
    if (rc) {
        ERR("%s", err);
        return -1;
    }
    if (wd_instruct_check(r->sp, &r->tmpl, err, sizeof err)) {
        ERR("--tokenizer %s: %s", o->tokenizer, err);
        return -1;
    }
    struct wd_instruct_opts io = { .tmpl = &r->tmpl, .system_prompt = o->system_prompt,
                                   .max_tokens = o->max_tokens, .overlong = o->overlong };
    double t0 = whale_now_s();
    if (wd_instruct_encode_all(r->sp, &r->corp, &io, &r->enc, &r->inst))
        return -1;
    r->t_enc = whale_now_s() - t0;
    const struct wd_instruct_stats *s = &r->inst;
    fprintf(stderr, "whale-data: %zu records (template %s): %zu tokens, %zu of them response "
            "tokens (mask 1)", s->records, r->tmpl.name, s->tokens, s->targets);
    if (s->truncated || s->dropped)
        fprintf(stderr, "; over --max-tokens %ld: %zu truncated (%zu of them left with no "
                "response token), %zu dropped", o->max_tokens, s->truncated, s->no_target,
                s->dropped);
    if (s->split_runs)
        fprintf(stderr, "; %zu texts encoded piece by piece (the tokens did not line up with "
                "the text: a normalizer?)", s->split_runs);
    fputc('\n', stderr);
    if (!s->tokens) {
        ERR("no tokens to write: all %zu records were dropped (--max-tokens %ld)", s->records,
            o->max_tokens);
        return -1;
    }
    return 0;
}

/* Read, tokenize, encode, write. 0 or -1 (said). */
static int run(const struct opts *o, struct data_run *r)
{
    struct wd_corpus *corp = &r->corp;
    bool progress = o->progress != 0 && isatty(STDERR_FILENO);
    if (wd_corpus_files(corp, o->inputs, o->ninputs) ||
        wd_corpus_read(corp, o->chat_template ? "" : o->jsonl) ||
        wd_corpus_split(corp, o->val_docs ? 0 : o->val_fraction, o->val_docs))
        return -1;
    fprintf(stderr, "whale-data: %d files, %zu documents, %.1f MB of text\n", corp->nfiles,
            corp->ndocs, corp->bytes / 1048576.0);
    if (make_tokenizer(o, progress, r))
        return -1;
    if (o->chat_template) {
        if (instruct_encode(o, r))
            return -1;
    } else if (wd_encode_all(r->sp, corp, (int)o->threads, progress, &r->enc, &r->t_enc)) {
        return -1;
    }
    if (write_shards(o, r) || commit_output(o, r))
        return -1;
    fprintf(stderr, "whale-data: vocabulary %d; train %zu tokens (%zu documents), val %zu tokens "
            "(%zu documents); encoded %.1f MB in %.2f s (%.1f MB/s, %ld threads) -> %s\n", r->V,
            r->tt, r->td, r->vt, r->vd, corp->bytes / 1048576.0, r->t_enc,
            r->t_enc > 0 ? corp->bytes / 1048576.0 / r->t_enc : 0.0, o->threads, o->out);
    return 0;
}

/* A failed run leaves no output and the previous one as it was. */
static void data_free(struct data_run *r, bool ok)
{
    if (ok)
        wd_out_free(&r->out);
    else
        wd_out_abort(&r->out);
    json_decref(r->tr);
    json_decref(r->va);
    json_decref(r->meta);
    wd_encoded_free(r->enc, r->corp.ndocs);
    free(r->order);
    wd_spm_free(r->sp);
    free(r->model);
    wd_corpus_free(&r->corp);
    wd_tmpl_free(&r->tmpl);
}

int main(int argc, char **argv)
{
    struct opts o;
    int st = parse_args(argc, argv, &o);
    if (st >= 0)
        return st;
    if (check_out(&o))
        return 1;
    o.inputs = argv + optind;
    o.ninputs = argc - optind;
    struct data_run r = { 0 };
    int rc = run(&o, &r) ? 1 : 0;
    data_free(&r, rc == 0);
    return rc;
}
