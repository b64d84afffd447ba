/* The data area plugged into whale-train's hooks: --val-data,
 * --eval-every, --eval-batches, --vocab, --tokenizer. The logic lives in
 * train_data.c; this file maps it onto the area interface (train_areas.h)
 * plus two calls from the core: the checkpoint record once the saver is
 * open (train_setup.c) and the validation loss in the progress line
 * (train_loop.c). One run per process: the state is this file's. */
#include <math.h>
#include <string.h>

#include "train_areas.h"
#include "train_data.h"
#include "whale/log.h"

static struct train_data td;

static int opt(int which, const char *a)
{
    train_data_opt(&td, which, a);
    return td.bad ? -1 : 0;
}
static int set_val(struct train *t, const char *a) { (void)t; return opt(TRAIN_DATA_VAL, a); }
static int set_every(struct train *t, const char *a) { (void)t; return opt(TRAIN_DATA_EVERY, a); }
static int set_batches(struct train *t, const char *a) { (void)t; return opt(TRAIN_DATA_BATCHES, a); }
static int set_vocab(struct train *t, const char *a) { (void)t; return opt(TRAIN_DATA_VOCAB, a); }
static int set_tok(struct train *t, const char *a) { (void)t; return opt(TRAIN_DATA_TOKENIZER, a); }

static const struct train_opt data_opts[] = {
    { "val-data", 1, set_val },
    { "eval-every", 1, set_every },
    { "eval-batches", 1, set_batches },
    { "vocab", 1, set_vocab },
    { "tokenizer", 1, set_tok },
    { NULL, 0, NULL },
};

/* --vocab and the tokenizer check, before the engine is built */
static int configure(struct train *t)
{
    if (train_data_model(&td, t->o.model, t->o.data, &t->md))
        return 1;
    t->ec.model.vocab = t->md.vocab;
    return TRAIN_GO;
}

/* the validation data, with the layout the training data gets next */
static int setup(struct train *t)
{
    struct whale_data_config dc = { .paths = t->o.data, .format = t->o.format,
                                    .vocab = t->md.vocab, .seq = (int)t->seq,
                                    .local_batch = (int)(t->micro * t->accum),
                                    .dp_rank = t->dp_rank, .dp_size = t->dp,
                                        .global_batch = t->share.uneven ? (int)t->share.global : 0,
                                        .offset = (int)t->share.offset };
    return train_data_val_open(&td, &dc, t->gbatch) ? 1 : TRAIN_GO;
}

int train_area_data_ckpt(struct train *t)
{
    return train_data_ckpt(&td, t->ck) ? 1 : 0;
}

bool train_area_data_validating(void)
{
    return td.val != NULL;
}

const char *train_area_data_progress(char *buf, size_t n)
{
    return train_data_progress(&td, buf, n);
}

/* Every working rank after every step: the evaluation is a collective. */
static void step(struct train *t, const struct whale_step_stats *st, json_t *line)
{
    (void)st;
    struct whale_train_state ts;
    whale_engine_get_state(t->e, &ts);
    if (train_data_eval(&td, t->e, ts.step, t->o.steps))
        td.failed = true; /* reported; the run ends with status 1 */
    if (line)
        train_data_metrics(&td, line);
}

static void report(struct train *t, json_t *summary)
{
    (void)t;
    train_data_summary(&td, summary);
}

static int teardown(struct train *t, int rc)
{
    (void)t;
    bool failed = td.failed;
    train_data_close(&td);
    return failed && rc == 0 ? 1 : rc;
}

const struct train_area train_area_data = {
    .name = "data",
    .opts = data_opts,
    .usage = train_data_usage,
    .configure = configure,
    .setup = setup,
    .step = step,
    .report = report,
    .teardown = teardown,
};
