/* Checkpoints written (or edited) by someone else: every manifest and
 * safetensors field is untrusted. Each test
 * saves a small real checkpoint, tampers with one field the way an
 * attacker would, and expects a refusal that names the problem instead of
 * a heap overflow, an overflowing product or a read outside the
 * checkpoint. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/ckpt_internal.h"
#include "whale/ckpt.h"
#include "whale/error.h"
#include "whale/log.h"

static char logbuf[32768];
static void sink(int level, const char *line, void *u)
{
    (void)level;
    (void)u;
    size_t l = strlen(logbuf);
    snprintf(logbuf + l, sizeof logbuf - l, "%s\n", line);
}
static void log_capture(void)
{
    logbuf[0] = 0;
    whale_log_set_sink(sink, NULL);
}
static void log_release(void) { whale_log_set_sink(NULL, NULL); }

enum { N = 3000 };

/* Saves step 1 (two fp32 tensors of N elements) under a fresh root;
 * returns the root, *dir = the step directory. */
static char *save_one(int zstd, char **dir)
{
    char t[] = "/tmp/whale-hostile-XXXXXX";
    char *root = strdup(mkdtemp(t));
    whale_ckpt_config c;
    whale_ckpt_config_default(&c);
    c.root = root;
    c.rank = 0;
    c.world = 1;
    c.run_id = "hostile";
    c.async = false;
    c.incremental = false;
    c.zstd_level = zstd;
    c.chunk_bytes = 8192;
    whale_ckpt *ck;
    assert_int_equal(whale_ckpt_open(&c, &ck), 0);
    static float a[N], b[N];
    for (int i = 0; i < N; i++)
        a[i] = b[i] = (float)i * 0.5f;
    int64_t s[1] = {N};
    whale_ckpt_piece p[2];
    whale_ckpt_piece_full(&p[0], "layer.a", WHALE_FLOAT32, 1, s, a);
    whale_ckpt_piece_full(&p[1], "layer.b", WHALE_FLOAT32, 1, s, b);
    whale_ckpt_meta m = {.step = 1};
    assert_int_equal(whale_ckpt_save(ck, &m, p, 2, NULL), 0);
    assert_int_equal(whale_ckpt_close(ck), 0);
    assert_int_equal(whale_ckpt_resolve(root, NULL, dir), 0);
    return root;
}

static json_t *man_load(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    json_t *m = json_load_file(p, 0, NULL);
    assert_non_null(m);
    return m;
}

/* Stores an edited manifest without its digest, as an older whale wrote
 * them: the digest would refuse every edit at once, and these cases check
 * the field checks that still guard such manifests (the digest itself is
 * tested by manifest_tamper.sh). */
static void man_store(const char *dir, json_t *m)
{
    json_object_del(m, "manifest_xxh3_128");
    char p[4096];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    assert_int_equal(json_dump_file(m, p, JSON_COMPACT), 0);
    json_decref(m);
}

static json_t *chunk0(json_t *m, const char *tensor)
{
    json_t *c = json_array_get(
        json_object_get(json_object_get(json_object_get(m, "tensors"), tensor), "chunks"), 0);
    assert_non_null(c);
    return c;
}

/* Opens the way --resume does and the way verify does; both must refuse
 * with a message containing want. */
static void expect_refused(const char *dir, const char *want)
{
    whale_ckpt_reader *r = NULL;
    log_capture();
    int rc = whale_ckpt_reader_open(dir, &r);
    if (rc == 0) {
        /* structurally fine: the read itself must fail */
        float y[N];
        int64_t s[1] = {N};
        whale_ckpt_piece q;
        whale_ckpt_piece_full(&q, "layer.a", WHALE_FLOAT32, 1, s, y);
        rc = whale_ckpt_read(r, &q, 1);
        whale_ckpt_reader_close(r);
    }
    log_release();
    assert_int_not_equal(rc, 0);
    if (!strstr(logbuf, want))
        fprintf(stderr, "log was:\n%s\nwanted: %s\n", logbuf, want);
    assert_non_null(strstr(logbuf, want));
}

/* verify opens the checkpoint at DIR and finds exactly one bad file; what
 * it said is in logbuf. */
static void verify_finds_one_bad(const char *dir)
{
    whale_ckpt_reader *r;
    assert_int_equal(whale_ckpt_reader_open_all(dir, &r), 0);
    log_capture();
    int bad = 0;
    assert_int_equal(whale_ckpt_verify(r, &bad), WHALE_ECORRUPT);
    log_release();
    whale_ckpt_reader_close(r);
    assert_int_equal(bad, 1);
}

/* P: a safetensors file of header HDR and 4 data bytes of zeros. */
static void write_st(const char *p, const char *hdr)
{
    size_t hl = strlen(hdr);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)(hl >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    fwrite("\0\0\0\0", 1, 4, f);
    fclose(f);
}

/* The header reader refuses P as corrupt; what it said is in logbuf. */
static void st_header_refused(const char *p)
{
    int fd = open(p, O_RDONLY);
    ckpt_st_entry *e = NULL;
    size_t ne = 0;
    uint64_t doff, fsz;
    log_capture();
    assert_int_equal(ckpt_st_read_header(fd, p, &e, &ne, &doff, &fsz, NULL), WHALE_ECORRUPT);
    log_release();
    close(fd);
}

static void cleanup(char *root, char *dir)
{
    ckpt_rm_rf(root);
    free(root);
    free(dir);
}

/* case 1: "shuffle": 8 on a zstd fp32 chunk overran the decode buffer */
static void test_shuffle_width_vs_decoded_size(void **st)
{
    (void)st;
    char *dir, *root = save_one(3, &dir);
    json_t *m = man_load(dir);
    json_t *c = chunk0(m, "layer.a");
    assert_int_equal(json_integer_value(json_object_get(c, "shuffle")), 4);
    json_object_set_new(c, "shuffle", json_integer(8));
    man_store(dir, m);
    expect_refused(dir, "shuffle width does not match the encoding");
    cleanup(root, dir);
}

/* case 8: offsets/counts near INT64_MAX and 2^62 x 2^62 shapes */
static void test_region_overflow(void **st)
{
    (void)st;
    char *dir, *root = save_one(0, &dir);
    json_t *m = man_load(dir);
    json_t *reg = json_object_get(chunk0(m, "layer.a"), "region");
    json_array_set_new(json_object_get(reg, "offsets"), 0, json_integer(INT64_MAX));
    man_store(dir, m);
    expect_refused(dir, "range offset 9223372036854775807");

    m = man_load(dir);
    reg = json_object_get(chunk0(m, "layer.a"), "region");
    json_array_set_new(json_object_get(reg, "offsets"), 0, json_integer(0));
    json_t *t = json_object_get(json_object_get(m, "tensors"), "layer.b");
    json_t *shape = json_pack("[II]", (json_int_t)1 << 62, (json_int_t)1 << 62);
    json_object_set_new(t, "shape", shape);
    man_store(dir, m);
    expect_refused(dir, "more than 2^60 elements");
    cleanup(root, dir);
}

/* case 9: a chunk with nbytes 2^62 named neither file nor tensor */
static void test_huge_nbytes_named(void **st)
{
    (void)st;
    char *dir, *root = save_one(0, &dir);
    json_t *m = man_load(dir);
    json_object_set_new(chunk0(m, "layer.a"), "nbytes", json_integer((json_int_t)1 << 62));
    man_store(dir, m);
    expect_refused(dir, "tensor layer.a needs bytes");
    verify_finds_one_bad(dir);
    assert_non_null(strstr(logbuf, ".safetensors is truncated: tensor layer.a"));
    cleanup(root, dir);
}

/* case 9: "files" and chunk "file" entries leading out of the checkpoint */
static void test_paths_confined(void **st)
{
    (void)st;
    char *dir, *root = save_one(0, &dir);
    json_t *m = man_load(dir);
    json_object_set_new(json_object_get(m, "files"), "../../../../../../etc/passwd",
                        json_pack("{s:i}", "bytes", 8));
    man_store(dir, m);
    verify_finds_one_bad(dir);
    assert_non_null(strstr(logbuf, "leaves the checkpoint directory"));
    assert_null(strstr(logbuf, "root:")); /* nothing of the file was read */
    expect_refused(dir, "leaves the checkpoint directory");

    /* a chunk file that is absolute */
    m = man_load(dir);
    json_object_del(json_object_get(m, "files"), "../../../../../../etc/passwd");
    json_object_set_new(chunk0(m, "layer.a"), "file", json_string("/etc/passwd"));
    man_store(dir, m);
    expect_refused(dir, "leaves the checkpoint directory");

    /* a symbolic link inside the checkpoint pointing out of it */
    m = man_load(dir);
    json_object_set_new(chunk0(m, "layer.a"), "file", json_string("escape"));
    man_store(dir, m);
    char lp[4096];
    snprintf(lp, sizeof lp, "%s/escape", dir);
    assert_int_equal(symlink("/etc/passwd", lp), 0);
    expect_refused(dir, "outside the checkpoint directory");
    cleanup(root, dir);
}

/* case 9: --resume accepted a shard whose header verify rejects */
static void test_resume_checks_headers(void **st)
{
    (void)st;
    char *dir, *root = save_one(0, &dir);
    json_t *m = man_load(dir);
    const char *f = json_string_value(json_object_get(chunk0(m, "layer.b"), "file"));
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, f);
    json_decref(m);
    /* header length 0: not a safetensors file (the data stays intact) */
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    static const unsigned char zero[8] = {0};
    assert_int_equal(pwrite(fd, zero, 8, 0), 8);
    close(fd);
    whale_ckpt_reader *r = NULL;
    log_capture();
    assert_int_equal(whale_ckpt_reader_open(dir, &r), WHALE_ECORRUPT);
    log_release();
    assert_non_null(strstr(logbuf, "bad safetensors header length"));
    cleanup(root, dir);
}

/* case 9: verify ROOT reported on an older step when the newest manifest
 * was truncated */
static void test_verify_root_damaged_latest(void **st)
{
    (void)st;
    char *dir, *root = save_one(0, &dir);
    char newer[4096], cmd[8192];
    snprintf(newer, sizeof newer, "%s/step-00000002", root);
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", dir, newer);
    assert_int_equal(system(cmd), 0);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/manifest.json", newer);
    struct stat sb;
    assert_int_equal(stat(mp, &sb), 0);
    assert_int_equal(truncate(mp, sb.st_size / 2), 0);
    char *got = NULL;
    /* the lenient resolve (--resume) falls back to step 1 ... */
    log_capture();
    assert_int_equal(whale_ckpt_resolve(root, "latest", &got), 0);
    log_release();
    assert_non_null(strstr(got, "step-00000001"));
    free(got);
    /* ... verify must not */
    log_capture();
    assert_int_equal(whale_ckpt_resolve_strict(root, "latest", &got), WHALE_ECORRUPT);
    log_release();
    assert_null(got);
    assert_non_null(strstr(logbuf, "step-00000002/manifest.json: the newest step's manifest is damaged"));
    cleanup(root, dir);
}

/* case 8: convert --from-safetensors accepted shape [2^62+1] with 4 bytes */
static void test_safetensors_shape_vs_bytes(void **st)
{
    (void)st;
    char t[] = "/tmp/whale-hostile-st-XXXXXX";
    char *d = mkdtemp(t);
    char p[4096];
    snprintf(p, sizeof p, "%s/x.safetensors", d);
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387905],"
                "\"data_offsets\":[0,4]}}");
    st_header_refused(p);
    assert_non_null(strstr(logbuf, "tensor w: shape has a negative extent or more than 2^60"));

    /* shape [2] but 4 bytes of F32: also refused, with both numbers */
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}");
    st_header_refused(p);
    assert_non_null(strstr(logbuf, "do not hold the 8 bytes"));
    unlink(p);
    rmdir(d);
}

/* a FIFO in place of the manifest must not block a tool */
static void test_fifo_manifest(void **st)
{
    (void)st;
    char *dir, *root = save_one(0, &dir);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    unlink(mp);
    assert_int_equal(mkfifo(mp, 0600), 0);
    whale_ckpt_reader *r = NULL;
    log_capture();
    assert_int_not_equal(whale_ckpt_reader_open(dir, &r), 0);
    log_release();
    assert_non_null(strstr(logbuf, "FIFO"));
    cleanup(root, dir);
}

int main(void)
{
    whale_log_set_level(WHALE_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shuffle_width_vs_decoded_size),
        cmocka_unit_test(test_region_overflow),
        cmocka_unit_test(test_huge_nbytes_named),
        cmocka_unit_test(test_paths_confined),
        cmocka_unit_test(test_resume_checks_headers),
        cmocka_unit_test(test_verify_root_damaged_latest),
        cmocka_unit_test(test_safetensors_shape_vs_bytes),
        cmocka_unit_test(test_fifo_manifest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
