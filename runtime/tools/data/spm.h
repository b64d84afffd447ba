/* A small C interface to SentencePiece's C++ API (spm.cc), so the C tools
 * (whale-data, whale-generate) can train, load and run a tokenizer.
 *
 * Newlines: SentencePiece's normalizer folds "\n" into a space, so a text
 * would lose its line structure. The tokenizers whale-data trains carry a
 * user-defined piece "<n>"; the C side encodes a document line by line and
 * puts that id between lines (decode maps it back to "\n"). A loaded model
 * without it falls back to the byte piece <0x0A>, else lines are joined by
 * a space. Errors are returned as text in err (never thrown across). */
#ifndef WHALE_DATA_SPM_H
#define WHALE_DATA_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wd_spm wd_spm;

/* The training corpus: a callback hands out one sentence (a line of text,
 * no newline) per call; returns 0 and sets *s and *len, or 1 at the end. */
typedef int (*wd_spm_next_fn)(void *user, const char **s, size_t *len);

struct wd_spm_train_opts {
    int vocab_size;
    const char *model_type;        /* "bpe" or "unigram" */
    int threads;
    long max_sentences;            /* sentences sampled for training (0: all) */
    double character_coverage;     /* e.g. 0.9995 */
    int verbose;                   /* keep SentencePiece's own log on stderr */
    wd_spm_next_fn next;
    void *user;
};

/* Train; on success *model (malloc'd serialized ModelProto, *model_len
 * bytes) is what a .model file holds. Returns 0, else -1 with err set. */
int wd_spm_train(const struct wd_spm_train_opts *o, char **model, size_t *model_len,
                 char *err, size_t errlen);

/* From the bytes of a .model file (read with whale_read_file: bounded,
 * never blocking on a FIFO; there is no loader by path on purpose). */
int wd_spm_load_bytes(const void *buf, size_t len, wd_spm **out, char *err, size_t errlen);
void wd_spm_free(wd_spm *s);

int wd_spm_vocab(const wd_spm *s);
int wd_spm_bos(const wd_spm *s);     /* -1 when the model has none */
int wd_spm_eos(const wd_spm *s);
int wd_spm_newline(const wd_spm *s); /* "<n>" or <0x0A>; -1: none */

/* Encode one line (no newline in it) and append the ids to *ids (grown
 * with realloc; *n and *cap updated). Thread-safe for a shared wd_spm. */
int wd_spm_encode_line(const wd_spm *s, const char *text, size_t len, int32_t **ids, size_t *n,
                       size_t *cap, char *err, size_t errlen);
/* Decode ids (newline ids become "\n", BOS/EOS dropped) into a malloc'd
 * NUL-terminated string. */
int wd_spm_decode(const wd_spm *s, const int32_t *ids, size_t n, char **out, char *err,
                  size_t errlen);

/* The id of a special piece by its text: a tokenizer.json's added token
 * (never a merged one: Hugging Face encodes those as text) or a
 * SentencePiece piece (control pieces such as <s> included); -1 when the
 * tokenizer has none (the chat templates' markers). */
int wd_spm_piece_id(const wd_spm *s, const char *piece);
/* The bytes of the text token id stands for, into buf (cap bytes): what
 * decoding it alone gives, with SentencePiece's U+2581 as a space and byte
 * pieces as their byte (the offsets of a chat template's response inside
 * an encoded text). Returns the length, or -1 for an id that stands for no
 * text (unknown, control) or does not fit. */
int wd_spm_token_bytes(const wd_spm *s, int32_t id, char *buf, size_t cap);

/* The library's version (pkg-config's, fixed at build time). */
const char *wd_spm_version(void);

#ifdef __cplusplus
}
#endif
#endif
