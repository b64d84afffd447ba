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

#define COMM_SHM_DEPTH 4
#define WHALE_SHM_MAX_RANKS 64 /* larger groups keep the schedules */
#define COMM_SHM_LINE 64

struct comm_shm_flags {
    uint64_t cin;   /* my input slot of this generation is filled */
    uint64_t red;   /* I have reduced this generation (read every input slot) */
    uint64_t fin;   /* I have copied this generation's output slot out */
    char pad[COMM_SHM_LINE - 3 * sizeof(uint64_t)];
};

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
    size_t slot;                   /* bytes of one step */
    struct comm_shm_flags *flags;  /* [p] */
    char *in;                      /* [p][depth][slot] */
    char *out;                     /* [depth][slot] */
    uint64_t next_gen;             /* generation of the next step built (same on every member) */
    char name[80];
    bool linked;                   /* the name still exists (creator, before everyone mapped it) */
};

static inline size_t comm_shm_bytes(int p, size_t slot)
{
    return sizeof(struct comm_shm_bell) + (size_t)p * sizeof(struct comm_shm_flags) +
           ((size_t)p + 1) * COMM_SHM_DEPTH * slot;
}

/* Ring after a flag store; sleep until rung or timeout_us passed, if the
 * bell still reads `seen` (shm_coll.c). */
void comm_shm_ring(struct comm_shm_bell *d);
void comm_shm_sleep(struct comm_shm_bell *d, uint32_t seen, long timeout_us);

#endif
