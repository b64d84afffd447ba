/* Output files of the tools (metrics, traces, profiles): created with mode
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
/* fopen(path, "w") with the modes above; NULL with errno set. */
FILE *whale_fopen_output(const char *path, bool priv);

#ifdef __cplusplus
}
#endif
#endif
