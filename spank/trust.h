/* Untrusted input in slurmstepd: the plan srun sent and the files the
 * plugin creates (trust.c, rankmap_file.c). */
#ifndef SPANK_WHALE_TRUST_H
#define SPANK_WHALE_TRUST_H

#include <stdbool.h>
#include <sys/types.h>

#include "whale/conf.h"
#include "whale/planfile.h"

/* srun -> slurmstepd: the plan as inline JSON. A SLURM_* name, because
 * srun keeps SLURM_* variables in the launch environment even with
 * --export=NONE; the plugin removes it from each task's
 * environment and sets WHALE_PLAN instead. */
#define WHALE_SPANK_PLAN_ENV "SLURM_WHALE_PLAN"

/* Site limits of whale.conf applied to a whole plan (srun for a plan
 * file, slurmstepd for whatever arrived). Logs the key and limit. */
int whale_plan_check_site(const struct whale_conf *c, const struct whale_plan *p,
                          const char *origin);

/* slurmstepd: parse and check the value of SLURM_WHALE_PLAN (NULL when
 * absent) against the site config and the replayed --whale-* options. */
int whale_plan_accept_remote(const char *value, const struct whale_conf *c,
                             struct whale_plan *out);

/* A file only this step's user can read, in a fresh private directory
 * (mkdtemp, 0700) under base: created with O_EXCL|O_NOFOLLOW, mode 0600,
 * owned by uid/gid when the caller is root. Directory fds are kept so that
 * removal never follows a path someone replaced meanwhile. */
struct whale_private_file {
    char path[1100];   /* dir/name */
    char dir[1024];
    int parent_fd;     /* base */
    int dir_fd;
    char name[64];
};
int whale_private_file_write(const char *base, const char *name, const char *text, uid_t uid,
                             gid_t gid, struct whale_private_file *out);
/* The same, kept root's: directory 0711, file 0444 (the site limits record:
 * the task reads it and cannot change it). */
int whale_private_file_write_readonly(const char *base, const char *name, const char *text,
                                      struct whale_private_file *out);
void whale_private_file_remove(struct whale_private_file *f);

#endif
