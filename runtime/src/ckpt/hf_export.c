/* whale checkpoint (any layout) -> Hugging Face directory
 * (whale/ckpt_hf.h): the reader reshards on load, so every whale tensor
 * comes back whole; each is read once per shard file it lands in, turned
 * into Hugging Face's layout and written; memory stays at one whale tensor. */
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
#include <unistd.h>

struct out_t {
    size_t ent;   /* whale entry */
    int part;     /* which source of it (STACK) */
    int shard;
    ckpt_st_entry st;
};

static void transpose(void *dst, const void *src, int64_t a, int64_t b, size_t es)
{
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            memcpy((char *)dst + (j * a + i) * es, (const char *)src + (i * b + j) * es, es);
}

static bool all_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i])
            return false;
    return true;
}

/* The whale tensor k in dtype dt (malloc'd into *buf). */
static int read_whole(whale_ckpt_reader *r, const struct hf_ent *m, enum whale_dtype dt,
                      void **buf)
{
    int64_t numel = ckpt_shape_numel(m->ndim, m->shape);
    *buf = malloc((size_t)numel * ckpt_dtype_size(dt) + 1);
    if (!*buf)
        return WHALE_ENOMEM;
    whale_ckpt_piece p;
    whale_ckpt_piece_full(&p, m->whale, dt, m->ndim, m->shape, *buf);
    return whale_ckpt_read(r, &p, 1);
}

/* Hugging Face tensor `part` of whale tensor m (data in buf) into dst */
static void to_hf(const struct hf_ent *m, int part, const void *buf, void *dst, size_t es)
{
    int64_t numel = ckpt_shape_numel(m->ndim, m->shape);
    if (m->op == HF_TRANSPOSE || m->op == HF_GPT2_QKV) /* whale [b, a] -> hf [a, b] */
        transpose(dst, buf, m->sshape[1], m->sshape[0], es);
    else if (m->op == HF_STACK) {
        size_t sz = (size_t)(numel / m->nsrc) * es;
        memcpy(dst, (const char *)buf + part * sz, sz);
    } else
        memcpy(dst, buf, (size_t)numel * es);
}

static int write_shard(whale_ckpt_reader *r, struct hf_ent *m, struct out_t *o, size_t no,
                       int shard, const char *path)
{
    size_t cnt = 0;
    for (size_t i = 0; i < no; i++)
        cnt += o[i].shard == shard;
    ckpt_st_entry *e = calloc(cnt + 1, sizeof *e);
    if (!e)
        return WHALE_ENOMEM;
    uint64_t off = 0;
    size_t k = 0;
    for (size_t i = 0; i < no; i++)
        if (o[i].shard == shard) {
            e[k] = o[i].st;
            e[k].begin = off;
            off += o[i].st.end - o[i].st.begin;
            e[k].end = off;
            k++;
        }
    json_t *meta = json_pack("{s:s}", "format", "pt");
    char *hdr = NULL;
    size_t hlen = 0;
    int rc = ckpt_st_header(e, cnt, meta, &hdr, &hlen);
    json_decref(meta);
    free(e);
    if (rc)
        return rc;
    char tmp[4300]; /* path (< 4200) + ".tmp" */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0664);
    if (fd < 0) {
        whale_error("export: cannot create %s: %s", tmp, strerror(errno));
        free(hdr);
        return WHALE_EIO;
    }
    rc = ckpt_write_all(fd, hdr, hlen, NULL) ? WHALE_EIO : 0;
    free(hdr);
    size_t cur = (size_t)-1;
    void *buf = NULL, *out = NULL;
    for (size_t i = 0; i < no && !rc; i++) {
        if (o[i].shard != shard)
            continue;
        const struct hf_ent *me = &m[o[i].ent];
        if (cur != o[i].ent) {
            free(buf);
            buf = NULL;
            cur = o[i].ent;
            rc = read_whole(r, me, o[i].st.dtype, &buf);
            if (rc)
                break;
        }
        size_t bytes = o[i].st.end - o[i].st.begin;
        free(out);
        out = malloc(bytes + 1);
        if (!out) {
            rc = WHALE_ENOMEM;
            break;
        }
        to_hf(me, o[i].part, buf, out, ckpt_dtype_size(o[i].st.dtype));
        if (ckpt_write_all(fd, out, bytes, NULL)) {
            whale_error("export: writing %s: %s", tmp, strerror(errno));
            rc = WHALE_EIO;
        }
    }
    free(buf);
    free(out);
    if (!rc && fdatasync(fd))
        rc = WHALE_EIO;
    close(fd);
    if (!rc && rename(tmp, path)) {
        whale_error("export: rename %s: %s", path, strerror(errno));
        rc = WHALE_EIO;
    }
    if (rc)
        unlink(tmp);
    return rc;
}

int whale_hf_export(const char *ckpt_dir, const char *model, const char *hf_config,
                    const char *out_dir, uint64_t max_shard_bytes, int to_dtype)
{
    struct whale_model_desc md;
    int rc = whale_model_desc_load(model, &md);
    if (rc)
        return rc;
    json_t *cfg = NULL;
    enum hf_family fam;
    if (hf_config) {
        if (!(cfg = hf_json_load(hf_config)))
            return WHALE_ECONF;
        struct whale_model_desc cmd;
        rc = hf_config_parse(cfg, hf_config, &cmd, &fam);
        if (!rc && (cmd.layers != md.layers || cmd.hidden != md.hidden ||
                    cmd.heads != md.heads || cmd.kv_heads != md.kv_heads ||
                    cmd.ffn != md.ffn || cmd.vocab != md.vocab ||
                    cmd.tied_embeddings != md.tied_embeddings || cmd.norm != md.norm ||
                    cmd.mlp != md.mlp || cmd.no_bias != md.no_bias)) {
            whale_error("export: %s does not describe the model %s (layers, widths, heads, "
                        "vocabulary or architecture differ)", hf_config, md.source);
            rc = WHALE_ECONF;
        }
    } else {
        cfg = json_object();
        rc = hf_family_of(&md, &fam);
    }
    if (!rc)
        rc = hf_config_fill(cfg, &md, fam);
    if (!rc)
        json_object_set_new(cfg, "torch_dtype",
                            json_string(to_dtype == WHALE_BFLOAT16 ? "bfloat16"
                                        : to_dtype == WHALE_FLOAT16 ? "float16" : "float32"));
    char *path = NULL;
    whale_ckpt_reader *r = NULL;
    if (!rc)
        rc = whale_ckpt_resolve(ckpt_dir, "latest", &path);
    if (!rc)
        rc = whale_ckpt_reader_open(path, &r);
    free(path);
    struct hf_ent *m = NULL;
    size_t nm = 0;
    if (!rc)
        rc = hf_map_build(&md, fam, fam == HF_GPT2 ? "transformer." : "model.", &m, &nm);
    struct out_t *o = NULL;
    size_t no = 0;
    if (!rc && !(o = calloc(nm * 3 + 1, sizeof *o)))
        rc = WHALE_ENOMEM;
    /* the layout: every Hugging Face tensor, in shards of at most max_shard_bytes */
    int shard = 0;
    uint64_t in_shard = 0, total = 0;
    for (size_t k = 0; k < nm && !rc; k++) {
        long ti = whale_ckpt_reader_find(r, m[k].whale);
        if (ti < 0) {
            whale_error("export: checkpoint %s has no tensor %s (is %s its model?)",
                        whale_ckpt_reader_info(r)->dir, m[k].whale, md.source);
            rc = WHALE_EDATA;
            break;
        }
        const char *nm_;
        enum whale_dtype dt;
        int nd;
        int64_t sh[WHALE_CKPT_MAX_DIMS];
        whale_ckpt_reader_tensor(r, (size_t)ti, &nm_, &dt, &nd, sh);
        bool same = nd == m[k].ndim;
        for (int d = 0; same && d < nd; d++)
            same = sh[d] == m[k].shape[d];
        if (!same) {
            whale_error("export: checkpoint tensor %s has another shape than %s describes",
                        m[k].whale, md.source);
            rc = WHALE_EDATA;
            break;
        }
        if (to_dtype >= 0)
            dt = (enum whale_dtype)to_dtype;
        if (m[k].op == HF_ZERO) { /* Hugging Face's model has no such bias */
            void *buf = NULL;
            rc = read_whole(r, &m[k], dt, &buf);
            if (!rc && !all_zero(buf, (size_t)ckpt_shape_numel(m[k].ndim, m[k].shape) *
                                          ckpt_dtype_size(dt))) {
                whale_error("export: tensor %s is not zero: %s has no such bias, exporting "
                            "would change the model", m[k].whale, hf_family_name(fam));
                rc = WHALE_ENOTSUP;
            }
            free(buf);
            continue;
        }
        for (int j = 0; j < m[k].nsrc; j++) {
            struct out_t *x = &o[no++];
            x->ent = k;
            x->part = j;
            x->st.name = m[k].src[j];
            x->st.dtype = dt;
            x->st.ndim = m[k].sndim;
            memcpy(x->st.shape, m[k].sshape, sizeof m[k].sshape);
            uint64_t bytes = (uint64_t)ckpt_shape_numel(m[k].sndim, m[k].sshape) *
                             ckpt_dtype_size(dt);
            if (in_shard && in_shard + bytes > max_shard_bytes) {
                shard++;
                in_shard = 0;
            }
            x->shard = shard;
            x->st.begin = 0;
            x->st.end = bytes;
            in_shard += bytes;
            total += bytes;
        }
    }
    if (!rc)
        rc = ckpt_mkdir_p(out_dir, 0775);
    int nshards = shard + 1;
    json_t *wm = json_object();
    for (int s = 0; s < nshards && !rc; s++) {
        char fn[64], fp[4200];
        if (nshards == 1)
            snprintf(fn, sizeof fn, "model.safetensors");
        else
            snprintf(fn, sizeof fn, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        snprintf(fp, sizeof fp, "%s/%s", out_dir, fn);
        rc = write_shard(r, m, o, no, s, fp);
        for (size_t i = 0; i < no && !rc; i++)
            if (o[i].shard == s)
                json_object_set_new(wm, o[i].st.name, json_string(fn));
    }
    if (!rc) {
        json_t *idx = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)total,
                                "weight_map", wm);
        char fp[4200];
        snprintf(fp, sizeof fp, "%s/model.safetensors.index.json", out_dir);
        if (json_dump_file(idx, fp, JSON_INDENT(2) | JSON_SORT_KEYS))
            rc = WHALE_EIO;
        snprintf(fp, sizeof fp, "%s/config.json", out_dir);
        if (!rc && json_dump_file(cfg, fp, JSON_INDENT(2) | JSON_SORT_KEYS))
            rc = WHALE_EIO;
        json_decref(idx);
        if (rc)
            whale_error("export: cannot write %s: %s", fp, strerror(errno));
    }
    if (!rc)
        whale_info("exported %s as %s (%zu tensors, %d file%s, %llu bytes) into %s",
                   whale_ckpt_reader_info(r)->dir, hf_family_name(fam), no, nshards,
                   nshards == 1 ? "" : "s", (unsigned long long)total, out_dir);
    json_decref(wm);
    json_decref(cfg);
    free(o);
    free(m);
    if (r)
        whale_ckpt_reader_close(r);
    return rc;
}
