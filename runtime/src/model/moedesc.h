/* The mixture-of-experts keys of a model description (moedesc.c), parsed
 * beside modeldesc.c's keys. */
#ifndef MODEL_MOEDESC_H
#define MODEL_MOEDESC_H

#include <stdbool.h>

#include "whale/kv.h"
#include "whale/modeldesc.h"

/* Where each MoE key was given (file:line of cross-key messages). */
struct md_moe_seen {
    char file[256];
    int experts, topk, ffn, shared, every, first, gate, renorm, capacity, aux, zloss;
    int any;   /* line of the first MoE key given */
    const char *any_key;
};

/* Sets the defaults of struct whale_moe_desc (dense). */
void md_moe_defaults(struct whale_moe_desc *d);
/* Whether key is a MoE key. */
bool md_moe_is_key(const char *key);
/* Parses one MoE key (messages: file:line). 0 or WHALE_ECONF. */
int md_moe_key(const struct whale_kv_line *l, const struct whale_kv *kv, struct whale_model_desc *m,
               struct md_moe_seen *seen);
/* After the whole file: defaults that depend on other keys (ExpertFFN =
 * FFN) and the checks across keys (TopK <= Experts, MoEFirst < Layers, ...),
 * each message naming the file:line of the key at fault. */
int md_moe_finish(struct whale_model_desc *m, const struct md_moe_seen *seen);

#endif
