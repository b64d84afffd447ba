/* whale-train's data side beyond the training stream:
 *  - --vocab N: the model's vocabulary for a tokenizer of N tokens;
 *  - the tokenizer the data was made with (whale-data.json beside the first
 *    --data file, or --tokenizer FILE), checked against the model and
 *    recorded in every checkpoint's manifest ("data"), so whale-generate
 *    finds the model, vocabulary and tokenizer;
 *  - validation: --val-data FILES, --eval-every N, --eval-batches K: the
 *    mean loss over K fixed global batches of held-out samples (batch k
 *    starts at sample k * (samples / K) of the validation stream: spread
 *    over all of it, the same at every evaluation and under every layout), computed with whale_engine_eval
 *    on every rank, reported in the progress line, the metrics ("val_loss")
 *    and the summary ("best_val_loss", "best_val_step"). */
#ifndef WHALE_TRAIN_DATA_H
#define WHALE_TRAIN_DATA_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "whale/ckpt.h"
#include "whale/data.h"
#include "whale/engine.h"
#include "whale/modeldesc.h"

enum { TRAIN_DATA_VAL = 0, TRAIN_DATA_EVERY, TRAIN_DATA_BATCHES, TRAIN_DATA_VOCAB,
       TRAIN_DATA_TOKENIZER, TRAIN_DATA_N_ };

struct train_data {
    const char *val, *tokenizer, *model_arg;
    long every, batches, vocab;
    bool bad;
    /* the tokenizer record */
    char tok_path[4096], tok_hash[17], model_rec[4096];
    long tok_vocab, tok_bytes, vocab_rec;
    const char *data_rec;
    char *ckpt_json;
    /* validation */
    whale_data *vd;
    int vd_local, vd_seq;
    int32_t *in, *tg;
    int64_t gbatch;
    double last, best;
    int64_t best_step, evals;
    bool fresh; /* an evaluation ran at the step being reported */
    bool failed; /* an evaluation failed (reported): the run ends with 1 */
};

void train_data_usage(FILE *f);
/* One option (which = TRAIN_DATA_*); a bad value is reported and sets bad. */
void train_data_opt(struct train_data *t, int which, const char *arg);
/* After the model is loaded: --vocab, the tokenizer and its check against
 * the model's vocabulary, the manifest record. 0 or -1 (reported). */
int train_data_model(struct train_data *t, const char *model_arg, const char *data,
                     struct whale_model_desc *md);
/* Record the tokenizer in the checkpoints this run writes. */
int train_data_ckpt(struct train_data *t, whale_ckpt *ck);
/* Open the validation data with the training layout (every rank); also
 * records the trained window (seq) for the checkpoints. */
int train_data_val_open(struct train_data *t, const struct whale_data_config *train_dc,
                        int64_t global_batch);
/* After step `step` (1-based) of `steps`: evaluate when due (all ranks). */
int train_data_eval(struct train_data *t, whale_engine *e, int64_t step, int64_t steps);
/* Metrics line / progress / summary additions (rank 0). */
void train_data_metrics(const struct train_data *t, json_t *line);
const char *train_data_progress(const struct train_data *t, char *buf, size_t n);
void train_data_summary(const struct train_data *t, json_t *summary);
void train_data_close(struct train_data *t);

#endif
