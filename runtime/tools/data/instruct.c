/* Instruction records into ids and loss masks (instruct.h). */
#define _GNU_SOURCE
#include "instruct.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR(...) (fprintf(stderr, "whale-data: " __VA_ARGS__), fputc('\n', stderr))
#define MAX_TOKEN_BYTES 4096

int wd_instruct_check(const wd_spm *s, const struct wd_tmpl *t, char *err, size_t errlen)
{
    const char *sp[8];
    wd_tmpl_specials(t, sp);
    for (int i = 0; sp[i]; i++)
        if (wd_spm_piece_id(s, sp[i]) < 0) {
            snprintf(err, errlen, "the tokenizer has no token %s, which the %s chat template "
                     "emits as one special token (a tokenizer of another model family?)",
                     sp[i], t->name);
            return -1;
        }
    return 0;
}

/* One record's ids and mask as they grow. */
struct rec {
    struct wd_ids d;
    size_t mcap;
    /* the text between two special tokens: bytes, their target flags, and
     * where each segment starts (for encoding piece by piece) */
    char *run;
    uint8_t *tgt;
    size_t rn, rcap;
    size_t *seg_at;
    uint8_t *seg_tgt;
    int nseg, segcap;
};

static int fit_mask(struct rec *r)
{
    if (r->mcap >= r->d.cap)
        return 0;
    uint8_t *p = realloc(r->d.mask, r->d.cap);
    if (!p)
        return -1;
    r->d.mask = p;
    r->mcap = r->d.cap;
    return 0;
}

static int push_id(struct rec *r, int32_t id, bool target)
{
    if (r->d.n == r->d.cap) {
        size_t nc = r->d.cap ? r->d.cap * 2 : 256;
        int32_t *p = realloc(r->d.ids, nc * sizeof *p);
        if (!p)
            return -1;
        r->d.ids = p;
        r->d.cap = nc;
    }
    if (fit_mask(r))
        return -1;
    r->d.mask[r->d.n] = target;
    r->d.ids[r->d.n++] = id;
    return 0;
}

static int run_add(struct rec *r, const char *t, size_t len, bool target)
{
    if (r->rn + len > r->rcap) {
        size_t nc = r->rcap ? r->rcap : 1024;
        while (nc < r->rn + len)
            nc *= 2;
        char *p = realloc(r->run, nc);
        uint8_t *q = p ? realloc(r->tgt, nc) : NULL;
        if (p)
            r->run = p;
        if (q)
            r->tgt = q;
        if (!p || !q)
            return -1;
        r->rcap = nc;
    }
    if (r->nseg == r->segcap) {
        int nc = r->segcap ? r->segcap * 2 : 16;
        size_t *p = realloc(r->seg_at, (size_t)nc * sizeof *p);
        uint8_t *q = p ? realloc(r->seg_tgt, (size_t)nc) : NULL;
        if (p)
            r->seg_at = p;
        if (q)
            r->seg_tgt = q;
        if (!p || !q)
            return -1;
        r->segcap = nc;
    }
    r->seg_at[r->nseg] = r->rn;
    r->seg_tgt[r->nseg++] = target;
    memcpy(r->run + r->rn, t, len);
    memset(r->tgt + r->rn, target, len);
    r->rn += len;
    return 0;
}

/* The mask of the ids from `from` on, from the bytes each token stands
 * for laid over the run; false when they do not line up with it (a
 * normalizer changed the text, an unknown piece). A token's leading space
 * that the text does not have at a line start is the dummy prefix of
 * SentencePiece or ByteLevel's add_prefix_space. */
static bool lay_over(const wd_spm *s, struct rec *r, size_t from)
{
    static __thread char buf[MAX_TOKEN_BYTES];
    size_t p = 0, L = r->rn;
    for (size_t k = from; k < r->d.n; k++) {
        int l = wd_spm_token_bytes(s, r->d.ids[k], buf, sizeof buf);
        if (l < 0)
            return false;
        const char *b = buf;
        if (l > 0 && b[0] == ' ' && (p >= L || r->run[p] != ' ') &&
            (p == 0 || r->run[p - 1] == '\n')) {
            b++;
            l--;
        }
        if (p + (size_t)l > L || memcmp(r->run + p, b, (size_t)l))
            return false;
        uint8_t m = 0;
        for (int i = 0; i < l; i++)
            m |= r->tgt[p + i];
        if (l == 0)
            m = p < L ? r->tgt[p] : 0;
        r->d.mask[k] = m;
        p += (size_t)l;
    }
    return p == L;
}

/* Encode the pending run as one text (as Hugging Face encodes the rendered
 * template between special tokens); the mask from the byte offsets, else
 * segment by segment (each its own flag; the ids may then differ from
 * Hugging Face's where a token would span two segments). */
static int flush_run(const wd_spm *s, struct rec *r, struct wd_instruct_stats *st, char *err,
                     size_t errlen)
{
    if (!r->rn) {
        r->nseg = 0;
        return 0;
    }
    size_t from = r->d.n;
    int rc = wd_encode_doc(s, r->run, r->rn, false, &r->d, err, errlen);
    if (!rc && fit_mask(r))
        rc = -1;
    if (!rc && !lay_over(s, r, from)) {
        st->split_runs++;
        r->d.n = from;
        for (int i = 0; i < r->nseg && !rc; i++) {
            size_t a = r->seg_at[i], e = i + 1 < r->nseg ? r->seg_at[i + 1] : r->rn;
            size_t f = r->d.n;
            if (e > a)
                rc = wd_encode_doc(s, r->run + a, e - a, false, &r->d, err, errlen);
            if (!rc && fit_mask(r))
                rc = -1;
            if (!rc)
                memset(r->d.mask + f, r->seg_tgt[i], r->d.n - f);
        }
    }
    if (rc && !err[0])
        snprintf(err, errlen, "out of memory");
    r->rn = 0;
    r->nseg = 0;
    return rc;
}

static const char *role_str(enum wd_role r)
{
    return r == WD_SYSTEM ? "system" : r == WD_USER ? "user" : "assistant";
}

/* A text field: a string with no NUL (jansson accepts \u0000) and none of
 * the template's special tokens (which would end the turn early). */
static int text_field(json_t *v, const char *what, const char *const *sp, const char **t,
                      size_t *len, char *err, size_t errlen)
{
    if (!json_is_string(v)) {
        snprintf(err, errlen, v ? "%s is not a string" : "%s is missing", what);
        return -1;
    }
    *t = json_string_value(v);
    *len = json_string_length(v);
    if (memchr(*t, 0, *len)) {
        snprintf(err, errlen, "%s contains a NUL character", what);
        return -1;
    }
    for (int i = 0; sp[i]; i++)
        if (memmem(*t, *len, sp[i], strlen(sp[i]))) {
            snprintf(err, errlen, "%s contains the template's special token %s (it would end "
                     "or open a turn)", what, sp[i]);
            return -1;
        }
    return 0;
}

/* The record's turns into m (room for n), checked. Returns the count or
 * -1 with err. */
static int turns(json_t *j, const struct wd_instruct_opts *o, struct wd_msg *m, int cap,
                 char *err, size_t errlen)
{
    const char *sp[8];
    wd_tmpl_specials(o->tmpl, sp);
    int n = 0;
    json_t *msgs = json_object_get(j, "messages");
    if (msgs) {
        if (!json_is_array(msgs) || !json_array_size(msgs)) {
            snprintf(err, errlen, "\"messages\" is not a non-empty array");
            return -1;
        }
        size_t i;
        json_t *v;
        json_array_foreach(msgs, i, v) {
            if ((int)i + 1 >= cap) {
                snprintf(err, errlen, "more than %d messages", cap - 2);
                return -1;
            }
            const char *r = json_string_value(json_object_get(v, "role"));
            char what[64];
            snprintf(what, sizeof what, "message %zu's \"content\"", i + 1);
            if (!json_is_object(v) || !r) {
                snprintf(err, errlen, "message %zu is not an object with a string \"role\"", i + 1);
                return -1;
            }
            if (!strcmp(r, "system"))
                m[n].role = WD_SYSTEM;
            else if (!strcmp(r, "user"))
                m[n].role = WD_USER;
            else if (!strcmp(r, "assistant"))
                m[n].role = WD_ASSISTANT;
            else {
                snprintf(err, errlen, "message %zu has role \"%s\" (system, user or assistant)",
                         i + 1, r);
                return -1;
            }
            if (text_field(json_object_get(v, "content"), what, sp, &m[n].text, &m[n].len, err,
                           errlen))
                return -1;
            n++;
        }
    } else if (json_object_get(j, "prompt") || json_object_get(j, "response")) {
        json_t *sys = json_object_get(j, "system");
        if (sys) {
            m[n].role = WD_SYSTEM;
            if (text_field(sys, "\"system\"", sp, &m[n].text, &m[n].len, err, errlen))
                return -1;
            n++;
        }
        m[n].role = WD_USER;
        if (text_field(json_object_get(j, "prompt"), "\"prompt\"", sp, &m[n].text, &m[n].len,
                       err, errlen))
            return -1;
        m[++n].role = WD_ASSISTANT;
        if (text_field(json_object_get(j, "response"), "\"response\"", sp, &m[n].text,
                       &m[n].len, err, errlen))
            return -1;
        n++;
    } else {
        snprintf(err, errlen, "the record has neither \"messages\" nor \"prompt\" and "
                 "\"response\"");
        return -1;
    }
    /* an optional system turn, then user / assistant alternating */
    int s0 = m[0].role == WD_SYSTEM;
    for (int i = s0; i < n; i++) {
        enum wd_role want = (i - s0) % 2 ? WD_ASSISTANT : WD_USER;
        if (m[i].role != want) {
            snprintf(err, errlen, "message %d has role \"%s\" where \"%s\" was expected (an "
                     "optional system turn first, then user and assistant alternating)",
                     i + 1, role_str(m[i].role), role_str(want));
            return -1;
        }
    }
    if (n == s0 || m[n - 1].role != WD_ASSISTANT) {
        snprintf(err, errlen, "the last message is not an assistant's: the record has no "
                 "response to train on");
        return -1;
    }
    if (!s0 && o->system_prompt) { /* --system-prompt */
        memmove(m + 1, m, (size_t)n * sizeof *m);
        m[0] = (struct wd_msg){ WD_SYSTEM, o->system_prompt, strlen(o->system_prompt) };
        n++;
    }
    return n;
}

static int encode_record(const wd_spm *s, const char *text, size_t len,
                         const struct wd_instruct_opts *o, struct rec *r,
                         struct wd_instruct_stats *st, char *err, size_t errlen)
{
    enum { MAXMSG = 4096 };
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!json_is_object(j)) {
        snprintf(err, errlen, j ? "the record is not a JSON object" : "not valid JSON: %s",
                 je.text);
        json_decref(j);
        return -1;
    }
    struct wd_msg *m = malloc(MAXMSG * sizeof *m);
    struct wd_seg *seg = NULL;
    char *owned = NULL;
    int nseg = 0, rc = -1;
    int n = m ? turns(j, o, m, MAXMSG, err, errlen) : -1;
    if (n > 0 && !wd_tmpl_render(o->tmpl, m, n, &seg, &nseg, &owned, err, errlen)) {
        rc = 0;
        for (int i = 0; i < nseg && !rc; i++) {
            int32_t id = seg[i].kind == WD_SEG_TEXT ? -1 : wd_spm_piece_id(s, seg[i].text);
            if (id >= 0 || seg[i].kind == WD_SEG_SPECIAL) /* checked: the tokenizer has it */
                rc = flush_run(s, r, st, err, errlen) || push_id(r, id, seg[i].target);
            else
                rc = run_add(r, seg[i].text, seg[i].len, seg[i].target);
        }
        if (!rc)
            rc = flush_run(s, r, st, err, errlen);
    }
    if (rc && !err[0])
        snprintf(err, errlen, "out of memory");
    free(seg);
    free(owned);
    free(m);
    json_decref(j);
    return rc;
}

int wd_instruct_encode_all(const wd_spm *s, const struct wd_corpus *c,
                           const struct wd_instruct_opts *o, struct wd_ids **out,
                           struct wd_instruct_stats *st)
{
    *st = (struct wd_instruct_stats){ 0 };
    *out = calloc(c->ndocs ? c->ndocs : 1, sizeof **out);
    if (!*out) {
        ERR("out of memory");
        return -1;
    }
    struct rec r = { 0 };
    char err[1024];
    int rc = 0;
    for (size_t i = 0; i < c->ndocs && !rc; i++) {
        const struct wd_doc *d = &c->docs[i];
        r.d = (struct wd_ids){ 0 };
        r.mcap = 0;
        err[0] = 0;
        if (encode_record(s, d->text, d->len, o, &r, st, err, sizeof err)) {
            ERR("%s:%ld: %s", c->files[d->file], d->line, err);
            free(r.d.ids);
            free(r.d.mask);
            rc = -1;
            break;
        }
        if (o->max_tokens && r.d.n > (size_t)o->max_tokens) {
            if (o->overlong == WD_OVERLONG_REFUSE) {
                ERR("%s:%ld: the record is %zu tokens, over --max-tokens %ld (--overlong "
                    "truncate keeps its first %ld, --overlong drop leaves it out)",
                    c->files[d->file], d->line, r.d.n, o->max_tokens, o->max_tokens);
                free(r.d.ids);
                free(r.d.mask);
                rc = -1;
                break;
            }
            if (o->overlong == WD_OVERLONG_DROP) {
                st->dropped++;
                r.d.n = 0;
            } else {
                st->truncated++;
                r.d.n = (size_t)o->max_tokens;
                if (!memchr(r.d.mask, 1, r.d.n))
                    st->no_target++;
            }
        }
        st->records++;
        st->tokens += r.d.n;
        for (size_t k = 0; k < r.d.n; k++)
            st->targets += r.d.mask[k];
        (*out)[i] = r.d;
    }
    free(r.run);
    free(r.tgt);
    free(r.seg_at);
    free(r.seg_tgt);
    if (rc) {
        wd_encoded_free(*out, c->ndocs);
        *out = NULL;
    }
    return rc;
}
