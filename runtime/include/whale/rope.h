/* Rotary position embedding frequencies, with the context-extension
 * scalings Hugging Face configs name in "rope_scaling" (Llama 3.1's
 * "llama3", and "linear" position interpolation). One definition for the
 * model description, the cpu kernel and the cuda kernel, so the three agree. */
#ifndef WHALE_ROPE_H
#define WHALE_ROPE_H

#include <math.h>

#ifdef __cplusplus
extern "C" {
#endif

enum whale_rope_scaling_kind {
    WHALE_ROPE_NONE = 0, /* theta^(-2i/hd) */
    WHALE_ROPE_LINEAR,   /* every frequency divided by factor */
    WHALE_ROPE_LLAMA3,   /* low frequencies divided by factor, high ones kept, a
                          * linear blend between (Llama 3.1) */
};

struct whale_rope_scaling {
    enum whale_rope_scaling_kind kind;
    float factor;      /* linear, llama3: > 0 */
    float low_freq;    /* llama3: low_freq_factor */
    float high_freq;   /* llama3: high_freq_factor (> low_freq) */
    int orig_seq;      /* llama3: original_max_position_embeddings */
};

#ifdef __CUDACC__
#define WHALE_ROPE_FN __host__ __device__ static inline
#else
#define WHALE_ROPE_FN static inline
#endif

/* Angle per position of pair i of a head of hd (hd even, 0 <= i < hd/2), in
 * double, as transformers' _compute_*_parameters compute inv_freq. */
WHALE_ROPE_FN double whale_rope_inv_freq(double theta, const struct whale_rope_scaling *sc, int i,
                                         int hd)
{
    double f = pow(theta, -2.0 * i / hd);
    if (!sc || sc->kind == WHALE_ROPE_NONE)
        return f;
    if (sc->kind == WHALE_ROPE_LINEAR)
        return f / sc->factor;
    /* llama3: wavelengths longer than orig/low_freq are interpolated by
     * factor, shorter than orig/high_freq kept, and in between blended */
    double wavelen = 2.0 * 3.14159265358979323846 / f;
    double lo_wl = sc->orig_seq / (double)sc->low_freq;
    double hi_wl = sc->orig_seq / (double)sc->high_freq;
    if (wavelen < hi_wl)
        return f;
    if (wavelen > lo_wl)
        return f / sc->factor;
    double s = (sc->orig_seq / wavelen - sc->low_freq) / ((double)sc->high_freq - sc->low_freq);
    return (1.0 - s) * f / sc->factor + s * f;
}

#ifdef __cplusplus
}
#endif

#endif
