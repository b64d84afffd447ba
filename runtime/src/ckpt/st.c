/* safetensors headers: u64 little-endian length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {str: str}},
 * then the data. The real library insists that entries tile the data
 * section without holes and that the section ends at the file's end; the
 * JSON is padded with spaces so the data starts 8-byte aligned. */
#include "ckpt_internal.h"

#include "whale/error.h"
#include "whale/log.h"
#include "whale/checked.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u * 1000u * 1000u)

int ckpt_st_header(const ckpt_st_entry *e, size_t n, void *metadata_json, char **out,
                   size_t *out_len)
{
    return ckpt_st_header_aligned(e, n, metadata_json, 8, out, out_len);
}

/* align: the data section starts at a multiple of it (8, or the 4096 of
 * O_DIRECT writes); the JSON is padded with spaces, which JSON allows. */
int ckpt_st_header_aligned(const ckpt_st_entry *e, size_t n, void *metadata_json, size_t align,
                           char **out, size_t *out_len)
{
    json_t *root = json_object();
    if (!root)
        return WHALE_ENOMEM;
    if (metadata_json)
        json_object_set(root, "__metadata__", (json_t *)metadata_json);
    for (size_t i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < e[i].ndim; d++)
            json_array_append_new(shape, json_integer(e[i].shape[d]));
        json_t *t = json_pack("{s:s, s:o, s:[I,I]}", "dtype", ckpt_dtype_st(e[i].dtype),
                              "shape", shape, "data_offsets", (json_int_t)e[i].begin,
                              (json_int_t)e[i].end);
        if (!t || json_object_set_new(root, e[i].name, t)) {
            json_decref(root);
            return WHALE_ENOMEM;
        }
    }
    char *js = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!js)
        return WHALE_ENOMEM;
    size_t jl = strlen(js);
    size_t padded = ((8 + jl + align - 1) / align) * align - 8;
    char *buf = malloc(8 + padded);
    if (!buf) {
        free(js);
        return WHALE_ENOMEM;
    }
    uint64_t N = padded;
    for (int i = 0; i < 8; i++)
        buf[i] = (char)((N >> (8 * i)) & 0xff);
    memcpy(buf + 8, js, jl);
    memset(buf + 8 + jl, ' ', padded - jl);
    free(js);
    *out = buf;
    *out_len = 8 + padded;
    return 0;
}

void ckpt_st_entries_free(ckpt_st_entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

static int pread_all(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (int)(got == len);
}

int ckpt_st_read_header(int fd, const char *path, ckpt_st_entry **out, size_t *nout,
                        uint64_t *data_off, uint64_t *file_size, void **metadata_json)
{
    struct stat st;
    if (fstat(fd, &st)) {
        whale_error("checkpoint: %s: %s", path, strerror(errno));
        return WHALE_EIO;
    }
    *file_size = (uint64_t)st.st_size;
    unsigned char lb[8];
    if (pread_all(fd, lb, 8, 0) != 1) {
        whale_error("checkpoint: %s: truncated (%lld bytes, no safetensors header)", path,
                    (long long)st.st_size);
        return WHALE_ECORRUPT;
    }
    uint64_t N = 0;
    for (int i = 0; i < 8; i++)
        N |= (uint64_t)lb[i] << (8 * i);
    if (N == 0 || N > ST_MAX_HEADER || 8 + N > (uint64_t)st.st_size) {
        whale_error("checkpoint: %s: bad safetensors header length %llu (file %lld bytes)",
                    path, (unsigned long long)N, (long long)st.st_size);
        return WHALE_ECORRUPT;
    }
    char *js = malloc(N + 1);
    if (!js)
        return WHALE_ENOMEM;
    if (pread_all(fd, js, N, 8) != 1) {
        free(js);
        whale_error("checkpoint: %s: cannot read header", path);
        return WHALE_EIO;
    }
    js[N] = 0;
    json_error_t jerr;
    json_t *root = json_loadb(js, N, 0, &jerr);
    free(js);
    if (!root || !json_is_object(root)) {
        whale_error("checkpoint: %s: safetensors header is not valid JSON (%s)", path,
                    root ? "not an object" : jerr.text);
        json_decref(root);
        return WHALE_ECORRUPT;
    }
    size_t cap = json_object_size(root), n = 0;
    ckpt_st_entry *e = calloc(cap ? cap : 1, sizeof *e);
    if (!e) {
        json_decref(root);
        return WHALE_ENOMEM;
    }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (metadata_json)
                *metadata_json = json_incref(v);
            continue;
        }
        ckpt_st_entry *x = &e[n];
        const char *dt = json_string_value(json_object_get(v, "dtype"));
        json_t *shape = json_object_get(v, "shape");
        json_t *offs = json_object_get(v, "data_offsets");
        if (ckpt_dtype_from_st(dt, &x->dtype)) {
            whale_error("checkpoint: %s: tensor %s: dtype %s is not supported (F32, BF16, F16, "
                        "I32, I64, U8, I8)", path, key, dt ? dt : "(missing)");
            rc = WHALE_ENOTSUP;
            break;
        }
        if (!json_is_array(shape) ||
            json_array_size(shape) > WHALE_CKPT_MAX_DIMS || !json_is_array(offs) ||
            json_array_size(offs) != 2) {
            whale_error("checkpoint: %s: tensor %s: bad safetensors entry", path, key);
            rc = WHALE_ECORRUPT;
            break;
        }
        x->name = strdup(key);
        x->ndim = (int)json_array_size(shape);
        for (int d = 0; d < x->ndim; d++)
            x->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
        json_int_t b = json_integer_value(json_array_get(offs, 0));
        json_int_t en = json_integer_value(json_array_get(offs, 1));
        x->begin = (uint64_t)(b < 0 ? 0 : b);
        x->end = (uint64_t)(en < 0 ? 0 : en);
        n++;
        if (!x->name) {
            rc = WHALE_ENOMEM;
            break;
        }
        /* untrusted header: the shape's bytes must be exactly the data
         * range (safetensors' own rule), computed without overflow */
        int64_t numel, bytes;
        if (!ckpt_numel_ok(x->ndim, x->shape, &numel) ||
            !whale_mul_i64(numel, (int64_t)ckpt_dtype_size(x->dtype), &bytes)) {
            whale_error("checkpoint: %s: tensor %s: shape has a negative extent or more than "
                        "2^60 elements", path, key);
            rc = WHALE_ECORRUPT;
            break;
        }
        if (b < 0 || en < b || (uint64_t)(en - b) != (uint64_t)bytes) {
            whale_error("checkpoint: %s: tensor %s: data_offsets [%lld, %lld) do not hold the "
                        "%lld bytes its shape and dtype need", path, key, (long long)b,
                        (long long)en, (long long)bytes);
            rc = WHALE_ECORRUPT;
            break;
        }
        if (x->end > (uint64_t)st.st_size - 8 - N) {
            whale_error("checkpoint: %s: tensor %s: truncated (needs bytes up to %llu, file "
                        "has %lld)", path, key, (unsigned long long)(8 + N + x->end),
                        (long long)st.st_size);
            rc = WHALE_ECORRUPT;
            break;
        }
    }
    json_decref(root);
    if (rc) {
        if (metadata_json && *metadata_json) {
            json_decref(*metadata_json);
            *metadata_json = NULL;
        }
        ckpt_st_entries_free(e, n);
        return rc;
    }
    *out = e;
    *nout = n;
    *data_off = 8 + N;
    return 0;
}
