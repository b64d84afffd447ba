/* whale-data --chat-template: instruction records (JSON lines) into token
 * ids and their loss mask (1 = a response token the loss counts).
 *
 * A record is {"prompt": P, "response": R} (and an optional "system") or
 * {"messages": [{"role": "system"|"user"|"assistant", "content": C}, ..]}:
 * an optional system turn first, then user and assistant turns
 * alternating, the last an assistant's. It is rendered with a fixed chat
 * template (chat_template.h); the template's special tokens become their
 * single ids, the text between them is encoded as one piece, as Hugging
 * Face's apply_chat_template does, and a token is a target when any of its
 * bytes is response text (the token ids and the mask of transformers'
 * return_assistant_tokens_mask). */
#ifndef WHALE_DATA_INSTRUCT_H
#define WHALE_DATA_INSTRUCT_H

#include <stddef.h>

#include "chat_template.h"
#include "corpus.h"
#include "encode.h"
#include "spm.h"

enum wd_overlong { WD_OVERLONG_REFUSE, WD_OVERLONG_TRUNCATE, WD_OVERLONG_DROP };

struct wd_instruct_opts {
    const struct wd_tmpl *tmpl;
    const char *system_prompt; /* the system turn of records without one (NULL: none) */
    long max_tokens;           /* tokens of a record at most; 0: no limit */
    enum wd_overlong overlong; /* what a longer record gets */
};

struct wd_instruct_stats {
    size_t records, tokens, targets;
    size_t truncated, dropped;  /* records over max_tokens */
    size_t no_target;           /* truncated records left with no response token */
    size_t split_runs;          /* texts encoded piece by piece (offsets did not line up) */
};

/* The tokenizer has every special token the template emits. 0, or -1 with
 * err naming the token and the template. */
int wd_instruct_check(const wd_spm *s, const struct wd_tmpl *t, char *err, size_t errlen);

/* Every document of c (one JSON record each, its file and line) into
 * out[i] (ids and mask; free with wd_encoded_free). A bad record is
 * refused with file:line and the problem. 0 or -1 (said on stderr). */
int wd_instruct_encode_all(const wd_spm *s, const struct wd_corpus *c,
                           const struct wd_instruct_opts *o, struct wd_ids **out,
                           struct wd_instruct_stats *st);

#endif
