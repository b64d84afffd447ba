/* The join file (el_joinfile.c): the running step's contact point and join
 * secret, for a process started again for a removed task slot. */
#ifndef WHALE_EL_JOINFILE_H
#define WHALE_EL_JOINFILE_H

#include <stddef.h>
#include <stdint.h>

#define EL_JOIN_SECRET_LEN 32
#define EL_JOIN_ID_MAX 48      /* step id, NUL included */
#define EL_JOIN_ADDR_MAX 4096  /* a UCX worker address */

struct el_join_info {
    char step_id[EL_JOIN_ID_MAX]; /* Slurm "JOBID.STEPID", or whale-run's PMIx namespace */
    int ntasks;
    int contact_task;             /* the task whose worker address follows */
    char contact_node[64];
    uint64_t epoch;               /* membership epoch when written */
    uint8_t *addr;                /* its UCX worker address (malloc'd when read) */
    size_t addr_len;
    uint8_t secret[EL_JOIN_SECRET_LEN];
};

/* dir (the caller's WHALE_JOIN_DIR) when set, else dflt, else
 * $HOME/.whale/join; either may be NULL or empty. */
int el_join_dir(char *buf, size_t len, const char *dir, const char *dflt);
/* DIR/join-STEP.json; WHALE_EINVAL when step_id is no safe file name part. */
int el_join_path(char *buf, size_t len, const char *dir, const char *step_id);
int el_join_secret_new(uint8_t secret[EL_JOIN_SECRET_LEN]);
/* Atomically (0600, no link followed, rename over the old one). */
int el_join_file_write(const char *dir, const struct el_join_info *ji);
/* 0, or WHALE_ENOENT / WHALE_EIO / WHALE_EINVAL (not ours, not 0600, not a
 * regular file, a link, too large, malformed), logged with the path. */
int el_join_file_read(const char *path, struct el_join_info *ji);
void el_join_info_free(struct el_join_info *ji);

#endif
