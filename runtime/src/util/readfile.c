/* Bounded, non-blocking whole-file reads (see whale/readfile.h). */
#include "whale/readfile.h"
#include "whale/error.h"
#include "whale/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

/* every message below honours WHALE_READ_QUIET (flags is in scope) */
#undef whale_error
#define whale_error(...)                                                                   \
    do {                                                                                   \
        if (!(flags & WHALE_READ_QUIET))                                                   \
            whale_log(WHALE_LOG_ERROR, __VA_ARGS__);                                       \
    } while (0)

int whale_read_file(const char *path, size_t max, int flags, char **buf, size_t *len)
{
    *buf = NULL;
    if (len)
        *len = 0;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer; the regular-file check below then refuses it. */
    int oflags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
    if (flags & WHALE_READ_NOFOLLOW)
        oflags |= O_NOFOLLOW;
    int fd = open(path, oflags);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP && (flags & WHALE_READ_NOFOLLOW)) {
            whale_error("%s: is a symbolic link; refusing to follow it", path);
            return WHALE_EINVAL;
        }
        whale_error("%s: cannot open: %s", path, strerror(e));
        return e == ENOENT ? WHALE_ENOENT : WHALE_EIO;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        whale_error("%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return WHALE_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        whale_error("%s: is %s; expected a regular file", path, kind_of(st.st_mode));
        close(fd);
        return WHALE_EINVAL;
    }
    if ((uint64_t)st.st_size > (uint64_t)max) {
        whale_error("%s: %lld bytes, more than the %zu allowed for this kind of file", path,
                    (long long)st.st_size, max);
        close(fd);
        return WHALE_ERANGE;
    }
    /* regular files never block; clear O_NONBLOCK anyway for NFS' sake */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    size_t cap = (size_t)st.st_size + 1;
    char *b = malloc(cap + 1);
    if (!b) {
        whale_error("%s: out of memory reading %zu bytes", path, cap);
        close(fd);
        return WHALE_ENOMEM;
    }
    size_t got = 0;
    /* read one byte past the size seen by fstat: a file that grew since
     * (or a /proc-like file reporting size 0) is checked against max too */
    for (;;) {
        if (got == cap) {
            if (cap > max) {
                whale_error("%s: more than the %zu bytes allowed for this kind of file", path,
                            max);
                free(b);
                close(fd);
                return WHALE_ERANGE;
            }
            size_t nc = cap * 2 > max + 1 ? max + 1 : cap * 2;
            if (nc <= cap)
                nc = cap + 1;
            char *nb = realloc(b, nc + 1);
            if (!nb) {
                whale_error("%s: out of memory reading %zu bytes", path, nc);
                free(b);
                close(fd);
                return WHALE_ENOMEM;
            }
            b = nb;
            cap = nc;
        }
        ssize_t n = read(fd, b + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            whale_error("%s: read error: %s", path, strerror(errno));
            free(b);
            close(fd);
            return WHALE_EIO;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (got > max) {
        whale_error("%s: more than the %zu bytes allowed for this kind of file", path, max);
        free(b);
        return WHALE_ERANGE;
    }
    b[got] = '\0';
    *buf = b;
    if (len)
        *len = got;
    return 0;
}
