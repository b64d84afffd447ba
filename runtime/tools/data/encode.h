/* Multi-threaded encoding of whale-data's documents: worker threads take
 * chunks of documents in turn, each document's ids land in its own slot,
 * so the output order is the document order whatever the thread count.
 * Document layout: [BOS] line ids <n> line ids <n> ... (spm.h). */
#ifndef WHALE_DATA_ENCODE_H
#define WHALE_DATA_ENCODE_H

#include <stdbool.h>
#include <stdint.h>

#include "corpus.h"
#include "spm.h"

struct wd_ids {
    int32_t *ids;
    size_t n, cap;
    uint8_t *mask; /* n loss-mask bytes (instruction data), or NULL */
};

/* out: c->ndocs entries (free with wd_encoded_free). progress: a live line
 * on stderr (MB/s, ETA). *seconds: wall time of the encoding alone. */
int wd_encode_all(const wd_spm *s, const struct wd_corpus *c, int threads, bool progress,
                  struct wd_ids **out, double *seconds);
void wd_encoded_free(struct wd_ids *e, size_t n);

/* One document into *dst (appended); the unit whale-generate also uses for
 * a prompt (bos: start with the BOS id). */
int wd_encode_doc(const wd_spm *s, const char *text, size_t len, bool bos, struct wd_ids *dst,
                  char *err, size_t errlen);

#endif
