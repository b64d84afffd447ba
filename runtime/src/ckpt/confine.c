/* Names read from a manifest are untrusted: "files" keys and chunk "file"
 * fields must not lead out of the checkpoint directory (an absolute path,
 * a ".." component, or a symbolic link pointing elsewhere), or `verify`
 * would read and echo bytes of any file the caller can read. */
#define _GNU_SOURCE
#include "ckpt_internal.h"

#include "whale/error.h"
#include "whale/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool bad_component(const char *name)
{
    if (!*name || name[0] == '/')
        return true;
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return true;
        p += n;
        if (*p == '/')
            p++;
    }
    return false;
}

int ckpt_name_confined(const char *dir, const char *name, const char *origin)
{
    if (!name || bad_component(name) || strlen(name) > 1024) {
        whale_error("checkpoint: %s: file name '%s' leaves the checkpoint directory (absolute, "
                    "empty or with a '..' component)", origin, name ? name : "(missing)");
        return WHALE_EDATA;
    }
    char *p = ckpt_path(dir, name);
    if (!p)
        return WHALE_ENOMEM;
    char *real = realpath(p, NULL);
    free(p);
    if (!real)
        return 0; /* missing: the open reports it with the path */
    char *rdir = realpath(dir, NULL);
    int rc = 0;
    size_t dl = rdir ? strlen(rdir) : 0;
    if (!rdir || strncmp(real, rdir, dl) || (real[dl] != '/' && dl != 1)) {
        whale_error("checkpoint: %s: file '%s' resolves to %s, outside the checkpoint directory "
                    "(symbolic link?)", origin, name, real);
        rc = WHALE_EDATA;
    }
    free(rdir);
    free(real);
    return rc;
}

int ckpt_open_confined(const char *dir, const char *name, const char *origin, int *fd)
{
    *fd = -1;
    int rc = ckpt_name_confined(dir, name, origin);
    if (rc)
        return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    /* non-blocking: a FIFO planted under the name cannot stall the reader */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0) {
        whale_error("checkpoint: %s: %s: %s", origin, path, strerror(errno));
        return errno == ENOENT ? WHALE_ENOENT : WHALE_EIO;
    }
    *fd = f;
    return 0;
}
