/* The chat templates whale-data renders instruction records with. A Jinja
 * engine is out of scope: the common fixed templates are written out in C
 * (each the exact output of the Hugging Face template it is named after),
 * and `auto` recognises which of them a tokenizer_config.json's
 * chat_template is by its markers and the shape of its turns, refusing any
 * other. Rendering gives segments: template text, a record's content, and
 * special tokens (encoded as their single ids, never split as text), each
 * flagged as a target (a response: assistant content and the end-of-turn
 * token that closes it) or not. */
#ifndef WHALE_DATA_CHAT_TEMPLATE_H
#define WHALE_DATA_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

enum wd_tmpl_kind { WD_TMPL_CHATML, WD_TMPL_LLAMA3, WD_TMPL_LLAMA2, WD_TMPL_MISTRAL };

struct wd_tmpl {
    enum wd_tmpl_kind kind;
    char name[16];
    char *default_system; /* the system turn of a record without one (NULL: none) */
    char *bos, *eos;      /* the tokenizer's bos_token / eos_token strings */
};

enum wd_role { WD_SYSTEM, WD_USER, WD_ASSISTANT };

struct wd_msg {
    enum wd_role role;
    const char *text;
    size_t len;
};

enum wd_seg_kind {
    WD_SEG_TEXT,    /* encoded as text, together with the text around it */
    WD_SEG_SPECIAL, /* one token, which the tokenizer must have */
    WD_SEG_MARKER,  /* [INST] / [/INST]: one token when the tokenizer has it, else text */
};

struct wd_seg {
    enum wd_seg_kind kind;
    const char *text;
    size_t len;
    bool target;
};

/* The names --chat-template takes, for messages. */
extern const char wd_tmpl_names[];

/* A template by name (chatml, qwen2, llama3, llama2, mistral). 0, or -1
 * with err naming the choices. */
int wd_tmpl_named(const char *name, struct wd_tmpl *t, char *err, size_t errlen);
/* The template of tokenizer_config.json at path (its chat_template, and
 * bos_token / eos_token). 0, or -1 with err naming the file, what was not
 * recognised and --chat-template. */
int wd_tmpl_auto(const char *path, struct wd_tmpl *t, char *err, size_t errlen);
void wd_tmpl_free(struct wd_tmpl *t);

/* The special tokens the template emits (NULL-terminated; a record's
 * content may not contain them). */
void wd_tmpl_specials(const struct wd_tmpl *t, const char *out[8]);

/* Render a conversation (system first if any, then user / assistant
 * alternating, last an assistant: checked by the caller) into *segs
 * (malloc'd, *nseg). Segment text points into m[], the template, or
 * *owned (Llama 2's system block joined to the first user turn; free it
 * after the segments). 0, or -1 with err (a role the template does not
 * have, out of memory). */
int wd_tmpl_render(const struct wd_tmpl *t, const struct wd_msg *m, int n, struct wd_seg **segs,
                   int *nseg, char **owned, char *err, size_t errlen);

#endif
