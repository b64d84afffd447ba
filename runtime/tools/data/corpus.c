/* Collects, reads, checks and splits whale-data's input documents. */
#define _GNU_SOURCE
#include "corpus.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ERR(...) (fprintf(stderr, "whale-data: " __VA_ARGS__), fputc('\n', stderr))

static int add_file(struct wd_corpus *c, const char *path)
{
    char **p = realloc(c->files, sizeof(char *) * (c->nfiles + 1));
    if (!p)
        return -1;
    c->files = p;
    if (!(c->files[c->nfiles] = strdup(path)))
        return -1;
    c->nfiles++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* regular files under dir, recursively; hidden entries skipped */
static int walk(struct wd_corpus *c, const char *dir, int depth)
{
    if (depth > 64) {
        ERR("%s: directories nested deeper than 64 (a symlink loop?)", dir);
        return -1;
    }
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    if (n < 0) {
        ERR("%s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = ents[i]->d_name;
        if (!rc && nm[0] != '.') {
            char *p;
            if (asprintf(&p, "%s/%s", dir, nm) < 0) {
                rc = -1;
            } else {
                struct stat sb;
                if (stat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
                    rc = walk(c, p, depth + 1);
                else if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
                    rc = add_file(c, p);
                free(p);
            }
        }
        free(ents[i]);
    }
    free(ents);
    return rc;
}

static int add_input(struct wd_corpus *c, const char *in)
{
    struct stat sb;
    if (stat(in, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return walk(c, in, 0);
        if (!S_ISREG(sb.st_mode)) {
            ERR("%s: not a regular file or directory", in);
            return -1;
        }
        return add_file(c, in);
    }
    if (!strpbrk(in, "*?[")) {
        ERR("%s: %s", in, strerror(errno));
        return -1;
    }
    glob_t g;
    int grc = glob(in, 0, NULL, &g);
    if (grc == GLOB_NOMATCH) {
        ERR("%s: the pattern matches no file", in);
        return -1;
    }
    if (grc) {
        ERR("%s: cannot expand the pattern", in);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && !rc; i++)
        rc = stat(g.gl_pathv[i], &sb) == 0 && S_ISDIR(sb.st_mode) ? walk(c, g.gl_pathv[i], 0)
                                                                   : add_file(c, g.gl_pathv[i]);
    globfree(&g);
    return rc;
}

int wd_corpus_files(struct wd_corpus *c, char **inputs, int n)
{
    if (n < 1) {
        ERR("no input files (give files, directories or glob patterns; see --help)");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (add_input(c, inputs[i]))
            return -1;
    if (!c->nfiles) {
        ERR("no input files found under the given inputs");
        return -1;
    }
    /* a deterministic order: the same inputs always give the same shards */
    qsort(c->files, c->nfiles, sizeof(char *), cmp_str);
    int k = 0;
    for (int i = 0; i < c->nfiles; i++) {
        if (k && !strcmp(c->files[k - 1], c->files[i])) {
            free(c->files[i]);
            continue;
        }
        c->files[k++] = c->files[i];
    }
    c->nfiles = k;
    return 0;
}

size_t wd_utf8_check(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned char b = u[i];
        size_t k;
        uint32_t cp;
        if (b < 0x80) {
            i++;
            continue;
        } else if ((b & 0xe0) == 0xc0) {
            k = 1;
            cp = b & 0x1f;
        } else if ((b & 0xf0) == 0xe0) {
            k = 2;
            cp = b & 0x0f;
        } else if ((b & 0xf8) == 0xf0) {
            k = 3;
            cp = b & 0x07;
        } else {
            return i;
        }
        if (i + k >= len) /* the sequence is cut off by the end */
            return i;
        for (size_t j = 1; j <= k; j++) {
            if ((u[i + j] & 0xc0) != 0x80)
                return i;
            cp = (cp << 6) | (u[i + j] & 0x3f);
        }
        /* overlong forms, surrogates, beyond U+10FFFF */
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return i;
        i += k + 1;
    }
    return len;
}

static int keep_buf(struct wd_corpus *c, char *b)
{
    if (c->nbufs == c->capbufs) {
        size_t nc = c->capbufs ? c->capbufs * 2 : 64;
        char **p = realloc(c->bufs, nc * sizeof *p);
        if (!p)
            return -1;
        c->bufs = p;
        c->capbufs = nc;
    }
    c->bufs[c->nbufs++] = b;
    return 0;
}

static int add_doc(struct wd_corpus *c, const char *t, size_t len, int file, long line)
{
    if (!len)
        return 0;
    if (c->ndocs == c->capdocs) {
        size_t nc = c->capdocs ? c->capdocs * 2 : 256;
        struct wd_doc *p = realloc(c->docs, nc * sizeof *p);
        if (!p)
            return -1;
        c->docs = p;
        c->capdocs = nc;
    }
    c->docs[c->ndocs++] = (struct wd_doc){ t, len, file, line, false };
    c->bytes += len;
    return 0;
}

/* line and column (1-based) of byte offset off */
static void where(const char *t, size_t off, long *line, long *col)
{
    *line = 1;
    size_t ls = 0;
    for (size_t i = 0; i < off; i++)
        if (t[i] == '\n') {
            (*line)++;
            ls = i + 1;
        }
    *col = (long)(off - ls) + 1;
}

static int read_jsonl(struct wd_corpus *c, int fi, const char *buf, size_t len, const char *field)
{
    const char *path = c->files[fi];
    long line = 0;
    for (size_t p = 0; p < len;) {
        const char *nl = memchr(buf + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - buf) : len;
        line++;
        size_t s = p;
        p = e + 1;
        while (s < e && (buf[s] == ' ' || buf[s] == '\t' || buf[s] == '\r'))
            s++;
        if (s == e)
            continue; /* blank line */
        json_error_t je;
        json_t *j = json_loadb(buf + s, e - s, 0, &je);
        if (!j) {
            ERR("%s:%ld: not valid JSON: %s (column %d)", path, line, je.text, je.column);
            return -1;
        }
        if (!*field) { /* the whole record (instruction data): checked by instruct.c */
            json_decref(j);
            if (add_doc(c, buf + s, e - s, fi, line))
                return -1;
            continue;
        }
        json_t *v = json_object_get(j, field);
        if (!json_is_object(j) || !v) {
            ERR("%s:%ld: the record has no field \"%s\" (--jsonl %s)", path, line, field, field);
            json_decref(j);
            return -1;
        }
        if (!json_is_string(v)) {
            ERR("%s:%ld: field \"%s\" is not a string", path, line, field);
            json_decref(j);
            return -1;
        }
        size_t n = json_string_length(v);
        char *t = malloc(n + 1);
        if (!t || keep_buf(c, t)) {
            free(t);
            json_decref(j);
            return -1;
        }
        memcpy(t, json_string_value(v), n + 1);
        json_decref(j);
        /* jansson accepts \u0000: a NUL cannot be tokenized as text */
        if (memchr(t, 0, n)) {
            ERR("%s:%ld: field \"%s\" contains a NUL character", path, line, field);
            return -1;
        }
        if (add_doc(c, t, n, fi, line))
            return -1;
    }
    return 0;
}

int wd_corpus_read(struct wd_corpus *c, const char *field)
{
    for (int fi = 0; fi < c->nfiles; fi++) {
        const char *path = c->files[fi];
        FILE *f = fopen(path, "rb");
        if (!f) {
            ERR("%s: %s", path, strerror(errno));
            return -1;
        }
        struct stat sb;
        if (fstat(fileno(f), &sb) < 0) {
            ERR("%s: %s", path, strerror(errno));
            fclose(f);
            return -1;
        }
        size_t sz = (size_t)sb.st_size;
        char *buf = malloc(sz + 1);
        if (!buf || keep_buf(c, buf)) {
            free(buf);
            fclose(f);
            ERR("%s: out of memory reading %zu bytes", path, sz);
            return -1;
        }
        size_t got = fread(buf, 1, sz, f);
        int ferr = ferror(f);
        fclose(f);
        if (ferr || got != sz) {
            ERR("%s: read %zu of %zu bytes (changed while reading?)", path, got, sz);
            return -1;
        }
        buf[sz] = 0;
        size_t bad = wd_utf8_check(buf, sz);
        if (bad < sz) {
            long line, col;
            where(buf, bad, &line, &col);
            ERR("%s:%ld:%ld: not UTF-8 text (byte 0x%02x at offset %zu)", path, line, col,
                (unsigned char)buf[bad], bad);
            return -1;
        }
        if (memchr(buf, 0, sz)) {
            long line, col;
            size_t off = (size_t)((char *)memchr(buf, 0, sz) - buf);
            where(buf, off, &line, &col);
            ERR("%s:%ld:%ld: a NUL byte (binary file?)", path, line, col);
            return -1;
        }
        if (field ? read_jsonl(c, fi, buf, sz, field) : add_doc(c, buf, sz, fi, 0))
            return -1;
    }
    if (!c->ndocs) {
        ERR("the inputs hold no text (every document is empty)");
        return -1;
    }
    return 0;
}

int wd_corpus_split(struct wd_corpus *c, double frac, long val_docs)
{
    size_t n = c->ndocs;
    size_t nv = val_docs > 0 ? (size_t)val_docs : (size_t)(n * frac + 0.5);
    if (val_docs <= 0 && frac <= 0)
        return 0;
    if (nv == 0) {
        ERR("--val-fraction %g of %zu documents selects none: give more documents "
            "(one per file, or --jsonl records) or --val-docs N", frac, n);
        return -1;
    }
    if (nv >= n) {
        ERR("the validation split would take %zu of %zu documents and leave none for "
            "training (--val-fraction / --val-docs)", nv, n);
        return -1;
    }
    /* document i is validation when the count floor((i+1) nv / n) steps up:
     * nv documents spread evenly, the same every run */
    for (size_t i = 0; i < n; i++)
        c->docs[i].val = ((i + 1) * nv) / n > (i * nv) / n;
    return 0;
}

void wd_corpus_free(struct wd_corpus *c)
{
    for (int i = 0; i < c->nfiles; i++)
        free(c->files[i]);
    free(c->files);
    for (size_t i = 0; i < c->nbufs; i++)
        free(c->bufs[i]);
    free(c->bufs);
    free(c->docs);
    memset(c, 0, sizeof *c);
}
