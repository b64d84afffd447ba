/* Output files of the tools (metrics, traces, profiles, reports, SVGs):
 * never written through a symbolic link, created with mode
 * 0644 further limited by the umask (never group- or world-writable, even
 * under umask 000), or 0600 when private output is asked for
 * (WHALE_CKPT_PRIVATE=1 covers every file a run writes, not only the
 * checkpoints). */
#ifndef WHALE_OUTFILE_H
#define WHALE_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* true when WHALE_CKPT_PRIVATE asks for owner-only files (a bad value is
 * logged and treated as private: the safer reading). */
bool whale_output_private(void);
/* fopen(path, "w") with the modes above, refusing a symbolic link as the
 * last component (O_NOFOLLOW: errno ELOOP); NULL with errno set. */
FILE *whale_fopen_output(const char *path, bool priv);
/* The same for appending (O_APPEND, no truncation). */
FILE *whale_fopen_append(const char *path, bool priv);
/* strerror(err), with a plain explanation of the ELOOP of a planted link. */
const char *whale_output_strerror(int err);
/* fflush / fclose of a file opened above, with every error checked: the
 * first failure of a file (a full disk) is warned about once, naming the
 * file and the reason, and WHALE_EIO returned; a run goes on. close
 * releases f either way. */
int whale_output_flush(FILE *f);
int whale_output_close(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
