/* Transformer description shared by the planner, the engine and the
 * plugin: loaded from a preset name (config/models/NAME.conf) or a file.
 *
 * File format (whale.conf syntax), e.g. config/models/gpt-1.7b.conf:
 *   Name=gpt-1.7b Layers=24 Hidden=2304 Heads=24 Seq=2048 Vocab=51200
 *   FFN=9216 KVHeads=24 TiedEmbeddings=yes
 */
#ifndef WHALE_MODELDESC_H
#define WHALE_MODELDESC_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct whale_model_desc {
    char name[64];
    int layers;        /* transformer blocks, l */
    int hidden;        /* model width, h */
    int heads;         /* attention heads, a */
    int kv_heads;      /* key/value heads (== heads without GQA) */
    int ffn;           /* MLP inner width (default 4h) */
    int seq;           /* training sequence length, s */
    int vocab;         /* vocabulary size, V */
    bool tied_embeddings; /* output projection shares the token embedding */
};

/* Load a preset by name (searched in $WHALE_MODEL_PATH (':'-separated),
 * the installed data dir, then the source tree) or a path (anything with a
 * '/' or ending in .conf). Errors are logged with file:line. */
int whale_model_desc_load(const char *name_or_path, struct whale_model_desc *out);
int whale_model_desc_parse_string(const char *text, const char *origin,
                                  struct whale_model_desc *out);
/* Checks consistency (heads divide hidden, ...); logs the reason. */
int whale_model_desc_validate(const struct whale_model_desc *m, const char *origin);

/* Parameter count of the GPT model described (embeddings included; the
 * output projection counted once when tied). */
int64_t whale_model_desc_params(const struct whale_model_desc *m);

#ifdef __cplusplus
}
#endif
#endif
