/* The shared segment of a group whose members all run on this node.
 *
 * Made lazily, before the group's first allreduce / reduce-scatter /
 * allgather, by group rank 0; the others map it by name. The name carries
 * the creator's pid and start time, the group id and the group's operation
 * number, so two steps (or two groups, or a recycled pid) on one node never
 * meet, and 64 random bits of the creator's that the others learn from the
 * group's setup broadcast: every other part can be read from /proc, and
 * another user who created the names first would have turned the step's
 * shared memory off. It is unlinked as soon as every member has mapped it (or failed to):
 * a task killed afterwards leaves nothing in /dev/shm, the mapping goes
 * with the last process. Whether the segment works is agreed by a small
 * allreduce over the group (members that see different /dev/shm, a full
 * tmpfs), so every member takes the same path afterwards. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/transport/shm_internal.h"
#include "comm/transport/transport.h"
#include "whale/error.h"
#include "whale/log.h"

/* A creator killed between creating its segment and unlinking it (the
 * others never came) leaves the name in /dev/shm: the next creator on the
 * node removes those whose creator is gone. The name says who made it (pid
 * and start time); only segments a minute old are touched, in case this
 * /dev/shm is shared with another pid namespace, where a live creator's
 * pid would look gone from here. */
static void reap_dead(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        long long pid, start;
        unsigned gid, seq;
        if (sscanf(e->d_name, "whale-coll-%lld-%lld-g%u-s%u", &pid, &start, &gid, &seq) != 4)
            continue;
        struct stat stb;
        struct comm_proc_id id = { pid, start };
        if (fstatat(dirfd(d), e->d_name, &stb, 0) != 0 || now - stb.st_mtime < 60 ||
            comm_proc_alive(&id) != 0)
            continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (shm_unlink(name) == 0)
            whale_debug("removed %s: its creator (pid %lld) is gone", name, pid);
    }
    closedir(d);
}

static void seg_name(struct comm_shm *sh, const struct comm_proc_id *lead, unsigned gid,
                     unsigned seq, uint64_t token)
{
    snprintf(sh->name, sizeof sh->name, "/whale-coll-%lld-%lld-g%u-s%u-%016llx",
             (long long)lead->pid, (long long)lead->start, gid, seq, (unsigned long long)token);
}

/* create: pick the random part (*token) and make the segment under it. */
static int map_segment(struct comm_shm *sh, bool create, const struct comm_proc_id *lead,
                       unsigned gid, unsigned seq, uint64_t *token, const char **why)
{
    int fd = -1;
    if (create) {
        reap_dead();
        /* O_EXCL: never someone else's segment; glibc's shm_open adds
         * O_NOFOLLOW. A name taken already (by chance, 2^-64) gets another. */
        for (int tries = 0; tries < 4 && fd < 0; tries++) {
            if (getrandom(token, sizeof *token, 0) != (ssize_t)sizeof *token) {
                *why = "no random bytes for its name (getrandom)";
                return -1;
            }
            seg_name(sh, lead, gid, seq, *token);
            fd = shm_open(sh->name, O_CREAT | O_EXCL | O_RDWR, 0600);
            if (fd < 0 && errno != EEXIST)
                break;
        }
        if (fd >= 0)
            sh->linked = true;
        if (fd >= 0 && ftruncate(fd, (off_t)sh->len) != 0) {
            *why = "ftruncate";
            close(fd);
            return -1;
        }
        /* Take the pages now: a tmpfs too small for the segment (a
         * container's 64 MiB /dev/shm) then fails here, where the group can
         * still fall back, instead of with SIGBUS at the first store into
         * a page that cannot be had. */
        int e = fd >= 0 ? posix_fallocate(fd, 0, (off_t)sh->len) : 0;
        if (e && e != EOPNOTSUPP && e != EINVAL) {
            *why = "no room for it in /dev/shm";
            errno = e;
            close(fd);
            return -1;
        }
    } else {
        seg_name(sh, lead, gid, seq, *token);
        fd = shm_open(sh->name, O_RDWR, 0600);
        struct stat stb;
        if (fd >= 0 && (fstat(fd, &stb) != 0 || (size_t)stb.st_size != sh->len)) {
            *why = "size differs";
            close(fd);
            return -1;
        }
        if (fd >= 0 && (stb.st_uid != geteuid() || (stb.st_mode & 077))) {
            *why = "not the creator's private segment (owner or mode)";
            close(fd);
            return -1;
        }
    }
    if (fd < 0) {
        *why = "shm_open";
        return -1;
    }
    void *m = mmap(NULL, sh->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        *why = "mmap";
        return -1;
    }
    sh->base = m;
    sh->door = m;
    sh->flags = (struct comm_shm_flags *)((char *)m + sizeof(struct comm_shm_bell));
    sh->in = (char *)sh->flags + (size_t)sh->p * sizeof(struct comm_shm_flags);
    sh->out = sh->in + (size_t)sh->p * COMM_SHM_DEPTH * sh->slot;
    return 0;
}

static void drop(struct comm_shm *sh)
{
    free(sh->scratch);
    comm_win_release(sh);
    if (sh->base)
        munmap(sh->base, sh->len);
    if (sh->linked)
        shm_unlink(sh->name);
    free(sh);
}

int comm_shm_prepare(whale_group *g)
{
    if (g->shm_state != COMM_SHM_UNKNOWN)
        return 0;
    whale_ctx *ctx = g->ctx;
    if (!ctx->shm_mode || g->nnodes != 1 || g->size < 2 || g->size > WHALE_SHM_MAX_RANKS || g->rank < 0 || g->failed) {
        g->shm_state = COMM_SHM_OFF;
        return 0;
    }
    g->shm_state = COMM_SHM_SETUP; /* the agreement below takes the other paths */
    struct comm_shm *sh = calloc(1, sizeof *sh);
    /* the creator's step size wins: every member maps the same layout */
    /* Steps a vector of a few slots is cut into (shm_coll.c): 8 keep the
     * phases of 2 members on 2 cores overlapping; with more members than
     * cores every hand-off may cost a context switch, and 2 steps were
     * the fastest and steadiest (2 MiB on 4 ranks, 2 cores: 2.7-3.0 GB/s
     * against 1.3-2.8 with 8). */
    /* hdr[5]: the random part of the segment's name, rank 0's */
    int64_t hdr[6] = { sh != NULL,
                       (int64_t)(ctx->shm_chunk ? ctx->shm_chunk : comm_shm_slot_auto(g->size)),
                       (int64_t)ctx->shm_cma_min, (int64_t)ctx->shm_cma_step,
                       ctx->oversubscribed ? 2 : 8, 0 };
    const char *why = sh ? NULL : "out of memory";
    const struct comm_proc_id *lead = &ctx->procs[g->tasks[0]];
    unsigned gid = (unsigned)g->gid, seq = (unsigned)g->seq;
    uint64_t token = 0;
    if (sh) {
        sh->p = g->size;
        sh->r = g->rank;
    }
    if (g->rank == 0 && sh) {
        sh->slot = (size_t)hdr[1];
        sh->len = comm_shm_bytes(sh->p, sh->slot);
        hdr[0] = map_segment(sh, true, lead, gid, seq, &token, &why) == 0;
        if (!hdr[0] && !ctx->shm_chunk && sh->slot > COMM_SHM_SLOT_MIN) {
            /* the default slots did not fit: the smallest default ones may */
            whale_debug("shared segment of %zu KiB: %s (%s); trying %d KiB steps", sh->len >> 10, why,
                        strerror(errno), COMM_SHM_SLOT_MIN >> 10);
            if (sh->linked)
                shm_unlink(sh->name);
            sh->linked = false;
            sh->slot = COMM_SHM_SLOT_MIN;
            sh->len = comm_shm_bytes(sh->p, sh->slot);
            hdr[1] = (int64_t)sh->slot;
            hdr[0] = map_segment(sh, true, lead, gid, seq, &token, &why) == 0;
        }
        if (hdr[0])
            comm_shm_cma_publish(sh, ctx->shm_cma);
        hdr[5] = (int64_t)token;
    }
    int rc = whale_broadcast(g, hdr, 6, WHALE_INT64, 0);
    if (!rc && g->rank != 0 && sh) {
        if (hdr[0]) {
            sh->slot = (size_t)hdr[1];
            sh->len = comm_shm_bytes(sh->p, sh->slot);
            token = (uint64_t)hdr[5];
            hdr[0] = map_segment(sh, false, lead, gid, seq, &token, &why) == 0;
            if (hdr[0])
                comm_shm_cma_publish(sh, ctx->shm_cma);
        } else {
            why = "rank 0 could not create it";
        }
    }
    int32_t ok = !rc && sh && hdr[0], all = 0;
    int rc2 = rc ? rc : whale_allreduce(g, &ok, &all, 1, WHALE_INT32, WHALE_MIN);
    if (sh && sh->linked) {
        /* everyone has mapped it or given up: the name is no longer needed */
        shm_unlink(sh->name);
        sh->linked = false;
    }
    if (rc2 || !all) {
        /* a warning: the step runs on, slower, and the user should know why */
        if (!rc2 && g->rank == 0)
            whale_warn("shared-memory collectives off for a group of %d on this node: %s (%s); "
                       "its collectives go through the network transport instead", g->size,
                       why ? why : "a member could not map the segment", strerror(errno));
        if (sh)
            drop(sh);
        g->shm_state = COMM_SHM_OFF;
        return rc2;
    }
    /* every member published its pid and probe word before the agreement
     * above: now each checks it can read every peer, and all agree */
    sh->stream_min = ctx->shm_stream_min; /* local: the bits are the same either way */
    sh->min_steps = hdr[4] > 0 ? (uint32_t)hdr[4] : 1;
    sh->cma_min = (size_t)hdr[2];
    sh->cma_step = (size_t)hdr[3];
    int32_t cma = ctx->shm_cma && sh->cma_step &&
                  (sh->scratch = aligned_alloc(COMM_SHM_LINE, 2 * sh->cma_step)) != NULL &&
                  comm_shm_cma_probe(sh);
    int32_t cma_all = 0;
    if ((rc = whale_allreduce(g, &cma, &cma_all, 1, WHALE_INT32, WHALE_MIN))) {
        drop(sh);
        g->shm_state = COMM_SHM_OFF;
        return rc;
    }
    sh->cma = cma_all;
    sh->next_gen = 1;
    g->shm = sh;
    g->shm_state = COMM_SHM_READY;
    whale_debug("shared-memory collectives on for a group of %d (%zu KiB steps, %zu KiB segment; "
                "single copy from %zu KiB: %s; streaming copy-out from %zu KiB)",
                g->size, sh->slot >> 10, sh->len >> 10, sh->cma_min >> 10, sh->cma ? "on" : "off",
                sh->stream_min >> 10);
    return 0;
}

void comm_shm_release(whale_group *g)
{
    if (g->shm)
        drop(g->shm);
    g->shm = NULL;
}

/* The shared-memory transport: a group's segment is made when the group
 * first agrees to use it (shm_state), and unmapped when the group goes. */
const struct comm_transport comm_transport_shm = {
    .name = "shm",
    .group_fini = comm_shm_release,
};
