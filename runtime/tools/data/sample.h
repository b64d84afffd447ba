/* Picking the next token from a probability row: greedy (argmax), or
 * temperature + top-k sampling from a seeded generator (the same seed and
 * inputs give the same text). */
#ifndef WHALE_DATA_SAMPLE_H
#define WHALE_DATA_SAMPLE_H

#include <stdint.h>

struct wg_sampler {
    double temperature; /* <= 0: greedy */
    int top_k;          /* 0: the whole vocabulary */
    uint64_t state;     /* splitmix64 */
    int *idx;           /* scratch (V) */
    double *w;          /* scratch (V) */
};

int wg_sampler_init(struct wg_sampler *s, double temperature, int top_k, uint64_t seed, int V);
/* probs (V): a distribution (the model's softmax at temperature 1). */
int wg_sample(struct wg_sampler *s, const float *probs, int V);
void wg_sampler_free(struct wg_sampler *s);

#endif
