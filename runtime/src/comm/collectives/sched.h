/* Schedules: a collective compiled into chains of rounds.
 *
 * A round posts its transfers (tagged sends/receives to group ranks) and,
 * when all of them have completed, runs its local actions in order. Rounds
 * of one chain run one after the other; chains are independent and run
 * concurrently up to a window, which is how the ring algorithms pipeline
 * (chain c moves chunk c of every block). Builders are pure functions of
 * (group size, my rank, buffers, count), so every algorithm can be checked
 * in one process by a simulator (tests/unit/comm).
 *
 * Transfer tags (20 bits) are chosen by the builder so that sender and
 * receiver agree on them; zero-byte transfers are dropped symmetrically
 * unless the schedule keeps them (barrier). */
#ifndef WHALE_COMM_SCHED_H
#define WHALE_COMM_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/comm.h"

#define SCHED_TAG_MASK 0xFFFFFu

struct sched_xfer {
    int peer;          /* group rank */
    uint32_t tag;      /* 20 bits */
    void *buf;
    size_t bytes;
    bool send;
};

enum sched_act_kind { SCHED_COPY = 0, SCHED_REDUCE, SCHED_AVG };

struct sched_act {
    uint8_t kind;
    void *dst;
    const void *a, *b; /* REDUCE: dst = a op b; COPY: dst = a */
    size_t n;          /* elements (COPY: bytes) */
    int div;           /* AVG divisor */
};

struct sched_round { uint32_t x0, nx, a0, na; };
struct sched_chain { uint32_t r0, nr; };

struct sched {
    int p, r;                  /* group size, my group rank */
    enum whale_dtype dtype;
    enum whale_op rop;         /* reduction used by REDUCE actions (never AVG) */
    size_t esz;
    bool keep_empty;
    int err;                   /* first allocation error while building */
    struct sched_chain *chains;
    uint32_t nchains, capchains;
    struct sched_round *rounds;
    uint32_t nrounds, caprounds;
    struct sched_xfer *xfers;
    uint32_t nxfers, capxfers;
    struct sched_act *acts;
    uint32_t nacts, capacts;
    void *tmp;                 /* scratch owned by the schedule */
    size_t tmp_bytes, tmp_cap;
};

void sched_init(struct sched *s, int p, int r, enum whale_dtype t, enum whale_op op);
void sched_free(struct sched *s);
/* Free the cached scratch buffers (whale_finalize). */
void sched_scratch_release_all(void);
/* Allocate scratch (once per schedule); NULL and s->err on failure. */
void *sched_tmp(struct sched *s, size_t bytes);
void sched_chain(struct sched *s);
void sched_round(struct sched *s);
void sched_send(struct sched *s, int peer, uint32_t tag, const void *buf, size_t bytes);
void sched_recv(struct sched *s, int peer, uint32_t tag, void *buf, size_t bytes);
void sched_reduce(struct sched *s, void *dst, const void *a, const void *b, size_t n);
void sched_copy(struct sched *s, void *dst, const void *src, size_t bytes);
void sched_avg(struct sched *s, void *dst, size_t n, int div);

/* Run the actions of one round (local compute). */
void sched_run_actions(const struct sched *s, const struct sched_round *rd);

/* Balanced partition of count elements into p blocks. */
static inline size_t part_off(size_t count, int p, int b)
{
    size_t base = count / (size_t)p, rem = count % (size_t)p;
    return (size_t)b * base + ((size_t)b < rem ? (size_t)b : rem);
}
static inline size_t part_len(size_t count, int p, int b)
{
    return count / (size_t)p + ((size_t)b < count % (size_t)p ? 1 : 0);
}

/* ---- builders (algos.c). Elements of s->dtype; avg_div > 0 divides the
 * final result by it (AVG). `chunk` is the pipelining unit in elements. */
void build_allreduce_ring(struct sched *s, const void *send, void *recv, size_t count,
                          size_t chunk, int window, int avg_div);
void build_allreduce_rd(struct sched *s, const void *send, void *recv, size_t count, int avg_div);
void build_allreduce_raben(struct sched *s, const void *send, void *recv, size_t count, int avg_div);
/* Reduce-scatter over a balanced partition of `count`: src holds all blocks;
 * work (full layout, may be NULL or == src when in place) keeps partial sums;
 * out receives my block (block r). */
void build_rs_ring(struct sched *s, const void *src, void *work, void *out, size_t count,
                   size_t chunk, int window, int avg_div);
void build_rs_halving(struct sched *s, const void *src, void *out, size_t count, int avg_div);
/* Allgather over a balanced partition: my block comes from `in`, dst has
 * the full layout (in may be dst + offset of my block). */
void build_ag_ring(struct sched *s, const void *in, void *dst, size_t count, size_t chunk,
                   int window);
void build_ag_rd(struct sched *s, const void *in, void *dst, size_t count);
void build_bcast_tree(struct sched *s, void *buf, size_t count, int root);
void build_bcast_chain(struct sched *s, void *buf, size_t count, int root, size_t chunk, int window);
void build_reduce_tree(struct sched *s, const void *send, void *recv, size_t count, int root,
                       int avg_div);
void build_reduce_ring(struct sched *s, const void *send, void *recv, size_t count, int root,
                       size_t chunk, int window, int avg_div);
void build_barrier(struct sched *s);

/* reduce.c: dst[i] = a[i] op b[i]; 16-bit floats accumulate in fp32. */
void comm_reduce(void *dst, const void *a, const void *b, size_t n, enum whale_dtype t,
                 enum whale_op op);
void comm_avg(void *dst, size_t n, enum whale_dtype t, int div);
float comm_bf16_to_f32(uint16_t h);
uint16_t comm_f32_to_bf16(float f);
float comm_f16_to_f32(uint16_t h);
uint16_t comm_f32_to_f16(float f);

#endif
