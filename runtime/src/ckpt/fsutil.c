/* File-system helpers for checkpoints: durable writes (fsync the file and
 * its directory, publish by rename), modes (the umask applies, and nothing
 * is ever world-writable), recursive removal, and fault injection for the
 * disk-full and kill-mid-save tests (WHALE_CKPT_FAULT). */
#define _GNU_SOURCE
#include "ckpt_internal.h"

#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* WHALE_CKPT_FAULT="enospc_after=BYTES,slow_ms=N,kill_rank=R" */
void ckpt_fault_from_env(ckpt_fault *f)
{
    f->enospc_after = -1;
    f->slow_ms = 0;
    f->kill_rank = -1;
    f->written = 0;
    const char *s = whale_knob_getenv("WHALE_CKPT_FAULT");
    if (!s || !*s)
        return;
    const char *p;
    if ((p = strstr(s, "enospc_after=")))
        f->enospc_after = atoll(p + 13);
    if ((p = strstr(s, "slow_ms=")))
        f->slow_ms = atoi(p + 8);
    if ((p = strstr(s, "kill_rank=")))
        f->kill_rank = atoi(p + 10);
    whale_warn("checkpoint: fault injection active: WHALE_CKPT_FAULT=%s", s);
}

mode_t ckpt_file_mode(bool priv) { return priv ? 0600 : 0664; }
mode_t ckpt_dir_mode(bool priv) { return priv ? 0700 : 0775; }

int ckpt_mkdir_p(const char *path, mode_t mode)
{
    char *p = strdup(path);
    if (!p)
        return WHALE_ENOMEM;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, mode) && errno != EEXIST) {
                whale_error("checkpoint: cannot create directory %s: %s", p, strerror(errno));
                int e = errno;
                free(p);
                return e == ENOSPC ? WHALE_ENOSPC : WHALE_EIO;
            }
            *s = c;
            if (!c)
                break;
        }
    }
    free(p);
    return 0;
}

int ckpt_write_all(int fd, const void *buf, size_t len, ckpt_fault *f)
{
    const char *b = buf;
    while (len) {
        size_t n = len > (1u << 26) ? (1u << 26) : len;
        if (f && f->enospc_after >= 0 && f->written + (long long)n > f->enospc_after) {
            errno = ENOSPC;
            return -1;
        }
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (f)
            f->written += w;
        b += w;
        len -= (size_t)w;
    }
    return 0;
}

int ckpt_fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return WHALE_EIO;
    int rc = fsync(fd) ? WHALE_EIO : 0;
    close(fd);
    return rc;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    if (remove(p) && errno != ENOENT)
        whale_warn("checkpoint: cannot remove %s: %s", p, strerror(errno));
    return 0;
}

int ckpt_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st))
        return errno == ENOENT ? 0 : WHALE_EIO;
    nftw(path, rm_cb, 32, FTW_DEPTH | FTW_PHYS);
    return access(path, F_OK) == 0 ? WHALE_EIO : 0;
}

char *ckpt_path(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p)
        return NULL;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
}

int ckpt_write_file_renamed(const char *dir, const char *name, const void *buf, size_t len,
                            mode_t mode, ckpt_fault *f)
{
    char tmp[4096], dst[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        int e = errno;
        whale_error("checkpoint: cannot create %s: %s", tmp, strerror(e));
        return e == ENOSPC ? WHALE_ENOSPC : WHALE_EIO;
    }
    int rc = 0;
    if (ckpt_write_all(fd, buf, len, f) || fdatasync(fd)) {
        int e = errno;
        whale_error("checkpoint: writing %s: %s", tmp, strerror(e));
        rc = e == ENOSPC || e == EDQUOT || e == EFBIG ? WHALE_ENOSPC : WHALE_EIO;
    }
    if (close(fd) && !rc)
        rc = WHALE_EIO;
    if (!rc && rename(tmp, dst)) {
        whale_error("checkpoint: rename %s -> %s: %s", tmp, dst, strerror(errno));
        rc = WHALE_EIO;
    }
    if (rc)
        unlink(tmp);
    return rc;
}

int ckpt_write_file_atomic(const char *dir, const char *name, const void *buf, size_t len,
                           mode_t mode, ckpt_fault *f)
{
    int rc = ckpt_write_file_renamed(dir, name, buf, len, mode, f);
    if (!rc)
        ckpt_fsync_path(dir);
    return rc;
}

int ckpt_read_file(const char *path, char **buf, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? WHALE_ENOENT : WHALE_EIO;
    struct stat st;
    if (fstat(fd, &st)) {
        close(fd);
        return WHALE_EIO;
    }
    char *b = malloc((size_t)st.st_size + 1);
    if (!b) {
        close(fd);
        return WHALE_ENOMEM;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    b[got] = 0;
    *buf = b;
    *len = got;
    return 0;
}

int ckpt_symlink_atomic(const char *dir, const char *name, const char *target)
{
    char tmp[4096], dst[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, name, (long)getpid());
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    unlink(tmp);
    if (symlink(target, tmp)) {
        whale_error("checkpoint: symlink %s: %s", tmp, strerror(errno));
        return errno == ENOSPC ? WHALE_ENOSPC : WHALE_EIO;
    }
    if (rename(tmp, dst)) {
        whale_error("checkpoint: rename %s -> %s: %s", tmp, dst, strerror(errno));
        unlink(tmp);
        return WHALE_EIO;
    }
    ckpt_fsync_path(dir);
    return 0;
}

int64_t ckpt_step_of(const char *name)
{
    if (strncmp(name, "step-", 5))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(name + 5, &end, 10);
    if (errno || *end || end == name + 5 || v < 0)
        return -1;
    return v;
}

double ckpt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ckpt_hex128(const void *hash16, char out[33])
{
    const unsigned char *h = hash16;
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

