/* Byte-level BPE tokenizers from a Hugging Face tokenizer.json (GPT-2,
 * Llama 3, Qwen2 and tokenizers trained with ByteLevel): the pre-tokenizer
 * regexes run in PCRE2 (Unicode properties \p{L} \p{N}, as the Rust
 * `tokenizers` package's Oniguruma), the merges by rank. Ids equal
 * `tokenizers`' Tokenizer.encode(text, add_special_tokens=False).
 * Refused at load (named in err): models other than BPE, normalizers,
 * pre-tokenizers other than ByteLevel / Split(Isolated) sequences. Added
 * tokens found in the text become their ids (their lstrip / rstrip /
 * single_word flags are not applied). */
#ifndef WHALE_DATA_BPE_H
#define WHALE_DATA_BPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wd_bpe wd_bpe;

int  wd_bpe_load_bytes(const void *json, size_t len, wd_bpe **out, char *err, size_t errlen);
void wd_bpe_free(wd_bpe *b);
int  wd_bpe_vocab(const wd_bpe *b);       /* highest id + 1 (added tokens included) */
int  wd_bpe_token_id(const wd_bpe *b, const char *tok); /* -1 when absent */
/* The id of an added token (added_tokens: the special tokens), -1 when tok
 * is not one: a chat template's markers are one token only as these. */
int  wd_bpe_added_id(const wd_bpe *b, const char *tok);
/* Appends the ids of text[0, len) to *ids (grown with realloc). Thread-safe. */
int  wd_bpe_encode(const wd_bpe *b, const char *text, size_t len, int32_t **ids, size_t *n,
                   size_t *cap, char *err, size_t errlen);
/* The bytes of the ids (malloc'd, NUL-terminated; *len without the NUL). */
int  wd_bpe_decode(const wd_bpe *b, const int32_t *ids, size_t n, char **out, size_t *len,
                   char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
