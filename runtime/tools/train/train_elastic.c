/* whale-train's recovery loop.
 *
 * Setup (collective over every task, spares included, when the step is
 * elastic: it has spare tasks, or WHALE_ELASTIC=1, or WHALE_REDUNDANCY_EVERY
 * is set): every task tells the others its node, logical rank and the size
 * of its copy; all compute the same holder table (whale_red_holders);
 * holders register memory for the copies they hold and the keys are
 * exchanged (whale_region_exchange). Spares then wait in whale_spare_wait.
 *
 * Every completed step: snapshot (two local rollback images) and, every K
 * steps, a non-blocking put of the unique state into the holder.
 *
 * A failed step: whale_elastic_recover agrees on the failed set and the
 * decision and rebuilds the groups; then every rank of the new world
 *   1. destroys and recreates its engine on the new groups (a shrink: more
 *      micro-batches per replica, same global batch and sample order);
 *   2. agrees on the rollback step R: the newest step that every survivor
 *      holds locally and every replacement can get (held copy or replica);
 *   3. restores R (survivors: own image; replacement: the holder's copy +
 *      the DP-replicated pieces from a surviving replica; after a shrink
 *      that moves the ZeRO shards: re-cut from the survivors' images and
 *      the dropped replicas' held copies), or, when no such
 *      R exists (a rank and the holder of its copy both lost), loads the
 *      last checkpoint from disk inside the running step;
 *   4. redoes from R; the recovery record (log line + metrics JSONL) is
 *      written when the interrupted step has been computed again. */
#define _GNU_SOURCE
#include "train_elastic.h"
#include "train_report.h"
#include "train_shares.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "whale/ckpt.h"
#include "whale/elastic.h"
#include "whale/env.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/redundancy.h"
#include "whale/clock.h"
#include "whale/outfile.h"

struct train_elastic {
    whale_ctx *ctx;
    whale_ckpt **ck;         /* fenced before the optimizer (deferred snapshot) */
    double ck_fence_s;       /* time those fences waited, not yet reported */
    struct whale_fault_plan faults;
    int fault_rank;          /* the logical rank this task was started with */
    bool elastic;
    int every;
    bool adaptive;           /* WHALE_REDUNDANCY_EVERY unset or auto: K follows the cost */
    int kmin;                /* auto:MIN: the adaptation never picks a K below MIN */
    double t_last;           /* end of the previous step (adaptive K) */
    double avg_step, avg_cost; /* moving averages: iteration, one refresh */
    bool promoted;
    bool reshaped;           /* a shrink happened: the holder tables below are stale */
    struct whale_membership_event ev;

    /* tables from the setup exchange (indexed by logical rank at setup) */
    int world, ntasks, zero;
    int *holder_task;        /* task holding rank r's copy, -1 none */
    size_t *slot_bytes;      /* rank r's remote slot */
    size_t *hold_off;        /* offset of rank r's 2 slots in its holder's region */
    unsigned char *hold;     /* my region: copies I hold */
    size_t hold_len;
    whale_region *region;
    whale_remote **remotes;  /* [ntasks] */

    whale_red *red;
    int64_t last_done;       /* last completed step */
    double snap_s, snap_bytes;
    struct whale_red_stats prev; /* the store's counters at the last snapshot */
    bool warned_target;
    double peak;             /* mine (set before te_start), then rank 0's after the exchange */

    /* a recovery whose redo is still running */
    bool pending;
    struct whale_recovery_report rep;
    double redo_t0;
    FILE *mf;
};

static const char *detect_name(enum whale_detect d)
{
    switch (d) {
    case WHALE_DETECT_CRASH: return "crash";
    case WHALE_DETECT_NODE: return "node";
    case WHALE_DETECT_LINK: return "link";
    case WHALE_DETECT_HANG: return "hang";
    }
    return "?";
}

static void on_phase(enum whale_engine_phase ph, int64_t step, void *user)
{
    struct train_elastic *te = user;
    static const enum whale_fault_phase map[] = {
        [WHALE_ENGINE_FORWARD] = WHALE_FAULT_FORWARD,
        [WHALE_ENGINE_BACKWARD] = WHALE_FAULT_BACKWARD,
        [WHALE_ENGINE_COLLECTIVE] = WHALE_FAULT_COLLECTIVE,
        [WHALE_ENGINE_OPTIMIZER] = WHALE_FAULT_OPTIMIZER,
    };
    if (te->elastic)
        whale_elastic_progress(te->ctx); /* the hang detector watches this */
    whale_fault_point(&te->faults, te->fault_rank, step, map[ph]);
    /* a deferred checkpoint snapshot may still read the weights and moments:
     * the optimizer is the first to change them (train_loop.c) */
    if (ph == WHALE_ENGINE_OPTIMIZER && te->ck && *te->ck) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        whale_ckpt_fence(*te->ck);
        clock_gettime(CLOCK_MONOTONIC, &b);
        te->ck_fence_s += (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    }
}

int te_init(struct train_elastic **out, whale_ctx *ctx)
{
    struct train_elastic *te = calloc(1, sizeof *te);
    if (!te)
        return 1;
    te->ctx = ctx;
    te->fault_rank = whale_rank(ctx);
    te->last_done = -1;
    if (whale_fault_from_env(&te->faults) || whale_red_every_from_env(1, &te->every)) {
        free(te);
        return 2;
    }
    const char *el = whale_knob_getenv("WHALE_ELASTIC"), *ev = whale_knob_getenv("WHALE_REDUNDANCY_EVERY");
    te->adaptive = !ev || !*ev || !strncmp(ev, "auto", 4);
    te->kmin = te->adaptive && ev && ev[4] == ':' ? atoi(ev + 5) : 1; /* checked by the library */
    te->elastic = whale_ntasks(ctx) > whale_world_size(ctx) || (el && !strcmp(el, "1")) ||
                  (ev && *ev && te->every > 0);
    *out = te;
    return 0;
}

/* A holder's memory is never freed before the process ends (an owner's
 * last put may still be on its way after a failure); its registration is
 * dropped before whale_finalize, which requires it. */
static unsigned char *kept_hold;

void te_free(struct train_elastic *te, bool clean)
{
    if (!te)
        return;
    whale_red_destroy(te->red); /* waits for this rank's refresh in flight */
    te->red = NULL;
    /* every owner's last refresh has landed before any holder lets go
     * (spares let go after whale_spare_wait returned: after this barrier) */
    if (clean && te->elastic && te->remotes && whale_rank(te->ctx) >= 0)
        whale_barrier(whale_world(te->ctx));
    if (te->remotes) {
        for (int t = 0; t < te->ntasks; t++)
            whale_remote_free(te->remotes[t]);
        free(te->remotes);
    }
    whale_region_free(te->region);
    kept_hold = te->hold;
    free(te->holder_task);
    free(te->slot_bytes);
    free(te->hold_off);
    free(te);
}

bool te_elastic(const struct train_elastic *te)
{
    return te->elastic;
}

bool te_promoted(const struct train_elastic *te)
{
    return te->promoted;
}

void te_set_peak(struct train_elastic *te, double gflops)
{
    te->peak = gflops;
}

double te_peak(const struct train_elastic *te)
{
    return te->peak;
}

/* ---- setup exchange ------------------------------------------------------- */
static uint64_t node_hash(void)
{
    const char *n = getenv(WHALE_ENV_NODE);
    char host[256];
    if (!n || !*n) {
        if (gethostname(host, sizeof host))
            snprintf(host, sizeof host, "?");
        host[sizeof host - 1] = 0;
        n = host;
    }
    return XXH64(n, strlen(n), 0);
}

/* per task: node hash, logical rank, copy size, ZeRO stage, peak (double bits) */
#define NX 5

static int te_exchange(struct train_elastic *te, whale_ctx *ctx, size_t my_slot, int zero)
{
    whale_group *all = whale_all_tasks(ctx);
    const int n = whale_ntasks(ctx), me = whale_task_id(ctx);
    struct whale_grid g;
    whale_ctx_grid(ctx, &g);
    const int world = whale_grid_world(&g);
    int64_t peak_bits = 0;
    memcpy(&peak_bits, &te->peak, sizeof peak_bits);
    int64_t mine[NX] = { (int64_t)node_hash(), whale_rank(ctx), (int64_t)my_slot, zero, peak_bits };
    int64_t *v = calloc((size_t)n * NX, sizeof *v);
    int *rank_node = calloc((size_t)world, sizeof(int)), *spare_node = calloc((size_t)n, sizeof(int));
    int *spare_task = calloc((size_t)n, sizeof(int)), *hold = calloc((size_t)world, sizeof(int));
    uint64_t *nodes = calloc((size_t)n, sizeof(uint64_t));
    te->holder_task = calloc((size_t)world, sizeof(int));
    te->slot_bytes = calloc((size_t)world, sizeof(size_t));
    te->hold_off = calloc((size_t)world, sizeof(size_t));
    int rc = WHALE_ENOMEM, nn = 0, ns = 0;
    if (!v || !rank_node || !spare_node || !spare_task || !hold || !nodes || !te->holder_task ||
        !te->slot_bytes || !te->hold_off)
        goto out;
    if ((rc = whale_allgather(all, mine, v, NX, WHALE_INT64))) {
        whale_error("elastic setup: exchange over all tasks failed: %s", whale_strerror(rc));
        goto out;
    }
    te->world = world;
    te->ntasks = n;
    int *task_of = calloc((size_t)world, sizeof(int));
    if (!task_of) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    for (int r = 0; r < world; r++)
        task_of[r] = -1;
    for (int t = 0; t < n; t++) {
        int k = 0;
        while (k < nn && nodes[k] != (uint64_t)v[t * NX])
            k++;
        if (k == nn)
            nodes[nn++] = (uint64_t)v[t * NX];
        int r = (int)v[t * NX + 1];
        if (r == 0)
            memcpy(&te->peak, &v[t * NX + 4], sizeof te->peak);
        if (r >= 0 && r < world) {
            task_of[r] = t;
            rank_node[r] = k;
            te->slot_bytes[r] = (size_t)v[t * NX + 2];
            te->zero = (int)v[t * NX + 3];
        } else {
            spare_task[ns] = t;
            spare_node[ns++] = k;
        }
    }
    rc = 0;
    for (int r = 0; r < world; r++)
        if (task_of[r] < 0) {
            whale_error("elastic setup: no task holds logical rank %d", r);
            rc = WHALE_EINVAL;
        }
    struct whale_red_layout l = { .grid = g, .zero = te->zero,
                                  .rank_node = rank_node, .nspares = ns,
                                  .spare_node = spare_node };
    if (!rc)
        rc = whale_red_holders(&l, hold);
    size_t off_of_task_len = 0;
    for (int r = 0; r < world && !rc; r++) {
        int h = hold[r];
        te->holder_task[r] = h == WHALE_RED_NO_HOLDER ? -1 : h >= 0 ? task_of[h]
                                                                     : spare_task[-h - 1];
        if (te->slot_bytes[r] == 0)
            te->holder_task[r] = -1;
    }
    /* offsets inside each holder's region, in rank order */
    for (int t = 0; t < n && !rc; t++) {
        size_t off = 0;
        for (int r = 0; r < world; r++)
            if (te->holder_task[r] == t) {
                te->hold_off[r] = off;
                off += 2 * te->slot_bytes[r];
            }
        if (t == me)
            off_of_task_len = off;
    }
    free(task_of);
    if (rc)
        goto out;
    te->hold_len = off_of_task_len;
    if (te->hold_len) {
        te->hold = calloc(1, te->hold_len);
        if (!te->hold) {
            whale_error("elastic setup: cannot allocate %zu bytes for the copies this task holds",
                        te->hold_len);
            rc = WHALE_ENOMEM;
            goto out;
        }
        if ((rc = whale_region_register(ctx, te->hold, te->hold_len, &te->region)))
            goto out;
    }
    if ((rc = whale_region_exchange(all, te->region, &te->remotes)))
        goto out;
    int myr = whale_rank(ctx);
    if (whale_rank(ctx) == 0 || (myr < 0 && me == spare_task[0])) {
        int64_t tot = 0;
        for (int r = 0; r < world; r++)
            tot += te->holder_task[r] >= 0 ? (int64_t)te->slot_bytes[r] : 0;
        whale_info("elastic: in-memory copies on %s, %lld bytes per refresh in all (every %d "
                   "step%s)%s", ns ? "the spare tasks" : "buddy ranks", (long long)tot, te->every,
                   te->every == 1 ? "" : "s",
                   tot == 0 ? " - nothing to copy: the DP replicas hold all state" : "");
    }
out:
    free(v);
    free(rank_node);
    free(spare_node);
    free(spare_task);
    free(hold);
    free(nodes);
    return rc;
}

/* Point this rank's store at its holder (the logical rank r it now holds). */
static void te_attach(struct train_elastic *te, int r, int me)
{
    if (!te->every) /* WHALE_REDUNDANCY_EVERY=0: local rollback images only */
        return;
    if (!te->red || r < 0 || r >= te->world || te->holder_task[r] < 0 || !te->remotes)
        return;
    int h = te->holder_task[r];
    for (int i = 0; i < te->ev.nfailed && te->ev.epoch; i++)
        if (te->ev.failed_task[i] == h) {
            whale_warn("elastic: the holder of rank %d's copy (task %d) failed; rank %d keeps "
                       "local rollback images only", r, h, r);
            te->holder_task[r] = -1;
            return;
        }
    if (h == me)
        whale_warn("elastic: rank %d's copy is now held by its own task (no other holder left): "
                   "it survives a failed step but not the loss of this task", r);
    if (!te->remotes[h] ||
        whale_remote_size(te->remotes[h]) < te->hold_off[r] + 2 * te->slot_bytes[r] ||
        te->slot_bytes[r] != whale_red_remote_slot_bytes(te->red)) {
        whale_warn("elastic: holder task %d has no room for rank %d's copy; local images only", h,
                   r);
        return;
    }
    struct whale_red_target t;
    if (!whale_red_target_rma(te->remotes[h], te->hold_off[r], &t))
        whale_red_set_target(te->red, &t);
}

/* After a shrink the copies were laid out for the old ranks: new holders
 * among the working ranks of the new layout (the dropped replicas' tasks
 * wait as spares and take no part), so that a second failure restores from
 * memory too. A collective over the new world, after new_store: every
 * survivor's refresh into the old regions has completed (the old store
 * waited for it), so the old region goes. */
static int te_rehold(struct train_elastic *te, whale_ctx *ctx)
{
    if (!te->every || !te->red)
        return 0;
    whale_group *w = whale_world(ctx);
    const int W = whale_world_size(ctx), me = whale_rank(ctx);
    struct whale_grid g;
    whale_ctx_grid(ctx, &g);
    int64_t mine[2] = { (int64_t)node_hash(), (int64_t)whale_red_remote_slot_bytes(te->red) };
    int64_t *v = calloc((size_t)W * 2, sizeof *v);
    int *rank_node = calloc((size_t)W, sizeof(int)), *hold = calloc((size_t)W, sizeof(int));
    int *holder_task = calloc((size_t)W, sizeof(int));
    size_t *slot_bytes = calloc((size_t)W, sizeof(size_t)), *hold_off = calloc((size_t)W, sizeof(size_t));
    whale_remote **rem = NULL, **by_task = calloc((size_t)te->ntasks, sizeof *by_task);
    unsigned char *buf = NULL;
    whale_region *region = NULL;
    int rc = WHALE_ENOMEM;
    if (!v || !rank_node || !hold || !holder_task || !slot_bytes || !hold_off || !by_task)
        goto out;
    if ((rc = whale_allgather(w, mine, v, 2, WHALE_INT64)))
        goto out;
    for (int r = 0; r < W; r++) { /* nodes numbered by first appearance */
        int k = 0;
        while (k < r && v[2 * k] != v[2 * r])
            k++;
        rank_node[r] = k;
        slot_bytes[r] = (size_t)v[2 * r + 1];
    }
    struct whale_red_layout l = { .grid = g, .zero = te->zero, .rank_node = rank_node };
    if ((rc = whale_red_holders(&l, hold)))
        goto out;
    size_t len = 0;
    for (int r = 0; r < W; r++) {
        holder_task[r] = hold[r] == WHALE_RED_NO_HOLDER || hold[r] < 0 || !slot_bytes[r]
                             ? -1 : whale_rankmap_task(ctx, hold[r]);
        if (holder_task[r] < 0 || holder_task[r] >= te->ntasks)
            holder_task[r] = -1;
    }
    /* offsets inside each holder's region, in rank order */
    for (int h = 0; h < W; h++) {
        size_t off = 0;
        const int ht = whale_rankmap_task(ctx, h);
        for (int r = 0; r < W; r++)
            if (holder_task[r] >= 0 && holder_task[r] == ht) {
                hold_off[r] = off;
                off += 2 * slot_bytes[r];
            }
        if (h == me)
            len = off;
    }
    if (len && (!(buf = calloc(1, len)) ||
                (rc = whale_region_register(ctx, buf, len, &region)))) {
        whale_error("elastic: rank %d cannot hold %zu bytes of copies after the shrink", me, len);
        rc = buf ? rc : WHALE_ENOMEM;
        goto out;
    }
    if ((rc = whale_region_exchange(w, region, &rem)))
        goto out;
    for (int r = 0; r < W; r++) {
        const int t = whale_rankmap_task(ctx, r);
        if (t >= 0 && t < te->ntasks && !by_task[t])
            by_task[t] = rem[r];
        else
            whale_remote_free(rem[r]);
    }
    free(rem);
    /* the old tables and regions go; the new ones are indexed by the new ranks */
    if (te->remotes)
        for (int t = 0; t < te->ntasks; t++)
            whale_remote_free(te->remotes[t]);
    free(te->remotes);
    whale_region_free(te->region);
    free(te->hold);
    free(te->holder_task);
    free(te->slot_bytes);
    free(te->hold_off);
    te->remotes = by_task;
    te->region = region;
    te->hold = buf;
    te->hold_len = len;
    te->holder_task = holder_task;
    te->slot_bytes = slot_bytes;
    te->hold_off = hold_off;
    te->world = W;
    te->reshaped = false;
    by_task = NULL;
    region = NULL;
    buf = NULL;
    holder_task = NULL;
    slot_bytes = hold_off = NULL;
    te_attach(te, me, whale_task_id(ctx));
    if (me == 0) {
        int64_t tot = 0;
        for (int r = 0; r < W; r++)
            tot += te->holder_task[r] >= 0 ? (int64_t)te->slot_bytes[r] : 0;
        whale_info("elastic: new holders after the shrink: in-memory copies on buddy ranks, "
                   "%lld bytes per refresh in all", (long long)tot);
    }
    rc = 0;
out:
    if (rc)
        whale_error("elastic: rank %d: setting up new holders after the shrink failed: %s", me,
                    whale_strerror(rc));
    whale_region_free(region);
    free(buf);
    free(by_task);
    free(v);
    free(rank_node);
    free(hold);
    free(holder_task);
    free(slot_bytes);
    free(hold_off);
    return rc;
}

int te_spare(struct train_elastic *te, whale_ctx *ctx)
{
    if (!te->elastic) {
        whale_info("hot spare: idle (the step is not elastic)");
        return 1;
    }
    int rc = te_exchange(te, ctx, 0, 0);
    if (rc)
        return rc;
    whale_info("hot spare: holding %zu bytes of copies, waiting to be called in", te->hold_len);
    rc = whale_spare_wait(ctx, &te->ev);
    if (rc == WHALE_EDONE)
        return 1;
    if (rc == WHALE_ENOTSUP) {
        whale_warn("hot spare: promotion is not available in this build (membership API "
                   "missing); idle");
        return 1;
    }
    if (rc) {
        whale_error("hot spare: %s", whale_strerror(rc));
        return rc;
    }
    te->promoted = true;
    te->fault_rank = -1; /* a replacement never inherits the failed rank's faults */
    whale_info("hot spare: promoted to rank %d", whale_rank(ctx));
    return 0;
}

static void write_event(struct train_elastic *te, FILE *mf)
{
    /* one line for the step (rank 0, who also writes the metrics), not one per rank */
    if (whale_rank(te->ctx) == 0)
        whale_recovery_log(&te->rep);
    if (!mf)
        return;
    char *s = whale_recovery_json(&te->rep);
    if (s) {
        fprintf(mf, "%s\n", s);
        whale_output_flush(mf);
        free(s);
    }
}

/* ---- the checkpointer across a membership change ---------------------------
 * Ranks of one save meet in a temporary directory named by the run id and
 * the checkpointer's save counter; a replacement starts with a fresh
 * counter. So after every recovery all ranks reopen their checkpointer with
 * a run id carrying the membership epoch. A save that was in flight when a
 * rank died can never complete: rank 0 marks the failed ranks' part of it
 * as failed (the checkpoint module's own protocol), which drops that save
 * at once instead of after the commit timeout; earlier checkpoints are
 * intact. */
static char run_id_buf[320];

static void mark_failed_shards(const char *root, const struct whale_membership_event *ev)
{
    DIR *d = opendir(root);
    if (!d)
        return;
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, ".tmp-", 5))
            continue;
        for (int i = 0; i < ev->nfailed; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s/rank-%05d.json", root, de->d_name, ev->failed_rank[i]);
            if (access(p, F_OK) == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s/rank-%05d.failed", root, de->d_name, ev->failed_rank[i]);
            int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (fd >= 0)
                close(fd);
        }
    }
    closedir(d);
}

static void ckpt_restart(struct train_elastic *te, whale_ctx *ctx, struct train_job *job,
                         bool survivor)
{
    if (!job->ck || !*job->ck || !job->ckc)
        return;
    if (survivor && whale_rank(ctx) == 0 && job->ckc->root)
        mark_failed_shards(job->ckc->root, &te->ev);
    if (whale_ckpt_close(*job->ck))
        whale_warn("elastic: the checkpoint in flight at the failure was dropped (the earlier "
                   "ones are intact)");
    *job->ck = NULL;
    const char *base = whale_knob_getenv("WHALE_CKPT_RUN_ID"), *job_id = getenv("SLURM_JOB_ID");
    char b[256];
    if (!base || !*base) {
        const char *stp = getenv("SLURM_STEP_ID"), *ns = getenv("PMIX_NAMESPACE");
        if (job_id)
            snprintf(b, sizeof b, "j%s.%s", job_id, stp ? stp : "x");
        else
            snprintf(b, sizeof b, "%s", ns ? ns : "run");
        base = b;
    }
    snprintf(run_id_buf, sizeof run_id_buf, "%s.e%llu", base,
             (unsigned long long)whale_elastic_epoch(ctx));
    job->ckc->run_id = run_id_buf;
    job->ckc->rank = whale_rank(ctx);
    job->ckc->world = whale_world_size(ctx);
    if (whale_ckpt_open(job->ckc, job->ck))
        whale_warn("elastic: checkpoints are off after the recovery (could not reopen)");
}

/* ---- restore after a membership change ----------------------------------- */
/* Can I provide rollback step s? Survivor: a local image. Replacement: the
 * held copy (local memory when I hold it, else fetched) or, with nothing to
 * copy (the DP replicas hold everything), the replica. */
static unsigned char *fetch_copy(struct train_elastic *te, int r, int me)
{
    int h = r >= 0 && r < te->world ? te->holder_task[r] : -1;
    if (h < 0)
        return NULL;
    size_t len = 2 * te->slot_bytes[r];
    unsigned char *buf = malloc(len);
    if (!buf)
        return NULL;
    if (h == me && te->hold) {
        memcpy(buf, te->hold + te->hold_off[r], len);
        return buf;
    }
    whale_req *req = NULL;
    if (!te->remotes || !te->remotes[h] ||
        whale_iget(te->remotes[h], te->hold_off[r], buf, len, &req) || whale_wait(req)) {
        whale_warn("elastic: cannot read rank %d's copy from task %d", r, h);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Adaptive K: at most TE_KMAX steps between refreshes, re-evaluated every
 * TE_EVAL steps (the same steps on every rank), target share of a step. */
#define TE_KMAX 16
#define TE_WIN (2 * TE_KMAX + 1)
#define TE_EVAL 4
#define TE_TARGET 0.05

/* The dropped replicas' held copies, each from its holder to the ranks
 * that re-cut it: the survivors at the same (TP, PP) position (the same
 * order everywhere: dropped replica, then old rank). copy[i] keeps dropped
 * replica i's copy at my (tp, pp), NULL when its holder is not a working
 * rank any more. Messages rather than one-sided gets: the holders are busy
 * in the same recovery, and a get emulated over tagged messages needs the
 * holder to progress. Every rank walks the copies in one order and each
 * copy only involves its holder and its receivers, so the blocking
 * receives cannot wait on each other in a cycle. */
#define TE_COPY_TAG 0x7e1
static int bcast_copies(struct train_elastic *te, whale_ctx *ctx, bool tables, int tpr, int ppr,
                        unsigned char **copy)
{
    const struct whale_membership_event *ev = &te->ev;
    const int W = whale_world_size(ctx), me = whale_rank(ctx);
    if (!tables || te->zero < 1)
        return 0;
    struct whale_grid ng;
    whale_ctx_grid(ctx, &ng);
    whale_group *world = whale_world(ctx);
    whale_req **reqs = calloc((size_t)W, sizeof *reqs);
    if (!reqs)
        return WHALE_ENOMEM; /* the others wait for this rank: stop loudly */
    int rc = 0;
    for (int i = 0; i < ev->ndropped && !rc; i++)
        for (int pp = 0; pp < ev->old_grid.pp && !rc; pp++)
            for (int tp = 0; tp < ev->old_grid.tp && !rc; tp++) {
                struct whale_coords c = { .tp = tp, .pp = pp, .dp = ev->dropped[i] };
                int orank = whale_grid_rank(&ev->old_grid, &c), root = -1;
                if (orank < 0 || orank >= te->world || te->holder_task[orank] < 0)
                    continue;
                for (int r = 0; r < W && root < 0; r++)
                    if (whale_rankmap_task(ctx, r) == te->holder_task[orank])
                        root = r;
                if (root < 0)
                    continue; /* a spare now (its replica was dropped), or gone */
                const bool mine = tp == tpr && pp == ppr;
                if (me != root && !mine)
                    continue;
                size_t len = 2 * te->slot_bytes[orank];
                unsigned char *buf = malloc(len ? len : 1);
                if (!buf) {
                    rc = WHALE_ENOMEM;
                    break;
                }
                if (me == root) {
                    memcpy(buf, te->hold + te->hold_off[orank], len);
                    int n = 0;
                    for (int r = 0; r < W && !rc; r++) {
                        struct whale_coords rc_;
                        whale_grid_coords(&ng, r, &rc_);
                        if (r != me && rc_.tp == tp && rc_.pp == pp)
                            rc = whale_isend(world, buf, len, WHALE_UINT8, r, TE_COPY_TAG,
                                             &reqs[n++]);
                    }
                    for (int k = 0; k < n; k++) {
                        int w = reqs[k] ? whale_wait(reqs[k]) : 0;
                        rc = rc ? rc : w;
                        reqs[k] = NULL;
                    }
                } else {
                    rc = whale_recv(world, buf, len, WHALE_UINT8, root, TE_COPY_TAG);
                }
                if (!rc && mine)
                    copy[i] = buf;
                else
                    free(buf);
            }
    free(reqs);
    return rc;
}

/* After a shrink whose new layout cuts the state differently (ZeRO >= 1:
 * the shards of every bucket move; DP 1: nothing is replicated any more),
 * no image restores a rank by itself. Each (TP, PP) position re-cuts its
 * state from memory: the survivors' local images of the same step, whose
 * unique parts they exchange within their new DP group, and the dropped
 * replicas' unique parts from the copies their holders keep. The step is
 * the newest that every survivor holds and every needed copy has intact;
 * WHALE_ENOENT when there is none (a copy is really gone: the caller goes
 * to disk). */
static int restore_reshard(struct train_elastic *te, whale_ctx *ctx, whale_engine *e,
                           int64_t agreed, int64_t *R)
{
    const struct whale_membership_event *ev = &te->ev;
    /* at ZeRO 0 every piece was on every replica: the survivors hold it all */
    const int nd = te->zero >= 1 ? ev->ndropped : 0;
    int tpr, ppr, dpr;
    whale_coords(ctx, &tpr, &ppr, &dpr);
    /* the holder tables are indexed by the ranks of the layout they were
     * built for: only that one (no earlier shrink) */
    const bool tables = !te->reshaped && te->holder_task &&
                        te->world == whale_grid_world(&ev->old_grid);
    unsigned char **copy = calloc((size_t)nd + 1, sizeof *copy);
    int *orank = calloc((size_t)nd + 1, sizeof *orank);
    int64_t (*held)[2] = calloc((size_t)nd + 1, sizeof *held);
    whale_group *dpg = whale_dp_group(ctx);
    const int D = whale_group_size(dpg), myd = whale_group_rank(dpg);
    struct whale_red_image *img = calloc((size_t)(D + nd), sizeof *img);
    unsigned char **bufs = calloc((size_t)D, sizeof *bufs);
    int rc = WHALE_ENOMEM, k = 0;
    if (!copy || !orank || !held || !img || !bufs)
        goto out;
    for (int i = 0; i < nd; i++) {
        struct whale_coords c = { .tp = tpr, .pp = ppr, .dp = ev->dropped[i] };
        orank[i] = whale_grid_rank(&ev->old_grid, &c);
        held[i][0] = held[i][1] = -1;
    }
    if ((rc = bcast_copies(te, ctx, tables, tpr, ppr, copy)))
        goto out;
    for (int i = 0; i < nd; i++)
        if (copy[i])
            whale_red_scan(copy[i], te->slot_bytes[orank[i]], held[i], NULL);
    int64_t loc[2] = { -1, -1 };
    whale_red_local_steps(te->red, loc);
    int32_t flags[TE_WIN + 1];
    for (int i = 0; i < TE_WIN; i++) {
        int64_t s = agreed - i;
        bool ok = s >= 0 && (loc[0] == s || loc[1] == s);
        for (int d = 0; d < nd && ok; d++)
            ok = held[d][0] == s || held[d][1] == s;
        flags[i] = ok;
    }
    flags[TE_WIN] = -(te->every > 0 ? te->every : 1);
    if ((rc = whale_allreduce(whale_world(ctx), flags, flags, TE_WIN + 1, WHALE_INT32,
                              WHALE_MIN)))
        goto out;
    if (te->every > 0 && -flags[TE_WIN] != te->every)
        te->every = -flags[TE_WIN];
    int pick = -1;
    for (int i = 0; i < TE_WIN && pick < 0; i++)
        if (flags[i])
            pick = i;
    if (pick < 0) {
        rc = WHALE_ENOENT;
        goto out;
    }
    *R = agreed - pick;
    /* mine first (with its replicated pieces), then the others' unique parts */
    size_t ulen = 0;
    if ((rc = whale_red_local_image(te->red, *R, &img[k++], &ulen)))
        goto out; /* cannot happen: the agreement says this rank holds R */
    double moved = 0;
    for (int i = 0; i < D; i++) {
        int64_t len = i == myd ? (int64_t)ulen : 0;
        if ((rc = whale_broadcast(dpg, &len, 1, WHALE_INT64, i)))
            goto out;
        if (i == myd) {
            rc = whale_broadcast(dpg, (void *)img[0].data, (size_t)len, WHALE_UINT8, i);
        } else if (!(bufs[i] = malloc(len > 0 ? (size_t)len : 1))) {
            rc = WHALE_ENOMEM; /* the others wait in the broadcast: stop loudly */
        } else {
            rc = whale_broadcast(dpg, bufs[i], (size_t)len, WHALE_UINT8, i);
            img[k++] = (struct whale_red_image){ bufs[i], (size_t)len };
            moved += (double)len;
        }
        if (rc)
            goto out;
    }
    for (int d = 0; d < nd; d++)
        if ((rc = whale_red_slot_image(copy[d], te->slot_bytes[orank[d]], *R, &img[k++])))
            goto out;
    if ((rc = whale_red_fill(e, img, k)))
        goto out;
    if (whale_rank(ctx) == 0)
        whale_info("elastic: state of step %lld re-cut for DP %d from memory (the survivors' "
                   "images and %d held cop%s; %.1f MB exchanged per rank)", (long long)*R,
                   ev->grid.dp, nd, nd == 1 ? "y" : "ies",
                   moved / 1e6);
out:
    for (int i = 0; copy && i < nd; i++)
        free(copy[i]);
    for (int i = 0; bufs && i < D; i++)
        free(bufs[i]);
    free(copy);
    free(orank);
    free(held);
    free(img);
    free(bufs);
    return rc;
}

static int restore(struct train_elastic *te, whale_ctx *ctx, whale_engine *e, bool joiner,
                   int64_t agreed, int64_t *R, const char **source)
{
    const int me = whale_task_id(ctx), r = whale_rank(ctx);
    if (!joiner && te->red && te->ev.kind == WHALE_RECOVERY_SHRUNK && !whale_red_fits(te->red, e)) {
        int rc = restore_reshard(te, ctx, e, agreed, R);
        if (!rc)
            *source = "memory";
        return rc;
    }
    unsigned char *copy = NULL;
    int64_t held[2] = { -1, -1 };
    bool torn[2] = { false, false };
    bool replica_only = joiner && (r >= te->world || te->holder_task[r] < 0);
    if (joiner && !replica_only && (copy = fetch_copy(te, r, me)))
        whale_red_scan(copy, te->slot_bytes[r], held, torn);
    int64_t loc[2] = { -1, -1 };
    if (!joiner && te->red && whale_red_fits(te->red, e))
        whale_red_local_steps(te->red, loc);
    /* flags[i]: I can provide step agreed - i (snapshots are K steps apart:
     * look back two of the largest K); the last entry agrees on K (min of
     * -K = the largest K: a promoted spare starts at 1) */
    int32_t flags[TE_WIN + 1];
    for (int i = 0; i < TE_WIN; i++) {
        int64_t s = agreed - i;
        bool ok = s >= 0 && (joiner ? (replica_only || held[0] == s || held[1] == s)
                                    : (loc[0] == s || loc[1] == s));
        flags[i] = ok;
    }
    flags[TE_WIN] = -(te->every > 0 ? te->every : 1);
    int rc = whale_allreduce(whale_world(ctx), flags, flags, TE_WIN + 1, WHALE_INT32, WHALE_MIN);
    if (rc) {
        free(copy);
        return rc;
    }
    if (te->every > 0 && -flags[TE_WIN] != te->every) {
        te->every = -flags[TE_WIN];
        if (te->red)
            whale_red_set_every(te->red, te->every);
    }
    int pick = -1;
    for (int i = 0; i < TE_WIN && pick < 0; i++)
        if (flags[i])
            pick = i;
    if (pick < 0) {
        free(copy);
        return WHALE_ENOENT; /* state lost in memory: the caller goes to disk */
    }
    *R = agreed - pick;
    bool complete = false;
    if (joiner && !replica_only)
        rc = whale_red_restore_slot(e, copy, te->slot_bytes[r], *R, &complete);
    else if (!joiner)
        rc = whale_red_rollback(te->red, e, *R);
    free(copy);
    /* a local failure here cannot be agreed on any more: stop loudly */
    if (rc)
        return rc;
    /* DP-replicated pieces and the scalars from a surviving replica: the
     * lowest DP rank that is not a replacement */
    whale_group *dpg = whale_dp_group(ctx);
    int32_t j = joiner ? 1 : 0, js[1024];
    int dsz = whale_group_size(dpg);
    if (dsz > 1 && dsz <= 1024) {
        if ((rc = whale_allgather(dpg, &j, js, 1, WHALE_INT32)))
            return rc;
        int root = -1, njoin = 0;
        for (int i = 0; i < dsz; i++) {
            njoin += js[i];
            if (!js[i] && root < 0)
                root = i;
        }
        if (njoin && root >= 0) {
            if ((rc = whale_red_sync_replicated(e, dpg, root, te->zero)))
                return rc;
            struct whale_train_state ts;
            whale_engine_get_state(e, &ts);
            if ((rc = whale_broadcast(dpg, &ts, sizeof ts, WHALE_UINT8, root)) ||
                (rc = whale_engine_set_state(e, &ts)))
                return rc;
        } else if (njoin && root < 0) {
            whale_error("elastic: every member of DP group is new; nothing to copy from");
            return WHALE_ENOENT;
        }
    }
    *source = joiner ? (replica_only ? "replica" : complete ? "memory" : "memory+replica")
                     : "memory";
    return 0;
}

static int restore_disk(whale_engine *e, const char *root, int64_t *R)
{
    if (!root) {
        whale_error("elastic: state lost in memory (a rank and the holder of its copy) and no "
                    "checkpoint directory to restore from");
        return WHALE_ENOENT;
    }
    char *dir = NULL;
    int rc = whale_ckpt_resolve(root, "latest", &dir);
    if (rc) {
        whale_error("elastic: state lost in memory and no checkpoint under %s", root);
        return rc;
    }
    whale_ckpt_reader *rd = NULL;
    rc = whale_ckpt_reader_open(dir, &rd);
    if (!rc)
        rc = whale_ckpt_load_engine(rd, e);
    whale_ckpt_reader_close(rd);
    free(dir);
    if (!rc) {
        struct whale_train_state ts;
        whale_engine_get_state(e, &ts);
        *R = ts.step;
    }
    return rc;
}

static int new_store(struct train_elastic *te, whale_ctx *ctx, whale_engine *e)
{
    struct whale_grid g;
    whale_ctx_grid(ctx, &g);
    whale_red_destroy(te->red);
    te->red = NULL;
    struct whale_red_config rc = { .dp = g.dp, .zero = te->zero, .every = te->every ? te->every : 1 };
    memset(&te->prev, 0, sizeof te->prev);
    return whale_red_create(e, &rc, &te->red);
}

void te_set_metrics(struct train_elastic *te, FILE *mf)
{
    if (te)
        te->mf = mf;
}

double te_take_ckpt_fence_s(struct train_elastic *te)
{
    double s = te->ck_fence_s;
    te->ck_fence_s = 0;
    return s;
}

int te_start(struct train_elastic *te, whale_ctx *ctx, struct train_job *job)
{
    te->ck = job->ck;
    whale_engine_set_phase_hook(*job->e, on_phase, te);
    if (!te->elastic)
        return 0;
    te->zero = job->ec->zero_stage;
    te->mf = job->metrics ? *job->metrics : NULL;
    if (te->promoted) {
        /* the failed rank's place: its state from the copy / the replica */
        double t0 = whale_now_s();
        int64_t R = -1;
        const char *src = "memory";
        int rc = restore(te, ctx, *job->e, true, te->ev.agreed_step, &R, &src);
        if (rc == WHALE_ENOENT)
            rc = restore_disk(*job->e, job->ckpt_root, &R), src = "disk";
        if (rc)
            return rc;
        ckpt_restart(te, ctx, job, false);
        te->last_done = R;
        /* the record is written (by whoever is rank 0 now) once the redo is done */
        memset(&te->rep, 0, sizeof te->rep);
        te->rep.kind = te->ev.kind == WHALE_RECOVERY_SHRUNK ? "shrunk"
                     : !strcmp(src, "disk")              ? "restored" : "replaced";
        te->rep.how = detect_name(te->ev.how);
        te->rep.nfailed = te->ev.nfailed < 8 ? te->ev.nfailed : 8;
        te->rep.tasks_known = true;
        for (int i = 0; i < te->rep.nfailed; i++) {
            te->rep.failed_rank[i] = te->ev.failed_rank[i];
            te->rep.failed_task[i] = te->ev.failed_task[i];
            snprintf(te->rep.failed_node[i], sizeof te->rep.failed_node[i], "%s",
                     te->ev.failed_node[i]);
        }
        whale_recovery_note_spares(&te->rep, &te->ev);
        te->rep.failed_step = te->ev.agreed_step + 1;
        te->rep.rollback_step = R;
        te->rep.steps_lost = te->ev.agreed_step > R ? te->ev.agreed_step - R : 0;
        te->rep.detect_s = te->ev.detect_s;
        te->rep.agree_s = te->ev.agree_s;
        te->rep.rebuild_s = te->ev.rebuild_s;
        te->rep.transfer_s = whale_now_s() - t0;
        te->rep.source = src;
        whale_ctx_grid(ctx, &te->rep.grid);
        te->pending = true;
        te->redo_t0 = whale_now_s();
        if ((rc = new_store(te, ctx, *job->e)))
            return rc;
        te_attach(te, whale_rank(ctx), whale_task_id(ctx));
        whale_info("elastic: took rank %d's place at step %lld (state from %s, %.2f s)",
                   whale_rank(ctx), (long long)R, src, whale_now_s() - t0);
        rc = whale_red_snapshot(te->red, *job->e);
        whale_red_get_stats(te->red, &te->prev);
        return rc;
    }
    int rc = new_store(te, ctx, *job->e);
    if (!rc)
        rc = te_exchange(te, ctx, te->every ? whale_red_remote_slot_bytes(te->red) : 0,
                         te->zero);
    if (rc)
        return rc;
    te_attach(te, whale_rank(ctx), whale_task_id(ctx));
    struct whale_train_state ts;
    whale_engine_get_state(*job->e, &ts);
    te->last_done = ts.step;
    rc = whale_red_snapshot(te->red, *job->e);
    whale_red_get_stats(te->red, &te->prev);
    return rc;
}

void te_step_begin(struct train_elastic *te, int64_t step1)
{
    /* The refresh of the previous step is NOT waited for here: its puts run
     * while this step computes (the progress thread drives them) and the
     * next snapshot completes them (whale_red_snapshot). A put cut short by
     * a failure leaves a torn slot (xxh3) next to the intact previous one;
     * the comm module keeps the holder alive when the origin dies mid-put
     * (comm/rma/rma_tag.c). */
    /* Several ranks failing at the start of this step (WHALE_FAULT
     * rank=1,2 or items joined by ;): meet first, so they all die before
     * anybody can notice one death and start a recovery without the
     * others (a barrier every rank reaches: the plan is the same on all). */
    if (te->elastic && whale_fault_group_due(&te->faults, step1, WHALE_FAULT_START))
        (void)whale_barrier(whale_world(te->ctx)); /* a failure shows in the step */
    whale_fault_point(&te->faults, te->fault_rank, step1, WHALE_FAULT_START);
}

void te_ckpt_started(struct train_elastic *te, int64_t step1)
{
    whale_fault_point(&te->faults, te->fault_rank, step1, WHALE_FAULT_CKPT);
}

/* Adaptive K (whale_red_adapt_every): moving averages of the iteration
 * and of one refresh's blocking cost; every TE_EVAL steps the ranks agree
 * on the largest K any of them wants (all must snapshot the same steps). */
static void te_adapt(struct train_elastic *te, int64_t step, bool refreshed)
{
    double t = whale_now_s();
    if (te->t_last > 0) {
        double it = t - te->t_last;
        te->avg_step = te->avg_step > 0 ? 0.7 * te->avg_step + 0.3 * it : it;
    }
    te->t_last = t;
    if (refreshed)
        te->avg_cost = te->avg_cost > 0 ? 0.7 * te->avg_cost + 0.3 * te->snap_s : te->snap_s;
    /* Who takes part must not depend on what this rank has measured (a
     * promoted spare has no history yet): only on the step and settings,
     * which are the same on every rank. */
    if (!te->adaptive || te->every < 1 || step % TE_EVAL)
        return;
    int32_t want = te->avg_step > 0 ? whale_red_adapt_every(te->avg_cost, te->avg_step, TE_TARGET,
                                                            te->every, TE_KMAX)
                                    : te->every;
    if (want < te->kmin)
        want = te->kmin;
    if (whale_allreduce(whale_world(te->ctx), &want, &want, 1, WHALE_INT32, WHALE_MAX))
        return; /* a failure: it shows in the next step */
    if (want == te->every)
        return;
    if (whale_rank(te->ctx) == 0)
        whale_info("elastic: in-memory copy refreshed every %d step%s from now on (a refresh "
                   "blocks %.3f s, %.1f %% of a %.3f s step; target %.0f %%)", (int)want,
                   want == 1 ? "" : "s", te->avg_cost, 100 * te->avg_cost / te->avg_step,
                   te->avg_step, 100 * TE_TARGET);
    te->every = want;
    whale_red_set_every(te->red, want);
}

int te_step_done(struct train_elastic *te, whale_engine *e)
{
    struct whale_train_state ts;
    whale_engine_get_state(e, &ts);
    te->last_done = ts.step;
    if (!te->elastic || !te->red)
        return 0;
    struct whale_red_stats a = te->prev, b;
    int rc = whale_red_snapshot(te->red, e);
    whale_red_get_stats(te->red, &b);
    te->prev = b;
    /* since the last snapshot: this one + waiting for the previous refresh
     * at the start of the step */
    te->snap_s = (b.t_serialize - a.t_serialize) + (b.t_wait - a.t_wait);
    te->snap_bytes = b.refreshes > a.refreshes ? (double)b.remote_bytes : 0;
    te_adapt(te, ts.step, b.snapshots > a.snapshots);
    if (rc == WHALE_EPEER || rc == WHALE_ETIMEDOUT) {
        /* the holder is gone: the failure shows up in the next step too */
        if (!te->warned_target)
            whale_warn("elastic: the holder of this rank's copy is unreachable");
        te->warned_target = true;
        whale_red_set_target(te->red, NULL);
        rc = 0;
    }
    if (te->pending && ts.step >= te->rep.failed_step) {
        te->rep.redo_s = whale_now_s() - te->redo_t0;
        te->pending = false;
        write_event(te, te->mf);
    }
    return rc;
}

void te_step_metrics(const struct train_elastic *te, double *snap_s, double *bytes)
{
    *snap_s = te->elastic ? te->snap_s : 0;
    *bytes = te->elastic ? te->snap_bytes : 0;
}

static void stop_message(struct train_elastic *te, struct train_job *job, int64_t step1,
                         const char *why, const struct whale_membership_event *ev)
{
    whale_error("stopping: step %lld could not be completed: %s. Work up to the last "
                "checkpoint is kept%s%s; resume with `whale-train ... --resume latest%s%s` "
                "(same options)", (long long)step1, why,
                job->ckpt_root ? " under " : " (no checkpoint directory was set: the run "
                "restarts from step 0; set --whale-ckpt-dir and --whale-ckpt-every)",
                job->ckpt_root ? job->ckpt_root : "", job->ckpt_root ? " --whale-ckpt-dir " : "",
                job->ckpt_root ? job->ckpt_root : "");
    struct whale_recovery_report r = { .kind = "stopped", .how = "crash", .nfailed = 0,
                                       .failed_step = step1, .rollback_step = te->last_done,
                                       .source = "none" };
    if (ev && ev->nfailed > 0) { /* what the survivors agreed on before giving up */
        r.how = detect_name(ev->how);
        r.nfailed = ev->nfailed < 8 ? ev->nfailed : 8;
        r.tasks_known = true;
        for (int i = 0; i < r.nfailed; i++) {
            r.failed_rank[i] = ev->failed_rank[i];
            r.failed_task[i] = ev->failed_task[i];
            snprintf(r.failed_node[i], sizeof r.failed_node[i], "%s", ev->failed_node[i]);
        }
        r.detect_s = ev->detect_s;
        r.agree_s = ev->agree_s;
        r.rebuild_s = ev->rebuild_s;
        r.grid = ev->grid;
    }
    FILE *mf = job->metrics ? *job->metrics : NULL;
    if (mf) {
        char *s = whale_recovery_json(&r);
        if (s) {
            fprintf(mf, "%s\n", s);
            whale_output_flush(mf);
            free(s);
        }
    }
}

int te_recover(struct train_elastic *te, whale_ctx *ctx, struct train_job *job, int step_rc,
               int64_t failed_step1, int64_t *redo_from)
{
    if (step_rc != WHALE_EPEER && step_rc != WHALE_ETIMEDOUT) {
        whale_error("stopping: step %lld failed: %s", (long long)failed_step1,
                    whale_strerror(step_rc));
        return -1;
    }
    if (!te->elastic) {
        stop_message(te, job, failed_step1,
                     "a peer failed and the step is not elastic (no hot spares: srun "
                     "--whale-spares=N or whale-run --spares N; WHALE_ELASTIC=1 lets DP > 1 "
                     "shrink)", NULL);
        return -1;
    }
    const double t0 = whale_now_s();
    struct whale_membership_event ev;
    memset(&ev, 0, sizeof ev);
    int rc = whale_elastic_recover(ctx, te->last_done, &ev);
    if (rc == WHALE_EMINORITY) {
        whale_error("stopping: this task is cut off from the majority of the step; the others "
                    "go on (nothing shared is written from here)");
        return -1;
    }
    if (rc) {
        stop_message(te, job, failed_step1,
                     rc == WHALE_ENOFIT ? "a rank failed, no spare is left and DP = 1"
                     : rc == WHALE_ENOTSUP ? "elastic recovery is not available in this build"
                                           : whale_strerror(rc), &ev);
        return -1;
    }
    te->ev = ev;
    train_report_failures(&ev); /* Slurm: drain, stop, exit status */
    const double t_agreed = whale_now_s();
    memset(&te->rep, 0, sizeof te->rep);
    te->rep.kind = ev.kind == WHALE_RECOVERY_SHRUNK   ? "shrunk"
                 : ev.kind == WHALE_RECOVERY_RESUMED ? "resumed" : "replaced";
    te->rep.how = detect_name(ev.how);
    te->rep.nfailed = ev.nfailed < 8 ? ev.nfailed : 8;
    te->rep.tasks_known = true;
    for (int i = 0; i < te->rep.nfailed; i++) {
        te->rep.failed_rank[i] = ev.failed_rank[i];
        te->rep.failed_task[i] = ev.failed_task[i];
        snprintf(te->rep.failed_node[i], sizeof te->rep.failed_node[i], "%s", ev.failed_node[i]);
    }
    whale_recovery_note_spares(&te->rep, &ev);
    te->rep.failed_step = failed_step1;
    te->rep.detect_s = ev.detect_s;
    te->rep.agree_s = ev.agree_s;
    te->rep.rebuild_s = ev.rebuild_s;
    /* a save in flight may still read the engine's tensors */
    if (job->ck && *job->ck)
        whale_ckpt_fence(*job->ck);
    whale_engine_destroy(*job->e);
    *job->e = NULL;
    if (whale_is_spare(ctx)) {
        /* my DP replica was dropped: wait to be called in again */
        whale_info("elastic: DP replica dropped; this task is a spare now");
        whale_red_destroy(te->red);
        te->red = NULL;
        int s = whale_spare_wait(ctx, &te->ev);
        if (s == WHALE_EDONE)
            return 1;
        whale_error("stopping: a dropped replica's task %s",
                    s ? whale_strerror(s) : "was called in again (not supported yet)");
        return -1;
    }
    /* the new layout */
    int tpr, ppr;
    whale_ctx_grid(ctx, job->grid);
    whale_coords(ctx, &tpr, &ppr, job->dp_rank);
    *job->rank = whale_rank(ctx);
    *job->world = whale_world_size(ctx);
    if (ev.kind == WHALE_RECOVERY_SHRUNK && ev.old_grid.dp != job->grid->dp) {
        /* the global batch is kept: the survivors take shares of it
         * (train_shares.h), uneven where it does not split evenly */
        struct whale_engine_config *ec = job->ec;
        const int n = job->grid->dp;
        const long gb = ec->global_batch ? ec->global_batch
                                         : (long)ec->micro_batch * *job->accum * ev.old_grid.dp;
        /* ZeRO 0/1: every replica's micro-batch stays; ZeRO 2/3: the count
         * (collectives at every micro-batch), unless the micro-batches still
         * split evenly (then as before: the micro-batch stays) */
        const int zero = !ec->global_batch && (gb / ec->micro_batch) % n == 0
                             ? 0 : ec->zero_stage;
        const long unit = zero < 2 ? ec->micro_batch : *job->accum;
        long *sh = calloc((size_t)n, sizeof *sh);
        struct train_share ts;
        if (sh && gb % unit == 0) {
            train_share_split(gb / unit, n, sh);
            for (int i = 0; i < n; i++)
                sh[i] *= unit;
        }
        int src = !sh || gb % unit ? -1
                  : train_share_of(sh, n, *job->dp_rank, ec->micro_batch, *job->accum, zero,
                                   "elastic shrink", &ts);
        free(sh);
        if (src) {
            stop_message(te, job, failed_step1, "after dropping a DP replica the global batch "
                         "does not split over the remaining replicas", &ev);
            return -1;
        }
        *job->accum = ts.accum;
        ec->grad_accum = (int)ts.accum;
        ec->micro_batch = (int)ts.micro;
        ec->global_batch = ts.uneven ? (int)ts.global : 0;
        job->dc->global_batch = ec->global_batch;
        job->dc->offset = (int)ts.offset;
        whale_data_close(*job->data);
        *job->data = NULL;
        job->dc->local_batch = job->ec->micro_batch * (int)*job->accum;
        job->dc->dp_rank = *job->dp_rank;
        job->dc->dp_size = job->grid->dp;
        size_t bt = (size_t)job->dc->local_batch * job->dc->seq;
        int32_t *in = realloc(*job->in, bt * sizeof(int32_t));
        if (in)
            *job->in = in;
        int32_t *tg = realloc(*job->tg, bt * sizeof(int32_t));
        if (tg)
            *job->tg = tg;
        if (!in || !tg || whale_data_open(job->dc, job->data)) {
            stop_message(te, job, failed_step1, "could not reopen the data after the shrink",
                         &ev);
            return -1;
        }
        whale_info("elastic: DP %d -> %d, this replica %ld micro-batches of %d (global batch "
                   "%ld kept%s)", ev.old_grid.dp, job->grid->dp, *job->accum,
                   job->ec->micro_batch, gb, job->ec->global_batch ? ", uneven shares" : "");
    }
    job->ec->tp = job->grid->tp;
    job->ec->pp = job->grid->pp;
    const double t_rb0 = whale_now_s();
    if ((rc = whale_engine_create(job->ec, ctx, job->e))) {
        stop_message(te, job, failed_step1, "the engine could not be rebuilt on the new groups",
                     &ev);
        return -1;
    }
    whale_engine_set_phase_hook(*job->e, on_phase, te);
    const double t_rb1 = whale_now_s();
    int64_t R = -1;
    const char *src = "memory";
    rc = restore(te, ctx, *job->e, false, ev.agreed_step, &R, &src);
    if (rc == WHALE_ENOENT) {
        whale_warn("elastic: state of step %lld is not in memory everywhere: restoring the last "
                   "checkpoint inside the running step", (long long)ev.agreed_step);
        rc = restore_disk(*job->e, job->ckpt_root, &R);
        src = "disk";
        te->rep.kind = "restored";
    }
    if (rc) {
        stop_message(te, job, failed_step1, "the state could not be restored after recovery",
                     &ev);
        return -1;
    }
    te->rep.transfer_s = whale_now_s() - t_rb1;
    te->rep.rebuild_s += t_rb1 - t_rb0;
    te->rep.source = src;
    te->rep.rollback_step = R;
    te->rep.steps_lost = (failed_step1 - 1) - R > 0 ? (failed_step1 - 1) - R : 0;
    te->rep.grid = *job->grid;
    ckpt_restart(te, ctx, job, true);
    if (!strcmp(src, "disk") || ev.kind == WHALE_RECOVERY_SHRUNK) {
        /* a new layout (or disk state): images of the old one are useless */
        if ((rc = new_store(te, ctx, *job->e)))
            return -1;
        if (ev.kind != WHALE_RECOVERY_SHRUNK) {
            te_attach(te, *job->rank, whale_task_id(ctx));
        } else {
            te->reshaped = true;
            if (te_rehold(te, ctx))
                whale_warn("elastic: after the shrink the in-memory copies are local rollback "
                           "images only");
        }
    } else {
        te_attach(te, *job->rank, whale_task_id(ctx));
    }
    /* A new store holds nothing yet: it takes step R at once, whatever K
     * (R is a multiple of the K it was copied under, not necessarily of
     * the K now, up to 16 under load), so that a failure before the next
     * multiple of K finds R in every survivor's image and in the new
     * holders' copies instead of nothing. */
    const bool fresh = !strcmp(src, "disk") || ev.kind == WHALE_RECOVERY_SHRUNK;
    if (fresh)
        whale_red_set_every(te->red, 1);
    whale_red_snapshot(te->red, *job->e);
    if (fresh)
        whale_red_set_every(te->red, te->every > 0 ? te->every : 1);
    whale_red_get_stats(te->red, &te->prev);
    te->last_done = R;
    te->pending = true;
    te->redo_t0 = whale_now_s();
    (void)t0;
    (void)t_agreed;
    *redo_from = R;
    return 0;
}
