/* Model description files: parsing, validation, parameter counts. */
#include "whale/modeldesc.h"
#include "whale/knobs.h"
#include "whale/error.h"
#include "whale/planfile.h"
#include "whale/kv.h"
#include "whale/log.h"
#include "whale_config.h"
#include "moedesc.h"

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
    struct md_moe_seen moe;
};

/* Architecture keys (MLP, Norm, Position, Bias, Attention, Precision):
 * one table of names per key, so each value is checked against the list
 * the error message prints. */
struct md_enum {
    const char *key;
    const char *const *names;
    int n;
};
static const char *const mlp_names[] = { "gelu", "swiglu", "geglu" };
static const char *const norm_names[] = { "layernorm", "rmsnorm" };
static const char *const pos_names[] = { "learned", "rotary", "alibi" };
static const char *const attn_names[] = { "plain", "flash" };
/* same order as enum whale_precision, then auto */
static const char *const prec_names[] = { "fp32", "bf16", "fp16", "auto" };
_Static_assert(WHALE_PREC_FP32 == 0 && WHALE_PREC_BF16 == 1 && WHALE_PREC_FP16 == 2,
               "Precision= names follow enum whale_precision");
static const struct md_enum md_enums[] = {
    { "MLP", mlp_names, 3 },
    { "Norm", norm_names, 2 },
    { "Position", pos_names, 3 },
    { "Attention", attn_names, 2 },
    { "Precision", prec_names, 4 },
};

static bool md_is_arch_key(const char *key)
{
    if (!strcasecmp(key, "Bias"))
        return true;
    for (size_t i = 0; i < sizeof md_enums / sizeof md_enums[0]; i++)
        if (!strcasecmp(key, md_enums[i].key))
            return true;
    return false;
}

static int md_arch_key(const struct whale_kv_line *l, const struct whale_kv *kv,
                       struct whale_model_desc *m)
{
    if (!strcasecmp(kv->key, "Bias"))
    {
        bool bias = true;
        int rc = whale_kv_to_bool(l, kv, &bias);
        if (rc == 0)
            m->no_bias = !bias;
        return rc;
    }
    for (size_t i = 0; i < sizeof md_enums / sizeof md_enums[0]; i++) {
        const struct md_enum *e = &md_enums[i];
        if (strcasecmp(kv->key, e->key))
            continue;
        for (int k = 0; k < e->n; k++) {
            if (strcasecmp(kv->value, e->names[k]))
                continue;
            if (e->names == mlp_names) m->mlp = (enum whale_mlp_kind)k;
            else if (e->names == norm_names) m->norm = (enum whale_norm_kind)k;
            else if (e->names == pos_names) m->position = (enum whale_pos_kind)k;
            else if (e->names == attn_names) m->attention = (enum whale_attn_kind)k;
            else {   /* enum whale_precision order; auto = not set */
                m->precision_set = k != 3;
                m->precision = k == 3 ? 0 : k;
            }
            return 0;
        }
        char list[96] = "";
        for (int k = 0; k < e->n; k++) {
            size_t o = strlen(list);
            snprintf(list + o, sizeof list - o, "%s%s", k ? ", " : "", e->names[k]);
        }
        whale_error("%s:%d: %s=%s: expected one of %s", l->file, l->line, kv->key, kv->value, list);
        return WHALE_ECONF;
    }
    return WHALE_ECONF;
}

const char *whale_mlp_name(enum whale_mlp_kind k)
{
    return (unsigned)k < 3 ? mlp_names[k] : "?";
}
const char *whale_norm_name(enum whale_norm_kind k)
{
    return (unsigned)k < 2 ? norm_names[k] : "?";
}
const char *whale_pos_name(enum whale_pos_kind k)
{
    return (unsigned)k < 3 ? pos_names[k] : "?";
}
const char *whale_attn_name(enum whale_attn_kind k)
{
    return (unsigned)k < 2 ? attn_names[k] : "?";
}

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
        } else if (!strcasecmp(kv->key, "RopeTheta")) {
            double th;
            rc = whale_kv_to_double(l, kv, 1.0, 1e12, &th);
            if (rc)
                return rc;
            m->rope_theta = (float)th;
            continue;
        } else if (!strcasecmp(kv->key, "RopeScaling")) {
            static const char *const kinds[] = {"none", "linear", "llama3"};
            int k = -1;
            for (int j = 0; j < 3; j++)
                if (!strcasecmp(kv->value, kinds[j]))
                    k = j;
            if (k < 0) {
                whale_error("%s:%d: RopeScaling=%s: expected none, linear or llama3", l->file,
                            l->line, kv->value);
                return WHALE_ECONF;
            }
            m->rope_scaling.kind = (enum whale_rope_scaling_kind)k;
            continue;
        } else if (!strcasecmp(kv->key, "RopeFactor") || !strcasecmp(kv->key, "RopeLowFreq") ||
                   !strcasecmp(kv->key, "RopeHighFreq") || !strcasecmp(kv->key, "NormEps")) {
            double x;
            bool eps = !strcasecmp(kv->key, "NormEps");
            rc = whale_kv_to_double(l, kv, eps ? 1e-12 : 1e-6, eps ? 0.1 : 1e6, &x);
            if (rc)
                return rc;
            float *f = eps ? &m->norm_eps
                     : !strcasecmp(kv->key, "RopeFactor") ? &m->rope_scaling.factor
                     : !strcasecmp(kv->key, "RopeLowFreq") ? &m->rope_scaling.low_freq
                     : &m->rope_scaling.high_freq;
            *f = (float)x;
            continue;
        } else if (!strcasecmp(kv->key, "RopeOrigSeq")) {
            dst = &m->rope_scaling.orig_seq;
            hi = MD_MAX_SEQ;
        } else if (md_moe_is_key(kv->key)) {
            if ((rc = md_moe_key(l, kv, m, &st->moe)))
                return rc;
            continue;
        } else if (md_is_arch_key(kv->key)) {
            rc = md_arch_key(l, kv, m);
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
                        "Seq Vocab TiedEmbeddings MLP Norm Position RopeTheta RopeScaling "
                        "RopeFactor RopeLowFreq RopeHighFreq RopeOrigSeq NormEps Bias Attention Precision "
                        "Experts TopK ExpertFFN SharedExperts MoEEvery MoEFirst Gate GateRenorm "
                        "CapacityFactor AuxLoss ZLoss)", l->file, l->line, kv->key);
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
    int rc = whale_model_desc_validate(m, origin);
    return rc ? rc : md_moe_finish(m, &st->moe);
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
    const struct whale_rope_scaling *sc = &m->rope_scaling;
    if (sc->kind != WHALE_ROPE_NONE && m->position != WHALE_POS_ROTARY) {
        whale_error("%s: RopeScaling=%s needs Position=rotary", origin,
                    sc->kind == WHALE_ROPE_LINEAR ? "linear" : "llama3");
        return WHALE_ECONF;
    }
    if (sc->kind != WHALE_ROPE_NONE && !(sc->factor > 0)) {
        whale_error("%s: RopeScaling=%s needs RopeFactor= > 0", origin,
                    sc->kind == WHALE_ROPE_LINEAR ? "linear" : "llama3");
        return WHALE_ECONF;
    }
    if (sc->kind == WHALE_ROPE_LLAMA3 &&
        !(sc->low_freq > 0 && sc->high_freq > sc->low_freq && sc->orig_seq > 0)) {
        whale_error("%s: RopeScaling=llama3 needs 0 < RopeLowFreq (%g) < RopeHighFreq (%g) and "
                    "RopeOrigSeq= > 0 (%d)", origin, (double)sc->low_freq,
                    (double)sc->high_freq, sc->orig_seq);
        return WHALE_ECONF;
    }
    return 0;
}

/* Defaults of the wave-1 files: a GPT-2 block with tied embeddings. */
static void md_defaults(struct whale_model_desc *m, const char *origin)
{
    memset(m, 0, sizeof *m);
    m->tied_embeddings = true;
    m->mlp = WHALE_MLP_GELU;
    m->norm = WHALE_NORM_LAYERNORM;
    m->position = WHALE_POS_LEARNED;
    m->attention = WHALE_ATTN_PLAIN;
    m->rope_theta = 10000.0f;
    md_moe_defaults(&m->moe);
    snprintf(m->source, sizeof m->source, "%s", origin ? origin : "model");
}

int whale_model_desc_gpt2_check(const struct whale_model_desc *m, char *why, size_t why_len)
{
    const char *key = NULL, *val = NULL, *want = NULL;
    if (m->mlp != WHALE_MLP_GELU)
        key = "MLP", val = whale_mlp_name(m->mlp), want = "gelu";
    else if (m->norm != WHALE_NORM_LAYERNORM)
        key = "Norm", val = whale_norm_name(m->norm), want = "layernorm";
    else if (m->position != WHALE_POS_LEARNED)
        key = "Position", val = whale_pos_name(m->position), want = "learned";
    else if (m->no_bias)
        key = "Bias", val = "no", want = "yes";
    if (!key)
        return 0;
    if (why && why_len)
        snprintf(why, why_len, "%s: %s=%s: the engine runs GPT-2 blocks only (%s=%s); "
                 "the planner (whale-plan) accepts this model", m->source[0] ? m->source : m->name,
                 key, val, key, want);
    return WHALE_ENOTSUP;
}

int whale_model_desc_parse_string(const char *text, const char *origin, struct whale_model_desc *out)
{
    md_defaults(out, origin);
    struct md_parse st = { .m = out };
    int rc = whale_kv_parse_string(text, origin, md_line, &st);
    return rc ? rc : md_finish(&st, origin);
}

static int md_load_file(const char *path, struct whale_model_desc *out)
{
    md_defaults(out, path);
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
    const char *mp = whale_knob_getenv("WHALE_MODEL_PATH");
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

int64_t whale_model_desc_block_params(const struct whale_model_desc *m)
{
    int64_t h = m->hidden, f = m->ffn;
    int64_t kv = (int64_t)m->kv_heads * (h / m->heads);
    int64_t bias = m->no_bias ? 0 : 1;
    int64_t norm = m->norm == WHALE_NORM_RMSNORM ? h : 2 * h;
    /* attention: qkv h x (h + 2 kv), proj h x h (+ biases) */
    int64_t attn = h * (h + 2 * kv) + h * h + bias * (h + 2 * kv + h);
    /* MLP: fc1 h x f + fc2 f x h, or gate + up (h x f each) + down f x h */
    int64_t mlp = m->mlp == WHALE_MLP_GELU ? 2 * h * f + bias * (f + h)
                                           : 3 * h * f + bias * (2 * f + h);
    return attn + mlp + 2 * norm;
}

int64_t whale_model_desc_params(const struct whale_model_desc *m)
{
    int64_t h = m->hidden, V = m->vocab, s = m->seq;
    int64_t emb = V * h + (m->position == WHALE_POS_LEARNED ? s * h : 0);
    int64_t out = m->tied_embeddings ? 0 : V * h;
    int64_t final_norm = m->norm == WHALE_NORM_RMSNORM ? h : 2 * h;
    int64_t nmoe = whale_model_desc_moe_blocks(m);
    return (m->layers - nmoe) * whale_model_desc_block_params(m) +
           nmoe * whale_model_desc_moe_block_params(m, false) + emb + final_norm + out;
}

int64_t whale_model_desc_active_params(const struct whale_model_desc *m)
{
    int64_t nmoe = whale_model_desc_moe_blocks(m);
    return whale_model_desc_params(m) -
           nmoe * (whale_model_desc_moe_block_params(m, false) -
                   whale_model_desc_moe_block_params(m, true));
}
