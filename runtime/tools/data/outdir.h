/* whale-data's output: every file is written to a temporary name in the
 * output directory and renamed into place only when all of them are
 * complete (fsync'd), so a failed or interrupted run leaves no half-written
 * shard and an earlier output stays intact until the new one is whole. */
#ifndef WHALE_DATA_OUTDIR_H
#define WHALE_DATA_OUTDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct wd_out {
    char *dir;
    char **tmp, **name;
    int n;
};

/* Create dir (and its parents) if missing. */
int wd_out_init(struct wd_out *o, const char *dir);
/* A new temporary file for `name` (a plain file name inside the dir). */
FILE *wd_out_open(struct wd_out *o, const char *name);
/* Flush, fsync and close a file from wd_out_open; reports write errors. */
int wd_out_close(struct wd_out *o, FILE *f);
/* Write a whole buffer as `name`. */
int wd_out_write(struct wd_out *o, const char *name, const void *buf, size_t len);
/* Rename every temporary into place. */
int wd_out_commit(struct wd_out *o);
/* Remove the temporaries (after a failure) and free. */
void wd_out_abort(struct wd_out *o);
void wd_out_free(struct wd_out *o);

/* An llm.c token shard: 256 int32 header (magic 20240520, version 1,
 * token count), then uint16 tokens (ids must be < 65536); wide: version 2,
 * uint32 tokens (vocabularies over 65536: Llama 3, Qwen2; whale-train
 * reads both). */
int wd_write_shard(struct wd_out *o, const char *name, const int32_t *const *parts,
                   const size_t *lens, size_t nparts, bool wide);

#endif
