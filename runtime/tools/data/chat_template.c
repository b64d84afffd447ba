/* The fixed chat templates of chat_template.h and their recognition. */
#define _GNU_SOURCE
#include "chat_template.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whale/readfile.h"

const char wd_tmpl_names[] = "chatml, qwen2, llama3, llama2, mistral or auto";

static void seterr(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static int set_name(struct wd_tmpl *t, enum wd_tmpl_kind k, const char *name, const char *bos,
                    const char *eos, const char *sys)
{
    t->kind = k;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->bos = strdup(bos);
    t->eos = strdup(eos);
    t->default_system = sys ? strdup(sys) : NULL;
    return t->bos && t->eos && (!sys || t->default_system) ? 0 : -1;
}

int wd_tmpl_named(const char *name, struct wd_tmpl *t, char *err, size_t errlen)
{
    *t = (struct wd_tmpl){ 0 };
    int rc;
    /* ChatML has no BOS; <|endoftext|> is Qwen2's eos_token (unused by the template) */
    if (!strcmp(name, "chatml"))
        rc = set_name(t, WD_TMPL_CHATML, name, "", "<|endoftext|>", NULL);
    else if (!strcmp(name, "qwen2")) /* Qwen2-Instruct's template: ChatML with a default system */
        rc = set_name(t, WD_TMPL_CHATML, name, "", "<|endoftext|>", "You are a helpful assistant.");
    else if (!strcmp(name, "llama3"))
        rc = set_name(t, WD_TMPL_LLAMA3, name, "<|begin_of_text|>", "<|eot_id|>", NULL);
    else if (!strcmp(name, "llama2"))
        rc = set_name(t, WD_TMPL_LLAMA2, name, "<s>", "</s>", NULL);
    else if (!strcmp(name, "mistral"))
        rc = set_name(t, WD_TMPL_MISTRAL, name, "<s>", "</s>", NULL);
    else {
        seterr(err, errlen, "--chat-template %s: not a template whale-data knows (%s)", name,
               wd_tmpl_names);
        return -1;
    }
    if (rc) {
        seterr(err, errlen, "out of memory");
        wd_tmpl_free(t);
    }
    return rc;
}

void wd_tmpl_free(struct wd_tmpl *t)
{
    free(t->default_system);
    free(t->bos);
    free(t->eos);
    t->default_system = t->bos = t->eos = NULL;
}

/* The template with white space outside string literals removed, double
 * quotes as single ones and message.x as message['x']: the spellings the
 * published templates differ in without rendering differently. */
static char *normalize(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(2 * n + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    char q = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (q) {
            if (c == '\\' && i + 1 < n) {
                o[k++] = c;
                o[k++] = s[++i];
                continue;
            }
            if (c == q) {
                q = 0;
                c = '\'';
            }
            if (c == '\n') { /* a newline in a literal as its escape: the same string */
                o[k++] = '\\';
                c = 'n';
            }
            o[k++] = c;
            continue;
        }
        if (c == '\'' || c == '"') {
            q = c;
            o[k++] = '\'';
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            continue;
        } else if (!strncmp(s + i, "message.role", 12) || !strncmp(s + i, "message.content", 15)) {
            bool role = s[i + 8] == 'r';
            const char *rep = role ? "message['role']" : "message['content']";
            memcpy(o + k, rep, strlen(rep)); /* at most twice the length: fits */
            k += strlen(rep);
            i += role ? 11 : 14;
        } else {
            o[k++] = c;
        }
    }
    o[k] = 0;
    return o;
}

/* ChatML's default system turn: the literal text between
 * '<|im_start|>system\n and <|im_end|> (Qwen2's "You are a helpful
 * assistant."), unescaped; NULL when the template has none. */
static char *chatml_default_system(const char *tp)
{
    static const char open[] = "<|im_start|>system\\n";
    for (const char *p = strstr(tp, open); p; p = strstr(p + 1, open)) {
        const char *b = p + strlen(open), *e = strstr(b, "<|im_end|>");
        if (!e || strcspn(b, "'\"{}+") < (size_t)(e - b))
            continue; /* not one literal: the record's own system content */
        char *o = malloc((size_t)(e - b) + 1);
        if (!o)
            return NULL;
        size_t k = 0;
        for (const char *c = b; c < e; c++) {
            if (*c == '\\' && c + 1 < e) {
                c++;
                o[k++] = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c;
            } else {
                o[k++] = *c;
            }
        }
        o[k] = 0;
        return o;
    }
    return NULL;
}

/* bos_token / eos_token: a string or an AddedToken object {"content": ..} */
static const char *token_str(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_string_value(v);
}

static int recognise(const char *path, const char *tp, json_t *cfg, struct wd_tmpl *t, char *err,
                     size_t errlen)
{
    char *n = normalize(tp);
    if (!n) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    const char *bos = token_str(cfg, "bos_token"), *eos = token_str(cfg, "eos_token");
    const char *why = NULL;
    int rc = -1;
    if (strstr(n, "<|im_start|>")) {
        if (strstr(n, "'<|im_start|>'+message['role']+'\\n'+message['content']+'<|im_end|>'+'\\n'")) {
            char *sys = chatml_default_system(n);
            rc = set_name(t, WD_TMPL_CHATML, sys ? "qwen2" : "chatml", "",
                          eos ? eos : "<|endoftext|>", sys);
            free(sys);
        } else {
            why = "it has ChatML's <|im_start|> but not its turns "
                  "('<|im_start|>' + role + '\\n' + content + '<|im_end|>' + '\\n')";
        }
    } else if (strstr(n, "<|start_header_id|>")) {
        if (strstr(n, "CuttingKnowledgeDate") || strstr(n, "Cutting Knowledge Date"))
            why = "it is a Llama 3.1 or later template (a dated system turn, tools), not Llama 3's";
        else if (strstr(n, "'<|start_header_id|>'+message['role']+'<|end_header_id|>\\n\\n'+"
                           "message['content']|trim+'<|eot_id|>'") &&
                 strstr(n, "bos_token+content"))
            rc = set_name(t, WD_TMPL_LLAMA3, "llama3", bos ? bos : "<|begin_of_text|>",
                          eos ? eos : "<|eot_id|>", NULL);
        else
            why = "it has Llama 3's <|start_header_id|> but not its turns";
    } else if (strstr(n, "[INST]")) {
        if (strstr(n, "<<SYS>>")) {
            if (strstr(n, "bos_token+'[INST] '+content.strip()+' [/INST]'") &&
                strstr(n, "'<<SYS>>\\n'+system_message+'\\n<</SYS>>\\n\\n'+message['content']") &&
                strstr(n, "' '+content.strip()+' '+eos_token"))
                rc = set_name(t, WD_TMPL_LLAMA2, "llama2", bos ? bos : "<s>", eos ? eos : "</s>",
                              NULL);
            else
                why = "it has Llama 2's <<SYS>> but not its turns";
        } else if (strstr(n, "'[INST] '+message['content']+' [/INST]'") &&
                   strstr(n, "message['content']+eos_token}}") && !strstr(n, "system_message") &&
                   !strstr(n, "[AVAILABLE_TOOLS]")) {
            rc = set_name(t, WD_TMPL_MISTRAL, "mistral", bos ? bos : "<s>", eos ? eos : "</s>",
                          NULL);
        } else {
            why = "it has [INST] but is neither Llama 2's nor Mistral v0.1's template (later "
                  "Mistral templates place the system text and spaces differently)";
        }
    } else {
        why = "it has none of the markers of ChatML, Llama 3, Llama 2 or Mistral";
    }
    free(n);
    if (rc && why)
        seterr(err, errlen, "%s: chat_template not recognised: %s; give --chat-template NAME "
               "(%s) if the model's template renders like one of them", path, why, wd_tmpl_names);
    else if (rc)
        seterr(err, errlen, "out of memory");
    return rc;
}

int wd_tmpl_auto(const char *path, struct wd_tmpl *t, char *err, size_t errlen)
{
    *t = (struct wd_tmpl){ 0 };
    char *buf = NULL;
    size_t len = 0;
    if (whale_read_file(path, WHALE_READ_MAX_TOKENIZER, 0, &buf, &len)) {
        seterr(err, errlen, "%s: cannot read it (see the line above); --chat-template auto "
               "reads the tokenizer_config.json beside --tokenizer", path);
        return -1;
    }
    json_error_t je;
    json_t *cfg = json_loadb(buf, len, 0, &je);
    free(buf);
    if (!json_is_object(cfg)) {
        seterr(err, errlen, "%s:%d: not a JSON object: %s", path, je.line, je.text);
        json_decref(cfg);
        return -1;
    }
    json_t *ct = json_object_get(cfg, "chat_template");
    if (json_is_array(ct)) { /* named templates: the "default" one */
        size_t i;
        json_t *v, *d = NULL;
        json_array_foreach(ct, i, v) if (!strcmp(json_string_value(json_object_get(v, "name")) ?: "",
                                                 "default")) d = json_object_get(v, "template");
        ct = d;
    }
    int rc;
    if (!json_is_string(ct)) {
        seterr(err, errlen, "%s: no chat_template string; give --chat-template NAME (%s)", path,
               wd_tmpl_names);
        rc = -1;
    } else {
        rc = recognise(path, json_string_value(ct), cfg, t, err, errlen);
    }
    json_decref(cfg);
    if (rc)
        wd_tmpl_free(t);
    return rc;
}

void wd_tmpl_specials(const struct wd_tmpl *t, const char *out[8])
{
    int k = 0;
    switch (t->kind) {
    case WD_TMPL_CHATML:
        out[k++] = "<|im_start|>";
        out[k++] = "<|im_end|>";
        break;
    case WD_TMPL_LLAMA3:
        out[k++] = "<|start_header_id|>";
        out[k++] = "<|end_header_id|>";
        out[k++] = "<|eot_id|>";
        break;
    case WD_TMPL_LLAMA2:
    case WD_TMPL_MISTRAL:
        break;
    }
    if (t->bos && *t->bos)
        out[k++] = t->bos;
    if (t->eos && *t->eos && t->kind != WD_TMPL_CHATML) /* ChatML ends turns with <|im_end|> */
        out[k++] = t->eos;
    out[k] = NULL;
}

/* Python's str.strip() white space (Jinja's trim): ASCII and the Unicode
 * spaces; the byte length of the one at s (0: none). */
static size_t space_at(const unsigned char *s, size_t n)
{
    if (n >= 1 && (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r') || (s[0] >= 0x1c && s[0] <= 0x1f)))
        return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0))
        return 2;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 &&
        ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3;
    if (n >= 3 && ((s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) ||
                   (s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) ||
                   (s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80)))
        return 3;
    return 0;
}

static void strip(const char **t, size_t *len)
{
    const unsigned char *s = (const unsigned char *)*t;
    size_t b = 0, e = *len, w;
    while (b < e && (w = space_at(s + b, e - b)))
        b += w;
    for (bool again = true; again && e > b;) { /* the last code point, 1..3 bytes */
        again = false;
        for (size_t l = 1; l <= 3 && l <= e - b; l++)
            if (space_at(s + e - l, l) == l) {
                e -= l;
                again = true;
                break;
            }
    }
    *t += b;
    *len = e - b;
}

struct out {
    struct wd_seg *s;
    int n, cap;
};

static int put(struct out *o, enum wd_seg_kind k, const char *t, size_t len, bool target)
{
    if (o->n == o->cap) {
        int nc = o->cap ? o->cap * 2 : 32;
        struct wd_seg *p = realloc(o->s, (size_t)nc * sizeof *p);
        if (!p)
            return -1;
        o->s = p;
        o->cap = nc;
    }
    o->s[o->n++] = (struct wd_seg){ k, t, len, target };
    return 0;
}

#define TXT(o, lit) put(o, WD_SEG_TEXT, lit, sizeof lit - 1, false)
#define SPC(o, lit, tg) put(o, WD_SEG_SPECIAL, lit, strlen(lit), tg)

static const char *role_name(enum wd_role r)
{
    return r == WD_SYSTEM ? "system" : r == WD_USER ? "user" : "assistant";
}

/* '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n' */
static int chatml(const struct wd_tmpl *t, const struct wd_msg *m, int n, struct out *o)
{
    int rc = 0;
    if (t->default_system && (n == 0 || m[0].role != WD_SYSTEM))
        rc |= SPC(o, "<|im_start|>", false) | TXT(o, "system\n") |
              put(o, WD_SEG_TEXT, t->default_system, strlen(t->default_system), false) |
              SPC(o, "<|im_end|>", false) | TXT(o, "\n");
    for (int i = 0; i < n && !rc; i++) {
        bool a = m[i].role == WD_ASSISTANT;
        const char *r = role_name(m[i].role);
        rc |= SPC(o, "<|im_start|>", false) | put(o, WD_SEG_TEXT, r, strlen(r), false) |
              TXT(o, "\n") | put(o, WD_SEG_TEXT, m[i].text, m[i].len, a) |
              SPC(o, "<|im_end|>", a) | TXT(o, "\n");
    }
    return rc;
}

/* [bos] '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content|trim + '<|eot_id|>' */
static int llama3(const struct wd_tmpl *t, const struct wd_msg *m, int n, struct out *o)
{
    int rc = 0;
    if (*t->bos)
        rc |= SPC(o, t->bos, false);
    for (int i = 0; i < n && !rc; i++) {
        bool a = m[i].role == WD_ASSISTANT;
        const char *r = role_name(m[i].role), *c = m[i].text;
        size_t cl = m[i].len;
        strip(&c, &cl);
        rc |= SPC(o, "<|start_header_id|>", false) | put(o, WD_SEG_TEXT, r, strlen(r), false) |
              SPC(o, "<|end_header_id|>", false) | TXT(o, "\n\n") |
              put(o, WD_SEG_TEXT, c, cl, a) | SPC(o, "<|eot_id|>", a);
    }
    return rc;
}

/* bos + '[INST] ' + content + ' [/INST]'; content + eos */
static int mistral(const struct wd_tmpl *t, const struct wd_msg *m, int n, struct out *o,
                   char *err, size_t errlen)
{
    int rc = 0;
    if (*t->bos)
        rc |= SPC(o, t->bos, false);
    for (int i = 0; i < n && !rc; i++) {
        if (m[i].role == WD_SYSTEM) {
            seterr(err, errlen, "the mistral template has no system role (its template raises "
                   "an exception on one)");
            return -1;
        }
        if (m[i].role == WD_USER)
            rc |= put(o, WD_SEG_MARKER, "[INST]", 6, false) | TXT(o, " ") |
                  put(o, WD_SEG_TEXT, m[i].text, m[i].len, false) | TXT(o, " ") |
                  put(o, WD_SEG_MARKER, "[/INST]", 7, false);
        else
            rc |= put(o, WD_SEG_TEXT, m[i].text, m[i].len, true) | SPC(o, t->eos, true);
    }
    return rc;
}

/* a system turn goes into the first user turn: '<<SYS>>\n' + system +
 * '\n<</SYS>>\n\n' + content; then per user turn bos + '[INST] ' +
 * content.strip() + ' [/INST]', per assistant turn ' ' + content.strip() +
 * ' ' + eos (the response: from the content to the eos) */
static int llama2(const struct wd_tmpl *t, const struct wd_msg *m, int n, struct out *o,
                  char **owned)
{
    int rc = 0, i0 = 0;
    if (n && m[0].role == WD_SYSTEM)
        i0 = 1;
    for (int i = i0; i < n && !rc; i++) {
        const char *c = m[i].text;
        size_t cl = m[i].len;
        if (i == 1 && i0) { /* strip() applies to the system block and the content together */
            if (asprintf(owned, "<<SYS>>\n%.*s\n<</SYS>>\n\n%.*s", (int)m[0].len, m[0].text,
                         (int)m[1].len, m[1].text) < 0) {
                *owned = NULL;
                return -1;
            }
            c = *owned;
            cl = strlen(c);
        }
        strip(&c, &cl);
        if (m[i].role == WD_USER)
            rc |= (*t->bos ? SPC(o, t->bos, false) : 0) |
                  put(o, WD_SEG_MARKER, "[INST]", 6, false) | TXT(o, " ") |
                  put(o, WD_SEG_TEXT, c, cl, false) | TXT(o, " ") |
                  put(o, WD_SEG_MARKER, "[/INST]", 7, false);
        else
            rc |= TXT(o, " ") | put(o, WD_SEG_TEXT, c, cl, true) |
                  put(o, WD_SEG_TEXT, " ", 1, true) | SPC(o, t->eos, true);
    }
    return rc;
}

int wd_tmpl_render(const struct wd_tmpl *t, const struct wd_msg *m, int n, struct wd_seg **segs,
                   int *nseg, char **owned, char *err, size_t errlen)
{
    struct out o = { 0 };
    *owned = NULL;
    err[0] = 0;
    int rc;
    switch (t->kind) {
    case WD_TMPL_CHATML: rc = chatml(t, m, n, &o); break;
    case WD_TMPL_LLAMA3: rc = llama3(t, m, n, &o); break;
    case WD_TMPL_MISTRAL: rc = mistral(t, m, n, &o, err, errlen); break;
    default: rc = llama2(t, m, n, &o, owned); break;
    }
    if (rc) {
        if (!err[0])
            seterr(err, errlen, "out of memory");
        free(o.s);
        free(*owned);
        *owned = NULL;
        return -1;
    }
    *segs = o.s;
    *nseg = o.n;
    return 0;
}
