/* Reading a whole file named by someone else (a user's option, a site
 * config, a model or calibration file) without being blocked or flooded:
 * the file is opened non-blocking (a FIFO or device cannot stall the
 * reader, which may be slurmstepd running as root), must be a regular
 * file, and may hold at most max bytes. Every refusal is logged with the
 * path and the reason. */
#ifndef WHALE_READFILE_H
#define WHALE_READFILE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default cap for text files (configs, plans, models, profiles). */
#define WHALE_READ_MAX_TEXT ((size_t)16 << 20)
/* Cap for tokenizer models (SentencePiece .model files are a few MiB). */
#define WHALE_READ_MAX_TOKENIZER ((size_t)256 << 20)

enum whale_read_flags {
    WHALE_READ_NOFOLLOW = 1, /* refuse a symbolic link as the last component */
    WHALE_READ_QUIET = 2,    /* log nothing (probing whether a file is usable) */
};

/* *buf is malloc'd with a terminating NUL (not counted in *len).
 * WHALE_ENOENT, WHALE_EIO (cannot open/read), WHALE_EINVAL (not a regular
 * file), WHALE_ERANGE (larger than max), WHALE_ENOMEM. */
int whale_read_file(const char *path, size_t max, int flags, char **buf, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
