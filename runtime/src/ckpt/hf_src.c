/* The safetensors files of a Hugging Face directory, mapped read-only,
 * and the checks that every tensor the name table needs is there with the
 * right shape and nothing is left over (hf_internal.h). */
#define _GNU_SOURCE
#include "hf_internal.h"

#include "whale/error.h"
#include "whale/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void hf_src_close(struct hf_src *s)
{
    for (size_t i = 0; i < s->nf; i++) {
        if (s->f[i].map && s->f[i].map != MAP_FAILED)
            munmap(s->f[i].map, s->f[i].len);
        if (s->f[i].fd >= 0)
            close(s->f[i].fd);
        ckpt_st_entries_free(s->f[i].e, s->f[i].n);
    }
    free(s->f);
    memset(s, 0, sizeof *s);
}

static int file_open(struct hf_file *f, const char *path)
{
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        whale_error("import: %s: %s", path, strerror(errno));
        return errno == ENOENT ? WHALE_ENOENT : WHALE_EIO;
    }
    uint64_t fsz;
    int rc = ckpt_st_read_header(f->fd, path, &f->e, &f->n, &f->doff, &fsz, NULL);
    if (rc)
        return rc;
    f->len = (size_t)fsz;
    f->map = mmap(NULL, f->len ? f->len : 1, PROT_READ, MAP_SHARED, f->fd, 0);
    if (f->map == MAP_FAILED) {
        whale_error("import: mmap %s: %s", path, strerror(errno));
        return WHALE_EIO;
    }
    return 0;
}

/* model.safetensors, or the files model.safetensors.index.json names */
int hf_src_open(const char *dir, struct hf_src *s)
{
    char p[4096];
    memset(s, 0, sizeof *s);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    json_t *idx = NULL;
    if (!access(p, F_OK)) {
        if (!(idx = hf_json_load(p)))
            return WHALE_ECONF;
    }
    const char *names[4096];
    size_t nn = 0;
    if (idx) {
        json_t *wm = json_object_get(idx, "weight_map");
        const char *k;
        json_t *v;
        if (!json_is_object(wm)) {
            whale_error("%s: no \"weight_map\" object", p);
            json_decref(idx);
            return WHALE_ECONF;
        }
        json_object_foreach(wm, k, v) {
            const char *fn = json_string_value(v);
            if (!fn || strchr(fn, '/') || fn[0] == '.') {
                whale_error("%s: weight_map[\"%s\"] is not a file name in the directory", p, k);
                json_decref(idx);
                return WHALE_ECONF;
            }
            size_t j = 0;
            while (j < nn && strcmp(names[j], fn))
                j++;
            if (j == nn) {
                if (nn == sizeof names / sizeof names[0]) {
                    whale_error("%s: more than %zu shard files", p, nn);
                    json_decref(idx);
                    return WHALE_ECONF;
                }
                names[nn++] = fn;
            }
        }
    } else {
        names[nn++] = "model.safetensors";
    }
    s->f = calloc(nn, sizeof *s->f);
    int rc = s->f ? 0 : WHALE_ENOMEM;
    for (size_t i = 0; i < nn && !rc; i++) {
        s->f[i].fd = -1;
        s->nf++;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        rc = file_open(&s->f[i], p);
    }
    json_decref(idx);
    return rc;
}


bool hf_find(struct hf_src *s, const char *name, struct hf_found *out)
{
    for (size_t i = 0; i < s->nf; i++)
        for (size_t j = 0; j < s->f[i].n; j++)
            if (!strcmp(s->f[i].e[j].name, name)) {
                out->f = &s->f[i];
                out->e = &s->f[i].e[j];
                return true;
            }
    return false;
}

const void *hf_tdata(const struct hf_found *x)
{
    return (const char *)x->f->map + x->f->doff + x->e->begin;
}

void hf_transpose(void *dst, const void *src, int64_t a, int64_t b, size_t es)
{
    /* src [a, b] -> dst [b, a] */
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            memcpy((char *)dst + (j * a + i) * es, (const char *)src + (i * b + j) * es, es);
}

/* Names Hugging Face saves that carry no weights (buffers of older
 * releases): skipped. */
static bool ignorable(const char *n)
{
    size_t l = strlen(n);
    static const char *suf[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    for (size_t i = 0; i < 3; i++) {
        size_t k = strlen(suf[i]);
        if (l >= k && !strcmp(n + l - k, suf[i]))
            return true;
    }
    return false;
}

/* Checks every entry against the files; marks used sources. */
int hf_check_all(struct hf_src *s, struct hf_ent *m, size_t nm, const char *dir,
                     unsigned char **used_out, enum whale_dtype *dt0)
{
    size_t total = 0;
    for (size_t i = 0; i < s->nf; i++)
        total += s->f[i].n;
    unsigned char *used = calloc(total + 1, 1);
    if (!used)
        return WHALE_ENOMEM;
    int bad = 0;
    *dt0 = (enum whale_dtype)-1;
    for (size_t k = 0; k < nm; k++) {
        for (int j = 0; j < m[k].nsrc; j++) {
            struct hf_found x;
            if (!hf_find(s, m[k].src[j], &x)) {
                whale_error("import: %s: tensor %s is missing (whale's %s needs it)", dir,
                            m[k].src[j], m[k].whale);
                bad++;
                continue;
            }
            size_t base = 0;
            for (struct hf_file *f = s->f; f != x.f; f++)
                base += f->n;
            used[base + (size_t)(x.e - x.f->e)] = 1;
            if (!ckpt_dtype_is_float(x.e->dtype)) {
                whale_error("import: %s: tensor %s has dtype %s (F32, BF16 or F16 expected)",
                            x.f->path, x.e->name, ckpt_dtype_st(x.e->dtype));
                bad++;
                continue;
            }
            if ((int)*dt0 < 0)
                *dt0 = x.e->dtype;
            bool shape_ok = x.e->ndim == m[k].sndim;
            for (int d = 0; shape_ok && d < m[k].sndim; d++)
                shape_ok = x.e->shape[d] == m[k].sshape[d];
            if (!shape_ok) {
                char got[96] = "", want[96] = "";
                for (int d = 0; d < x.e->ndim; d++)
                    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "",
                             (long long)x.e->shape[d]);
                for (int d = 0; d < m[k].sndim; d++)
                    snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld",
                             d ? "," : "", (long long)m[k].sshape[d]);
                whale_error("import: %s: tensor %s has shape [%s], config.json says [%s]",
                            x.f->path, x.e->name, got, want);
                bad++;
            }
            if (m[k].nsrc > 1 && j > 0) {
                struct hf_found x0;
                if (hf_find(s, m[k].src[0], &x0) && x0.e->dtype != x.e->dtype) {
                    whale_error("import: %s: tensors %s and %s differ in dtype (%s, %s)", dir,
                                m[k].src[0], m[k].src[j], ckpt_dtype_st(x0.e->dtype),
                                ckpt_dtype_st(x.e->dtype));
                    bad++;
                }
            }
        }
    }
    *used_out = used;
    return bad ? WHALE_EDATA : 0;
}

int hf_check_leftovers(struct hf_src *s, const unsigned char *used, bool tied,
                           const char *embed, const char *dir)
{
    int bad = 0;
    size_t u = 0;
    for (size_t i = 0; i < s->nf; i++)
        for (size_t j = 0; j < s->f[i].n; j++, u++) {
            const ckpt_st_entry *e = &s->f[i].e[j];
            if (used[u] || ignorable(e->name))
                continue;
            if (tied && !strcmp(e->name, "lm_head.weight")) {
                /* a tied model saved with its head: fine when it is the embedding */
                struct hf_found x;
                if (hf_find(s, embed, &x) && x.e->dtype == e->dtype &&
                    x.e->end - x.e->begin == e->end - e->begin &&
                    !memcmp(hf_tdata(&x), (const char *)s->f[i].map + s->f[i].doff + e->begin,
                            e->end - e->begin))
                    continue;
                whale_error("import: %s: config.json field \"tie_word_embeddings\" = true but "
                            "lm_head.weight differs from %s", dir, embed);
                bad++;
                continue;
            }
            whale_error("import: %s: unexpected tensor %s (no place for it in whale's %s)",
                        s->f[i].path, e->name, "model");
            bad++;
        }
    return bad ? WHALE_EDATA : 0;
}

