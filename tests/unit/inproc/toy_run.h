/* What the in-process DP tests (ranks = threads) share to train a toy model:
 * a small pseudo-Python text corpus, one rank's training loop over it, and
 * the threads that run the ranks. Include after <cmocka.h>: the helpers
 * assert on setup failures. */
#ifndef TEST_TOY_RUN_H
#define TEST_TOY_RUN_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "inproc.h"
#include "whale/data.h"
#include "whale/engine.h"

/* Writes 20000 tokens of repetitive code-like text to
 * /tmp/whale-test-TAG-PID.txt and names it in PATH: a loss drops visibly in
 * a few steps, and the same seed gives every test the same data. */
static inline void toy_text_make(char *path, size_t len, const char *tag)
{
    snprintf(path, len, "/tmp/whale-test-%s-%d.txt", tag, (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    uint64_t s = 7;
    for (int i = 0; i < 20000; i++) {
        s = s * 6364136223846793005ULL + 1;
        const char *words[] = { "def ", "return ", "self", ".x", " = ", "(", ")", ":\n    ",
                                "import ", "os", "\n", "for i in range(10):" };
        fputs(words[(s >> 33) % 12], f);
    }
    fclose(f);
}

/* The toy model (LAYERS blocks of width 32, vocabulary 256, SEQ tokens)
 * trained for STEPS steps at lr 3e-3 after 3 warm-up steps, in DP buckets of
 * 16 KiB (several even for this small model), on one thread. */
static inline struct whale_engine_config toy_engine_cfg(int layers, int seq, int steps)
{
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    c.model = (struct whale_model_desc){ .name = "t", .layers = layers, .hidden = 32, .heads = 4,
                                         .kv_heads = 4, .ffn = 128, .seq = seq, .vocab = 256,
                                         .tied_embeddings = true };
    c.seq = seq;
    c.lr = 3e-3f;
    c.warmup_steps = 3;
    c.total_steps = steps;
    c.bucket_bytes = 16 << 10;
    c.threads = 1;
    return c;
}

/* The engine of rank RANK of the DP world W (NULL: a single rank). */
static inline int toy_engine(const struct whale_engine_config *c, struct inproc_world *w, int rank,
                             whale_engine **e)
{
    struct whale_par_comm comm;
    if (w)
        inproc_comm(w, rank, &comm);
    return eng_create(c, NULL, w ? &comm : NULL, e);
}

/* STEPS steps of E on the batches DC reads, each step's loss in LOSS and,
 * where HIDDEN is non-NULL, the offload hidden fractions summed there.
 * Returns the first failure (open, read or step), 0 if none. */
static inline int toy_train(whale_engine *e, const struct whale_data_config *dc, int steps,
                            double *loss, double *hidden)
{
    whale_data *d = NULL;
    int rc = whale_data_open(dc, &d);
    if (rc)
        return rc;
    size_t n = (size_t)dc->local_batch * dc->seq;
    int32_t *in = malloc(n * 4), *tg = malloc(n * 4);
    for (int s = 0; s < steps && !rc; s++) {
        struct whale_train_state ts;
        whale_engine_get_state(e, &ts);
        struct whale_step_stats st;
        rc = whale_data_next(d, ts.samples, in, tg);
        if (!rc)
            rc = whale_engine_step(e, in, tg, &st);
        loss[s] = st.loss;
        if (hidden)
            *hidden += st.offload_hidden;
    }
    free(in);
    free(tg);
    whale_data_close(d);
    return rc;
}

/* The largest relative difference of LOSS from REF over STEPS steps. */
static inline double toy_worst_rel(const double *loss, const double *ref, int steps)
{
    double worst = 0;
    for (int s = 0; s < steps; s++) {
        double rel = fabs(loss[s] - ref[s]) / fabs(ref[s]);
        worst = rel > worst ? rel : worst;
    }
    return worst;
}

/* FN on N threads, thread r given the r-th of the N SIZE-byte records at
 * RUNS; returns once all have finished. */
static inline void toy_threads(int n, void *(*fn)(void *), void *runs, size_t size)
{
    pthread_t th[8];
    assert_true(n <= 8);
    for (int r = 0; r < n; r++)
        pthread_create(&th[r], NULL, fn, (char *)runs + (size_t)r * size);
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
}

#endif
