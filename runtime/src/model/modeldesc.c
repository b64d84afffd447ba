#include "whale/modeldesc.h"
#include "whale/error.h"
#include "whale/kv.h"
#include "whale/log.h"
#include "whale_config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MD_MAX_LAYERS (1L << 16)
#define MD_MAX_WIDTH (1L << 20)
#define MD_MAX_SEQ (1L << 24)
#define MD_MAX_VOCAB (1L << 24)

struct md_parse {
    struct whale_model_desc *m;
    bool seen_ffn, seen_kv;
};

static int md_line(const struct whale_kv_line *l, void *user)
{
    struct md_parse *st = user;
    struct whale_model_desc *m = st->m;
    for (int i = 0; i < l->n; i++) {
        const struct whale_kv *kv = &l->kv[i];
        long v;
        int rc = 0;
        int *dst = NULL;
        long lo = 1, hi = INT_MAX;
        if (!strcasecmp(kv->key, "Name")) {
            snprintf(m->name, sizeof m->name, "%s", kv->value);
            continue;
        } else if (!strcasecmp(kv->key, "TiedEmbeddings")) {
            rc = whale_kv_to_bool(l, kv, &m->tied_embeddings);
            if (rc)
                return rc;
            continue;
        /* Upper bounds far above any real model keep every product of the
         * parameter and memory counts inside int64 (h*f*layers < 2^57,
         * vocab*h < 2^45): a hostile file cannot make them overflow. */
        } else if (!strcasecmp(kv->key, "Layers")) { dst = &m->layers; hi = MD_MAX_LAYERS; }
        else if (!strcasecmp(kv->key, "Hidden")) { dst = &m->hidden; hi = MD_MAX_WIDTH; }
        else if (!strcasecmp(kv->key, "Heads")) { dst = &m->heads; hi = MD_MAX_WIDTH; }
        else if (!strcasecmp(kv->key, "KVHeads")) { dst = &m->kv_heads; st->seen_kv = true; hi = MD_MAX_WIDTH; }
        else if (!strcasecmp(kv->key, "FFN")) { dst = &m->ffn; st->seen_ffn = true; hi = 4 * MD_MAX_WIDTH; }
        else if (!strcasecmp(kv->key, "Seq")) { dst = &m->seq; hi = MD_MAX_SEQ; }
        else if (!strcasecmp(kv->key, "Vocab")) { dst = &m->vocab; hi = MD_MAX_VOCAB; }
        else {
            whale_error("%s:%d: unknown key '%s' (known: Name Layers Hidden Heads KVHeads FFN "
                        "Seq Vocab TiedEmbeddings)", l->file, l->line, kv->key);
            return WHALE_ECONF;
        }
        rc = whale_kv_to_long(l, kv, lo, hi, true, &v);
        if (rc)
            return rc;
        *dst = (int)v;
    }
    return 0;
}

static int md_finish(struct md_parse *st, const char *origin)
{
    struct whale_model_desc *m = st->m;
    if (!st->seen_kv)
        m->kv_heads = m->heads;
    if (!st->seen_ffn)
        m->ffn = 4 * m->hidden;
    return whale_model_desc_validate(m, origin);
}

int whale_model_desc_validate(const struct whale_model_desc *m, const char *origin)
{
    const char *missing = !m->layers ? "Layers" : !m->hidden ? "Hidden" : !m->heads ? "Heads"
                        : !m->seq ? "Seq" : !m->vocab ? "Vocab" : NULL;
    if (missing) {
        whale_error("%s: model description lacks %s=", origin, missing);
        return WHALE_ECONF;
    }
    if (m->hidden % m->heads) {
        whale_error("%s: Hidden=%d is not divisible by Heads=%d", origin, m->hidden, m->heads);
        return WHALE_ECONF;
    }
    if (m->kv_heads < 1 || m->kv_heads > m->heads || m->heads % m->kv_heads) {
        whale_error("%s: KVHeads=%d must divide Heads=%d", origin, m->kv_heads, m->heads);
        return WHALE_ECONF;
    }
    return 0;
}

int whale_model_desc_parse_string(const char *text, const char *origin, struct whale_model_desc *out)
{
    memset(out, 0, sizeof *out);
    out->tied_embeddings = true;
    struct md_parse st = { .m = out };
    int rc = whale_kv_parse_string(text, origin, md_line, &st);
    return rc ? rc : md_finish(&st, origin);
}

static int md_load_file(const char *path, struct whale_model_desc *out)
{
    memset(out, 0, sizeof *out);
    out->tied_embeddings = true;
    struct md_parse st = { .m = out };
    int rc = whale_kv_parse_file(path, md_line, &st);
    if (rc)
        return rc;
    if (!out->name[0]) {
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        snprintf(out->name, sizeof out->name, "%.*s", (int)strcspn(b, "."), b);
    }
    return md_finish(&st, path);
}

static bool md_try_dir(const char *dir, size_t dlen, const char *name, char *buf, size_t bufsz)
{
    snprintf(buf, bufsz, "%.*s/%s.conf", (int)dlen, dir, name);
    return access(buf, R_OK) == 0;
}

int whale_model_desc_load(const char *name, struct whale_model_desc *out)
{
    if (!name || !*name) {
        whale_error("no model given (a preset name such as gpt-tiny, or a .conf file)");
        return WHALE_EINVAL;
    }
    size_t nl = strlen(name);
    if (strchr(name, '/') || (nl > 5 && !strcmp(name + nl - 5, ".conf")))
        return md_load_file(name, out);

    char path[PATH_MAX];
    const char *mp = getenv("WHALE_MODEL_PATH");
    while (mp && *mp) {
        size_t len = strcspn(mp, ":");
        if (len && md_try_dir(mp, len, name, path, sizeof path))
            return md_load_file(path, out);
        mp += len;
        if (*mp == ':')
            mp++;
    }
    const char *dirs[] = { WHALE_DATADIR "/models", WHALE_SOURCE_CONFIG_DIR "/models" };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        if (md_try_dir(dirs[i], strlen(dirs[i]), name, path, sizeof path))
            return md_load_file(path, out);
    whale_error("model preset '%s' not found (looked in $WHALE_MODEL_PATH, %s/models, %s/models)",
                name, WHALE_DATADIR, WHALE_SOURCE_CONFIG_DIR);
    return WHALE_ENOENT;
}

int64_t whale_model_desc_params(const struct whale_model_desc *m)
{
    int64_t h = m->hidden, f = m->ffn, V = m->vocab, s = m->seq;
    int64_t hd = h / m->heads;
    int64_t kv = (int64_t)m->kv_heads * hd;
    /* per block: ln1(2h) + qkv (h*(h+2kv) + h+2kv) + proj (h*h + h) + ln2 (2h)
     *            + fc (h*f + f) + fc2 (f*h + h) */
    int64_t block = 2 * h + h * (h + 2 * kv) + (h + 2 * kv) + h * h + h + 2 * h + h * f + f + f * h + h;
    int64_t emb = V * h + s * h;
    int64_t out = m->tied_embeddings ? 0 : V * h;
    return (int64_t)m->layers * block + emb + 2 * h /* final ln */ + out;
}
