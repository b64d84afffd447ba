/* Interchange with plain safetensors: consolidate a (sharded, compressed)
 * checkpoint into one ordinary file for other tools, and import an
 * ordinary file as a one-rank checkpoint to fine-tune from. */
#define _GNU_SOURCE
#include "ckpt_internal.h"

#include "whale/error.h"
#include "whale/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int whale_ckpt_consolidate(whale_ckpt_reader *r, const char *out_path, int to_dtype,
                           bool params_only)
{
    const whale_ckpt_info *in = whale_ckpt_reader_info(r);
    if (to_dtype >= 0 && !ckpt_dtype_is_float((enum whale_dtype)to_dtype)) {
        whale_error("consolidate: target dtype must be F32, BF16 or F16");
        return WHALE_EINVAL;
    }
    size_t n = in->ntensors, ne = 0;
    ckpt_st_entry *e = calloc(n + 1, sizeof *e);
    if (!e)
        return WHALE_ENOMEM;
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name;
        enum whale_dtype dt;
        int nd;
        int64_t shape[WHALE_CKPT_MAX_DIMS];
        whale_ckpt_reader_tensor(r, i, &name, &dt, &nd, shape);
        if (params_only && !strncmp(name, "opt.", 4))
            continue;
        if (to_dtype >= 0 && ckpt_dtype_is_float(dt))
            dt = (enum whale_dtype)to_dtype;
        /* the whole tensor is allocated below: first check the checkpoint
         * holds all of it, so a wrong shape (2^31 rows) is named, not an
         * allocation that fails */
        int64_t numel = ckpt_shape_numel(nd, shape), held = ckpt_reader_held(r, i);
        if (held < numel) { /* more: replicas saved by several ranks */
            char sh[128];
            ckpt_fmt_shape(sh, sizeof sh, nd, shape);
            whale_error("consolidate: %s: tensor %s: shape %s has %lld elements but the "
                        "checkpoint holds %lld of them (a partial save, or a changed shape)",
                        in->dir, name, sh, (long long)numel, (long long)held);
            free(e);
            return WHALE_EDATA;
        }
        uint64_t bytes = (uint64_t)numel * ckpt_dtype_size(dt);
        e[ne] = (ckpt_st_entry){.name = (char *)name, .dtype = dt, .ndim = nd, .begin = off,
                                .end = off + bytes};
        memcpy(e[ne].shape, shape, sizeof shape);
        off += bytes;
        ne++;
    }
    json_t *meta = json_object();
    char b[64];
    json_object_set_new(meta, "format", json_string("whale-ckpt-consolidated"));
    snprintf(b, sizeof b, "%lld", (long long)in->step);
    json_object_set_new(meta, "step", json_string(b));
    snprintf(b, sizeof b, "%lld", (long long)in->samples);
    json_object_set_new(meta, "samples", json_string(b));
    if (in->plan_json)
        json_object_set_new(meta, "plan", json_string(in->plan_json));
    char *hdr = NULL;
    size_t hlen = 0;
    int rc = ckpt_st_header(e, ne, meta, &hdr, &hlen);
    json_decref(meta);
    if (rc) {
        free(e);
        return rc;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    /* O_NOFOLLOW: OUT.tmp is a name anyone can guess (a link planted there
     * would have the write truncate its target); the rename below replaces
     * a link at OUT instead of following it */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0664);
    if (fd < 0) {
        whale_error("consolidate: cannot create %s: %s", tmp,
                    errno == ELOOP ? "it is a symbolic link (output files are never written "
                                     "through a link)" : strerror(errno));
        free(hdr);
        free(e);
        return WHALE_EIO;
    }
    if (ckpt_write_all(fd, hdr, hlen, NULL))
        rc = WHALE_EIO;
    free(hdr);
    for (size_t i = 0; i < ne && !rc; i++) {
        size_t bytes = e[i].end - e[i].begin;
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf) {
            char sh[128];
            ckpt_fmt_shape(sh, sizeof sh, e[i].ndim, e[i].shape);
            whale_error("consolidate: tensor %s (shape %s): out of memory for %zu bytes",
                        e[i].name, sh, bytes);
            rc = WHALE_ENOMEM;
            break;
        }
        whale_ckpt_piece p;
        whale_ckpt_piece_full(&p, e[i].name, e[i].dtype, e[i].ndim, e[i].shape, buf);
        rc = whale_ckpt_read(r, &p, 1);
        if (!rc && ckpt_write_all(fd, buf, bytes, NULL)) {
            whale_error("consolidate: writing %s: %s", tmp, strerror(errno));
            rc = errno == ENOSPC ? WHALE_ENOSPC : WHALE_EIO;
        }
        free(buf);
    }
    if (!rc && fdatasync(fd))
        rc = WHALE_EIO;
    close(fd);
    if (!rc && rename(tmp, out_path)) {
        whale_error("consolidate: rename %s -> %s: %s", tmp, out_path, strerror(errno));
        rc = WHALE_EIO;
    }
    if (rc)
        unlink(tmp);
    free(e);
    return rc;
}

int whale_ckpt_import_safetensors(const char *path, const whale_ckpt_config *cfg, int64_t step)
{
    return whale_ckpt_import_safetensors_checked(path, cfg, step, NULL);
}

int whale_ckpt_import_safetensors_checked(const char *path, const whale_ckpt_config *cfg,
                                          int64_t step, const whale_ckpt_import_check *chk)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        whale_error("import: %s: %s", path, strerror(errno));
        return errno == ENOENT ? WHALE_ENOENT : WHALE_EIO;
    }
    ckpt_st_entry *e = NULL;
    size_t n = 0;
    uint64_t doff, fsz;
    int rc = ckpt_st_read_header(fd, path, &e, &n, &doff, &fsz, NULL);
    if (rc) {
        close(fd);
        return rc;
    }
    /* the caller's checks first: nothing is read or written for a file
     * it refuses */
    for (size_t i = 0; i < n && !rc && chk && chk->tensor; i++)
        rc = chk->tensor(chk->user, e[i].name, e[i].dtype, e[i].ndim, e[i].shape);
    if (!rc && chk && chk->end)
        rc = chk->end(chk->user);
    whale_ckpt_piece *p = calloc(n + 1, sizeof *p);
    void **bufs = calloc(n + 1, sizeof *bufs);
    if (!rc && (!p || !bufs))
        rc = WHALE_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        if ((int)e[i].dtype == (int)CKPT_INT8) {
            whale_error("import: %s: tensor %s: dtype I8 is not supported", path, e[i].name);
            rc = WHALE_ENOTSUP;
            break;
        }
        uint64_t want = (uint64_t)ckpt_shape_numel(e[i].ndim, e[i].shape) *
                        ckpt_dtype_size(e[i].dtype);
        if (e[i].end - e[i].begin != want) {
            whale_error("import: %s: tensor %s: %llu bytes for its shape needs %llu", path,
                        e[i].name, (unsigned long long)(e[i].end - e[i].begin),
                        (unsigned long long)want);
            rc = WHALE_EDATA;
            break;
        }
        bufs[i] = malloc(want ? want : 1);
        if (!bufs[i]) {
            rc = WHALE_ENOMEM;
            break;
        }
        ssize_t got = pread(fd, bufs[i], want, (off_t)(doff + e[i].begin));
        if (got != (ssize_t)want) {
            whale_error("import: %s: tensor %s: truncated", path, e[i].name);
            rc = WHALE_ECORRUPT;
            break;
        }
        whale_ckpt_piece_full(&p[i], e[i].name, e[i].dtype, e[i].ndim, e[i].shape, bufs[i]);
    }
    close(fd);
    if (!rc) {
        whale_ckpt_config c = *cfg;
        c.rank = 0;
        c.world = 1;
        c.async = false;
        whale_ckpt *ck;
        rc = whale_ckpt_open(&c, &ck);
        if (!rc) {
            whale_ckpt_meta m = {.step = step, .loss_scale = 1,
                                 .extra_json = "{\"imported\":true}"};
            rc = whale_ckpt_save(ck, &m, p, n, NULL);
            int r2 = whale_ckpt_close(ck);
            if (!rc)
                rc = r2;
        }
    }
    for (size_t i = 0; i < n && bufs; i++)
        free(bufs[i]);
    free(bufs);
    free(p);
    ckpt_st_entries_free(e, n);
    return rc;
}
