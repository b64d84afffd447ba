/* The saver API: one background thread per handle, at most one save in
 * flight, errors kept until the caller's next call.
 *
 * The save thread copies a deferred snapshot at the caller's priority (the
 * optimizer waits for that copy), then persists (hash, encode, write,
 * commit) in a short-lived thread at a lower CPU priority
 * (cfg.priority): on a machine whose cores all run compute threads, a
 * persist at equal priority took their cores and every step slowed while
 * it ran. WHALE_TRACE records the spans "ckpt snapshot", "ckpt wait"
 * (the caller blocked on a save) and "ckpt persist" / "ckpt write". */
#define _GNU_SOURCE
#include "save_internal.h"

#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/trace.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void job_free(struct job *j)
{
    for (size_t i = 0; i < j->n; i++)
        free(j->p[i].name);
    free(j->p);
    free(j->plan);
    free(j->data);
    free(j->extra);
    free(j->rng);
    memset(j, 0, sizeof *j);
}

static char *dupn(const char *s) { return s ? strdup(s) : NULL; }

/* Copy every piece into the snapshot buffer (device pieces asynchronously
 * on the checkpoint's stream, host pieces meanwhile with memcpy). */
static int snapshot(whale_ckpt *ck, struct job *j)
{
    size_t off = 0;
    int rc = 0;
    for (size_t i = 0; i < j->n; i++) {
        if (j->p[i].device && !rc)
            rc = ckpt_dev_to_host_async(ck->buf + off, j->p[i].user, j->p[i].bytes, &ck->stream);
        else if (!j->p[i].device)
            memcpy(ck->buf + off, j->p[i].user, j->p[i].bytes);
        j->p[i].src = ck->buf + off;
        off += ckpt_snap_stride(j->p[i].bytes);
    }
    int r2 = ckpt_dev_sync(ck->stream);
    return rc ? rc : r2;
}

/* Runs one job to the end on this rank (and commits on rank 0). */
static int run_job(whale_ckpt *ck, struct job *j, whale_ckpt_stats *st)
{
    double t0 = ckpt_now();
    uint64_t tr0 = whale_trace_now();
    struct persist ps;
    memset(&ps, 0, sizeof ps);
    ps.step = j->step;
    ps.fmode = ckpt_file_mode(ck->cfg.private_files);
    ps.dmode = ckpt_dir_mode(ck->cfg.private_files);
    snprintf(ps.tmp_name, sizeof ps.tmp_name, ".tmp-%08lld-%s-%u", (long long)j->step,
             ck->run_id, j->seq);
    snprintf(ps.final_name, sizeof ps.final_name, "step-%08lld", (long long)j->step);
    ps.tmpdir = ckpt_path(ck->root, ps.tmp_name);
    ps.finaldir = ckpt_path(ck->root, ps.final_name);
    int rc = ps.tmpdir && ps.finaldir ? 0 : WHALE_ENOMEM;
    char rd[4096];
    if (!rc) {
        snprintf(rd, sizeof rd, "%s/rank-%05d", ps.tmpdir, ck->cfg.rank);
        ckpt_rm_rf(rd); /* a stale attempt under the same name */
        rc = ckpt_mkdir_p(rd, ps.dmode);
    }
    if (!rc)
        rc = ckpt_persist_rank(ck, j, &ps, st);
    if (!rc && ck->cfg.rank == 0)
        rc = ckpt_commit(ck, j, &ps);
    if (rc) /* a base that may not have been committed: the next save is full */
        ck->base_valid = false;
    if (rc && ps.tmpdir)
        ckpt_abort_rank(ck, &ps, rc);
    st->persist_s = ckpt_now() - t0;
    whale_trace_span("ckpt", "ckpt persist", tr0, -1, -1);
    free(ps.tmpdir);
    free(ps.finaldir);
    return rc;
}

/* Lowers the calling thread's CPU priority (threads it creates inherit
 * it). Best effort: a refusal leaves the caller's priority. */
void ckpt_lower_priority(enum whale_ckpt_priority prio)
{
    if (prio == WHALE_CKPT_PRIO_IDLE) {
        struct sched_param sp = {0};
        if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) == 0)
            return;
        prio = WHALE_CKPT_PRIO_LOW; /* no SCHED_IDLE here: the nice level */
    }
    if (prio == WHALE_CKPT_PRIO_LOW) {
        /* Linux: a thread's nice value is its own (PRIO_PROCESS of its tid) */
        id_t tid = (id_t)syscall(SYS_gettid);
        errno = 0;
        int cur = getpriority(PRIO_PROCESS, tid);
        if (errno == 0)
            (void)setpriority(PRIO_PROCESS, tid, cur + 10 > 19 ? 19 : cur + 10);
    }
}

struct persist_arg {
    whale_ckpt *ck;
    struct job *j;
    whale_ckpt_stats *st;
    int rc;
};

static void *persist_main(void *arg)
{
    struct persist_arg *a = arg;
    whale_trace_thread_name("ckpt persist");
    ckpt_lower_priority(a->ck->cfg.priority);
    a->rc = run_job(a->ck, a->j, a->st);
    return NULL;
}

/* run_job at cfg.priority: in a thread of its own, since an unprivileged
 * thread cannot raise its priority again for the next snapshot copy. */
static int run_job_bg(whale_ckpt *ck, struct job *j, whale_ckpt_stats *st)
{
    if (ck->cfg.priority == WHALE_CKPT_PRIO_NORMAL)
        return run_job(ck, j, st);
    struct persist_arg a = {ck, j, st, 0};
    pthread_t th;
    if (pthread_create(&th, NULL, persist_main, &a))
        return run_job(ck, j, st); /* no thread: at this priority, still correct */
    pthread_join(th, NULL);
    return a.rc;
}

static void *worker(void *arg)
{
    whale_ckpt *ck = arg;
    whale_trace_thread_name("ckpt save");
    pthread_mutex_lock(&ck->mu);
    for (;;) {
        while (!ck->stop && !ck->has_job)
            pthread_cond_wait(&ck->cv, &ck->mu);
        if (!ck->has_job)
            break;
        ck->has_job = false;
        bool need_snap = !ck->snap_done;
        pthread_mutex_unlock(&ck->mu);

        int rc = 0;
        if (need_snap) {
            double t0 = ckpt_now();
            uint64_t tr0 = whale_trace_now();
            if (ck->snap_coop)
                ckpt_snap_help(ck); /* the fence may be copying slices too */
            else
                rc = snapshot(ck, &ck->job);
            pthread_mutex_lock(&ck->mu);
            while (ck->snap_coop && !ck->snap_done)
                pthread_cond_wait(&ck->cv, &ck->mu);
            ck->cur.snapshot_s = ckpt_now() - t0;
            whale_trace_span("ckpt", "ckpt snapshot", tr0, -1, -1);
            ck->snap_done = true;
            pthread_cond_broadcast(&ck->cv);
            pthread_mutex_unlock(&ck->mu);
        }
        whale_ckpt_stats st;
        pthread_mutex_lock(&ck->mu);
        st = ck->cur;
        pthread_mutex_unlock(&ck->mu);
        if (!rc)
            rc = run_job_bg(ck, &ck->job, &st);

        pthread_mutex_lock(&ck->mu);
        st.stall_s = ck->cur.stall_s; /* fence time may have been added meanwhile */
        ck->last = st;
        job_free(&ck->job);
        if (rc)
            ck->pending_err = rc;
        ck->busy = false;
        pthread_cond_broadcast(&ck->cv);
    }
    pthread_mutex_unlock(&ck->mu);
    return NULL;
}

/* An id of this launch that every rank derives alike: it names the
 * temporary directory, so ranks of one save meet in the same one and a
 * dead launch's leftovers are told apart. NULL when there is none. */
static char *default_run_id(int world)
{
    const char *s = whale_knob_getenv("WHALE_CKPT_RUN_ID");
    if (s && *s)
        return strdup(s);
    const char *job = getenv("SLURM_JOB_ID"), *stp = getenv("SLURM_STEP_ID"),
               *rs = getenv("SLURM_RESTART_COUNT");
    char b[256];
    if (job) {
        snprintf(b, sizeof b, "j%s.%s.%s", job, stp ? stp : "x", rs ? rs : "0");
        return strdup(b);
    }
    /* whale-run (its embedded PMIx server) and other PMIx launchers */
    const char *ns = getenv("PMIX_NAMESPACE");
    if (ns && *ns)
        return strdup(ns);
    if (world > 1)
        return NULL;
    snprintf(b, sizeof b, "p%ld", (long)getpid()); /* one process: unique enough */
    return strdup(b);
}

int whale_ckpt_open(const whale_ckpt_config *cfg, whale_ckpt **out)
{
    *out = NULL;
    if (!cfg || !cfg->root || !*cfg->root) {
        whale_error("checkpoint: no directory (set --whale-ckpt-dir or WHALE_CKPT_DIR)");
        return WHALE_EINVAL;
    }
    if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world) {
        whale_error("checkpoint: rank %d outside [0, %d)", cfg->rank, cfg->world);
        return WHALE_ERANGE;
    }
    if (cfg->chunk_bytes < 4096 || cfg->quant_block < 1 || cfg->zstd_level < 0 ||
        cfg->zstd_level > 19 || cfg->keep < 0 || cfg->commit_timeout_s < 1 ||
        cfg->writers < 0 || cfg->writers > CKPT_MAX_WRITERS) {
        whale_error("checkpoint: bad settings (chunk >= 4 KiB, quant block >= 1, zstd 0..19, "
                    "keep >= 0, commit timeout >= 1 s, writers 0..%d)", CKPT_MAX_WRITERS);
        return WHALE_ERANGE;
    }
    whale_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        return WHALE_ENOMEM;
    ck->cfg = *cfg;
    ck->root = strdup(cfg->root);
    ck->run_id = cfg->run_id && *cfg->run_id ? strdup(cfg->run_id) : default_run_id(cfg->world);
    if (!ck->run_id && cfg->world > 1) {
        whale_error("checkpoint: %d ranks but no launch id common to them (no SLURM_JOB_ID, "
                    "PMIX_NAMESPACE or WHALE_CKPT_RUN_ID): set WHALE_CKPT_RUN_ID", cfg->world);
        free(ck->root);
        free(ck);
        return WHALE_EINVAL;
    }
    for (char *p = ck->run_id; p && *p; p++) /* '-' separates fields of tmp names */
        if (*p == '-' || *p == '/' || *p == ' ')
            *p = '_';
    ck->cfg.root = ck->root;
    ck->cfg.run_id = ck->run_id;
    if (ck->cfg.writers == 0)
        ck->cfg.writers = 2;
    ckpt_fault_from_env(&ck->fault);
    ck->zc = ZSTD_createCCtx();
    pthread_mutex_init(&ck->mu, NULL);
    pthread_cond_init(&ck->cv, NULL);
    int rc = ck->root && ck->run_id && ck->zc ? 0 : WHALE_ENOMEM;
    if (!rc)
        rc = ckpt_mkdir_p(ck->root, ckpt_dir_mode(cfg->private_files));
    if (!rc && ck->cfg.async) {
        if (pthread_create(&ck->th, NULL, worker, ck))
            rc = WHALE_ENOMEM;
        else
            ck->have_thread = true;
    }
    if (rc) {
        whale_ckpt_close(ck);
        return rc;
    }
    if (ck->cfg.incremental)
        ckpt_prev_from_latest(ck);
    ck->last_save_time = ckpt_now();
    *out = ck;
    return 0;
}

static int check_piece(const whale_ckpt_piece *p, size_t i)
{
    char what[512];
    snprintf(what, sizeof what, "piece %zu (%s)", i, p->name ? p->name : "(no name)");
    if (!p->name || !*p->name || strlen(p->name) > 400 || strchr(p->name, '#')) {
        whale_error("checkpoint: %s: needs a name of 1..400 characters without '#'", what);
        return WHALE_EINVAL;
    }
    if (!ckpt_dtype_size(p->dtype) || (int)p->dtype == (int)CKPT_INT8) {
        whale_error("checkpoint: %s: unsupported dtype %d", what, (int)p->dtype);
        return WHALE_EINVAL;
    }
    ckpt_region r;
    ckpt_region_from_piece(&r, p);
    int rc = ckpt_region_check(&r, what);
    if (rc)
        return rc;
    if (p->device && !ckpt_dev_available()) {
        whale_error("checkpoint: %s is GPU memory but this build has no CUDA", what);
        return WHALE_ENOTSUP;
    }
    if (!p->data && ckpt_region_numel(&r) > 0) {
        whale_error("checkpoint: %s: no data pointer", what);
        return WHALE_EINVAL;
    }
    return 0;
}

static int take_pending(whale_ckpt *ck)
{
    int e = ck->pending_err;
    ck->pending_err = 0;
    return e;
}

int whale_ckpt_save(whale_ckpt *ck, const whale_ckpt_meta *meta, const whale_ckpt_piece *pieces,
                    size_t n, bool *skipped)
{
    double t0 = ckpt_now();
    if (skipped)
        *skipped = false;
    if (!ck || !meta || (n && !pieces))
        return WHALE_EINVAL;
    pthread_mutex_lock(&ck->mu);
    int e = take_pending(ck);
    if (e) {
        pthread_mutex_unlock(&ck->mu);
        whale_error("checkpoint: the previous background save failed (%s); step %lld not saved",
                    whale_strerror(e), (long long)meta->step);
        return e;
    }
    if (ck->busy) {
        if (ck->cfg.busy == WHALE_CKPT_BUSY_SKIP) {
            pthread_mutex_unlock(&ck->mu);
            whale_info("checkpoint step %lld skipped: the previous save is still running",
                       (long long)meta->step);
            if (skipped)
                *skipped = true;
            return 0;
        }
        uint64_t tw = whale_trace_now();
        while (ck->busy)
            pthread_cond_wait(&ck->cv, &ck->mu);
        whale_trace_span("ckpt", "ckpt wait (previous save)", tw, -1, -1);
        if ((e = take_pending(ck))) {
            pthread_mutex_unlock(&ck->mu);
            return e;
        }
    }
    pthread_mutex_unlock(&ck->mu);

    for (size_t i = 0; i < n; i++) {
        int rc = check_piece(&pieces[i], i);
        if (rc)
            return rc;
    }
    struct job j;
    memset(&j, 0, sizeof j);
    j.p = calloc(n ? n : 1, sizeof *j.p);
    if (!j.p)
        return WHALE_ENOMEM;
    j.n = n;
    size_t total = 0;
    bool any_device = false, any_transient = false;
    whale_ckpt_stats st;
    memset(&st, 0, sizeof st);
    for (size_t i = 0; i < n; i++) {
        struct job_piece *q = &j.p[i];
        q->name = strdup(pieces[i].name);
        q->dtype = pieces[i].dtype;
        q->kind = pieces[i].kind;
        ckpt_region_from_piece(&q->reg, &pieces[i]);
        q->bytes = (size_t)ckpt_region_numel(&q->reg) * ckpt_dtype_size(q->dtype);
        q->user = pieces[i].data;
        q->src = pieces[i].data;
        q->device = pieces[i].device;
        any_device |= q->device;
        any_transient |= pieces[i].transient;
        total += ckpt_snap_stride(q->bytes);
        st.bytes_logical += q->bytes;
        if (!q->name) {
            job_free(&j);
            return WHALE_ENOMEM;
        }
    }
    j.step = meta->step;
    j.samples = meta->samples;
    j.loss_scale = meta->loss_scale;
    j.plan = dupn(meta->plan_json);
    j.data = dupn(meta->data_json ? meta->data_json : ck->data_json);
    j.extra = dupn(meta->extra_json);
    if (meta->rng_len) {
        j.rng = malloc(meta->rng_len);
        if (j.rng)
            memcpy(j.rng, meta->rng, meta->rng_len);
        j.rng_len = meta->rng_len;
    }
    j.seq = ++ck->seq;
    st.step = j.step;

    if (!ck->cfg.async && !any_device) {
        /* synchronous: persist straight from the caller's tensors */
        int rc = run_job(ck, &j, &st);
        job_free(&j);
        st.stall_s = ckpt_now() - t0;
        ck->last = st;
        ck->last_save_time = ckpt_now();
        return rc;
    }
    if (total > ck->cap || (any_device && !ck->buf_pinned)) {
        ckpt_host_free(ck->buf, ck->buf_pinned);
        ck->buf = ckpt_host_alloc(total, any_device, &ck->buf_pinned);
        ck->cap = ck->buf ? total : 0;
        if (!ck->buf) {
            whale_error("checkpoint: cannot allocate a %zu-byte snapshot buffer", total);
            job_free(&j);
            return WHALE_ENOMEM;
        }
    }
    /* transient pieces go away when this returns: a deferred snapshot
     * would read freed memory, so they are copied now in every mode */
    bool snap_now = ck->cfg.snapshot == WHALE_CKPT_SNAPSHOT_COPY || !ck->cfg.async ||
                    any_transient;
    /* an async copy of host pieces: the save thread copies slices alongside
     * this one (a deferred snapshot fenced before returning), about half
     * the stall on two cores */
    bool copy_shared = snap_now && ck->cfg.async && !any_device;
    if (copy_shared)
        snap_now = false;
    if (snap_now) {
        double s0 = ckpt_now();
        uint64_t tr0 = whale_trace_now();
        int rc = snapshot(ck, &j);
        st.snapshot_s = ckpt_now() - s0;
        whale_trace_span("ckpt", "ckpt snapshot", tr0, -1, -1);
        if (rc) {
            job_free(&j);
            return rc;
        }
    }
    if (!ck->cfg.async) { /* synchronous, from the staged copy of device pieces */
        int rc = run_job(ck, &j, &st);
        job_free(&j);
        st.stall_s = ckpt_now() - t0;
        ck->last = st;
        ck->last_save_time = ckpt_now();
        return rc;
    }
    bool coop = !snap_now && ckpt_snap_prepare(ck, &j);
    pthread_mutex_lock(&ck->mu);
    ck->job = j;
    ck->snap_coop = coop;
    ck->snap_done = snap_now || (coop && ck->snap_slices == 0);
    st.stall_s = ckpt_now() - t0;
    ck->cur = st;
    ck->busy = true;
    ck->has_job = true;
    ck->last_save_time = ckpt_now();
    pthread_cond_broadcast(&ck->cv);
    pthread_mutex_unlock(&ck->mu);
    return copy_shared ? whale_ckpt_fence(ck) : 0;
}

int whale_ckpt_fence(whale_ckpt *ck)
{
    if (!ck)
        return WHALE_EINVAL;
    double t0 = ckpt_now();
    uint64_t tr0 = whale_trace_now();
    pthread_mutex_lock(&ck->mu);
    bool waited = false;
    if (ck->busy && !ck->snap_done && ck->snap_coop) {
        /* copy what is left alongside the save thread instead of sleeping */
        pthread_mutex_unlock(&ck->mu);
        ckpt_snap_help(ck);
        pthread_mutex_lock(&ck->mu);
        waited = true;
    }
    while (ck->busy && !ck->snap_done) {
        pthread_cond_wait(&ck->cv, &ck->mu);
        waited = true;
    }
    if (waited || ck->busy)
        ck->cur.stall_s += ckpt_now() - t0;
    pthread_mutex_unlock(&ck->mu);
    if (waited)
        whale_trace_span("ckpt", "ckpt wait (snapshot)", tr0, -1, -1);
    return 0;
}

bool whale_ckpt_in_flight(whale_ckpt *ck)
{
    if (!ck)
        return false;
    pthread_mutex_lock(&ck->mu);
    bool b = ck->busy;
    pthread_mutex_unlock(&ck->mu);
    return b;
}

void whale_ckpt_mark_milestone(whale_ckpt *ck)
{
    if (ck)
        atomic_store(&ck->milestone_req, true);
}

int whale_ckpt_poll(whale_ckpt *ck)
{
    if (!ck)
        return WHALE_EINVAL;
    pthread_mutex_lock(&ck->mu);
    int e = ck->busy ? 0 : take_pending(ck);
    pthread_mutex_unlock(&ck->mu);
    return e;
}

int whale_ckpt_wait(whale_ckpt *ck)
{
    if (!ck)
        return WHALE_EINVAL;
    pthread_mutex_lock(&ck->mu);
    while (ck->busy)
        pthread_cond_wait(&ck->cv, &ck->mu);
    int e = take_pending(ck);
    pthread_mutex_unlock(&ck->mu);
    return e;
}

bool whale_ckpt_due(whale_ckpt *ck, int64_t step)
{
    if (!ck)
        return false;
    if (ck->cfg.every_steps > 0 && step > 0 && step % ck->cfg.every_steps == 0)
        return true;
    if (ck->cfg.every_seconds > 0 && ckpt_now() - ck->last_save_time >= ck->cfg.every_seconds)
        return true;
    return false;
}

void whale_ckpt_last_stats(whale_ckpt *ck, whale_ckpt_stats *out)
{
    pthread_mutex_lock(&ck->mu);
    *out = ck->last;
    pthread_mutex_unlock(&ck->mu);
}

int whale_ckpt_close(whale_ckpt *ck)
{
    if (!ck)
        return 0;
    int rc = 0;
    if (ck->have_thread) {
        pthread_mutex_lock(&ck->mu);
        while (ck->busy)
            pthread_cond_wait(&ck->cv, &ck->mu);
        ck->stop = true;
        pthread_cond_broadcast(&ck->cv);
        pthread_mutex_unlock(&ck->mu);
        pthread_join(ck->th, NULL);
    }
    rc = take_pending(ck);
    ckpt_prev_clear(ck);
    job_free(&ck->job);
    ZSTD_freeCCtx(ck->zc);
    pthread_mutex_destroy(&ck->mu);
    pthread_cond_destroy(&ck->cv);
    ckpt_host_free(ck->buf, ck->buf_pinned);
    ckpt_host_free(ck->base, ck->base_pinned);
    ckpt_dev_stream_destroy(ck->stream);
    free(ck->root);
    free(ck->run_id);
    free(ck->data_json);
    free(ck);
    return rc;
}

int whale_ckpt_set_data_json(whale_ckpt *ck, const char *json)
{
    char *d = NULL;
    if (json && !(d = strdup(json)))
        return WHALE_ENOMEM;
    free(ck->data_json);
    ck->data_json = d;
    return 0;
}
