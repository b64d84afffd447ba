/* Rank 0's commit: wait for every rank's index in the temporary directory,
 * merge them into manifest.json, rename the directory to step-N, swap the
 * `latest` symlink, then remove checkpoints beyond the K newest. Until the
 * rename nothing under a step-N name changes, so a crash at any point
 * leaves the previous checkpoint and `latest` intact. */
#define _GNU_SOURCE
#include "save_internal.h"

#include "whale/error.h"
#include "whale/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Rank 0 after a failure: every other rank must be done with the
 * directory (published its index or its failure marker) before it goes,
 * else a rank still writing would leave files behind. Bounded by the
 * commit timeout (a dead rank never reports; its leftovers go at the next
 * commit's GC). */
static void wait_all_done(whale_ckpt *ck, struct persist *ps)
{
    double t0 = ckpt_now();
    char p[4096];
    for (int r = 1; r < ck->cfg.world;) {
        snprintf(p, sizeof p, "%s/rank-%05d.json", ps->tmpdir, r);
        bool done = access(p, F_OK) == 0;
        if (!done) {
            snprintf(p, sizeof p, "%s/rank-%05d.failed", ps->tmpdir, r);
            done = access(p, F_OK) == 0;
        }
        if (done) {
            r++;
            continue;
        }
        if (ckpt_now() - t0 > ck->cfg.commit_timeout_s)
            return;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

void ckpt_abort_rank(whale_ckpt *ck, struct persist *ps, int err)
{
    char p[4096];
    if (ck->cfg.rank == 0) {
        wait_all_done(ck, ps);
        ckpt_rm_rf(ps->tmpdir);
        whale_error("checkpoint step %lld failed (%s): removed %s; earlier checkpoints are "
                    "intact", (long long)ps->step, whale_strerror(err), ps->tmpdir);
        return;
    }
    /* The failure marker must appear even on a full disk: renaming this
     * rank's directory to rank-N.failed needs no space (an empty file is
     * the fallback when the directory was never made). */
    char rd[4096];
    snprintf(rd, sizeof rd, "%s/rank-%05d", ps->tmpdir, ck->cfg.rank);
    snprintf(p, sizeof p, "%s/rank-%05d.json", ps->tmpdir, ck->cfg.rank);
    unlink(p);
    snprintf(p, sizeof p, "%s/rank-%05d.failed", ps->tmpdir, ck->cfg.rank);
    if (rename(rd, p) != 0) { /* after the rename this rank touches nothing: rank 0 removes */
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, ps->fmode);
        if (fd >= 0)
            close(fd);
        else
            whale_error("checkpoint: cannot leave %s (%s): rank 0 waits for the commit timeout",
                        p, strerror(errno));
    }
    whale_error("checkpoint step %lld failed on rank %d (%s); rank 0 removes %s",
                (long long)ps->step, ck->cfg.rank, whale_strerror(err), ps->tmpdir);
}

static int wait_ranks(whale_ckpt *ck, struct persist *ps)
{
    double t0 = ckpt_now(), sleep_s = 0.002;
    int next = 1; /* ranks 0..next-1 are known to be done */
    char p[4096];
    while (next < ck->cfg.world) {
        snprintf(p, sizeof p, "%s/rank-%05d.json", ps->tmpdir, next);
        if (access(p, F_OK) == 0) {
            next++;
            continue;
        }
        for (int r = next; r < ck->cfg.world; r++) {
            snprintf(p, sizeof p, "%s/rank-%05d.failed", ps->tmpdir, r);
            if (access(p, F_OK) == 0) {
                whale_error("checkpoint step %lld: rank %d failed to write its shards (see "
                            "its log)", (long long)ps->step, r);
                return WHALE_EPEER;
            }
        }
        if (ckpt_now() - t0 > ck->cfg.commit_timeout_s) {
            whale_error("checkpoint step %lld: rank %d did not finish its shards within %d s "
                        "(dead rank?)", (long long)ps->step, next, ck->cfg.commit_timeout_s);
            return WHALE_ETIMEDOUT;
        }
        struct timespec ts = {0, (long)(sleep_s * 1e9)};
        nanosleep(&ts, NULL);
        if (sleep_s < 0.05)
            sleep_s *= 1.5;
    }
    return 0;
}

static int merge(whale_ckpt *ck, struct job *j, struct persist *ps, json_t **out)
{
    json_t *man = json_object(), *tensors = json_object(), *files = json_object(),
           *ranks = json_array(), *bases = json_object();
    json_int_t logical = 0, stored = 0, written = 0, linked = 0;
    json_t *idx0 = NULL;
    int rc = 0;
    for (int r = 0; r < ck->cfg.world && !rc; r++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/rank-%05d.json", ps->tmpdir, r);
        json_error_t je;
        json_t *idx = json_load_file(p, 0, &je);
        if (!idx) {
            whale_error("checkpoint step %lld: %s: %s", (long long)ps->step, p, je.text);
            rc = WHALE_ECORRUPT;
            break;
        }
        json_int_t st = json_integer_value(json_object_get(idx, "step"));
        const char *run = json_string_value(json_object_get(idx, "run"));
        if (st != j->step || !run || strcmp(run, ck->run_id)) {
            whale_error("checkpoint step %lld: %s belongs to step %lld of run %s (stale file)",
                        (long long)ps->step, p, (long long)st, run ? run : "?");
            json_decref(idx);
            rc = WHALE_ECORRUPT;
            break;
        }
        json_array_append_new(ranks, json_pack("{s:i, s:O, s:O}", "rank", r, "rng",
                                               json_object_get(idx, "rng"), "extra",
                                               json_object_get(idx, "extra")));
        size_t k;
        json_t *c;
        json_array_foreach(json_object_get(idx, "chunks"), k, c) {
            const char *tn = json_string_value(json_object_get(c, "tensor"));
            json_t *t = json_object_get(tensors, tn);
            if (!t) {
                t = json_pack("{s:O, s:O, s:O, s:[]}", "dtype", json_object_get(c, "dtype"),
                              "shape", json_object_get(c, "shape"), "kind",
                              json_object_get(c, "kind"), "chunks");
                json_object_set_new(tensors, tn, t);
            } else if (!json_equal(json_object_get(t, "dtype"), json_object_get(c, "dtype")) ||
                       !json_equal(json_object_get(t, "shape"), json_object_get(c, "shape"))) {
                whale_error("checkpoint step %lld: tensor %s: rank %d saved a different dtype "
                            "or global shape than an earlier rank", (long long)ps->step, tn, r);
                rc = WHALE_EINVAL;
                break;
            }
            json_t *rec = json_deep_copy(c);
            json_object_del(rec, "tensor");
            json_object_del(rec, "dtype");
            json_object_del(rec, "shape");
            json_object_del(rec, "kind");
            json_object_set_new(rec, "rank", json_integer(r));
            const char *db = json_string_value(json_object_get(rec, "delta_base"));
            if (db)
                json_object_set_new(bases, db, json_true());
            json_array_append_new(json_object_get(t, "chunks"), rec);
        }
        json_array_foreach(json_object_get(idx, "files"), k, c)
            json_object_set_new(files, json_string_value(json_object_get(c, "file")),
                                json_pack("{s:O, s:O, s:O, s:i}", "bytes", json_object_get(c, "bytes"),
                                          "key", json_object_get(c, "key"), "linked",
                                          json_object_get(c, "linked"), "rank", r));
        json_t *b = json_object_get(idx, "bytes");
        logical += json_integer_value(json_object_get(b, "logical"));
        stored += json_integer_value(json_object_get(b, "stored"));
        written += json_integer_value(json_object_get(b, "written"));
        linked += json_integer_value(json_object_get(b, "linked"));
        if (r == 0)
            idx0 = idx;
        else
            json_decref(idx);
    }
    if (rc) {
        json_decref(bases);
        json_decref(idx0);
        json_decref(man);
        json_decref(tensors);
        json_decref(files);
        json_decref(ranks);
        return rc;
    }
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(man, "format", json_string(CKPT_FORMAT));
    json_object_set_new(man, "version", json_integer(CKPT_VERSION));
    json_object_set_new(man, "step", json_integer(j->step));
    json_object_set_new(man, "samples", json_integer(j->samples));
    json_object_set_new(man, "loss_scale", json_real(j->loss_scale));
    json_object_set_new(man, "world", json_integer(ck->cfg.world));
    json_object_set_new(man, "run", json_string(ck->run_id));
    json_object_set_new(man, "created", json_string(ts));
    json_object_set(man, "plan", json_object_get(idx0, "plan"));
    json_object_set(man, "data", json_object_get(idx0, "data"));
    json_object_set(man, "extra", json_object_get(idx0, "extra"));
    json_object_set(man, "encoding", json_object_get(idx0, "encoding"));
    json_object_set_new(man, "bytes", json_pack("{s:I, s:I, s:I, s:I}", "logical", logical,
                                                "stored", stored, "written", written,
                                                "linked", linked));
    json_object_set_new(man, "ranks", ranks);
    json_object_set_new(man, "tensors", tensors);
    json_object_set_new(man, "files", files);
    if (json_object_size(bases)) { /* a delta: the full checkpoints it needs */
        json_t *bl = json_array();
        const char *bn;
        json_t *v;
        json_object_foreach(bases, bn, v)
            json_array_append_new(bl, json_string(bn));
        json_object_set_new(man, "delta_bases", bl);
    }
    json_decref(bases);
    json_decref(idx0);
    char dg[33];
    if (ckpt_manifest_digest(man, dg)) {
        json_decref(man);
        return WHALE_ENOMEM;
    }
    json_object_set_new(man, CKPT_DIGEST_KEY, json_string(dg));
    *out = man;
    return 0;
}

int ckpt_commit(whale_ckpt *ck, struct job *j, struct persist *ps)
{
    int rc = wait_ranks(ck, ps);
    if (rc)
        return rc;
    json_t *man = NULL;
    if ((rc = merge(ck, j, ps, &man)))
        return rc;
    char *txt = json_dumps(man, JSON_INDENT(1));
    json_t *bl = json_object_get(man, "delta_bases");
    char *btxt = bl ? json_dumps(bl, JSON_COMPACT) : NULL;
    json_decref(man);
    if (!txt || (bl && !btxt)) {
        free(txt);
        free(btxt);
        return WHALE_ENOMEM;
    }
    /* retention reads this marker, not every kept manifest */
    if (btxt) {
        rc = ckpt_write_file_renamed(ps->tmpdir, CKPT_DELTA_BASES, btxt, strlen(btxt), ps->fmode,
                                    &ck->fault);
        free(btxt);
        if (rc) {
            free(txt);
            return rc;
        }
    }
    rc = ckpt_write_file_renamed(ps->tmpdir, CKPT_MANIFEST, txt, strlen(txt), ps->fmode,
                                &ck->fault);
    free(txt);
    if (rc)
        return rc;
    /* a milestone: retention keeps it whatever `keep` says (marker file, so
     * that GC tells it with a stat and older readers ignore it) */
    bool asked = atomic_exchange(&ck->milestone_req, false);
    bool every = ck->cfg.milestone_every > 0 && j->step % ck->cfg.milestone_every == 0;
    bool mark = asked || every;
    if (mark) {
        char why[96];
        int wl = snprintf(why, sizeof why, "{\"step\":%lld,\"reason\":\"%s\"}\n",
                          (long long)j->step, asked ? "signal" : "every");
        if ((rc = ckpt_write_file_renamed(ps->tmpdir, CKPT_MILESTONE, why, (size_t)wl, ps->fmode,
                                         &ck->fault)))
            return rc;
    }
    /* the renames of every rank's index and of the files above, at once */
    ckpt_fsync_path(ps->tmpdir);
    /* A step directory of the same name (an earlier run that reached this
     * step) is moved aside first; resolve() survives a crash in between. */
    char old[4096];
    snprintf(old, sizeof old, "%s/.old-%s-%s-%u", ck->root, ps->final_name, ck->run_id, j->seq);
    bool moved = false;
    if (access(ps->finaldir, F_OK) == 0) {
        if (rename(ps->finaldir, old)) {
            whale_error("checkpoint: rename %s: %s", ps->finaldir, strerror(errno));
            return WHALE_EIO;
        }
        moved = true;
    }
    if (rename(ps->tmpdir, ps->finaldir)) {
        whale_error("checkpoint: rename %s -> %s: %s", ps->tmpdir, ps->finaldir, strerror(errno));
        return WHALE_EIO;
    }
    ckpt_fsync_path(ck->root);
    if ((rc = ckpt_symlink_atomic(ck->root, "latest", ps->final_name)))
        return rc;
    if (moved)
        ckpt_rm_rf(old);
    whale_info("checkpoint step %lld committed%s: %s", (long long)j->step,
               mark ? " (milestone)" : "", ps->finaldir);
    ckpt_gc(ck, ps->final_name, j->seq);
    return 0;
}

static int cmp_i64_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Adds the full checkpoints that step directory `step` is a delta against
 * (its CKPT_DELTA_BASES marker) to the set `need`. */
static void add_bases_of(const char *root, const char *name, json_t *need)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s/%s", root, name, CKPT_DELTA_BASES);
    json_t *a = json_load_file(p, 0, NULL);
    size_t k;
    json_t *v;
    json_array_foreach(a, k, v)
        if (json_is_string(v))
            json_object_set_new(need, json_string_value(v), json_true());
    json_decref(a);
}

static void add_bases(const char *root, int64_t step, json_t *need)
{
    char name[64];
    snprintf(name, sizeof name, "step-%08lld", (long long)step);
    add_bases_of(root, name, need);
}

/* Whether step directory `name` of the root is a milestone. */
static bool is_milestone(const char *root, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s/%s", root, name, CKPT_MILESTONE);
    return access(p, F_OK) == 0;
}

/* Milestones that are deltas keep their bases too. */
static void add_milestone_bases(const char *root, json_t *need)
{
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (ckpt_step_of(e->d_name) >= 0 && is_milestone(root, e->d_name))
            add_bases_of(root, e->d_name, need);
    if (d)
        closedir(d);
}

/* Remove step directories beyond the K newest, stale temporary directories
 * of other runs (or earlier saves of this run), and moved-aside leftovers.
 * Hard links make this the chunk GC: a bundle's data lives as long as one
 * kept step directory links it. */
void ckpt_gc(whale_ckpt *ck, const char *keep_name, unsigned seq)
{
    DIR *d = opendir(ck->root);
    if (!d)
        return;
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    char p[4096];
    char mine[256];
    snprintf(mine, sizeof mine, "-%s-", ck->run_id);
    while ((e = readdir(d))) {
        int64_t s = ckpt_step_of(e->d_name);
        if (s >= 0) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                int64_t *ns = realloc(steps, cap * sizeof *ns);
                if (!ns)
                    break;
                steps = ns;
            }
            steps[n++] = s;
        } else if (!strncmp(e->d_name, ".tmp-", 5) || !strncmp(e->d_name, ".old-", 5)) {
            /* .tmp-<step>-<run>-<seq>: ours with seq >= current may be in flight on another rank */
            const char *m = strstr(e->d_name, mine);
            if (m) {
                unsigned s2 = (unsigned)strtoul(strrchr(e->d_name, '-') + 1, NULL, 10);
                if (s2 >= seq)
                    continue;
            }
            snprintf(p, sizeof p, "%s/%s", ck->root, e->d_name);
            whale_debug("checkpoint: removing stale %s", p);
            ckpt_rm_rf(p);
        }
    }
    closedir(d);
    if (ck->cfg.keep > 0 && n > (size_t)ck->cfg.keep) {
        qsort(steps, n, sizeof *steps, cmp_i64_desc);
        /* the full checkpoints that the kept deltas need stay too */
        json_t *need = json_object();
        for (size_t i = 0; i < (size_t)ck->cfg.keep; i++)
            add_bases(ck->root, steps[i], need);
        add_milestone_bases(ck->root, need);
        for (size_t i = (size_t)ck->cfg.keep; i < n; i++) {
            snprintf(p, sizeof p, "%s/step-%08lld", ck->root, (long long)steps[i]);
            const char *base = strrchr(p, '/') + 1;
            if (!strcmp(base, keep_name) || is_milestone(ck->root, base))
                continue; /* milestones: never removed */
            if (json_object_get(need, base)) {
                whale_debug("checkpoint: keeping %s: a kept delta checkpoint needs it", p);
                continue;
            }
            whale_debug("checkpoint: removing %s (keep %d)", p, ck->cfg.keep);
            ckpt_rm_rf(p);
        }
        json_decref(need);
    }
    free(steps);
}
