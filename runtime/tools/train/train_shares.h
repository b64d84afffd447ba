/* Uneven data parallelism: each DP replica's share of the global batch.
 *
 * Sample order: every step reads one global batch of G consecutive samples
 * of the stream; replica r reads the contiguous slice [offset_r, offset_r +
 * share_r), offset_r being the sum of the shares of replicas 0..r-1. The
 * even split (every share G / DP) is the special case offset_r = r x G / DP,
 * the order whale-train has always used, so runs and checkpoints with even
 * splits are unchanged.
 *
 * How a share runs on its replica:
 *  - ZeRO 0 and 1 reduce gradients once per step: micro-batches of one size
 *    (the micro-batch) on every replica, share / micro-batch of them;
 *  - ZeRO 2 and 3 reduce (and gather weights) at every micro-batch, so every
 *    replica runs the same number of micro-batches (grad-accum) and the
 *    share sets the micro-batch size: share / grad-accum.
 * Either way the engine scales every replica's summed loss gradients by
 * 1 / (G x seq) (whale_engine_config.global_batch): the DP sum is the
 * global-batch mean, and the reported loss the global mean. */
#ifndef WHALE_TRAIN_SHARES_H
#define WHALE_TRAIN_SHARES_H

#include <stdbool.h>

struct train_share {
    long micro, accum; /* this replica's micro-batch and micro-batches per step */
    long offset;       /* its first sample within the global batch */
    long global;       /* samples per step over all replicas */
    bool uneven;       /* the shares differ (else: the even split) */
};

/* Replica r of n with share[] samples each. zero < 2: micro-batches of
 * `micro` samples; zero >= 2: `accum` micro-batches. Returns 0, or -1 with
 * the problem reported, naming `what` (the option or plan field). */
int train_share_of(const long *share, int n, int r, long micro, long accum, int zero,
                   const char *what, struct train_share *out);

/* `total` units over n replicas as evenly as possible: the first
 * total % n replicas get one more (8 over 3: 3, 3, 2). */
void train_share_split(long total, int n, long *out);

/* Parse "3,1" (positive integers, n entries) into out. -1 with the
 * problem reported, naming `what`. */
int train_share_parse(const char *s, int n, const char *what, long *out);

#endif
