/* Internals of the elastic state module (runtime/src/elastic). */
#ifndef WHALE_ELASTIC_INTERNAL_H
#define WHALE_ELASTIC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/redundancy.h"

#define RED_MAGIC   0x4445524c4148570aULL /* "\nWHALRED" */
#define RED_VERSION 2u
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

/* The directory after the scalars of every image: a uint64 count, then one
 * entry per piece in walk order (unique and replicated ones alike), so an
 * image can be read without the engine that wrote it (resharding after a
 * shrink: the lost rank's copy lands in engines of another DP degree). */
struct red_dirent {
    uint64_t name;       /* XXH64 of the piece's global name */
    int32_t kind, dtype;
    int64_t begin, end;  /* flat range within the TP slice */
    int32_t rep, pad_;   /* 1: replicated (its bytes follow the unique ones) */
};
_Static_assert(sizeof(struct red_dirent) == 40, "directory entry is 40 bytes");

struct whale_red {
    struct whale_red_config cfg;
    uint64_t layout;
    size_t uniq, repl;          /* bytes of unique / replicated pieces */
    size_t dir_bytes;           /* the directory: count + entries */
    size_t local_bytes;         /* hdr + state + dir + uniq + repl */
    size_t remote_payload;      /* state + dir + uniq (+ repl with copy_all) */
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
int red_layout(whale_engine *e, int dp, int zero, uint64_t *hash, size_t *uniq, size_t *repl,
               size_t *dir_bytes);
int red_dir_write(whale_engine *e, int dp, int zero, unsigned char *dst);
int red_copy(whale_engine *e, int dp, int zero, bool to_image, bool with_repl,
             unsigned char *payload, size_t uniq);


#endif
