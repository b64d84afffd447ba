/* The join file: where a process started again for a removed task slot
 * finds the running step (the contact task's UCX worker address) and the
 * step's join secret. No ctx: the survivors write it, the restarted
 * process reads it before it has any ctx of the step.
 *
 * Location (el_join_dir): the caller's WHALE_JOIN_DIR when set, else the caller's
 * default (whale-train passes its checkpoint directory), else
 * $HOME/.whale/join. Not /tmp or $TMPDIR: under Slurm those are per node
 * (and the job's TMPDIR may be wiped with the node's job containers when
 * slurmd restarts), while the restarted process runs on the node that
 * came back, so the file must be on a file system every node of the
 * allocation sees; the home directory and the checkpoint directory are.
 *
 * Trust: the secret is what keeps a stray process out, so the file is
 * created 0600 without following links (temporary name, then rename over
 * the old one) and is read only when it is a regular file owned by the
 * reader with no group/other permissions, at most EL_JOINFILE_MAX bytes;
 * every field is checked. The directory is created 0700 when missing. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "member/el_joinfile.h"
#include "whale/error.h"
#include "whale/log.h"

#define EL_JOINFILE_MAX ((size_t)64 << 10)

int el_join_dir(char *buf, size_t len, const char *d, const char *dflt)
{
    int n;
    if (d && *d)
        n = snprintf(buf, len, "%s", d);
    else if (dflt && *dflt)
        n = snprintf(buf, len, "%s", dflt);
    else {
        const char *home = getenv("HOME");
        if (!home || !*home) {
            whale_error("elastic: no directory for the join file: set WHALE_JOIN_DIR (HOME is unset)");
            return WHALE_ENOENT;
        }
        n = snprintf(buf, len, "%s/.whale/join", home);
    }
    if (n < 0 || (size_t)n >= len) {
        whale_error("elastic: the join directory name is longer than %zu bytes", len - 1);
        return WHALE_ETOOLONG;
    }
    return 0;
}

/* A step id becomes part of a file name: letters, digits, '.', '-', '_'. */
static bool id_ok(const char *s)
{
    if (!*s || strlen(s) >= EL_JOIN_ID_MAX || s[0] == '.')
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '-' || *s == '_'))
            return false;
    return true;
}

int el_join_path(char *buf, size_t len, const char *dir, const char *step_id)
{
    if (!id_ok(step_id)) {
        whale_error("elastic: '%s' is no step id for a join file (letters, digits, '.', '-', '_', "
                    "at most %d)", step_id, EL_JOIN_ID_MAX - 1);
        return WHALE_EINVAL;
    }
    int n = snprintf(buf, len, "%s/join-%s.json", dir, step_id);
    if (n < 0 || (size_t)n >= len) {
        whale_error("elastic: join file name under %s too long", dir);
        return WHALE_ETOOLONG;
    }
    return 0;
}

int el_join_secret_new(uint8_t secret[EL_JOIN_SECRET_LEN])
{
    size_t got = 0;
    while (got < EL_JOIN_SECRET_LEN) {
        ssize_t r = getrandom(secret + got, EL_JOIN_SECRET_LEN - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            whale_error("elastic: getrandom for the join secret: %s", strerror(errno));
            return WHALE_EIO;
        }
        got += (size_t)r;
    }
    return 0;
}

static void to_hex(const uint8_t *p, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* n bytes from exactly 2n lowercase hex digits */
static bool from_hex(const char *s, uint8_t *out, size_t n)
{
    if (strlen(s) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        int a = hexval(s[2 * i]), b = hexval(s[2 * i + 1]);
        if (a < 0 || b < 0)
            return false;
        out[i] = (uint8_t)(a << 4 | b);
    }
    return true;
}

int el_join_file_write(const char *dir, const struct el_join_info *ji)
{
    char path[4096], tmp[4200];
    int rc = el_join_path(path, sizeof path, dir, ji->step_id);
    if (rc)
        return rc;
    if (ji->addr_len == 0 || ji->addr_len > EL_JOIN_ADDR_MAX) {
        whale_error("elastic: a worker address of %zu bytes for the join file", ji->addr_len);
        return WHALE_EINVAL;
    }
    /* the directory and any missing parent ($HOME/.whale/join), private */
    char d[4096];
    snprintf(d, sizeof d, "%s", dir);
    for (char *p = d + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir(d, 0700) && errno != EEXIST) {
                whale_error("elastic: cannot create the join directory %s: %s", d, strerror(errno));
                return WHALE_EIO;
            }
            if (end)
                break;
            *p = '/';
        }
    }
    char *ahex = malloc(2 * ji->addr_len + 1), shex[2 * EL_JOIN_SECRET_LEN + 1];
    if (!ahex)
        return WHALE_ENOMEM;
    to_hex(ji->addr, ji->addr_len, ahex);
    to_hex(ji->secret, EL_JOIN_SECRET_LEN, shex);
    json_t *o = json_pack("{s:i, s:s, s:i, s:i, s:s, s:I, s:s, s:s}", "version", 1, "step",
                          ji->step_id, "ntasks", ji->ntasks, "contact_task", ji->contact_task,
                          "contact_node", ji->contact_node, "epoch", (json_int_t)ji->epoch,
                          "contact", ahex, "secret", shex);
    free(ahex);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return WHALE_ENOMEM;
    /* a name no other writer of this directory uses at the same time */
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        whale_error("elastic: cannot create %s: %s", tmp, strerror(errno));
        free(text);
        return WHALE_EIO;
    }
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(text);
    if (off != n || fsync(fd) || close(fd) || rename(tmp, path)) {
        whale_error("elastic: cannot write the join file %s: %s", path, strerror(errno));
        if (off != n)
            close(fd);
        unlink(tmp);
        return WHALE_EIO;
    }
    return 0;
}

static int refuse(const char *path, const char *why)
{
    whale_error("elastic: join file %s: %s", path, why);
    return WHALE_EINVAL;
}

int el_join_file_read(const char *path, struct el_join_info *ji)
{
    memset(ji, 0, sizeof *ji);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        whale_error("elastic: cannot open the join file %s: %s", path, strerror(e));
        return e == ENOENT ? WHALE_ENOENT : e == ELOOP ? WHALE_EINVAL : WHALE_EIO;
    }
    struct stat st;
    char *text = NULL;
    int rc = WHALE_EINVAL;
    if (fstat(fd, &st)) {
        rc = WHALE_EIO;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = refuse(path, "not a regular file");
        goto out;
    }
    if (st.st_uid != geteuid()) {
        rc = refuse(path, "owned by another user");
        goto out;
    }
    if (st.st_mode & 077) {
        rc = refuse(path, "readable or writable by others (want mode 0600)");
        goto out;
    }
    if ((size_t)st.st_size > EL_JOINFILE_MAX) {
        rc = refuse(path, "larger than 64 KiB");
        goto out;
    }
    text = malloc((size_t)st.st_size + 1);
    if (!text) {
        rc = WHALE_ENOMEM;
        goto out;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, text + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    text[got] = '\0';
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    int version = 0, ntasks = 0, ct = -1;
    json_int_t epoch = -1;
    const char *step = NULL, *cnode = NULL, *ahex = NULL, *shex = NULL;
    if (!o || json_unpack(o, "{s:i, s:s, s:i, s:i, s:s, s:I, s:s, s:s}", "version", &version, "step",
                          &step, "ntasks", &ntasks, "contact_task", &ct, "contact_node", &cnode,
                          "epoch", &epoch, "contact", &ahex, "secret", &shex)) {
        json_decref(o);
        rc = refuse(path, "not a join file (JSON with version, step, ntasks, contact_task, "
                          "contact_node, epoch, contact, secret)");
        goto out;
    }
    size_t alen = strlen(ahex) / 2;
    const char *bad = version != 1                                  ? "version is not 1"
                      : !id_ok(step)                                ? "bad step id"
                      : ntasks < 1 || ntasks > (1 << 24)            ? "ntasks out of [1, 16777216]"
                      : ct < 0 || ct >= ntasks                      ? "contact_task out of range"
                      : strlen(cnode) >= sizeof ji->contact_node    ? "contact_node too long"
                      : epoch < 0                                   ? "negative epoch"
                      : alen == 0 || alen > EL_JOIN_ADDR_MAX        ? "contact address size"
                      : !from_hex(shex, ji->secret, EL_JOIN_SECRET_LEN) ? "secret is not 64 hex digits"
                                                                    : NULL;
    if (!bad && !(ji->addr = malloc(alen)))
        bad = "out of memory";
    if (!bad && !from_hex(ahex, ji->addr, alen))
        bad = "contact address is not hex";
    if (bad) {
        json_decref(o);
        el_join_info_free(ji);
        rc = refuse(path, bad);
        goto out;
    }
    ji->addr_len = alen;
    snprintf(ji->step_id, sizeof ji->step_id, "%s", step);
    snprintf(ji->contact_node, sizeof ji->contact_node, "%s", cnode);
    ji->ntasks = ntasks;
    ji->contact_task = ct;
    ji->epoch = (uint64_t)epoch;
    json_decref(o);
    rc = 0;
out:
    free(text);
    close(fd);
    return rc;
}

void el_join_info_free(struct el_join_info *ji)
{
    free(ji->addr);
    ji->addr = NULL;
    ji->addr_len = 0;
}
