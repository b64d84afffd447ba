/* The shared segment of a one-node group (shm_seg.c) as the collectives
 * use it (shm_coll.c).
 *
 * Layout: p flag lines (one cache line per member, written only by that
 * member), then p x depth input slots, then depth output slots; a slot holds
 * one step: `slot` bytes, p pieces of cb elements. Flags are generation
 * numbers that only grow (0 = nothing yet), so no flag is ever reset and a
 * member that runs ahead needs no rendezvous: it only waits when the slot it
 * wants to fill is still `depth` generations behind on some peer. */
#ifndef WHALE_COMM_SHM_INTERNAL_H
#define WHALE_COMM_SHM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/comm.h"

#define COMM_SHM_DEPTH 4
#define WHALE_SHM_MAX_RANKS 64 /* larger groups keep the schedules */
#define COMM_SHM_LINE 64

struct comm_shm_flags {
    uint64_t cin;   /* my input slot of this generation is filled */
    uint64_t red;   /* I have reduced this generation (read every input slot) */
    uint64_t fin;   /* I have copied this generation's output slot out */
    /* the single-copy path (shm_cma.c): peers read my buffers directly */
    uint64_t pid;   /* my getpid(), for process_vm_readv */
    uint64_t probe; /* address of my probe word (shm_seg.c) */
    uint64_t xgen;  /* the single-copy job starting at this generation published: */
    uint64_t xsend; /*   its send buffer */
    uint64_t xrecv; /*   and its receive buffer */
};
_Static_assert(sizeof(struct comm_shm_flags) == COMM_SHM_LINE, "one cache line per member");

/* The doorbell (first line of the segment): every flag store rings it;
 * a member with nothing to do sleeps on it (futex) once it has spun a
 * while, instead of yielding its core to whatever else runs on a busy
 * machine (a yield costs a whole time slice there; a futex wake-up is
 * scheduled at once). */
struct comm_shm_bell {
    uint32_t bell;      /* futex word: bumped after every flag store */
    uint32_t sleepers;  /* members in futex_wait: ringers only call the kernel then */
    char pad[COMM_SHM_LINE - 2 * sizeof(uint32_t)];
};

struct comm_shm {
    void *base;
    struct comm_shm_bell *door;
    size_t len;
    int p, r;
    size_t slot;                   /* bytes of one step (at most) */
    uint32_t min_steps;            /* a vector is cut into at least this many steps where the
                                    * slot allows (creator's choice, the same on every member) */
    struct comm_shm_flags *flags;  /* [p] */
    char *in;                      /* [p][depth][slot] */
    char *out;                     /* [depth][slot] */
    uint64_t next_gen;             /* generation of the next step built (same on every member) */
    char name[128];
    bool linked;                   /* the name still exists (creator, before everyone mapped it) */
    /* single-copy path (shm_cma.c), agreed by every member at setup */
    bool cma;                      /* process_vm_readv works between every pair */
    size_t cma_min;                /* vectors of at least this many bytes take it */
    size_t cma_step;               /* bytes of a block reduced per step (cache-sized) */
    char *scratch;                 /* [2][cma_step]: peers' pieces read in, the running sum */
    size_t stream_min;             /* receive vectors of at least this many bytes are copied out
                                    * with streaming stores (shm_copy.c) */
    int8_t a2a_cma;                /* all-to-all reads the peers' buffers (a2a_shm.c): 0 not
                                    * agreed yet, 1 yes, -1 no */
    struct comm_win_cache *wins;   /* the peers' receive windows mapped here (shm_win.c) */
};

/* WHALE_SHM_CHUNK unset: 1 MiB slots, smaller for large groups so that the
 * segment stays within 64 MiB (never under 256 KiB; shm_seg.c retries
 * with 256 KiB where /dev/shm has no room for more). Measured at 64 MiB on
 * 2 and 4 ranks: 1 MiB steps 1.1-1.2x the 256 KiB ones (a quarter of the
 * flag hand-offs); larger ones were no faster. */
#define COMM_SHM_SLOT_MIN (256 << 10)
static inline size_t comm_shm_slot_auto(int p)
{
    size_t s = ((size_t)16 << 20) / (size_t)(p + 1);
    s = s > ((size_t)1 << 20) ? (size_t)1 << 20 : s < COMM_SHM_SLOT_MIN ? COMM_SHM_SLOT_MIN : s;
    return s & ~(size_t)(COMM_SHM_LINE - 1);
}

static inline size_t comm_shm_bytes(int p, size_t slot)
{
    return sizeof(struct comm_shm_bell) + (size_t)p * sizeof(struct comm_shm_flags) +
           ((size_t)p + 1) * COMM_SHM_DEPTH * slot;
}

/* Ring after a flag store; sleep until rung or timeout_us passed, if the
 * bell still reads `seen` (shm_coll.c). */
void comm_shm_ring(struct comm_shm_bell *d);
void comm_shm_sleep(struct comm_shm_bell *d, uint32_t seen, long timeout_us);

/* shm_copy.c: memcpy with streaming stores (then a store fence), and the
 * default of WHALE_SHM_STREAM_MIN from this core's L2 size. */
void comm_copy_stream(void *dst, const void *src, size_t n);
size_t comm_shm_stream_min_auto(void);

/* shm_cma.c: the single-copy path. comm_shm_cma_publish writes my pid and
 * probe word into my flag line (permit: let peers read me where Yama
 * restricts ptrace to ancestors); comm_shm_cma_probe checks that this
 * member can read every peer's memory (after every member published); comm_shm_cma_build fills a job when the vector is large enough
 * (returns 1 when it did not: take the slot path); comm_shm_cma_advance
 * runs it like comm_shm_advance. */
void comm_shm_cma_publish(struct comm_shm *sh, bool permit);
bool comm_shm_cma_probe(const struct comm_shm *sh);
struct comm_shm_job;
struct comm_stage;
int comm_shm_cma_build(struct comm_shm *sh, struct comm_shm_job *j, int coll, size_t esz);
int comm_shm_cma_advance(struct comm_stage *stg, enum whale_dtype t, enum whale_op rop, size_t esz,
                         int *events);

/* shm_win.c: receive windows (whale_shm_alloc). comm_win_find: whether
 * [p, p + len) lies in one of this process's shareable windows (ref: its
 * id, descriptor, length and p's offset); comm_win_map: peer q's window
 * (pid, id, fd, len from its all-to-all header) mapped here, cached, or
 * NULL where it cannot be mapped; comm_win_release: unmaps them all. */
struct comm_win_ref {
    uint64_t id, fd, len;
    size_t off;
};
bool comm_win_find(const void *p, size_t len, struct comm_win_ref *ref);
char *comm_win_map(struct comm_shm *sh, int q, uint64_t pid, uint64_t id, uint64_t fd,
                   uint64_t len);
void comm_win_release(struct comm_shm *sh);

#endif
