/* The saver's state, shared by save.c (persist one rank), saver.c (jobs,
 * thread, API) and commit.c (rank 0: manifest, rename, latest, GC). */
#ifndef WHALE_CKPT_SAVE_INTERNAL_H
#define WHALE_CKPT_SAVE_INTERNAL_H

#include "ckpt_internal.h"
#include "whale/nameidx.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <zstd.h>

struct job_piece {
    char *name;
    enum whale_dtype dtype;
    enum whale_ckpt_kind kind;
    ckpt_region reg;
    size_t bytes;
    const void *user;          /* caller's pointer */
    bool device;               /* user is CUDA device memory */
    const unsigned char *src;  /* what persist reads: snapshot buffer or user */
};

struct job {
    int64_t step, samples;
    double loss_scale;
    char *plan, *data, *extra;
    unsigned char *rng;
    size_t rng_len;
    struct job_piece *p;
    size_t n;
    unsigned seq;
};

/* A bundle of the previous save that can be hard-linked. */
struct prev_bundle {
    char key[33];
    char *path;      /* relative to the root: step-N/rank-R/F */
    char *tmp_path;  /* .tmp-.../rank-R/F while rank 0 has not committed yet */
    uint64_t bytes;
    json_t *chunks;  /* chunk records (file field rewritten on reuse) */
};

struct persist {
    int64_t step;
    char tmp_name[256], final_name[64];
    char *tmpdir, *finaldir;
    mode_t fmode, dmode;
    bool no_direct;        /* the file system refused O_DIRECT: buffered writes */
};

/* A run of file bytes: from the stage buffer, or straight from a chunk's
 * page-aligned source (zero copy). With O_DIRECT every extent but the last
 * starts and ends on a block; the last is rounded up (zero padding staged)
 * and the file cut back to `total`. */
struct ckpt_extent {
    uint64_t off;
    size_t len;
    const unsigned char *src;
};

/* One bundle's file, as extents over an aligned stage buffer (writer.c). */
struct ckpt_image {
    unsigned char *buf;    /* stage: header, small and unaligned chunks, padding */
    size_t cap;
    struct ckpt_extent *ext;
    size_t next, ext_cap;
    size_t total;          /* file bytes */
    bool direct;
    char fname[128];       /* relative to the save's temporary directory */
};

/* Background writers of bundle images (writer.c): `nth` threads take
 * filled images in submission order, each writes and fdatasyncs its file;
 * the save thread fills the next of nth + 1 images meanwhile. */
struct ckpt_writer {
    whale_ckpt *ck;
    struct persist *ps;
    struct ckpt_image img[CKPT_MAX_WRITERS + 1];
    int state[CKPT_MAX_WRITERS + 1]; /* CKPT_IMG_FREE / _FILLING / _QUEUED / _WRITING */
    unsigned seq[CKPT_MAX_WRITERS + 1]; /* submission order of queued images */
    unsigned next_seq;
    int nimg, nth, started;
    int err;               /* first write error; later images are not written */
    bool stop, inline_only;
    pthread_t th[CKPT_MAX_WRITERS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* `threads` writer threads (1..CKPT_MAX_WRITERS; 0: the caller writes each
 * image inside ckpt_writer_submit). */
void ckpt_writer_init(struct ckpt_writer *w, whale_ckpt *ck, struct persist *ps, int threads);
/* A free image with a stage of at least `stage_bytes` and room for
 * `extents` extents, emptied; waits while every image is queued or being
 * written (NULL: out of memory). */
struct ckpt_image *ckpt_writer_image(struct ckpt_writer *w, size_t stage_bytes, size_t extents);
bool ckpt_writer_direct_ok(struct ckpt_writer *w);
/* Hands a filled image to the writers; returns the first write error so
 * far (the image is then dropped). */
int  ckpt_writer_submit(struct ckpt_writer *w, struct ckpt_image *im);
/* Waits for every image, stops the threads, frees the images; the first
 * write or fdatasync error. */
int  ckpt_writer_finish(struct ckpt_writer *w);

#define CKPT_DIRECT_ALIGN 4096
#define CKPT_DIRECT_MIN (256u << 10) /* smaller bundles: buffered, 8-byte aligned */
#define CKPT_ZC_MIN (64u << 10)      /* smaller chunks are staged, not written in place */

/* Where a piece starts in the snapshot buffer: page-aligned, so that its
 * bytes can be written with O_DIRECT without a staging copy. */
static inline size_t ckpt_snap_stride(size_t bytes)
{
    return (bytes + CKPT_DIRECT_ALIGN - 1) & ~(size_t)(CKPT_DIRECT_ALIGN - 1);
}

struct whale_ckpt {
    whale_ckpt_config cfg;
    char *root, *run_id;
    char *data_json;  /* whale_ckpt_set_data_json: default manifest "data" */
    ckpt_fault fault;
    ZSTD_CCtx *zc;

    pthread_t th;
    bool have_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy;        /* a job is in flight */
    bool has_job;     /* the worker has not picked it up */
    bool snap_done;   /* the job no longer reads the caller's tensors */
    bool snap_coop;   /* deferred host snapshot in slices (snapshot.c) */
    atomic_size_t snap_next; /* next slice to take */
    size_t snap_slices, snap_copied; /* copied: under mu */
    bool stop;
    int pending_err;  /* error of a finished job, not reported yet */
    struct job job;
    whale_ckpt_stats cur, last;

    unsigned char *buf;        /* snapshot buffer, pinned when pieces live on a GPU */
    size_t cap;
    bool buf_pinned;
    void *stream;              /* CUDA stream of the device-to-host copies */
    unsigned seq;

    struct prev_bundle *prev;
    size_t nprev;
    struct whale_nameidx prev_idx; /* bundle key -> index into prev */

    double last_save_time;
    /* delta saves (cfg.delta_every): the last full save's snapshot (the
     * snapshot buffer of that save, swapped out, same layout), its step and
     * layout signature, and how many deltas followed it */
    unsigned char *base;
    size_t base_cap;
    bool base_pinned, base_valid;
    int64_t base_step;
    uint64_t base_sig;
    int since_full;
    bool delta_now;   /* the job being persisted is a delta against base */
    atomic_bool milestone_req; /* whale_ckpt_mark_milestone: the next commit is one */
};

/* Lowers the calling thread's CPU priority to `prio` (saver.c). */
void ckpt_lower_priority(enum whale_ckpt_priority prio);

int  ckpt_persist_rank(whale_ckpt *ck, struct job *j, struct persist *ps, whale_ckpt_stats *st);
void ckpt_prev_clear(whale_ckpt *ck);
void ckpt_prev_from_latest(whale_ckpt *ck);
/* rank 0: wait for every rank, write the manifest, rename, latest, GC */
int  ckpt_commit(whale_ckpt *ck, struct job *j, struct persist *ps);
/* after a failure: remove this rank's files, leave rank-N.failed (rank 0:
 * remove the whole temporary directory) */
void ckpt_abort_rank(whale_ckpt *ck, struct persist *ps, int err);
void ckpt_gc(whale_ckpt *ck, const char *keep_name, unsigned seq);
/* Deferred snapshot in slices shared by the save thread and the fence
 * (snapshot.c). prepare points the pieces at the buffer; false when a
 * piece is device memory (the stream path copies those). */
bool ckpt_snap_prepare(whale_ckpt *ck, struct job *j);
void ckpt_snap_help(whale_ckpt *ck);

#endif
