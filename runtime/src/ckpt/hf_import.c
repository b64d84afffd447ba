/* Hugging Face directory -> whale model description + checkpoint
 * (whale/ckpt_hf.h). The safetensors files are mapped, not read: tensors
 * that keep their layout go to the checkpoint writer straight from the
 * mapping, only transposed or stacked ones take a buffer. Every check
 * (config fields, names, shapes, dtypes, leftovers) runs before anything
 * is written. */
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
#include <sys/stat.h>
#include <unistd.h>

static int copy_file(const char *from, const char *to)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = ckpt_read_file(from, &buf, &len);
    if (rc)
        return rc;
    FILE *f = fopen(to, "w");
    if (!f || fwrite(buf, 1, len, f) != len) {
        whale_error("cannot write %s: %s", to, strerror(errno));
        rc = WHALE_EIO;
    }
    if (f && fclose(f))
        rc = WHALE_EIO;
    free(buf);
    return rc;
}

int whale_hf_import(const char *hf_dir, const char *out_dir)
{
    struct whale_model_desc md;
    char cp[4096];
    snprintf(cp, sizeof cp, "%s/config.json", hf_dir);
    enum hf_family fam;
    int rc = hf_config_load(hf_dir, &md, &fam);
    if (rc)
        return rc;
    struct hf_src s;
    rc = hf_src_open(hf_dir, &s);
    if (rc) {
        hf_src_close(&s);
        return rc;
    }
    struct hf_found probe;
    const char *prefix = fam != HF_GPT2 ? "model."
                         : hf_find(&s, "transformer.wte.weight", &probe) ? "transformer." : "";
    struct hf_ent *m = NULL;
    size_t nm = 0;
    unsigned char *used = NULL;
    enum whale_dtype dt0;
    rc = hf_map_build(&md, fam, prefix, &m, &nm);
    if (!rc)
        rc = hf_check_all(&s, m, nm, hf_dir, &used, &dt0);
    char embed[160];
    snprintf(embed, sizeof embed, "%s%s", prefix,
             fam == HF_GPT2 ? "wte.weight" : "embed_tokens.weight");
    if (!rc)
        rc = hf_check_leftovers(&s, used, md.tied_embeddings, embed, hf_dir);
    whale_ckpt_piece *p = rc ? NULL : calloc(nm, sizeof *p);
    void **bufs = rc ? NULL : calloc(nm, sizeof *bufs);
    if (!rc && (!p || !bufs))
        rc = WHALE_ENOMEM;
    for (size_t k = 0; k < nm && !rc; k++) {
        struct hf_found x[3];
        for (int j = 0; j < m[k].nsrc; j++)
            hf_find(&s, m[k].src[j], &x[j]);
        enum whale_dtype dt = m[k].nsrc ? x[0].e->dtype : dt0;
        size_t es = ckpt_dtype_size(dt);
        int64_t numel = ckpt_shape_numel(m[k].ndim, m[k].shape);
        const void *data = NULL;
        if (m[k].op == HF_COPY) {
            data = hf_tdata(&x[0]);
        } else {
            bufs[k] = calloc((size_t)numel ? (size_t)numel : 1, es);
            if (!bufs[k]) {
                rc = WHALE_ENOMEM;
                break;
            }
            data = bufs[k];
            if (m[k].op == HF_TRANSPOSE || m[k].op == HF_GPT2_QKV)
                hf_transpose(bufs[k], hf_tdata(&x[0]), m[k].sshape[0], m[k].sshape[1], es);
            else if (m[k].op == HF_STACK) {
                size_t part = (size_t)(numel / m[k].nsrc) * es;
                for (int j = 0; j < m[k].nsrc; j++)
                    memcpy((char *)bufs[k] + j * part, hf_tdata(&x[j]), part);
            } /* HF_ZERO: calloc'd */
        }
        whale_ckpt_piece_full(&p[k], m[k].whale, dt, m[k].ndim, m[k].shape, (void *)data);
    }
    if (!rc) {
        rc = ckpt_mkdir_p(out_dir, 0775);
        char path[4096];
        if (!rc) {
            snprintf(path, sizeof path, "%s/model.conf", out_dir);
            rc = hf_write_conf(path, &md, cp);
        }
        if (!rc) {
            snprintf(path, sizeof path, "%s/hf_config.json", out_dir);
            rc = copy_file(cp, path);
        }
    }
    if (!rc) {
        whale_ckpt_config c;
        whale_ckpt_config_default(&c);
        c.root = out_dir;
        c.rank = 0;
        c.world = 1;
        c.async = false;
        whale_ckpt *ck;
        rc = whale_ckpt_open(&c, &ck);
        if (!rc) {
            char extra[256];
            snprintf(extra, sizeof extra,
                     "{\"imported\":true,\"hf_model_type\":\"%s\"}", hf_family_name(fam));
            whale_ckpt_meta meta = {.step = 0, .loss_scale = 1, .extra_json = extra};
            rc = whale_ckpt_save(ck, &meta, p, nm, NULL);
            int r2 = whale_ckpt_close(ck);
            if (!rc)
                rc = r2;
        }
    }
    if (!rc)
        whale_info("imported %s (%s, %zu tensors, %s) into %s", hf_dir, hf_family_name(fam), nm,
                   ckpt_dtype_st(dt0), out_dir);
    for (size_t k = 0; bufs && k < nm; k++)
        free(bufs[k]);
    free(bufs);
    free(p);
    free(used);
    free(m);
    hf_src_close(&s);
    return rc;
}
