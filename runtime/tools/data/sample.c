/* Greedy and temperature / top-k / top-p sampling (sample.h). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int wg_sampler_init(struct wg_sampler *s, double temperature, int top_k, double top_p,
                    uint64_t seed, int V)
{
    s->temperature = temperature;
    s->top_k = top_k > 0 && top_k < V ? top_k : V;
    s->top_p = top_p > 0 && top_p < 1 ? top_p : 1;
    s->state = seed;
    s->idx = malloc(sizeof(int) * V);
    s->w = malloc(sizeof(double) * V);
    return s->idx && s->w ? 0 : -1;
}

void wg_sampler_free(struct wg_sampler *s)
{
    free(s->idx);
    free(s->w);
}

/* descending probability, then ascending id: a total order, so ties
 * cannot make runs differ */
static const float *g_p;
static int by_prob(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (g_p[i] != g_p[j])
        return g_p[i] < g_p[j] ? 1 : -1;
    return i - j;
}

int wg_sample(struct wg_sampler *s, const float *p, int V)
{
    if (s->temperature <= 0) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (p[v] > p[best])
                best = v;
        return best;
    }
    for (int v = 0; v < V; v++)
        s->idx[v] = v;
    g_p = p;
    qsort(s->idx, V, sizeof(int), by_prob);
    /* softmax(logits / T) restricted to the top k = p^(1/T), renormalized */
    int K = s->top_k;
    double sum = 0;
    for (int k = 0; k < K; k++) {
        double q = p[s->idx[k]];
        s->w[k] = q > 0 ? exp(log(q) / s->temperature) : 0;
        sum += s->w[k];
    }
    if (!(sum > 0))
        return s->idx[0];
    if (s->top_p < 1) {
        /* the shortest run of likeliest tokens whose share reaches top_p
         * (at least one), then renormalized over it */
        double cut = s->top_p * sum, acc = 0;
        int k = 0;
        while (k < K && acc < cut)
            acc += s->w[k++];
        K = k > 0 ? k : 1;
        sum = acc > 0 ? acc : s->w[0];
        if (!(sum > 0))
            return s->idx[0];
    }
    double r = (double)(splitmix(&s->state) >> 11) * 0x1.0p-53 * sum;
    for (int k = 0; k < K; k++) {
        r -= s->w[k];
        if (r < 0)
            return s->idx[k];
    }
    return s->idx[K - 1];
}
