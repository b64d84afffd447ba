/* Training data: memory-mapped token files, split across data-parallel
 * ranks, with a background prefetch thread.
 *
 * Formats (detected from the content, or forced):
 *  - llm.c token shards: 256 x int32 header (magic 20240520, version 1,
 *    token count), then uint16 tokens; version 2 (whale-data's for
 *    vocabularies over 65536: Llama 3, Qwen2) has uint32 tokens;
 *  - raw bytes: every byte is a token (vocabulary 256).
 * Several files (comma-separated) are concatenated in the given order.
 *
 * Position: one global sample counter. Global sample g is the window of
 * seq+1 tokens starting at token (g * seq) mod (ntokens - seq - 1) of the
 * concatenated stream (inputs = first seq, targets = last seq). A step
 * consumes global_batch samples; data-parallel rank d of D takes samples
 * [d*B_d, (d+1)*B_d) of each step's global batch, so no two ranks read the
 * same sample and a run resumed (or re-shaped to another DP degree) at the
 * same counter continues with exactly the same samples. */
#ifndef WHALE_DATA_H
#define WHALE_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WHALE_LLMC_MAGIC 20240520
#define WHALE_LLMC_HEADER_INTS 256

enum whale_data_format { WHALE_DATA_AUTO = 0, WHALE_DATA_LLMC, WHALE_DATA_BYTES };

typedef struct whale_data whale_data;

struct whale_data_config {
    const char *paths;      /* one file or a comma-separated list */
    enum whale_data_format format;
    int vocab;              /* tokens must be < vocab (checked at open) */
    int seq;                /* T */
    int local_batch;        /* samples this rank reads per step, B_d */
    int dp_rank, dp_size;   /* this rank's slice of the global batch */
    bool prefetch;          /* background thread prepares the next batch */
    /* Uneven data parallelism: with global_batch > 0 the DP replicas read
     * shares of different sizes and this rank reads samples [offset, offset
     * + local_batch) of every global batch of global_batch samples. 0 keeps
     * the even split: offset dp_rank x local_batch, global batch
     * local_batch x dp_size (the same samples in the same order). */
    int global_batch, offset;
    /* Loss masks (instruction data): one byte per token of the matching data
     * file, 0 = the token is not a target (its target id becomes -1, which
     * the engine ignores with loss_mask), 1 = it counts. NULL: each data
     * file's PATH.mask when it exists (whale-data --jsonl writes it), none
     * otherwise; else a comma-separated list, one per data file. */
    const char *masks;
};

/* Whether any data file of the list has a PATH.mask beside it. */
bool whale_data_mask_beside(const char *paths);

/* Opens, maps and validates every file; errors name the file and the
 * problem (missing, empty, wrong magic, truncated, token >= vocab, fewer
 * than seq+1 tokens). */
int whale_data_open(const struct whale_data_config *cfg, whale_data **out);
void whale_data_close(whale_data *d);

/* Fill inputs/targets (local_batch x seq, int32) with this rank's samples
 * of the step that starts at global sample `global_sample`
 * (= step * global batch), then, when prefetching, start preparing
 * the next step's batch. */
int whale_data_next(whale_data *d, int64_t global_sample, int32_t *inputs, int32_t *targets);

int64_t whale_data_tokens(const whale_data *d);
/* Samples per epoch: how many windows the stream offers before wrapping. */
int64_t whale_data_epoch_samples(const whale_data *d);

#ifdef __cplusplus
}
#endif
#endif
