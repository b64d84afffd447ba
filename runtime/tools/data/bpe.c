/* Byte-level BPE from tokenizer.json (bpe.h). Normalization: none, or NFC
 * (Qwen2) through ICU, on the text between added tokens as tokenizers does.
 * Pre-tokenization: the
 * Split / ByteLevel regexes cut the text into words (PCRE2, UTF + UCP,
 * JIT); each word's bytes become the byte-level alphabet's symbols
 * (GPT-2's bytes_to_unicode) and the pair of lowest merge rank is merged
 * until none is left, as tokenizers' BPE model does. */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include <jansson.h>
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MAX_SPLITS 8
/* tokenizers' ByteLevel(use_regex=True) pattern (GPT-2) */
static const char GPT2_PAT[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct vent { /* vocab: token bytes -> id */
    char *s;
    uint32_t len;
    int32_t id;
};
struct ment { /* merges: (left id, right id) -> rank, merged id */
    uint64_t key;
    int32_t rank, id;
    bool used;
};

struct wd_bpe {
    struct vent *vt;
    size_t vcap;
    struct ment *mt;
    size_t mcap;
    char **tok;      /* id -> token string (byte-level chars) */
    uint32_t *toklen;
    int nid;
    int32_t byte_id[256];
    uint32_t b2u[256];         /* byte -> code point */
    int16_t u2b[512];          /* code point -> byte (-1 none) */
    pcre2_code *re[MAX_SPLITS];
    int nre;
    bool prefix_space, ignore_merges;
    const UNormalizer2 *nfc; /* normalizer NFC, else NULL */
    /* added tokens: the text is cut at their occurrences first, as
     * tokenizers does, and each becomes its own id */
    char **added;
    uint32_t *added_len;
    int32_t *added_id;
    int nadded;
    bool added_first[256];
};

static void seterr(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static size_t vslot(const wd_bpe *b, const char *s, size_t len)
{
    size_t i = (size_t)XXH3_64bits(s, len) & (b->vcap - 1);
    while (b->vt[i].s && !(b->vt[i].len == len && !memcmp(b->vt[i].s, s, len)))
        i = (i + 1) & (b->vcap - 1);
    return i;
}

static int32_t vget(const wd_bpe *b, const char *s, size_t len)
{
    size_t i = vslot(b, s, len);
    return b->vt[i].s ? b->vt[i].id : -1;
}

static size_t mslot(const wd_bpe *b, uint64_t key)
{
    size_t i = (size_t)XXH3_64bits(&key, sizeof key) & (b->mcap - 1);
    while (b->mt[i].used && b->mt[i].key != key)
        i = (i + 1) & (b->mcap - 1);
    return i;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < 2 * n)
        c <<= 1;
    return c;
}

static int put_utf8(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

static void byte_alphabet(wd_bpe *b)
{
    int n = 0;
    for (int i = 0; i < 512; i++)
        b->u2b[i] = -1;
    for (int c = 0; c < 256; c++) {
        bool keep = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
        b->b2u[c] = keep ? (uint32_t)c : (uint32_t)(256 + n++);
        b->u2b[b->b2u[c]] = (int16_t)c;
    }
}

static int add_regex(wd_bpe *b, const char *pat, char *err, size_t errlen)
{
    if (b->nre == MAX_SPLITS) {
        seterr(err, errlen, "tokenizer.json: more than %d pre-tokenizer splits", MAX_SPLITS);
        return -1;
    }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR m[160];
        pcre2_get_error_message(ec, m, sizeof m);
        seterr(err, errlen, "tokenizer.json: pre-tokenizer regex at offset %zu: %s", (size_t)eo,
               (char *)m);
        return -1;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    b->re[b->nre++] = re;
    return 0;
}

/* One pre-tokenizer object: ByteLevel or Split(Regex, Isolated). */
static int pretok(wd_bpe *b, json_t *p, char *err, size_t errlen)
{
    const char *t = json_string_value(json_object_get(p, "type"));
    if (t && !strcmp(t, "ByteLevel")) {
        b->prefix_space = json_is_true(json_object_get(p, "add_prefix_space"));
        json_t *ur = json_object_get(p, "use_regex");
        if (!ur || json_is_true(ur))
            return add_regex(b, GPT2_PAT, err, errlen);
        return 0;
    }
    if (t && !strcmp(t, "Split")) {
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        const char *rx = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        if (!rx || !beh || strcmp(beh, "Isolated") || json_is_true(json_object_get(p, "invert"))) {
            seterr(err, errlen, "tokenizer.json: pre_tokenizer Split is supported with a Regex "
                                "pattern, behavior Isolated and invert false only");
            return -1;
        }
        return add_regex(b, rx, err, errlen);
    }
    seterr(err, errlen, "tokenizer.json: pre_tokenizer type \"%s\" is not supported (ByteLevel, "
                        "Split, Sequence of them)", t ? t : "?");
    return -1;
}

void wd_bpe_free(wd_bpe *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->vcap; i++)
        free(b->vt[i].s);
    free(b->vt);
    free(b->mt);
    free(b->tok);
    free(b->toklen);
    for (int i = 0; i < b->nadded; i++)
        free(b->added[i]);
    free(b->added);
    free(b->added_len);
    free(b->added_id);
    for (int i = 0; i < b->nre; i++)
        pcre2_code_free(b->re[i]);
    free(b);
}

static int load(wd_bpe *b, json_t *root, char *err, size_t errlen)
{
    json_t *model = json_object_get(root, "model");
    const char *mt = json_string_value(json_object_get(model, "type"));
    if (!mt || strcmp(mt, "BPE")) {
        seterr(err, errlen, "tokenizer.json: model type \"%s\" is not supported (BPE)",
               mt ? mt : "?");
        return -1;
    }
    json_t *norm = json_object_get(root, "normalizer");
    const char *nt = json_string_value(json_object_get(norm, "type"));
    if (nt && !strcmp(nt, "NFC")) {
        UErrorCode ue = U_ZERO_ERROR;
        b->nfc = unorm2_getNFCInstance(&ue);
        if (U_FAILURE(ue)) {
            seterr(err, errlen, "tokenizer.json: normalizer NFC: ICU: %s", u_errorName(ue));
            return -1;
        }
    } else if (norm && !json_is_null(norm)) {
        seterr(err, errlen, "tokenizer.json: normalizer \"%s\" is not supported (null, NFC)",
               nt ?: "?");
        return -1;
    }
    json_t *pt = json_object_get(root, "pre_tokenizer");
    const char *ptt = json_string_value(json_object_get(pt, "type"));
    if (ptt && !strcmp(ptt, "Sequence")) {
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(pt, "pretokenizers"), i, x)
            if (pretok(b, x, err, errlen))
                return -1;
    } else if (pretok(b, pt, err, errlen)) {
        return -1;
    }
    b->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    b->vcap = pow2_at_least(json_object_size(vocab) + json_array_size(added) + 1);
    b->vt = calloc(b->vcap, sizeof *b->vt);
    if (!b->vt)
        return -1;
    int maxid = -1;
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id > (1 << 30)) {
            seterr(err, errlen, "tokenizer.json: vocab entry \"%s\" has no valid id", k);
            return -1;
        }
        size_t s = vslot(b, k, strlen(k));
        b->vt[s] = (struct vent){strdup(k), (uint32_t)strlen(k), (int32_t)id};
        if (id > maxid)
            maxid = (int)id;
    }
    size_t i;
    b->added = calloc(json_array_size(added) + 1, sizeof *b->added);
    b->added_len = calloc(json_array_size(added) + 1, sizeof *b->added_len);
    b->added_id = calloc(json_array_size(added) + 1, sizeof *b->added_id);
    if (!b->added || !b->added_len || !b->added_id)
        return -1;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        const char *c = json_string_value(json_object_get(v, "content"));
        if (c && *c && id >= 0 && id < (1 << 30)) {
            if (!(b->added[b->nadded] = strdup(c)))
                return -1;
            b->added_len[b->nadded] = (uint32_t)strlen(c);
            b->added_id[b->nadded++] = (int32_t)id;
            b->added_first[(unsigned char)c[0]] = true;
            size_t s = vslot(b, c, strlen(c));
            if (!b->vt[s].s)
                b->vt[s] = (struct vent){strdup(c), (uint32_t)strlen(c), (int32_t)id};
            if (id > maxid)
                maxid = (int)id;
        }
    }
    b->nid = maxid + 1;
    b->tok = calloc((size_t)b->nid + 1, sizeof *b->tok);
    b->toklen = calloc((size_t)b->nid + 1, sizeof *b->toklen);
    if (!b->tok || !b->toklen)
        return -1;
    for (size_t s = 0; s < b->vcap; s++)
        if (b->vt[s].s) {
            b->tok[b->vt[s].id] = b->vt[s].s;
            b->toklen[b->vt[s].id] = b->vt[s].len;
        }
    byte_alphabet(b);
    for (int c = 0; c < 256; c++) {
        char u[4];
        int l = put_utf8(b->b2u[c], u);
        b->byte_id[c] = vget(b, u, (size_t)l);
    }
    json_t *merges = json_object_get(model, "merges");
    b->mcap = pow2_at_least(json_array_size(merges) + 1);
    b->mt = calloc(b->mcap, sizeof *b->mt);
    if (!b->mt)
        return -1;
    json_array_foreach(merges, i, v) {
        const char *l = NULL, *r = NULL;
        char tmp[1024];
        if (json_is_string(v)) { /* "left right" */
            snprintf(tmp, sizeof tmp, "%s", json_string_value(v));
            char *sp = strchr(tmp, ' ');
            if (sp) {
                *sp = 0;
                l = tmp;
                r = sp + 1;
            }
        } else if (json_is_array(v) && json_array_size(v) == 2) {
            l = json_string_value(json_array_get(v, 0));
            r = json_string_value(json_array_get(v, 1));
        }
        if (!l || !r) {
            seterr(err, errlen, "tokenizer.json: merge %zu is not a pair", i);
            return -1;
        }
        char cat[2048];
        snprintf(cat, sizeof cat, "%s%s", l, r);
        int32_t a = vget(b, l, strlen(l)), c = vget(b, r, strlen(r)), m = vget(b, cat, strlen(cat));
        if (a < 0 || c < 0 || m < 0) {
            seterr(err, errlen, "tokenizer.json: merge %zu (\"%s\" \"%s\") names a token not in "
                                "the vocabulary", i, l, r);
            return -1;
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)c;
        size_t s = mslot(b, key);
        if (!b->mt[s].used)
            b->mt[s] = (struct ment){key, (int32_t)i, m, true};
    }
    return 0;
}

int wd_bpe_load_bytes(const void *buf, size_t len, wd_bpe **out, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(buf, len, 0, &je);
    if (!root) {
        seterr(err, errlen, "tokenizer.json:%d: %s", je.line, je.text);
        return -1;
    }
    wd_bpe *b = calloc(1, sizeof *b);
    int rc = b ? load(b, root, err, errlen) : -1;
    json_decref(root);
    if (rc) {
        if (b && !err[0])
            seterr(err, errlen, "tokenizer.json: out of memory");
        wd_bpe_free(b);
        return -1;
    }
    *out = b;
    return 0;
}

int wd_bpe_vocab(const wd_bpe *b)
{
    return b->nid;
}

int wd_bpe_token_id(const wd_bpe *b, const char *tok)
{
    return vget(b, tok, strlen(tok));
}

struct ids {
    int32_t **v;
    size_t *n, *cap;
};

static int push(struct ids *o, int32_t id)
{
    if (*o->n == *o->cap) {
        size_t nc = *o->cap ? 2 * *o->cap : 1024;
        int32_t *nv = realloc(*o->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        *o->v = nv;
        *o->cap = nc;
    }
    (*o->v)[(*o->n)++] = id;
    return 0;
}

/* BPE of one pre-token (bytes w[0, n)) */
static int word(const wd_bpe *b, const unsigned char *w, size_t n, struct ids *o, char *err,
                size_t errlen)
{
    if (b->ignore_merges) { /* a word that is a token is that token */
        char stack[256], *u = n * 3 <= sizeof stack ? stack : malloc(n * 3);
        if (!u)
            return -1;
        size_t ul = 0;
        for (size_t i = 0; i < n; i++)
            ul += (size_t)put_utf8(b->b2u[w[i]], u + ul);
        int32_t id = vget(b, u, ul);
        if (u != stack)
            free(u);
        if (id >= 0)
            return push(o, id);
    }
    int32_t sbuf[128], *sym = n <= 128 ? sbuf : malloc(n * sizeof *sym);
    if (!sym)
        return -1;
    for (size_t i = 0; i < n; i++) {
        sym[i] = b->byte_id[w[i]];
        if (sym[i] < 0) {
            seterr(err, errlen, "tokenizer.json: byte 0x%02x has no token", w[i]);
            if (sym != sbuf)
                free(sym);
            return -1;
        }
    }
    size_t m = n;
    for (;;) {
        int32_t best = INT32_MAX, bid = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            uint64_t key = (uint64_t)(uint32_t)sym[i] << 32 | (uint32_t)sym[i + 1];
            const struct ment *e = &b->mt[mslot(b, key)];
            if (e->used && e->rank < best) {
                best = e->rank;
                bid = e->id;
                at = i;
            }
        }
        if (bid < 0)
            break;
        sym[at] = bid;
        memmove(sym + at + 1, sym + at + 2, (m - at - 2) * sizeof *sym);
        m--;
    }
    int rc = 0;
    for (size_t i = 0; i < m && !rc; i++)
        rc = push(o, sym[i]);
    if (sym != sbuf)
        free(sym);
    return rc;
}

/* Split text[0, len) by regex r and hand each piece (matches and the gaps
 * between them, as Split Isolated) to the next level. */
static int split(const wd_bpe *b, int r, const char *t, size_t len, pcre2_match_data **md,
                 struct ids *o, char *err, size_t errlen)
{
    if (r == b->nre)
        return len ? word(b, (const unsigned char *)t, len, o, err, errlen) : 0;
    size_t pos = 0, prev = 0;
    while (pos < len) {
        int rc = pcre2_match(b->re[r], (PCRE2_SPTR)t, len, pos, pos ? PCRE2_NO_UTF_CHECK : 0,
                             md[r], NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR m[160];
            pcre2_get_error_message(rc, m, sizeof m);
            seterr(err, errlen, "pre-tokenizer regex: %s (the text must be UTF-8)", (char *)m);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md[r]);
        size_t s = ov[0], e = ov[1];
        if (e == s) { /* empty match: step one character */
            pos = s + 1;
            while (pos < len && ((unsigned char)t[pos] & 0xC0) == 0x80)
                pos++;
            continue;
        }
        if (s > prev && split(b, r + 1, t + prev, s - prev, md, o, err, errlen))
            return -1;
        if (split(b, r + 1, t + s, e - s, md, o, err, errlen))
            return -1;
        prev = pos = e;
    }
    if (prev < len)
        return split(b, r + 1, t + prev, len - prev, md, o, err, errlen);
    return 0;
}

/* NFC of t[0, len) into *out (malloc'd, *olen bytes), through UTF-16 as
 * ICU normalizes. 0, or -1 with err set (invalid UTF-8, no memory). */
static int nfc_utf8(const UNormalizer2 *nfc, const char *t, size_t len, char **out,
                    size_t *olen, char *err, size_t errlen)
{
    UErrorCode ue = U_ZERO_ERROR;
    UChar *u = NULL, *v = NULL;
    char *o = NULL;
    int32_t nu = 0, nv = 0, no = 0;
    if (len > INT32_MAX / 4) {
        seterr(err, errlen, "NFC: a text of %zu bytes between added tokens is too long", len);
        return -1;
    }
    u_strFromUTF8(NULL, 0, &nu, t, (int32_t)len, &ue); /* preflight: the UTF-16 length */
    if (ue == U_BUFFER_OVERFLOW_ERROR)
        ue = U_ZERO_ERROR;
    if (U_SUCCESS(ue) && (u = malloc(sizeof(UChar) * ((size_t)nu + 1))))
        u_strFromUTF8(u, nu + 1, NULL, t, (int32_t)len, &ue);
    /* NFC never grows a string by more than 3x (Unicode's stated bound) */
    if (u && U_SUCCESS(ue) && (v = malloc(sizeof(UChar) * (3 * (size_t)nu + 1))))
        nv = unorm2_normalize(nfc, u, nu, v, 3 * nu + 1, &ue);
    if (v && U_SUCCESS(ue) && (o = malloc(4 * (size_t)nv + 1)))
        u_strToUTF8(o, 4 * nv + 1, &no, v, nv, &ue);
    free(u);
    free(v);
    if (U_FAILURE(ue)) {
        free(o);
        seterr(err, errlen, "NFC: %s (the text must be UTF-8)", u_errorName(ue));
        return -1;
    }
    if (!o) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    *out = o;
    *olen = (size_t)no;
    return 0;
}

/* The normalizer, then the pre-tokenizers, on text[0, len) (no added
 * tokens in it). ASCII is its own NFC: no copy for it. */
static int normed_split(const wd_bpe *b, const char *t, size_t len, pcre2_match_data **md,
                        struct ids *o, char *err, size_t errlen)
{
    bool ascii = true;
    for (size_t i = 0; i < len && ascii; i++)
        ascii = !((unsigned char)t[i] & 0x80);
    if (!b->nfc || ascii)
        return split(b, 0, t, len, md, o, err, errlen);
    char *n = NULL;
    size_t nl = 0;
    if (nfc_utf8(b->nfc, t, len, &n, &nl, err, errlen))
        return -1;
    int rc = split(b, 0, n, nl, md, o, err, errlen);
    free(n);
    return rc;
}

int wd_bpe_added_id(const wd_bpe *b, const char *tok)
{
    for (int i = 0; i < b->nadded; i++)
        if (!strcmp(b->added[i], tok))
            return b->added_id[i];
    return -1;
}

/* The added token at t[0, len) (the longest), or -1 */
static int added_at(const wd_bpe *b, const char *t, size_t len)
{
    int best = -1;
    for (int i = 0; i < b->nadded; i++)
        if (b->added_len[i] <= len && !memcmp(t, b->added[i], b->added_len[i]) &&
            (best < 0 || b->added_len[i] > b->added_len[best]))
            best = i;
    return best;
}

static int pieces(const wd_bpe *b, const char *text, size_t len, pcre2_match_data **md,
                  struct ids *o, char *err, size_t errlen)
{
    size_t prev = 0;
    for (size_t i = 0; b->nadded && i < len; i++) {
        if (!b->added_first[(unsigned char)text[i]])
            continue;
        int a = added_at(b, text + i, len - i);
        if (a < 0)
            continue;
        if (i > prev && normed_split(b, text + prev, i - prev, md, o, err, errlen))
            return -1;
        if (push(o, b->added_id[a]))
            return -1;
        i += b->added_len[a] - 1;
        prev = i + 1;
    }
    return prev < len ? normed_split(b, text + prev, len - prev, md, o, err, errlen) : 0;
}

int wd_bpe_encode(const wd_bpe *b, const char *text, size_t len, int32_t **ids, size_t *n,
                  size_t *cap, char *err, size_t errlen)
{
    struct ids o = {ids, n, cap};
    pcre2_match_data *md[MAX_SPLITS] = {0};
    int rc = 0;
    for (int i = 0; i < b->nre && !rc; i++)
        if (!(md[i] = pcre2_match_data_create_from_pattern(b->re[i], NULL)))
            rc = -1;
    char *tmp = NULL;
    if (!rc && b->prefix_space && len && text[0] != ' ') { /* ByteLevel add_prefix_space */
        if (!(tmp = malloc(len + 1)))
            rc = -1;
        else {
            tmp[0] = ' ';
            memcpy(tmp + 1, text, len);
            text = tmp;
            len++;
        }
    }
    if (!rc)
        rc = pieces(b, text, len, md, &o, err, errlen);
    free(tmp);
    for (int i = 0; i < b->nre; i++)
        pcre2_match_data_free(md[i]);
    if (rc && !err[0])
        seterr(err, errlen, "out of memory");
    return rc;
}

int wd_bpe_decode(const wd_bpe *b, const int32_t *ids, size_t n, char **out, size_t *len,
                  char *err, size_t errlen)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= b->nid || !b->tok[ids[i]]) {
            seterr(err, errlen, "token id %d is not in the vocabulary", ids[i]);
            return -1;
        }
        cap += b->toklen[ids[i]];
    }
    char *o = malloc(cap);
    if (!o)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *s = (const unsigned char *)b->tok[ids[i]];
        size_t l = b->toklen[ids[i]];
        for (size_t j = 0; j < l;) { /* byte-level chars back to bytes (U+0000..U+01FF) */
            uint32_t cp;
            int w;
            if (s[j] < 0x80) {
                cp = s[j];
                w = 1;
            } else if ((s[j] & 0xE0) == 0xC0 && j + 1 < l) {
                cp = (uint32_t)(s[j] & 0x1F) << 6 | (s[j + 1] & 0x3F);
                w = 2;
            } else {
                cp = 0x200;
                w = 1;
            }
            if (cp < 0x200 && b->u2b[cp] >= 0) {
                o[k++] = (char)b->u2b[cp];
                j += (size_t)w;
            } else { /* an added token's own text */
                memcpy(o + k, s + j, (size_t)w);
                k += (size_t)w;
                j += (size_t)w;
            }
        }
    }
    o[k] = 0;
    *out = o;
    *len = k;
    return 0;
}
