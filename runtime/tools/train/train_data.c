/* --val-data / --eval-every / --vocab / tokenizer record (train_data.h). */
#define _GNU_SOURCE
#include "train_data.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "whale/error.h"
#include "whale/log.h"
#include "whale/envnum.h"
#include "whale/readfile.h"

void train_data_usage(FILE *f)
{
    fprintf(f,
"  --val-data FILES     held-out token shards (whale-data's val_*.bin): validation loss\n"
"  --eval-every N       validation every N steps and after the last (default 100 with\n"
"                       --val-data)\n"
"  --eval-batches K     global batches of fixed held-out samples per evaluation, spread\n"
"                       evenly over the validation data (8)\n"
"  --vocab N            the model's vocabulary (overrides the preset's Vocab), e.g. the\n"
"                       size of whale-data's tokenizer\n"
"  --tokenizer FILE     the SentencePiece model the data was made with (default:\n"
"                       whale-data.json beside the first --data file); recorded in the\n"
"                       checkpoints for whale-generate\n");
}

void train_data_opt(struct train_data *t, int which, const char *arg)
{
    int rc = 0;
    switch (which) {
    case TRAIN_DATA_VAL: t->val = arg; break;
    case TRAIN_DATA_EVERY: rc = whale_opt_long("whale-train", "--eval-every", arg, 1, 1L << 40, &t->every); break;
    case TRAIN_DATA_BATCHES: rc = whale_opt_long("whale-train", "--eval-batches", arg, 1, 1 << 20, &t->batches); break;
    case TRAIN_DATA_VOCAB: rc = whale_opt_long("whale-train", "--vocab", arg, 1, 1 << 24, &t->vocab); break;
    case TRAIN_DATA_TOKENIZER: t->tokenizer = arg; break;
    }
    if (rc)
        t->bad = true;
}

/* Bounded and non-blocking (whale/readfile.h): /dev/zero or a FIFO named
 * as the tokenizer is refused with the reason (logged) instead of being
 * read forever or blocking the open. */
static int hash_file(const char *path, char out[17], long *bytes)
{
    char *buf = NULL;
    size_t len = 0;
    if (whale_read_file(path, WHALE_READ_MAX_TOKENIZER, 0, &buf, &len))
        return -1;
    snprintf(out, 17, "%016llx", (unsigned long long)XXH64(buf, len, 0));
    free(buf);
    *bytes = (long)len;
    return 0;
}

/* whale-data.json in the folder of the first data file: the tokenizer and
 * its vocabulary (absent: a byte-level or foreign corpus, nothing to do) */
static int find_meta(struct train_data *t, const char *data)
{
    size_t len = strcspn(data, ",");
    char *first = strndup(data, len);
    if (!first)
        return -1;
    char *slash = strrchr(first, '/');
    char *meta;
    int rc = asprintf(&meta, "%.*s/whale-data.json", slash ? (int)(slash - first) : 1,
                      slash ? first : ".");
    free(first);
    if (rc < 0)
        return -1;
    json_error_t je;
    json_t *j = access(meta, F_OK) == 0 ? json_load_file(meta, 0, &je) : NULL;
    if (access(meta, F_OK) == 0 && !j) {
        whale_error("%s:%d: %s", meta, je.line, je.text);
        free(meta);
        return -1;
    }
    if (j) {
        const char *tok = json_string_value(json_object_get(j, "tokenizer"));
        if (!t->tokenizer && tok) {
            char *dir = strdup(meta);
            char *s = dir ? strrchr(dir, '/') : NULL;
            if (s)
                *s = 0;
            snprintf(t->tok_path, sizeof t->tok_path, "%s/%s", dir ? dir : ".", tok);
            free(dir);
        }
        t->tok_vocab = (long)json_integer_value(json_object_get(j, "vocab_size"));
        json_decref(j);
    }
    free(meta);
    return 0;
}

int train_data_model(struct train_data *t, const char *model_arg, const char *data,
                     struct whale_model_desc *md)
{
    if (t->vocab > 0)
        md->vocab = (int)t->vocab;
    if (t->tokenizer)
        snprintf(t->tok_path, sizeof t->tok_path, "%s", t->tokenizer);
    else if (find_meta(t, data))
        return -1;
    if (t->tok_vocab > md->vocab) {
        whale_error("the data's tokenizer has %ld tokens but model %s has Vocab=%d: give "
                    "--vocab %ld (or a model file with that Vocab)", t->tok_vocab, md->name,
                    md->vocab, t->tok_vocab);
        return -1;
    }
    /* a model file is recorded by its absolute path, a preset by name */
    char *rp = strchr(model_arg, '/') || strstr(model_arg, ".conf") ? realpath(model_arg, NULL)
                                                                     : NULL;
    snprintf(t->model_rec, sizeof t->model_rec, "%s", rp ? rp : model_arg);
    free(rp);
    t->vocab_rec = md->vocab;
    t->data_rec = data;
    if (t->tok_path[0]) {
        char *tp = realpath(t->tok_path, NULL);
        if (!tp) {
            whale_error("tokenizer %s: %s", t->tok_path, strerror(errno));
            return -1;
        }
        if (hash_file(tp, t->tok_hash, &t->tok_bytes)) {
            whale_error("tokenizer %s: cannot use it (see the line above)", t->tok_path);
            free(tp);
            return -1;
        }
        snprintf(t->tok_path, sizeof t->tok_path, "%s", tp);
        free(tp);
    }
    if (!t->val && (t->every || t->batches)) {
        whale_error("--eval-every / --eval-batches need --val-data FILES");
        return -1;
    }
    if (t->val && !t->every)
        t->every = 100;
    if (!t->batches)
        t->batches = 8;
    t->best = t->last = NAN;
    return 0;
}

int train_data_ckpt(struct train_data *t, whale_ckpt *ck)
{
    return ck && t->ckpt_json ? whale_ckpt_set_data_json(ck, t->ckpt_json) : 0;
}

int train_data_val_open(struct train_data *t, const struct whale_data_config *train_dc,
                        int64_t global_batch)
{
    /* the manifest record (built here, where main's cleanup frees it) */
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string(t->model_rec));
    json_object_set_new(j, "vocab", json_integer(t->vocab_rec));
    json_object_set_new(j, "seq", json_integer(train_dc->seq)); /* the trained window */
    if (t->tok_path[0])
        json_object_set_new(j, "tokenizer", json_pack("{sssssI}", "path", t->tok_path, "xxh64",
                                                      t->tok_hash, "bytes",
                                                      (json_int_t)t->tok_bytes));
    if (t->data_rec)
        json_object_set_new(j, "train", json_string(t->data_rec));
    if (t->val)
        json_object_set_new(j, "val", json_string(t->val));
    t->ckpt_json = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!t->ckpt_json)
        return -1;
    if (!t->val)
        return 0;
    struct whale_data_config dc = *train_dc;
    dc.paths = t->val;
    dc.masks = NULL; /* the validation files' own PATH.mask, if any */
    dc.prefetch = false; /* a few batches every N steps */
    if (whale_data_open(&dc, &t->vd)) {
        whale_error("--val-data %s cannot be used (see above)", t->val);
        return -1;
    }
    size_t bt = (size_t)dc.local_batch * dc.seq;
    t->vd_local = dc.local_batch;
    t->vd_seq = dc.seq;
    t->in = malloc(bt * sizeof(int32_t));
    t->tg = malloc(bt * sizeof(int32_t));
    t->gbatch = global_batch;
    if (!t->in || !t->tg)
        return -1;
    int64_t want = t->batches * global_batch, have = whale_data_epoch_samples(t->vd);
    if (want > have)
        whale_warn("--val-data %s holds %lld samples of seq %d; --eval-batches %ld x global "
                   "batch %lld = %lld repeats some of them", t->val, (long long)have, dc.seq,
                   t->batches, (long long)global_batch, (long long)want);
    return 0;
}

int train_data_eval(struct train_data *t, whale_engine *e, int64_t step, int64_t steps)
{
    t->fresh = false;
    if (!t->vd || (step % t->every && step != steps))
        return 0;
    double sum = 0;
    int bad = 0;
    const size_t bt = (size_t)t->vd_local * t->vd_seq;
    for (long k = 0; k < t->batches; k++) {
        double l = 0;
        /* batch k starts k/K of the way through the validation stream: the
         * fixed set covers all of it, not just its first files */
        int64_t gs = k * (whale_data_epoch_samples(t->vd) / t->batches);
        int rc = whale_data_next(t->vd, gs, t->in, t->tg);
        if (rc) { /* still take part in the collective: the others wait in it */
            memset(t->in, 0, bt * sizeof(int32_t));
            memset(t->tg, 0, bt * sizeof(int32_t));
            bad = rc;
        }
        rc = whale_engine_eval(e, t->in, t->tg, &l);
        if (rc) {
            whale_error("validation at step %lld failed: %s", (long long)step,
                        whale_strerror(rc));
            return rc;
        }
        sum += l;
    }
    if (bad) {
        whale_error("validation at step %lld: reading --val-data failed (above)",
                    (long long)step);
        return bad;
    }
    t->last = sum / t->batches;
    t->fresh = true;
    t->evals++;
    if (isfinite(t->last) && (!isfinite(t->best) || t->last < t->best)) {
        t->best = t->last;
        t->best_step = step;
    }
    return 0;
}

void train_data_metrics(const struct train_data *t, json_t *line)
{
    if (t->fresh)
        json_object_set_new(line, "val_loss", isfinite(t->last) ? json_real(t->last) : json_null());
}

const char *train_data_progress(const struct train_data *t, char *buf, size_t n)
{
    if (!t->vd || !isfinite(t->last))
        snprintf(buf, n, "%s", "");
    else
        snprintf(buf, n, "  val %.4f", t->last);
    return buf;
}

void train_data_summary(const struct train_data *t, json_t *sm)
{
    if (!t->vd)
        return;
    json_object_set_new(sm, "val_loss", isfinite(t->last) ? json_real(t->last) : json_null());
    json_object_set_new(sm, "best_val_loss", isfinite(t->best) ? json_real(t->best) : json_null());
    json_object_set_new(sm, "best_val_step", json_integer(t->best_step));
    json_object_set_new(sm, "evals", json_integer(t->evals));
}

void train_data_close(struct train_data *t)
{
    whale_data_close(t->vd);
    t->vd = NULL;
    free(t->in);
    free(t->tg);
    t->in = t->tg = NULL;
    free(t->ckpt_json);
    t->ckpt_json = NULL;
}
