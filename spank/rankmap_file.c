/* Private per-step files of slurmstepd (the rank map when it is too long
 * for the environment). The old scheme - a predictable name in /tmp opened
 * with fopen("w") - let another user's symlink redirect the write and left
 * a 0644 file; here the name is unpredictable, the directory private and
 * every open refuses links. */
#define _GNU_SOURCE
#include "plugin.h"
#include "trust.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* give: hand the directory and file to uid/gid (a file the task may own);
 * else keep them root's, readable by all but writable by root alone (a
 * record the task must not change) */
static int write_file(const char *base, const char *name, const char *text, uid_t uid, gid_t gid,
                      bool give, struct whale_private_file *out)
{
    memset(out, 0, sizeof *out);
    out->parent_fd = out->dir_fd = -1;
    snprintf(out->name, sizeof out->name, "%s", name);
    int fd = -1;
    out->parent_fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (out->parent_fd < 0) {
        slurm_error(PLUGIN_NAME ": cannot use %s for the step's files: %s", base, strerror(errno));
        goto fail;
    }
    if ((size_t)snprintf(out->dir, sizeof out->dir, "%s/whale.XXXXXX", base) >= sizeof out->dir) {
        slurm_error(PLUGIN_NAME ": %s: path too long", base);
        goto fail;
    }
    if (!mkdtemp(out->dir)) { /* mode 0700, unpredictable name */
        slurm_error(PLUGIN_NAME ": cannot create a private directory in %s: %s", base,
                    strerror(errno));
        out->dir[0] = '\0';
        goto fail;
    }
    out->dir_fd = open(out->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (out->dir_fd < 0) {
        slurm_error(PLUGIN_NAME ": cannot open %s: %s", out->dir, strerror(errno));
        goto fail;
    }
    fd = openat(out->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        slurm_error(PLUGIN_NAME ": cannot create %s/%s: %s", out->dir, name, strerror(errno));
        goto fail;
    }
    snprintf(out->path, sizeof out->path, "%s/%s", out->dir, name);
    /* root (slurmstepd before it drops privileges): hand both to the user
     * whose tasks read the file */
    if (give && geteuid() == 0 && (fchown(out->dir_fd, uid, gid) || fchown(fd, uid, gid))) {
        slurm_error(PLUGIN_NAME ": cannot give %s to uid %u: %s", out->path, (unsigned)uid,
                    strerror(errno));
        goto fail;
    }
    /* the task's user passes through the directory (no listing) and reads
     * the file; only root writes either */
    if (!give && (fchmod(out->dir_fd, 0711) || fchmod(fd, 0444))) {
        slurm_error(PLUGIN_NAME ": cannot make %s readable: %s", out->path, strerror(errno));
        goto fail;
    }
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            slurm_error(PLUGIN_NAME ": cannot write %s: %s", out->path,
                        n < 0 ? strerror(errno) : "short write");
            goto fail;
        }
        off += (size_t)n;
    }
    if (close(fd)) {
        fd = -1;
        slurm_error(PLUGIN_NAME ": cannot write %s: %s", out->path, strerror(errno));
        goto fail;
    }
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    whale_private_file_remove(out);
    return -1;
}

int whale_private_file_write(const char *base, const char *name, const char *text, uid_t uid,
                             gid_t gid, struct whale_private_file *out)
{
    return write_file(base, name, text, uid, gid, true, out);
}

int whale_private_file_write_readonly(const char *base, const char *name, const char *text,
                                      struct whale_private_file *out)
{
    return write_file(base, name, text, 0, 0, false, out);
}

void whale_private_file_remove(struct whale_private_file *f)
{
    if (f->dir_fd >= 0) {
        unlinkat(f->dir_fd, f->name, 0);
        close(f->dir_fd);
    }
    if (f->parent_fd >= 0) {
        const char *b = strrchr(f->dir, '/');
        if (f->dir[0] && b)
            unlinkat(f->parent_fd, b + 1, AT_REMOVEDIR); /* only if empty */
        close(f->parent_fd);
    }
    memset(f, 0, sizeof *f);
    f->parent_fd = f->dir_fd = -1;
}
