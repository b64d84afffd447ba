/* Module-internal pieces of the checkpoint module (prefix ckpt_). */
#ifndef WHALE_CKPT_INTERNAL_H
#define WHALE_CKPT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>
#include <xxhash.h>

#include "whale/ckpt.h"

/* ---- dtypes (safetensors names) ------------------------------------------ */
/* The comm module's enum plus INT8 for quantized codes. */
#define CKPT_INT8 ((enum whale_dtype)100)
size_t      ckpt_dtype_size(enum whale_dtype t);
const char *ckpt_dtype_st(enum whale_dtype t);          /* "F32", ... or NULL */
int         ckpt_dtype_from_st(const char *s, enum whale_dtype *t);
bool        ckpt_dtype_is_float(enum whale_dtype t);

/* ---- regions: a box or a flat range of a row-major tensor ----------------- */
typedef struct ckpt_region {
    int ndim;
    int64_t shape[WHALE_CKPT_MAX_DIMS];
    bool flat;
    int64_t off[WHALE_CKPT_MAX_DIMS], cnt[WHALE_CKPT_MAX_DIMS];
    int64_t fb, fe;
} ckpt_region;

void    ckpt_region_from_piece(ckpt_region *r, const whale_ckpt_piece *p);
int64_t ckpt_region_numel(const ckpt_region *r);
int64_t ckpt_shape_numel(int ndim, const int64_t *shape);
/* Untrusted shapes: every extent >= 0, product <= CKPT_MAX_NUMEL. */
#define CKPT_MAX_NUMEL ((int64_t)1 << 60)
bool    ckpt_numel_ok(int ndim, const int64_t *shape, int64_t *out);
/* Checks the region lies inside the shape; logs with `what` on failure. */
int     ckpt_region_check(const ckpt_region *r, const char *what);

/* Contiguous runs of a region in global flat index order. */
typedef struct ckpt_runs {
    const ckpt_region *r;
    int k;                  /* last partial dim (box) */
    int64_t runlen, nruns, idx;
    int64_t mi[WHALE_CKPT_MAX_DIMS];
    int64_t stride[WHALE_CKPT_MAX_DIMS];
} ckpt_runs;
void ckpt_runs_init(ckpt_runs *it, const ckpt_region *r);
bool ckpt_runs_next(ckpt_runs *it, int64_t *gstart, int64_t *len, int64_t *lstart);

/* Calls fn(src_local, dst_local, len) for every overlap of src and dst
 * (element indices into each region's own row-major contents). */
typedef void (*ckpt_overlap_fn)(int64_t src, int64_t dst, int64_t len, void *u);
int64_t ckpt_region_overlap(const ckpt_region *src, const ckpt_region *dst,
                            ckpt_overlap_fn fn, void *u);
/* Bounding [lo, hi) of the region's flat indices. */
void ckpt_region_bounds(const ckpt_region *r, int64_t *lo, int64_t *hi);

/* ---- codecs ---------------------------------------------------------------- */
enum ckpt_enc { CKPT_ENC_RAW = 0, CKPT_ENC_BF16, CKPT_ENC_FP16, CKPT_ENC_Q8, CKPT_ENC_Q8SQRT };
const char *ckpt_enc_name(enum ckpt_enc e);
int         ckpt_enc_from_name(const char *s, enum ckpt_enc *e);
/* Bytes of the encoded form of n elements of dtype t (before zstd). */
size_t ckpt_enc_size(enum ckpt_enc e, enum whale_dtype t, int64_t n, int block);
/* Encode n elements (src of dtype t) into dst (ckpt_enc_size bytes).
 * Q8 layout: float scales[nblocks] then int8 codes[n]. */
void   ckpt_encode(enum ckpt_enc e, enum whale_dtype t, const void *src, int64_t n, int block,
                   void *dst);
/* Decode into dst (n elements of dtype t). */
void   ckpt_decode(enum ckpt_enc e, enum whale_dtype t, const void *src, int64_t n, int block,
                   void *dst);
/* Convert n elements between float dtypes (or copy when equal). */
int    ckpt_convert(enum whale_dtype from, const void *src, enum whale_dtype to, void *dst,
                    int64_t n);
/* Byte-shuffle width used before zstd for an encoding (0: none). */
int    ckpt_shuffle_width(enum ckpt_enc e, enum whale_dtype t);
void   ckpt_shuffle(const void *src, void *dst, size_t n, int w);
void   ckpt_unshuffle(const void *src, void *dst, size_t n, int w);
/* Delta chunks (delta.c): out = zigzag(cur - base) per w-byte element;
 * apply turns such differences back into the values, in place. */
bool   ckpt_delta_width_ok(size_t w);
void   ckpt_delta_encode(size_t w, const void *base, const void *cur, size_t n, void *out);
void   ckpt_delta_apply(size_t w, const void *base, void *inout, size_t n);
/* The same over a chunk's encoded bytes (ckpt_enc_size of them): each of
 * its arrays (int8: scales, codes) at its own width. Whether the encoding
 * of dtype t has deltas. */
bool   ckpt_delta_enc_ok(enum ckpt_enc e, enum whale_dtype t);
void   ckpt_delta_encode_enc(enum ckpt_enc e, enum whale_dtype t, int64_t n, int block,
                             const void *base, const void *cur, void *out);
void   ckpt_delta_apply_enc(enum ckpt_enc e, enum whale_dtype t, int64_t n, int block,
                            const void *base, void *inout);
uint16_t ckpt_f32_to_bf16(float f);
float    ckpt_bf16_to_f32(uint16_t h);
uint16_t ckpt_f32_to_f16(float f);
float    ckpt_f16_to_f32(uint16_t h);

/* ---- safetensors headers --------------------------------------------------- */
typedef struct ckpt_st_entry {
    char *name;
    enum whale_dtype dtype;
    int ndim;
    int64_t shape[WHALE_CKPT_MAX_DIMS];
    uint64_t begin, end;     /* within the data section */
} ckpt_st_entry;

/* Builds the header bytes (8-byte length + JSON padded to 8) for entries
 * laid out in order and a metadata object (json_t *, may be NULL). */
int  ckpt_st_header_aligned(const ckpt_st_entry *e, size_t n, void *metadata_json, size_t align,
                            char **out, size_t *out_len);
int  ckpt_st_header(const ckpt_st_entry *e, size_t n, void *metadata_json,
                    char **out, size_t *out_len);
/* Parses a header from an open file: entries (malloc'd), data offset. */
int  ckpt_st_read_header(int fd, const char *path, ckpt_st_entry **e, size_t *n,
                         uint64_t *data_off, uint64_t *file_size, void **metadata_json);
void ckpt_st_entries_free(ckpt_st_entry *e, size_t n);

/* ---- files ----------------------------------------------------------------- */
#define CKPT_MAX_WRITERS 16 /* whale_ckpt_config.writers */

typedef struct ckpt_fault {
    long long enospc_after; /* fail writes with ENOSPC after this many bytes (-1 off) */
    int slow_ms;            /* sleep before each file write (kill tests) */
    int kill_rank;          /* this rank SIGKILLs itself after its first shard file (-1 off) */
    long long written;
} ckpt_fault;
void ckpt_fault_from_env(ckpt_fault *f);

mode_t ckpt_file_mode(bool priv);
mode_t ckpt_dir_mode(bool priv);
int  ckpt_mkdir_p(const char *path, mode_t mode);
int  ckpt_write_all(int fd, const void *buf, size_t len, ckpt_fault *f);
int  ckpt_fsync_path(const char *path);       /* fsync a directory (or file) by path */
int  ckpt_rm_rf(const char *path);
/* Write a small file atomically: path.tmp, fsync, rename, fsync dir. */
int  ckpt_write_file_atomic(const char *dir, const char *name, const void *buf, size_t len,
                            mode_t mode, ckpt_fault *f);
/* The same without the directory fsync, for files of a save's temporary
 * directory: commit fsyncs that directory once, after the last of them
 * (every rank's index, the manifest, ...), before renaming it. */
int  ckpt_write_file_renamed(const char *dir, const char *name, const void *buf, size_t len,
                             mode_t mode, ckpt_fault *f);
int  ckpt_read_file(const char *path, char **buf, size_t *len);
/* Bytes [begin, begin + len) of fd (readio.c): *data points at them inside
 * *alloc (the caller frees it), *got says how many the file had (short at
 * its end). direct_ok: large ranges with O_DIRECT where the file system
 * allows it. 0, WHALE_ENOMEM or WHALE_EIO (errno set). */
int  ckpt_read_range(int fd, uint64_t begin, uint64_t len, bool direct_ok, void **alloc,
                     unsigned char **data, uint64_t *got);
/* Points dir/name at target (a symlink), atomically. */
int  ckpt_symlink_atomic(const char *dir, const char *name, const char *target);
char *ckpt_path(const char *a, const char *b);  /* a/b, malloc'd */
/* step-%08lld parsing; -1 when the name is not a step directory. */
int64_t ckpt_step_of(const char *name);
double ckpt_now(void);

/* ---- device memory (devcopy.c; CUDA builds) --------------------------------- */
bool  ckpt_dev_available(void);
void *ckpt_host_alloc(size_t n, bool pinned, bool *is_pinned);
void  ckpt_host_free(void *p, bool pinned);
int   ckpt_dev_to_host_async(void *dst, const void *src, size_t n, void **stream);
int   ckpt_dev_sync(void *stream);
int   ckpt_host_to_dev(void *dst, const void *src, size_t n);
void  ckpt_dev_stream_destroy(void *stream);

/* ---- hashing ---------------------------------------------------------------- */
void ckpt_hex128(const void *hash16, char out[33]);
/* A chunk's content_xxh3_128 (digest.c): the hash of its encoded bytes
 * (after zstd and unshuffle, before decoding) bound to the dtype, enc,
 * block and region that give them their meaning. */
void ckpt_content_hash(XXH128_hash_t bytes, enum whale_dtype dt, enum ckpt_enc enc, int block,
                       const ckpt_region *reg, char out[33]);
/* The manifest's own digest (stored under CKPT_DIGEST_KEY): xxh3-128 of
 * its canonical JSON without that key. 0, or -1 out of memory. */
#define CKPT_DIGEST_KEY "manifest_xxh3_128"
int  ckpt_manifest_digest(json_t *man, char out[33]);

/* Confinement of names read from a manifest ("files", chunk "file"): a
 * relative path without ".." components whose real location stays inside
 * the checkpoint directory (no symlink escape). 0 or WHALE_EDATA (logged
 * with origin). */
int  ckpt_name_confined(const char *dir, const char *name, const char *origin);
/* Opens dir/name read-only after ckpt_name_confined. */
int  ckpt_open_confined(const char *dir, const char *name, const char *origin, int *fd);

/* Elements of tensor i that the reader's chunks hold (load.c). */
int64_t ckpt_reader_held(const whale_ckpt_reader *r, size_t i);
/* "[a, b, c]" */
void ckpt_fmt_shape(char *b, size_t n, int nd, const int64_t *s);

/* whale_ckpt_resolve, optionally without logging (an empty root is normal) */
int ckpt_resolve(const char *root, const char *which, char **out, bool quiet);

#define CKPT_MANIFEST "manifest.json"
#define CKPT_MILESTONE "milestone.json" /* marker: retention keeps this step */
/* marker of a delta checkpoint: the full ones it needs (a JSON array of names) */
#define CKPT_DELTA_BASES "delta-bases.json"
#define CKPT_FORMAT   "whale-ckpt"
#define CKPT_VERSION  1

#endif
