/* The redundancy store of one rank: two local images (the last two
 * snapshots, so a survivor can go back to whichever step everybody
 * completed) and the refresh of the holder's copy.
 *
 * Refresh protocol for snapshot N (slot s = the older of the two):
 *   1. wait for the puts of the previous refresh (they overlapped a whole
 *      step of compute): the holder now has a complete copy in slot 1-s;
 *   2. serialise N into local slot s;
 *   3. put header + payload into the holder's slot s (non-blocking; their
 *      order does not matter: the header's xxh3 over the payload is the
 *      commit, so a payload cut short by a failure reads as torn, and slot
 *      1-s is intact). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "elastic/elastic_internal.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/clock.h"

bool whale_red_piece_replicated(const struct whale_tensor_piece *p, int dp, int zero)
{
    if (dp <= 1 || zero >= 3 || p->expert)
        return false;
    return zero == 0 || p->kind == WHALE_TENSOR_PARAM;
}

size_t red_piece_bytes(const struct whale_tensor_piece *p)
{
    return (size_t)(p->flat_end - p->flat_begin) * whale_dtype_size(p->dtype);
}

/* ---- layout: sizes and a hash of every piece's description ---------------- */
struct layout_walk {
    int dp, zero;
    XXH3_state_t *h;
    size_t uniq, repl;
    int n;
    struct red_dirent *dir; /* red_dir_write: the entries, else NULL */
};

static int layout_fn(const struct whale_tensor_piece *p, void *user)
{
    struct layout_walk *w = user;
    bool rep = whale_red_piece_replicated(p, w->dp, w->zero);
    XXH3_64bits_update(w->h, p->name, strnlen(p->name, sizeof p->name));
    int32_t meta[4] = { (int32_t)p->kind, (int32_t)p->dtype, (int32_t)p->ndim, rep };
    XXH3_64bits_update(w->h, meta, sizeof meta);
    XXH3_64bits_update(w->h, p->global_shape, sizeof p->global_shape);
    XXH3_64bits_update(w->h, p->tp_offset, sizeof p->tp_offset);
    XXH3_64bits_update(w->h, p->tp_shape, sizeof p->tp_shape);
    int64_t fr[2] = { p->flat_begin, p->flat_end };
    XXH3_64bits_update(w->h, fr, sizeof fr);
    if (p->flat_end < p->flat_begin || !p->data) {
        whale_error("redundancy: piece %s (%s) has no host bytes to copy", p->name,
                    whale_tensor_kind_name(p->kind));
        return WHALE_EINVAL;
    }
    if (rep)
        w->repl += red_piece_bytes(p);
    else
        w->uniq += red_piece_bytes(p);
    if (w->dir) {
        struct red_dirent d = { .name = XXH64(p->name, strnlen(p->name, sizeof p->name), 0),
                                .kind = (int32_t)p->kind, .dtype = (int32_t)p->dtype,
                                .begin = p->flat_begin, .end = p->flat_end, .rep = rep };
        memcpy(&w->dir[w->n], &d, sizeof d);
    }
    w->n++;
    return 0;
}

int red_layout(whale_engine *e, int dp, int zero, uint64_t *hash, size_t *uniq, size_t *repl,
               size_t *dir_bytes)
{
    struct layout_walk w = { .dp = dp, .zero = zero, .h = XXH3_createState() };
    if (!w.h)
        return WHALE_ENOMEM;
    XXH3_64bits_reset(w.h);
    int rc = whale_engine_tensors(e, layout_fn, &w);
    *hash = XXH3_64bits_digest(w.h);
    XXH3_freeState(w.h);
    *uniq = w.uniq;
    *repl = w.repl;
    if (dir_bytes)
        *dir_bytes = sizeof(uint64_t) + (size_t)w.n * sizeof(struct red_dirent);
    return rc;
}

/* The directory at dst (red_layout's dir_bytes of room). */
int red_dir_write(whale_engine *e, int dp, int zero, unsigned char *dst)
{
    struct layout_walk w = { .dp = dp, .zero = zero, .h = XXH3_createState(),
                             .dir = (struct red_dirent *)(dst + sizeof(uint64_t)) };
    if (!w.h)
        return WHALE_ENOMEM;
    XXH3_64bits_reset(w.h);
    int rc = whale_engine_tensors(e, layout_fn, &w);
    XXH3_freeState(w.h);
    uint64_t n = (uint64_t)w.n;
    memcpy(dst, &n, sizeof n);
    return rc;
}

/* ---- copying pieces between the engine and an image ---------------------- */
struct copy_walk {
    int dp, zero;
    bool to_image;      /* engine -> image, else image -> engine */
    bool with_repl;     /* the image holds replicated pieces (after the unique ones) */
    unsigned char *uniq, *repl; /* cursors */
};

static int copy_fn(const struct whale_tensor_piece *p, void *user)
{
    struct copy_walk *w = user;
    bool rep = whale_red_piece_replicated(p, w->dp, w->zero);
    if (rep && !w->with_repl)
        return 0;
    unsigned char **cur = rep ? &w->repl : &w->uniq;
    size_t n = red_piece_bytes(p);
    if (w->to_image)
        memcpy(*cur, p->data, n);
    else
        memcpy(p->data, *cur, n);
    *cur += n;
    return 0;
}

int red_copy(whale_engine *e, int dp, int zero, bool to_image, bool with_repl,
             unsigned char *payload, size_t uniq)
{
    struct copy_walk w = { .dp = dp, .zero = zero, .to_image = to_image, .with_repl = with_repl,
                           .uniq = payload, .repl = payload + uniq };
    return whale_engine_tensors(e, copy_fn, &w);
}

/* ---- the store ------------------------------------------------------------------ */
int whale_red_every_from_env(int dflt, int *every)
{
    const char *s = whale_knob_getenv("WHALE_REDUNDANCY_EVERY");
    *every = dflt;
    if (!s || !*s || !strcmp(s, "auto"))
        return 0;
    /* auto:MIN (testing): adaptive, K at least MIN from its first
     * evaluation on (K starts at 1 all the same) */
    const bool floor = !strncmp(s, "auto:", 5);
    char *end;
    long v = strtol(floor ? s + 5 : s, &end, 10);
    if (end == (floor ? s + 5 : s) || *end || v < (floor ? 1 : 0) || v > (floor ? 16 : 1000000)) {
        whale_error("WHALE_REDUNDANCY_EVERY=%s: expected an integer in 0..1000000 (steps between "
                    "refreshes of the in-memory copy; 0 disables it), auto or auto:MIN (MIN 1..16)",
                    s);
        return WHALE_EINVAL;
    }
    if (!floor)
        *every = (int)v;
    return 0;
}

int whale_red_create(whale_engine *e, const struct whale_red_config *c, whale_red **out)
{
    *out = NULL;
    if (c->dp < 1 || c->every < 1 || c->zero < 0 || c->zero > 3) {
        whale_error("redundancy: dp=%d zero=%d every=%d: expected dp >= 1, zero 0..3, every >= 1",
                    c->dp, c->zero, c->every);
        return WHALE_EINVAL;
    }
    whale_red *r = calloc(1, sizeof *r);
    if (!r)
        return WHALE_ENOMEM;
    r->cfg = *c;
    int rc = red_layout(e, c->dp, c->zero, &r->layout, &r->uniq, &r->repl, &r->dir_bytes);
    if (rc) {
        free(r);
        return rc;
    }
    r->local_bytes = sizeof(struct red_hdr) + sizeof(struct whale_train_state) + r->dir_bytes +
                     r->uniq + r->repl;
    r->remote_payload = sizeof(struct whale_train_state) + r->dir_bytes + r->uniq +
                        (c->copy_all ? r->repl : 0);
    for (int i = 0; i < 2; i++) {
        r->slot[i] = malloc(r->local_bytes);
        r->slot_step[i] = -1;
        if (!r->slot[i]) {
            whale_red_destroy(r);
            whale_error("redundancy: cannot allocate 2 x %zu bytes for the rollback images",
                        r->local_bytes);
            return WHALE_ENOMEM;
        }
    }
    r->newest = -1;
    *out = r;
    return 0;
}

/* A put that failed may still read its source until whale_finalize (see
 * whale/comm.h): such images are never freed, only kept reachable here. */
static unsigned char *orphaned[32];
static int n_orphaned;

void whale_red_destroy(whale_red *r)
{
    if (!r)
        return;
    bool failed = whale_red_flush(r) != 0 || r->put_failed;
    whale_red_set_target(r, NULL);
    for (int i = 0; i < 2; i++) {
        if (failed && n_orphaned < 32)
            orphaned[n_orphaned++] = r->slot[i];
        else
            free(r->slot[i]);
    }
    free(r);
}

size_t whale_red_remote_slot_bytes(const whale_red *r)
{
    return sizeof(struct red_hdr) + r->remote_payload;
}

size_t whale_red_local_slot_bytes(const whale_red *r)
{
    return r->local_bytes;
}

int whale_red_set_target(whale_red *r, const struct whale_red_target *t)
{
    if (r->have_tgt) {
        whale_red_flush(r);
        if (r->tgt.release)
            r->tgt.release(r->tgt.u);
        r->have_tgt = false;
    }
    if (t) {
        r->tgt = *t;
        r->have_tgt = true;
    }
    return 0;
}

int whale_red_flush(whale_red *r)
{
    int rc = 0;
    if (!r->have_tgt) {
        r->req[0] = r->req[1] = NULL;
        return 0;
    }
    double t0 = whale_now_s();
    for (int i = 0; i < 2; i++)
        if (r->req[i]) {
            int wrc = r->tgt.wait(r->tgt.u, r->req[i]);
            r->req[i] = NULL;
            if (wrc && !rc)
                rc = wrc;
        }
    r->stats.t_wait += whale_now_s() - t0;
    if (rc)
        r->put_failed = true;
    return rc;
}

int whale_red_snapshot(whale_red *r, whale_engine *e)
{
    struct whale_train_state ts;
    whale_engine_get_state(e, &ts);
    if (ts.step % r->cfg.every)
        return 0;
    int prc = whale_red_flush(r); /* 1. the previous refresh has landed */
    if (prc)
        whale_warn("redundancy: refresh of step %lld to the holder failed: %s (the local "
                   "rollback image is kept)", (long long)r->slot_step[r->newest < 0 ? 0 : r->newest],
                   whale_strerror(prc));
    double t0 = whale_now_s();
    /* the older slot (K may change between snapshots: never by step) */
    int s = r->newest < 0 ? 0 : 1 - r->newest;
    unsigned char *img = r->slot[s];
    struct red_hdr *h = (struct red_hdr *)img;
    unsigned char *payload = img + sizeof *h;
    r->slot_step[s] = -1; /* being rewritten */
    memcpy(payload, &ts, sizeof ts);
    int rc = red_dir_write(e, r->cfg.dp, r->cfg.zero, payload + sizeof ts);
    if (!rc)
        rc = red_copy(e, r->cfg.dp, r->cfg.zero, true, true, payload + sizeof ts + r->dir_bytes,
                      r->uniq);
    if (rc)
        return rc;
    /* the header describes the remote slot (state + unique [+ replicated]) */
    memset(h, 0, sizeof *h);
    h->magic = RED_MAGIC;
    h->version = RED_VERSION;
    h->flags = r->cfg.copy_all ? RED_F_ALL : 0;
    h->step = ts.step;
    h->layout = r->layout;
    h->bytes = r->remote_payload;
    h->dp = r->cfg.dp;
    h->zero = r->cfg.zero;
    h->xxh = XXH3_64bits_withSeed(payload, r->remote_payload, (XXH64_hash_t)ts.step);
    r->slot_step[s] = ts.step;
    r->newest = s;
    r->stats.snapshots++;
    r->stats.local_bytes = r->local_bytes;
    r->stats.dir_bytes = r->dir_bytes;
    r->stats.t_serialize += whale_now_s() - t0;
    if (!r->have_tgt || prc)
        return prc;
    /* 3. the puts overlap the next step */
    size_t off = (size_t)s * whale_red_remote_slot_bytes(r);
    rc = r->tgt.put(r->tgt.u, off + sizeof *h, payload, r->remote_payload, &r->req[0]);
    if (!rc)
        rc = r->tgt.put(r->tgt.u, off, h, sizeof *h, &r->req[1]);
    if (!rc) {
        r->stats.refreshes++;
        r->stats.remote_bytes = whale_red_remote_slot_bytes(r);
    }
    return rc;
}

void whale_red_set_every(whale_red *r, int every)
{
    if (r && every >= 1)
        r->cfg.every = every;
}

bool whale_red_fits(const whale_red *r, whale_engine *e)
{
    uint64_t lay;
    size_t u, p;
    return !red_layout(e, r->cfg.dp, r->cfg.zero, &lay, &u, &p, NULL) && lay == r->layout &&
           u == r->uniq && p == r->repl;
}

void whale_red_local_steps(const whale_red *r, int64_t steps[2])
{
    int n = r->newest;
    steps[0] = n >= 0 ? r->slot_step[n] : -1;
    steps[1] = n >= 0 ? r->slot_step[1 - n] : -1;
}

int whale_red_rollback(whale_red *r, whale_engine *e, int64_t step)
{
    int s = -1;
    for (int i = 0; i < 2; i++)
        if (r->slot_step[i] == step && step >= 0)
            s = i;
    if (s < 0) {
        int64_t st[2];
        whale_red_local_steps(r, st);
        whale_error("rollback to step %lld: this rank holds steps %lld and %lld only",
                    (long long)step, (long long)st[0], (long long)st[1]);
        return WHALE_ENOENT;
    }
    uint64_t lay;
    size_t u, p;
    int rc = red_layout(e, r->cfg.dp, r->cfg.zero, &lay, &u, &p, NULL);
    if (rc)
        return rc;
    if (lay != r->layout || u != r->uniq || p != r->repl) {
        whale_error("rollback to step %lld: the engine's layout differs from the image's",
                    (long long)step);
        return WHALE_EDATA;
    }
    const unsigned char *payload = r->slot[s] + sizeof(struct red_hdr);
    struct whale_train_state ts;
    memcpy(&ts, payload, sizeof ts);
    rc = red_copy(e, r->cfg.dp, r->cfg.zero, false, true,
                  (unsigned char *)payload + sizeof ts + r->dir_bytes, r->uniq);
    if (!rc)
        rc = whale_engine_set_state(e, &ts);
    return rc;
}

void whale_red_get_stats(const whale_red *r, struct whale_red_stats *s)
{
    *s = r->stats;
}

/* ---- the holder's view -------------------------------------------------------- */
static bool slot_ok(const unsigned char *slot, size_t slot_bytes, bool *torn)
{
    const struct red_hdr *h = (const struct red_hdr *)slot;
    *torn = false;
    if (h->magic != RED_MAGIC || h->version != RED_VERSION)
        return false; /* never written */
    if (h->bytes + sizeof *h > slot_bytes || h->step < 0 ||
        h->bytes < sizeof(struct whale_train_state) ||
        XXH3_64bits_withSeed(slot + sizeof *h, h->bytes, (XXH64_hash_t)h->step) != h->xxh) {
        *torn = true;
        return false;
    }
    const struct whale_train_state *ts = (const void *)(slot + sizeof *h);
    if (ts->step != h->step) {
        *torn = true;
        return false;
    }
    return true;
}

void whale_red_scan(const void *mem, size_t slot_bytes, int64_t steps[2], bool torn[2])
{
    for (int i = 0; i < 2; i++) {
        const unsigned char *slot = (const unsigned char *)mem + (size_t)i * slot_bytes;
        bool t;
        steps[i] = slot_ok(slot, slot_bytes, &t) ? ((const struct red_hdr *)slot)->step : -1;
        if (torn)
            torn[i] = t;
    }
}

int whale_red_restore_slot(whale_engine *e, const void *mem, size_t slot_bytes, int64_t step,
                           bool *complete)
{
    int64_t st[2];
    bool torn[2];
    whale_red_scan(mem, slot_bytes, st, torn);
    int s = st[0] == step && step >= 0 ? 0 : st[1] == step && step >= 0 ? 1 : -1;
    if (s < 0) {
        whale_error("restore of step %lld from a held copy: the holder has steps %lld%s and "
                    "%lld%s", (long long)step, (long long)st[0], torn[0] ? " (torn)" : "",
                    (long long)st[1], torn[1] ? " (torn)" : "");
        return WHALE_ENOENT;
    }
    const unsigned char *slot = (const unsigned char *)mem + (size_t)s * slot_bytes;
    const struct red_hdr *h = (const struct red_hdr *)slot;
    uint64_t lay;
    size_t u, p, db;
    int rc = red_layout(e, h->dp, h->zero, &lay, &u, &p, &db);
    if (rc)
        return rc;
    bool all = h->flags & RED_F_ALL;
    size_t want = sizeof(struct whale_train_state) + db + u + (all ? p : 0);
    if (lay != h->layout || want != h->bytes) {
        whale_error("restore of step %lld: the held copy was made for another layout",
                    (long long)step);
        return WHALE_EDATA;
    }
    struct whale_train_state ts;
    memcpy(&ts, slot + sizeof *h, sizeof ts);
    rc = red_copy(e, h->dp, h->zero, false, all,
                  (unsigned char *)slot + sizeof *h + sizeof ts + db, u);
    if (!rc)
        rc = whale_engine_set_state(e, &ts);
    if (complete)
        *complete = all || p == 0;
    return rc;
}

