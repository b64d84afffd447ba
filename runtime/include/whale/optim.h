/* Optimizer pieces of the training engine: AdamW with decoupled weight
 * decay, global-norm gradient clipping, cosine learning-rate schedule with
 * linear warmup, and the dynamic loss scaler of mixed precision.
 *
 * All functions work on plain fp32 arrays so the engine can run them on a
 * ZeRO shard (a contiguous slice of the flat parameter space) as easily as
 * on whole tensors. Deterministic: no randomness, fixed summation order. */
#ifndef WHALE_OPTIM_H
#define WHALE_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/comm.h" /* enum whale_dtype */

#ifdef __cplusplus
extern "C" {
#endif

struct whale_adamw {
    float lr;           /* current learning rate (set by the schedule) */
    float beta1, beta2; /* 0.9, 0.95 */
    float eps;          /* 1e-8 */
    float weight_decay; /* decoupled: w -= lr * wd * w (only where decay is asked) */
};

/* One AdamW update of n elements at optimizer step t (1-based, for the bias
 * correction). grad is read only, already unscaled and clipped by the caller
 * through grad_mul (1 when nothing to do). m, v: fp32 moments.
 * Shapes: w, g, m, v all (n). */
void whale_adamw_update(const struct whale_adamw *o, int64_t t, float *w, const float *g,
                        float *m, float *v, size_t n, float grad_mul, bool decay);

/* The same update for optimizer offload, on host threads and vectorised
 * (AVX-512 or AVX2 chosen at run time; WHALE_SIMD=scalar|avx2 forces a
 * narrower path). Bit-identical to whale_adamw_update. */
enum whale_simd { WHALE_SIMD_SCALAR = 0, WHALE_SIMD_AVX2, WHALE_SIMD_AVX512 };
void whale_adamw_update_host(const struct whale_adamw *o, int64_t t, float *w, const float *g,
                             float *m, float *v, size_t n, float grad_mul, bool decay);
enum whale_simd whale_adamw_simd(void);      /* the path whale_adamw_update_host takes */
enum whale_simd whale_adamw_best_simd(void); /* the widest this CPU runs */
/* With an explicit path (clamped to what the CPU runs): tests, benchmarks. */
void whale_adamw_update_simd(enum whale_simd s, const struct whale_adamw *o, int64_t t, float *w,
                             const float *g, float *m, float *v, size_t n, float grad_mul,
                             bool decay);
const char *whale_simd_name(enum whale_simd s); /* "scalar", "avx2", "avx512" */
/* Mixed precision: AdamW on the fp32 master weights, then the 16-bit
 * params the model computes with = round(master) (param_dtype
 * WHALE_BFLOAT16 or WHALE_FLOAT16; param may be NULL, or param_dtype
 * WHALE_FLOAT32, for no cast). One function over explicit buffers so the
 * update can run wherever the master and moments live (host offload).
 * Shapes: master, g, m, v, param all (n). */
void whale_adamw_update_mixed(const struct whale_adamw *o, int64_t t, float *master,
                              const float *g, float *m, float *v, uint16_t *param,
                              enum whale_dtype param_dtype, size_t n, float grad_mul, bool decay);
/* The same with the host AdamW (whale_adamw_update_host: vectorised, host
 * threads): optimizer offload at 16-bit precision. Bit-identical to
 * whale_adamw_update_mixed. Shapes as above. */
void whale_adamw_update_mixed_host(const struct whale_adamw *o, int64_t t, float *master,
                                   const float *g, float *m, float *v, uint16_t *param,
                                   enum whale_dtype param_dtype, size_t n, float grad_mul,
                                   bool decay);

/* One tensor of a multi-tensor host AdamW step. Shapes: w, g, m, v (n)
 * fp32; p16 (n) 16-bit copy of w written in the same pass, or NULL. */
struct whale_adamw_tensor {
    float *w;
    const float *g;
    float *m, *v;
    uint16_t *p16;
    size_t n;
    bool decay;
};
/* One AdamW step at step t over nt tensors in one parallel region of host
 * threads (blocks of all tensors handed out dynamically), grad_mul folded
 * in (clip coefficient x 1/loss scale); where p16 is set it receives
 * round(w) as param_dtype (WHALE_BFLOAT16 or WHALE_FLOAT16; WHALE_FLOAT32:
 * no cast) in the same pass. Bit-identical to whale_adamw_update_mixed on
 * each tensor, for any thread count. Returns 0, WHALE_EINVAL (bad dtype,
 * t < 1, NULL tensors) or WHALE_ENOMEM. The _simd form takes the path
 * explicitly (clamped to what the CPU runs): tests, benchmarks. */
int whale_adamw_multi_host(const struct whale_adamw *o, int64_t t,
                           const struct whale_adamw_tensor *ts, int nt,
                           enum whale_dtype param_dtype, float grad_mul);
int whale_adamw_multi_simd(enum whale_simd s, const struct whale_adamw *o, int64_t t,
                           const struct whale_adamw_tensor *ts, int nt,
                           enum whale_dtype param_dtype, float grad_mul);

/* Sum of squares of g (n), accumulated in double. */
double whale_sumsq(const float *g, size_t n);
/* out[i] = whale_sumsq(g[i], n[i]) for np tensors, bit for bit, in one
 * parallel region; 0 on success, WHALE_ENOMEM. */
int whale_sumsq_multi(const float *const *g, const int64_t *n, int np, double *out);
/* Multiplier that brings a gradient of global norm `norm` to at most
 * max_norm (1 when max_norm <= 0 or norm is small enough). */
float whale_clip_coef(double norm, float max_norm);

/* Cosine schedule: linear warmup from 0 over `warmup` steps, then cosine
 * from lr_max down to lr_min at step `total`; constant lr_min after.
 * step is 0-based (the step about to run). */
struct whale_lr_schedule {
    float lr_max, lr_min;
    int64_t warmup, total;
};
float whale_lr_at(const struct whale_lr_schedule *s, int64_t step);

/* Dynamic loss scaling (Micikevicius et al.): multiply the loss by `scale`;
 * when a gradient holds inf/NaN skip the step and divide the scale by
 * `backoff`; after `growth_interval` clean steps in a row multiply it by
 * `growth`. With enabled=false the scale stays 1 and nothing is skipped
 * (fp32 needs no scaling). */
struct whale_loss_scaler {
    bool enabled;
    float scale;           /* current scale, e.g. 65536 */
    float growth, backoff; /* 2, 2 */
    int growth_interval;   /* 2000 */
    float min_scale, max_scale;
    int good_steps;        /* clean steps since the last change */
    int64_t skipped;       /* steps skipped in total */
};
void whale_loss_scaler_init(struct whale_loss_scaler *s, bool enabled, float init_scale,
                            int growth_interval);
/* True when any of the n values is inf or NaN. */
bool whale_has_inf_nan(const float *g, size_t n);
/* Record the outcome of a step (found_inf agreed by all ranks). Returns
 * true when the optimizer must skip this step. */
bool whale_loss_scaler_update(struct whale_loss_scaler *s, bool found_inf);

#ifdef __cplusplus
}
#endif
#endif
