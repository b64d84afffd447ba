/* Checkpoints: sharded, asynchronous, incremental, compressed, in
 * safetensors, with resharding on load.
 *
 * The module knows nothing about the engine. A rank describes what it holds
 * as a list of tensor pieces: global name, dtype, global shape, and the part
 * of the tensor this rank owns, either
 *   - a box (per-dimension offset + count, row-major; e.g. a TP slice), or
 *   - a flat range [begin, end) of the row-major contents of a box: of the
 *     whole tensor (a ZeRO partition of a parameter), or of this rank's TP
 *     slice (ZeRO over a tensor-parallel shard, as Megatron's distributed
 *     optimizer partitions its local flat buffer),
 * plus a host pointer to that part's contents. On restore every rank asks
 * for the pieces it owns now, in any layout, and only the stored chunks
 * that overlap them are read.
 *
 * On disk (root = --whale-ckpt-dir):
 *   root/step-00000100/manifest.json          plan, step, samples, RNG, tensor index
 *   root/step-00000100/rank-00003.json        what rank 3 wrote (merged into the manifest)
 *   root/step-00000100/rank-00003/000012.safetensors   chunk bundles, each a valid
 *                                             safetensors file, global name / shape /
 *                                             offsets in __metadata__
 *   root/latest -> step-00000100              symlink, replaced atomically
 *   root/.tmp-<step>-<run>-<seq>/             a save in progress (never read)
 * Incremental: a bundle whose content hash (xxh3-128 of its chunks) equals
 * one of the previous checkpoint is hard-linked, not rewritten, so every
 * step directory stays self-contained while unchanged data is stored once;
 * removing old step directories (keep the last K) frees exactly the chunks
 * no kept checkpoint references.
 *
 * Commit protocol (no collectives needed, so a background thread can run
 * it while training uses the communicators): every rank writes its files
 * into the temporary directory, fsyncs them and publishes rank-N.json by
 * rename; rank 0 waits for all of them, writes manifest.json, renames the
 * directory to step-N, swaps `latest`, and removes checkpoints beyond K.
 * A rank that fails removes its files and leaves rank-N.failed; rank 0 then
 * removes the whole temporary directory. Status is per rank: an engine that
 * needs one decision for the job reduces whale_ckpt_poll() over its ranks.
 */
#ifndef WHALE_CKPT_H
#define WHALE_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/comm.h"   /* enum whale_dtype */
#include "whale/engine.h" /* the engine glue at the end */

#ifdef __cplusplus
extern "C" {
#endif

#define WHALE_CKPT_MAX_DIMS 8

/* What a tensor is, which decides its compression. */
enum whale_ckpt_kind {
    WHALE_CKPT_PARAM = 0,   /* weights (fp32 masters): bf16/fp16 storage optional */
    WHALE_CKPT_MOMENT1,     /* Adam first moment: int8 block quantization optional */
    WHALE_CKPT_MOMENT2,     /* Adam second moment (>= 0): uint8 of sqrt, per-block scales */
    WHALE_CKPT_OTHER,       /* always stored exactly */
};

typedef struct whale_ckpt_piece {
    const char *name;                   /* global name, e.g. "h.3.attn.qkv.weight" */
    enum whale_dtype dtype;             /* element type of data (and of the tensor) */
    enum whale_ckpt_kind kind;
    int ndim;                           /* 0 (scalar) .. WHALE_CKPT_MAX_DIMS */
    int64_t shape[WHALE_CKPT_MAX_DIMS]; /* global shape */
    int64_t offset[WHALE_CKPT_MAX_DIMS];/* box: first index per dim */
    int64_t count[WHALE_CKPT_MAX_DIMS]; /* box: extent per dim */
    bool flat;                          /* only [flat_begin, flat_end) of the box's */
    int64_t flat_begin, flat_end;       /* row-major contents */
    void *data;                         /* row-major contents of the region */
    bool device;                        /* data is CUDA device memory (CUDA builds): saved
                                         * through a pinned host buffer, restored by copy */
    bool transient;                     /* data is valid only until whale_ckpt_save returns
                                         * (e.g. an engine walk's buffers): copied before it
                                         * returns, whatever the snapshot mode */
} whale_ckpt_piece;

/* Fill a piece that covers the whole tensor / a box / a flat range. */
void whale_ckpt_piece_full(whale_ckpt_piece *p, const char *name, enum whale_dtype t,
                           int ndim, const int64_t *shape, void *data);
void whale_ckpt_piece_box(whale_ckpt_piece *p, const char *name, enum whale_dtype t,
                          int ndim, const int64_t *shape, const int64_t *offset,
                          const int64_t *count, void *data);
void whale_ckpt_piece_flat(whale_ckpt_piece *p, const char *name, enum whale_dtype t,
                           int ndim, const int64_t *shape, int64_t begin, int64_t end,
                           void *data);
/* [begin, end) of the row-major contents of the box offset/count. */
void whale_ckpt_piece_box_flat(whale_ckpt_piece *p, const char *name, enum whale_dtype t,
                               int ndim, const int64_t *shape, const int64_t *offset,
                               const int64_t *count, int64_t begin, int64_t end, void *data);
/* Kind from the naming convention: "opt.m.*" moment1, "opt.v.*" moment2,
 * "opt.*" other, everything else a parameter. */
enum whale_ckpt_kind whale_ckpt_kind_from_name(const char *name);
/* Part i of n of a piece (split along its outermost dimension with more
 * than one element, or of its flat range), e.g. to let the n data-parallel
 * replicas of a parameter each write 1/n of it. Data points into p->data.
 * Parts may be empty. */
void whale_ckpt_piece_part(const whale_ckpt_piece *p, int i, int n, whale_ckpt_piece *out);
int64_t whale_ckpt_piece_numel(const whale_ckpt_piece *p);

enum whale_ckpt_busy {
    WHALE_CKPT_BUSY_WAIT = 0, /* a save while one is in flight waits for it */
    WHALE_CKPT_BUSY_SKIP,     /* ... or is skipped (logged, *skipped = true) */
    /* ... or is postponed by the caller to its first step boundary after the
     * running save ends (whale_ckpt_in_flight; whale-train does this, the
     * ranks agreeing). whale_ckpt_save() itself waits, as with WAIT. */
    WHALE_CKPT_BUSY_DEFER,
};

/* CPU priority of the thread that hashes, encodes and writes a save (the
 * deferred snapshot copy keeps the caller's priority: the optimizer waits
 * for it). */
enum whale_ckpt_priority {
    WHALE_CKPT_PRIO_LOW = 0,  /* nice +10 over the caller's: compute threads first */
    WHALE_CKPT_PRIO_NORMAL,   /* the caller's priority */
    WHALE_CKPT_PRIO_IDLE,     /* SCHED_IDLE: only cycles no other thread wants */
};

enum whale_ckpt_snapshot {
    /* whale_ckpt_save() copies every piece to the host buffer before it
     * returns: tensors may change as soon as it returns. */
    WHALE_CKPT_SNAPSHOT_COPY = 0,
    /* The background thread copies: whale_ckpt_save() returns at once and
     * the caller must call whale_ckpt_fence() before it next changes any
     * saved tensor (e.g. before the next optimizer step), so the copy
     * overlaps forward/backward. */
    WHALE_CKPT_SNAPSHOT_DEFERRED,
};

enum whale_ckpt_wstore {
    WHALE_CKPT_WEIGHTS_EXACT = 0, /* parameters stored in their own dtype */
    WHALE_CKPT_WEIGHTS_BF16,      /* fp32 parameters stored as bf16 (rel. error <= 2^-9) */
    WHALE_CKPT_WEIGHTS_FP16,      /* fp32 parameters stored as fp16 (rel. error <= 2^-12 in range) */
    /* fp32 parameters stored as int8 with one fp32 scale per output channel
     * (a row of a 2-D or larger box chunk; ZeRO's flat shards and vectors:
     * per quant_block elements): |error| <= max|row| / 254 */
    WHALE_CKPT_WEIGHTS_INT8,
};

typedef struct whale_ckpt_config {
    const char *root;       /* checkpoint root directory (created if missing) */
    int rank, world;        /* this rank among the ranks that save (0 <= rank < world) */
    int keep;               /* keep the last K committed checkpoints (0 = all); default 3 */
    bool async;             /* persist in a background thread; default true */
    enum whale_ckpt_busy busy;
    enum whale_ckpt_snapshot snapshot;
    enum whale_ckpt_wstore weights;
    bool quantize_moments;  /* int8 block-quantized Adam moments */
    int quant_block;        /* elements per quantization block; default 128 */
    int zstd_level;         /* 0 = off, 1..19 */
    bool incremental;       /* hard-link unchanged bundles; default true */
    size_t chunk_bytes;     /* target bundle size; default 32 MiB */
    int commit_timeout_s;   /* rank 0 waits this long for the other ranks; default 600 */
    bool private_files;     /* 0600/0700 whatever the umask; default false (umask, never o+w) */
    const char *run_id;     /* same on every rank of one launch; default from the env */
    int every_steps;        /* whale_ckpt_due(): every N steps (0 = off) */
    double every_seconds;   /* ... or every T seconds (0 = off) */
    enum whale_ckpt_priority priority; /* of the persist thread; default LOW */
    int milestone_every;    /* step multiples of M are milestones (0 = none) */
    int delta_every;        /* up to K delta saves between full ones (0 = off): a
                             * delta stores each exact chunk as the difference of
                             * its bit patterns against the last full save,
                             * zstd-compressed; retention keeps the full ones
                             * that kept deltas need */
    int writers;            /* threads writing one rank's bundle files at once,
                             * each fdatasyncs the files it wrote (1..16;
                             * 0 = the default, 2) */
} whale_ckpt_config;

void whale_ckpt_config_default(whale_ckpt_config *c);
/* Override from WHALE_CKPT_DIR, _EVERY (N steps or "30s"/"10m"/"2h"), _KEEP,
 * _ASYNC (0/1), _BUSY (wait|skip|defer), _PRIORITY (low|normal|idle),
 * _MILESTONE_EVERY (steps), _DELTA (K), _WEIGHTS (exact|bf16|fp16|int8), _MOMENTS
 * (exact|int8), _ZSTD (level), _INCREMENTAL (0/1), _CHUNK_MB, _PRIVATE
 * (0/1), _COMMIT_TIMEOUT (s), _RUN_ID, _WRITERS (1..16); rank/world from
 * WHALE_RANK/WHALE_WORLD. Bad values are logged with the variable and the allowed range. */
int whale_ckpt_config_from_env(whale_ckpt_config *c);
/* The same settings from a lookup by variable name (NULL or "": unset), for
 * a tool that resolves its own sources (flags > variables > a plan) and
 * hands the values down instead of putting them into the environment. */
typedef const char *(*whale_ckpt_lookup_fn)(const char *name, void *user);
int whale_ckpt_config_from(whale_ckpt_config *c, whale_ckpt_lookup_fn get, void *user);

/* Metadata saved with a checkpoint. Strings are JSON texts (may be NULL). */
typedef struct whale_ckpt_meta {
    int64_t step;
    int64_t samples;        /* global consumed-sample counter */
    double loss_scale;
    const char *plan_json;  /* the full plan */
    const char *data_json;  /* data position beyond the sample counter */
    const char *extra_json; /* anything else the engine needs (object) */
    const void *rng;        /* this rank's RNG state (opaque bytes) */
    size_t rng_len;
} whale_ckpt_meta;

typedef struct whale_ckpt_stats {
    int64_t step;
    double stall_s;          /* time whale_ckpt_save() + fence blocked the caller */
    double snapshot_s;       /* copy to the host buffer */
    double persist_s;        /* hash + encode + write + fsync (+ commit on rank 0) */
    uint64_t bytes_logical;  /* bytes of the pieces */
    uint64_t bytes_stored;   /* size of this rank's files (after compression) */
    uint64_t bytes_written;  /* bytes actually written (linked bundles excluded) */
    uint64_t bytes_linked;   /* bytes reused from the previous checkpoint */
    int files_written, files_linked;
    uint64_t bytes_in_place; /* written with O_DIRECT straight from the snapshot (no staging copy) */
} whale_ckpt_stats;

typedef struct whale_ckpt whale_ckpt;

int  whale_ckpt_open(const whale_ckpt_config *cfg, whale_ckpt **out);
/* Start a checkpoint of these pieces (the pieces this rank is responsible
 * for writing; replicated tensors are written by one replica or split with
 * whale_ckpt_piece_part). Returns the error of a failed earlier background
 * save (once) instead of starting. */
int  whale_ckpt_save(whale_ckpt *ck, const whale_ckpt_meta *meta,
                     const whale_ckpt_piece *pieces, size_t n, bool *skipped);
/* Block until the in-flight save no longer reads the caller's tensors. */
int  whale_ckpt_fence(whale_ckpt *ck);
/* Non-blocking: the error of a finished background save (reported once), else 0. */
int  whale_ckpt_poll(whale_ckpt *ck);
/* Wait until no save is in flight; returns its status (reported once). */
int  whale_ckpt_wait(whale_ckpt *ck);
/* Whether a save is in flight (started and not yet persisted/committed on
 * this rank). */
bool whale_ckpt_in_flight(whale_ckpt *ck);
/* Make the next checkpoint this rank commits a milestone (rank 0 decides:
 * it writes the manifest). Retention keeps the newest `keep` checkpoints
 * and, besides them, every milestone. Async-signal-safe. */
void whale_ckpt_mark_milestone(whale_ckpt *ck);
/* Whether a checkpoint is due at this step (every_steps / every_seconds).
 * Time-based: evaluate on rank 0 and broadcast, clocks differ per rank. */
bool whale_ckpt_due(whale_ckpt *ck, int64_t step);
/* Figures of the last finished save of this rank. */
void whale_ckpt_last_stats(whale_ckpt *ck, whale_ckpt_stats *out);
/* Waits for the in-flight save, stops the thread; returns its status. */
int  whale_ckpt_close(whale_ckpt *ck);
/* A JSON text (object) saved as the manifest's "data" by every later save
 * whose meta has no data_json (whale_ckpt_save_engine passes none): what
 * the run trained on, e.g. whale-train's tokenizer record. NULL clears it.
 * Older readers ignore the key. */
int  whale_ckpt_set_data_json(whale_ckpt *ck, const char *json);

/* ---- restore -------------------------------------------------------------- */
/* Resolve "latest" (or "", NULL), "step-N", N, or a path, against a root or
 * a checkpoint directory; *out is malloc'd. A dangling `latest` falls back
 * to the newest step directory with a readable manifest (warned). */
int whale_ckpt_resolve(const char *root, const char *which, char **out);
/* The same without a word: WHALE_ENOENT when nothing resolves (a run that
 * resumes "latest" on its first start), for a caller that says it itself. */
int whale_ckpt_resolve_quiet(const char *root, const char *which, char **out);

typedef struct whale_ckpt_reader whale_ckpt_reader;

typedef struct whale_ckpt_info {
    int64_t step, samples;
    double loss_scale;
    int world;              /* ranks that saved */
    const char *plan_json;  /* JSON texts or NULL; owned by the reader */
    const char *data_json;
    const char *extra_json;
    const char *dir;
    size_t ntensors;
} whale_ckpt_info;

/* whale_ckpt_resolve, but "latest" fails (WHALE_ECORRUPT, logged) when a
 * newer step than the one it would pick has a manifest that does not load:
 * `whale-ckpt verify ROOT` must not report on an older step instead. */
int  whale_ckpt_resolve_strict(const char *root, const char *which, char **out);
/* Every manifest field is untrusted: names must stay inside dir, shapes,
 * offsets and sizes are bounds- and overflow-checked, and every shard file
 * listed must have a valid safetensors header and the recorded size, so a
 * restore refuses what `whale-ckpt verify` refuses (WHALE_EDATA /
 * WHALE_ECORRUPT, logged with file and tensor). */
int  whale_ckpt_reader_open(const char *dir, whale_ckpt_reader **out);
/* The same manifest checks, but damaged shard files do not stop the open:
 * for whale_ckpt_verify, which then lists every problem. */
int  whale_ckpt_reader_open_all(const char *dir, whale_ckpt_reader **out);
const whale_ckpt_info *whale_ckpt_reader_info(const whale_ckpt_reader *r);
/* Name / dtype / shape of tensor i (0 <= i < ntensors), in manifest order. */
int  whale_ckpt_reader_tensor(const whale_ckpt_reader *r, size_t i, const char **name,
                              enum whale_dtype *dtype, int *ndim, int64_t *shape);
/* Index of a tensor by name, or -1. */
long whale_ckpt_reader_find(const whale_ckpt_reader *r, const char *name);
/* RNG state saved by rank `rank` (a copy into buf; *len = its size). */
int  whale_ckpt_reader_rng(const whale_ckpt_reader *r, int rank, void *buf, size_t cap,
                           size_t *len);
/* Fill each piece's data from the checkpoint: any layout, any of the
 * float dtypes (converted), reading only the overlapping chunks, each
 * checked against its xxh3 checksum. Missing coverage, a shape mismatch,
 * a bad checksum or a truncated file is an error naming file and tensor. */
int  whale_ckpt_read(whale_ckpt_reader *r, const whale_ckpt_piece *pieces, size_t n);
/* Check every file and chunk checksum; logs each problem (file + tensor),
 * *bad = number of problems. Returns WHALE_ECORRUPT if any. */
int  whale_ckpt_verify(whale_ckpt_reader *r, int *bad);
void whale_ckpt_reader_close(whale_ckpt_reader *r);

/* ---- interchange ------------------------------------------------------------ */
/* Write every tensor, whole and decoded, into one plain safetensors file
 * (written to a temporary name, fsynced, renamed). to_dtype < 0 keeps each
 * tensor's dtype, else float tensors are converted to it; params_only
 * leaves out "opt.*". __metadata__ holds step, samples, plan. */
int whale_ckpt_consolidate(whale_ckpt_reader *r, const char *out_path, int to_dtype,
                           bool params_only);
/* Make a checkpoint at `step` under cfg->root from a plain safetensors file
 * (e.g. a model to fine-tune): one rank, tensor names kept, kinds from
 * whale_ckpt_kind_from_name. Supported dtypes: F32, BF16, F16, I32, I64, U8. */
int whale_ckpt_import_safetensors(const char *path, const whale_ckpt_config *cfg, int64_t step);
/* The same, with the file's tensors checked before anything is written:
 * tensor() for each (a non-zero return refuses the file; the callback
 * logs why), then end() (e.g. for tensors the file lacks). Either may be
 * NULL. */
typedef struct whale_ckpt_import_check {
    int (*tensor)(void *user, const char *name, enum whale_dtype dtype, int ndim,
                  const int64_t *shape);
    int (*end)(void *user);
    void *user;
} whale_ckpt_import_check;
int whale_ckpt_import_safetensors_checked(const char *path, const whale_ckpt_config *cfg,
                                          int64_t step, const whale_ckpt_import_check *chk);

/* ---- the training engine ------------------------------------------------------
 * Names on disk: parameters under their engine name, AdamW moments as
 * "opt.m.<name>" / "opt.v.<name>", fp32 masters as "opt.master.<name>".
 * The engine's scalar state (struct whale_train_state) goes into the
 * manifest's "extra" as {"train_state": {...}}. */
/* Save the pieces this rank writes (writer = true) plus the train state.
 * plan_json (may be NULL) is stored as the manifest's plan. Call between
 * steps; with SNAPSHOT_DEFERRED call whale_ckpt_fence before the next step. */
int whale_ckpt_save_engine(whale_ckpt *ck, whale_engine *e, const char *plan_json,
                           bool *skipped);
/* Restore every piece this rank holds (any layout the checkpoint was saved
 * with) and the train state. A checkpoint without a train state (imported
 * with whale_ckpt_import_safetensors) initializes the weights only: the
 * optimizer and the step counter start afresh (fine-tuning). */
int whale_ckpt_load_engine(whale_ckpt_reader *r, whale_engine *e);

#ifdef __cplusplus
}
#endif
#endif
