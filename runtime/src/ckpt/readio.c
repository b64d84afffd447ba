/* Reading a chunk's stored bytes on load. Large ranges bypass the page
 * cache (O_DIRECT): a restore reads each byte once, so the cache only adds
 * a kernel copy per byte (CPU that a loaded node's reader threads lack)
 * and evicts pages training wants. O_DIRECT needs the file offset, the
 * length and the buffer aligned to the device's block, so the range is
 * widened to CKPT_READ_ALIGN on both ends into an aligned buffer and the
 * caller gets a pointer to its first byte inside it. A file system without
 * O_DIRECT (tmpfs; some FUSE mounts) refuses it with EINVAL at fcntl or at
 * the first read: the same range is then read through the page cache. */
#define _GNU_SOURCE
#include "ckpt_internal.h"

#include "whale/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 4096 covers every logical block size Linux disks report (512 or 4096) */
#define CKPT_READ_ALIGN ((uint64_t)4096)
/* smaller ranges: through the page cache, whose readahead then serves the
 * neighbouring small tensors of the same bundle */
#define CKPT_READ_DIRECT_MIN ((uint64_t)256 << 10)

/* pread until len bytes or end of file (or, with O_DIRECT, a short read
 * that stops off the block: the file's end). Returns the bytes read, or
 * -1 with errno. */
static ssize_t pread_full(int fd, unsigned char *b, size_t len, uint64_t off, bool direct)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, b + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return got ? (ssize_t)got : -1;
        if (n == 0)
            break;
        got += (size_t)n;
        if (direct && got % CKPT_READ_ALIGN)
            break;
    }
    return (ssize_t)got;
}

int ckpt_read_range(int fd, uint64_t begin, uint64_t len, bool direct_ok, void **alloc,
                    unsigned char **data, uint64_t *got)
{
    *alloc = NULL;
    *data = NULL;
    *got = 0;
    if (direct_ok && len >= CKPT_READ_DIRECT_MIN) {
        uint64_t lo = begin & ~(CKPT_READ_ALIGN - 1);
        uint64_t hi = (begin + len + CKPT_READ_ALIGN - 1) & ~(CKPT_READ_ALIGN - 1);
        int fl = fcntl(fd, F_GETFL);
        unsigned char *b = aligned_alloc(CKPT_READ_ALIGN, (size_t)(hi - lo));
        if (!b)
            return WHALE_ENOMEM;
        if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0) {
            ssize_t n = pread_full(fd, b, (size_t)(hi - lo), lo, true);
            fcntl(fd, F_SETFL, fl);
            if (n >= 0) {
                uint64_t skip = begin - lo;
                *alloc = b;
                *data = b + skip;
                *got = (uint64_t)n > skip ? (uint64_t)n - skip : 0;
                if (*got > len)
                    *got = len;
                return 0;
            }
            if (errno != EINVAL) {
                free(b);
                return WHALE_EIO;
            }
        }
        free(b); /* O_DIRECT refused here: through the page cache */
    }
    unsigned char *b = malloc(len ? (size_t)len : 1);
    if (!b)
        return WHALE_ENOMEM;
    ssize_t n = pread_full(fd, b, (size_t)len, begin, false);
    if (n < 0) {
        free(b);
        return WHALE_EIO;
    }
    *alloc = b;
    *data = b;
    *got = (uint64_t)n;
    return 0;
}
