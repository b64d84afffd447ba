/* Picking the next token from a probability row: greedy (argmax), or
 * temperature, top-k and top-p (nucleus) sampling from a seeded generator
 * (the same seed and inputs give the same text), applied in the order
 * Hugging Face's generate() applies them. */
#ifndef WHALE_DATA_SAMPLE_H
#define WHALE_DATA_SAMPLE_H

#include <stdint.h>

struct wg_sampler {
    double temperature; /* <= 0: greedy */
    int top_k;          /* 0: the whole vocabulary */
    double top_p;       /* nucleus: the likeliest tokens holding this share of the
                         * tempered top-k mass (1: all of them) */
    uint64_t state;     /* splitmix64 */
    int *idx;           /* scratch (V) */
    double *w;          /* scratch (V) */
};

int wg_sampler_init(struct wg_sampler *s, double temperature, int top_k, double top_p,
                    uint64_t seed, int V);
/* probs (V): a distribution (the model's softmax at temperature 1). */
int wg_sample(struct wg_sampler *s, const float *probs, int V);
void wg_sampler_free(struct wg_sampler *s);

#endif
