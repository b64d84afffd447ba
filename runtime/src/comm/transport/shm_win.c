/* Receive windows: host memory (whale_shm_alloc) that the other members of
 * a one-node group can map and write into, so that an all-to-all whose
 * receive buffer lies in it is filled by the senders with one ordinary
 * copy (a2a_shm.c) instead of a process_vm_readv per block, which pins
 * every page it reads and ran at about half of memcpy's rate here.
 *
 * A window is a memfd mapped MAP_SHARED; a peer maps it through
 * /proc/PID/fd/FD, which the kernel allows where it allows
 * process_vm_readv (the same ptrace check), so the all-to-all path that
 * uses windows is the single-copy one, already agreed by the group. Each
 * window has an id unique in its process: a peer keys its mappings by
 * (pid, id), so a freed window whose descriptor number is reused is never
 * mistaken for the new one. A peer keeps a few mappings per member and
 * unmaps the oldest when it needs another (and all when the group goes);
 * a freed window's memory lives until its last peer mapping goes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/transport/shm_internal.h"
#include "whale/comm.h"
#include "whale/error.h"
#include "whale/log.h"

struct win {
    char *base;
    size_t len;
    int fd; /* -1: anonymous memory (no memfd here): usable, not shareable */
    uint64_t id;
    struct win *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct win *g_wins;
static uint64_t g_next_id = 1;

void *whale_shm_alloc(size_t bytes)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t len = bytes ? (bytes + (size_t)pg - 1) & ~((size_t)pg - 1) : (size_t)pg;
    struct win *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->fd = memfd_create("whale-window", MFD_CLOEXEC);
    void *p = MAP_FAILED;
    if (w->fd >= 0 && ftruncate(w->fd, (off_t)len) == 0)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, w->fd, 0);
    if (p == MAP_FAILED) {
        whale_debug("whale_shm_alloc: no shareable memory (%s): anonymous memory instead",
                    strerror(errno));
        if (w->fd >= 0)
            close(w->fd);
        w->fd = -1;
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED) {
        whale_error("whale_shm_alloc: cannot map %zu bytes: %s", len, strerror(errno));
        free(w);
        return NULL;
    }
    w->base = p;
    w->len = len;
    pthread_mutex_lock(&g_lock);
    w->id = g_next_id++;
    w->next = g_wins;
    g_wins = w;
    pthread_mutex_unlock(&g_lock);
    return p;
}

void whale_shm_free(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&g_lock);
    struct win **pp = &g_wins;
    while (*pp && (*pp)->base != (char *)p)
        pp = &(*pp)->next;
    struct win *w = *pp;
    if (w)
        *pp = w->next;
    pthread_mutex_unlock(&g_lock);
    if (!w) {
        whale_error("whale_shm_free: %p was not returned by whale_shm_alloc", p);
        return;
    }
    munmap(w->base, w->len);
    if (w->fd >= 0)
        close(w->fd);
    free(w);
}

bool comm_win_find(const void *p, size_t len, struct comm_win_ref *ref)
{
    const char *c = p;
    bool found = false;
    pthread_mutex_lock(&g_lock);
    for (struct win *w = g_wins; w && !found; w = w->next)
        if (w->fd >= 0 && c >= w->base && len <= w->len && (size_t)(c - w->base) <= w->len - len) {
            ref->id = w->id;
            ref->fd = (uint64_t)w->fd;
            ref->len = w->len;
            ref->off = (size_t)(c - w->base);
            found = true;
        }
    pthread_mutex_unlock(&g_lock);
    return found;
}

/* Mappings of the peers' windows, per group segment. */
#define WIN_CACHE 4
struct comm_win_cache {
    struct {
        uint64_t pid, id;
        char *base;
        size_t len;
    } m[WHALE_SHM_MAX_RANKS][WIN_CACHE];
    unsigned next[WHALE_SHM_MAX_RANKS];
};

char *comm_win_map(struct comm_shm *sh, int q, uint64_t pid, uint64_t id, uint64_t fd,
                   uint64_t len)
{
    if (!sh->wins && !(sh->wins = calloc(1, sizeof *sh->wins)))
        return NULL;
    struct comm_win_cache *c = sh->wins;
    for (int k = 0; k < WIN_CACHE; k++)
        if (c->m[q][k].base && c->m[q][k].pid == pid && c->m[q][k].id == id &&
            c->m[q][k].len == len)
            return c->m[q][k].base;
    char path[64];
    snprintf(path, sizeof path, "/proc/%llu/fd/%llu", (unsigned long long)pid,
             (unsigned long long)fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) {
        whale_debug("member %d's receive window %s: %s", q, path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    void *p = MAP_FAILED;
    if (fstat(f, &sb) == 0 && (uint64_t)sb.st_size >= len)
        p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    close(f);
    if (p == MAP_FAILED) {
        whale_debug("member %d's receive window %s: cannot map %llu bytes", q, path,
                    (unsigned long long)len);
        return NULL;
    }
    unsigned k = c->next[q]++ % WIN_CACHE;
    if (c->m[q][k].base)
        munmap(c->m[q][k].base, c->m[q][k].len);
    c->m[q][k].pid = pid;
    c->m[q][k].id = id;
    c->m[q][k].base = p;
    c->m[q][k].len = (size_t)len;
    return p;
}

void comm_win_release(struct comm_shm *sh)
{
    struct comm_win_cache *c = sh->wins;
    if (!c)
        return;
    for (int q = 0; q < WHALE_SHM_MAX_RANKS; q++)
        for (int k = 0; k < WIN_CACHE; k++)
            if (c->m[q][k].base)
                munmap(c->m[q][k].base, c->m[q][k].len);
    free(c);
    sh->wins = NULL;
}
