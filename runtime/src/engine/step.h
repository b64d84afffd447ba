/* The parts of a training step, one file each; whale_engine_step (step.c)
 * strings them together, pipe.c's schedule calls the chunk passes
 * (engine_internal.h), offload_apply.c does offload's part. */
#ifndef ENGINE_STEP_H
#define ENGINE_STEP_H

#include "engine_internal.h"

/* step_comm.c: a DP collective started / waited for / polled (time in
 * flight and exposed wait), and the step's transient arena buffers. */
void   eng_comm_started(whale_engine *e);
int    eng_req_wait(whale_engine *e, void **req);
int    eng_req_poll(whale_engine *e, void **req, bool *done);
float *eng_scratch_alloc(whale_engine *e, enum whale_mem_cat cat, size_t n, bool zero);
void   eng_scratch_free(whale_engine *e, enum whale_mem_cat cat, float **p, size_t n);

/* step_weights.c: bucket b's compute weights. acquire starts the gather
 * (ZeRO 3) or widens the 16-bit params and takes a reference; ready waits
 * for them; release drops the reference (the last one frees them). */
int  eng_w_acquire(whale_engine *e, int b);
int  eng_w_ready(whale_engine *e, int b);
void eng_w_release(whale_engine *e, int b);

/* step_grads.c: bucket b's gradient. acquire: the ZeRO 2/3 buffer for
 * backward; reduce: start its DP reduction (the bucket's backward of this
 * micro-batch is done); finish: wait for it and accumulate (blocking);
 * poll: finish the reductions that completed (between layers). */
int eng_g_acquire(whale_engine *e, int b);
int eng_g_reduce(whale_engine *e, int b, bool first_micro, bool last_micro);
int eng_g_finish(whale_engine *e, int b);
int eng_g_poll(whale_engine *e);

/* step_optim.c: squared gradient norm and inf/NaN over this rank's part;
 * AdamW over its update range (grad_mul: unscale x clip); ZeRO 1/2: every
 * rank gets every updated shard; gradients zeroed for the next step. */
void eng_grad_stats(whale_engine *e, double *sumsq, bool *bad);
int  eng_apply_adamw(whale_engine *e, float grad_mul);
int  eng_allgather_weights(whale_engine *e);
/* ZeRO 1/2: wait for bucket b's (every bucket's) gather of the weights the
 * last step updated; before anything reads them. */
int  eng_w_settle(whale_engine *e, int b);
int  eng_w_settle_all(whale_engine *e);
void eng_zero_grads(whale_engine *e);

#endif
