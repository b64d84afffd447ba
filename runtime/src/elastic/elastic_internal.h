/* Internals of the elastic state module (runtime/src/elastic). */
#ifndef WHALE_ELASTIC_INTERNAL_H
#define WHALE_ELASTIC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/redundancy.h"

#define RED_MAGIC   0x4445524c4148570aULL /* "\nWHALRED" */
#define RED_VERSION 1u
#define RED_F_ALL   1u /* replicated pieces included */

/* 64 bytes at the start of every slot; its xxh3 over the payload (seeded
 * with the step) is what makes a slot valid. */
struct red_hdr {
    uint64_t magic;
    uint32_t version, flags;
    int64_t step;
    uint64_t layout;     /* hash of every piece's description */
    uint64_t bytes;      /* payload bytes after this header */
    uint64_t xxh;
    int32_t dp, zero;    /* layout the replicated/unique split was made for */
    uint64_t reserved_;
};
_Static_assert(sizeof(struct red_hdr) == 64, "slot header is 64 bytes");

struct whale_red {
    struct whale_red_config cfg;
    uint64_t layout;
    size_t uniq, repl;          /* bytes of unique / replicated pieces */
    size_t local_bytes;         /* hdr + state + uniq + repl */
    size_t remote_payload;      /* state + uniq (+ repl with copy_all) */
    unsigned char *slot[2];
    int64_t slot_step[2];       /* -1: empty or being rewritten */
    int newest;                 /* slot of the newest snapshot, -1 */
    struct whale_red_target tgt;
    bool have_tgt;
    void *req[2];               /* payload and header puts in flight */
    bool put_failed;            /* a put failed: its source may still be read */
    struct whale_red_stats stats;
};

size_t red_piece_bytes(const struct whale_tensor_piece *p);
int red_layout(whale_engine *e, int dp, int zero, uint64_t *hash, size_t *uniq, size_t *repl);
int red_copy(whale_engine *e, int dp, int zero, bool to_image, bool with_repl,
             unsigned char *payload, size_t uniq);


#endif
