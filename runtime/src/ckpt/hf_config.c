/* config.json of Hugging Face causal LMs <-> whale model descriptions.
 * Every field that changes the computation is either represented or
 * refused, naming the field and its value: whale must not train a model
 * that only looks like the one the user brought. */
#define _GNU_SOURCE
#include "hf_internal.h"

#include "whale/error.h"
#include "whale/log.h"
#include "whale/readfile.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* whale's LayerNorm epsilon (kernels: 1e-5f); RMSNorm takes any */
#define HF_WHALE_EPS 1e-5

static const char *fam_names[] = {"gpt2", "llama", "mistral", "qwen2", "mixtral"};

const char *hf_family_name(enum hf_family f)
{
    return (unsigned)f < HF_NFAMILIES ? fam_names[f] : "?";
}

struct cfgctx {
    json_t *c;
    const char *path;
};

/* required positive integer field */
static int get_int(struct cfgctx *x, const char *key, int lo, int hi, int *out)
{
    json_t *v = json_object_get(x->c, key);
    if (!json_is_integer(v)) {
        whale_error("%s: field \"%s\" is missing or not an integer", x->path, key);
        return WHALE_ECONF;
    }
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi) {
        whale_error("%s: field \"%s\" = %lld is out of range %d..%d", x->path, key, (long long)i,
                    lo, hi);
        return WHALE_ECONF;
    }
    *out = (int)i;
    return 0;
}

/* optional integer: absent or null keeps *out */
static int opt_int(struct cfgctx *x, const char *key, int lo, int hi, int *out)
{
    json_t *v = json_object_get(x->c, key);
    if (!v || json_is_null(v))
        return 0;
    return get_int(x, key, lo, hi, out);
}

static int opt_bool(struct cfgctx *x, const char *key, bool dflt, bool *out)
{
    json_t *v = json_object_get(x->c, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        whale_error("%s: field \"%s\" is not true or false", x->path, key);
        return WHALE_ECONF;
    }
    *out = json_is_true(v);
    return 0;
}

/* A field that must be absent, null or equal to `want` (a boolean). */
static int want_bool(struct cfgctx *x, const char *key, bool dflt, bool want, const char *why)
{
    bool b;
    int rc = opt_bool(x, key, dflt, &b);
    if (rc)
        return rc;
    if (b != want) {
        whale_error("%s: field \"%s\" = %s is not supported: %s", x->path, key,
                    b ? "true" : "false", why);
        return WHALE_ENOTSUP;
    }
    return 0;
}

/* A norm epsilon: absent or null is `dflt`; any = false accepts only
 * whale's LayerNorm epsilon. */
static int get_eps(struct cfgctx *x, const char *key, double dflt, bool any, double *out)
{
    json_t *v = json_object_get(x->c, key);
    double e = v && json_is_number(v) ? json_number_value(v) : dflt;
    if (v && !json_is_null(v) && !json_is_number(v)) {
        whale_error("%s: field \"%s\" is not a number", x->path, key);
        return WHALE_ECONF;
    }
    if (!(e >= 1e-12 && e <= 0.1)) {
        whale_error("%s: field \"%s\" = %g is out of range 1e-12..0.1", x->path, key, e);
        return WHALE_ECONF;
    }
    if (!any && fabs(e - HF_WHALE_EPS) > 1e-12) {
        whale_error("%s: field \"%s\" = %g is not supported: whale's LayerNorm uses epsilon "
                    "1e-05", x->path, key, e);
        return WHALE_ENOTSUP;
    }
    *out = e;
    return 0;
}

/* A number field of rope_scaling, required, > 0. */
static int rs_num(struct cfgctx *x, json_t *rs, const char *key, float *out)
{
    json_t *v = json_object_get(rs, key);
    if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1e6) {
        whale_error("%s: field \"rope_scaling.%s\" is missing or not a number in (0, 1e6]",
                    x->path, key);
        return WHALE_ECONF;
    }
    *out = (float)json_number_value(v);
    return 0;
}

/* rope_scaling -> md->rope_scaling: "linear" and "llama3" are represented;
 * "default" is none; every other type (dynamic, yarn, longrope, su, ...)
 * is refused by name, as are keys that change them (attention_factor). */
static int parse_rope_scaling(struct cfgctx *x, struct whale_model_desc *md, enum hf_family fam)
{
    json_t *rs = json_object_get(x->c, "rope_scaling");
    if (!rs || json_is_null(rs))
        return 0;
    if (!json_is_object(rs)) {
        whale_error("%s: field \"rope_scaling\" is not an object or null", x->path);
        return WHALE_ECONF;
    }
    const char *key = "rope_type";
    json_t *t = json_object_get(rs, key);
    if (!t) {
        key = "type";
        t = json_object_get(rs, key);
    }
    const char *ty = json_string_value(t);
    if (!ty) {
        whale_error("%s: field \"rope_scaling\" has no string \"rope_type\" or \"type\"",
                    x->path);
        return WHALE_ECONF;
    }
    if (!strcmp(ty, "default"))
        return 0;
    if (fam == HF_MISTRAL || fam == HF_MIXTRAL) {
        /* transformers' Mistral and Mixtral ignore rope_scaling: importing
         * it scaled would compute something else than the model was
         * trained with */
        whale_error("%s: field \"rope_scaling.%s\" = \"%s\" is not supported for model_type "
                    "%s (its rotary embedding takes no scaling)", x->path, key, ty,
                    hf_family_name(fam));
        return WHALE_ENOTSUP;
    }
    struct whale_rope_scaling *sc = &md->rope_scaling;
    int rc;
    if (!strcmp(ty, "linear")) {
        sc->kind = WHALE_ROPE_LINEAR;
        rc = rs_num(x, rs, "factor", &sc->factor);
    } else if (!strcmp(ty, "llama3")) {
        sc->kind = WHALE_ROPE_LLAMA3;
        float orig = 0;
        if ((rc = rs_num(x, rs, "factor", &sc->factor)) ||
            (rc = rs_num(x, rs, "low_freq_factor", &sc->low_freq)) ||
            (rc = rs_num(x, rs, "high_freq_factor", &sc->high_freq)) ||
            (rc = rs_num(x, rs, "original_max_position_embeddings", &orig)))
            return rc;
        if (orig != (float)(int)orig || !(sc->high_freq > sc->low_freq)) {
            whale_error("%s: field \"rope_scaling\": original_max_position_embeddings = %g must "
                        "be an integer and high_freq_factor = %g > low_freq_factor = %g",
                        x->path, (double)orig, (double)sc->high_freq, (double)sc->low_freq);
            return WHALE_ECONF;
        }
        sc->orig_seq = (int)orig;
    } else {
        whale_error("%s: field \"rope_scaling.%s\" = \"%s\" is not supported: whale's rotary "
                    "embedding scales frequencies as \"linear\" or \"llama3\" only", x->path,
                    key, ty);
        return WHALE_ENOTSUP;
    }
    if (rc)
        return rc;
    json_t *af = json_object_get(rs, "attention_factor");
    if (af && !json_is_null(af) &&
        !(json_is_number(af) && json_number_value(af) == 1.0)) {
        whale_error("%s: field \"rope_scaling.attention_factor\" is not supported: whale does "
                    "not scale cos/sin", x->path);
        return WHALE_ENOTSUP;
    }
    return 0;
}

static int want_act(struct cfgctx *x, const char *key, const char *dflt, const char *const *ok,
                    const char *why)
{
    json_t *v = json_object_get(x->c, key);
    const char *s = v ? json_string_value(v) : dflt;
    if (!s) {
        whale_error("%s: field \"%s\" is not a string", x->path, key);
        return WHALE_ECONF;
    }
    for (; *ok; ok++)
        if (!strcmp(s, *ok))
            return 0;
    whale_error("%s: field \"%s\" = \"%s\" is not supported: %s", x->path, key, s, why);
    return WHALE_ENOTSUP;
}

static int parse_gpt2(struct cfgctx *x, struct whale_model_desc *md)
{
    int rc;
    double eps;
    if ((rc = get_int(x, "n_layer", 1, 1 << 16, &md->layers)) ||
        (rc = get_int(x, "n_embd", 1, 1 << 20, &md->hidden)) ||
        (rc = get_int(x, "n_head", 1, 1 << 16, &md->heads)) ||
        (rc = get_int(x, "n_positions", 1, 1 << 24, &md->seq)) ||
        (rc = get_int(x, "vocab_size", 1, 1 << 30, &md->vocab)))
        return rc;
    md->kv_heads = md->heads;
    md->ffn = 4 * md->hidden;
    if ((rc = opt_int(x, "n_inner", 1, 1 << 24, &md->ffn)))
        return rc;
    static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast", NULL};
    if ((rc = want_act(x, "activation_function", "gelu_new", gelu,
                       "whale's GPT-2 MLP uses the tanh approximation of GeLU (gelu_new)")) ||
        (rc = get_eps(x, "layer_norm_epsilon", 1e-5, false, &eps)) ||
        (rc = want_bool(x, "scale_attn_weights", true, true,
                        "whale scales attention scores by 1/sqrt(head size)")) ||
        (rc = want_bool(x, "scale_attn_by_inverse_layer_idx", false, false,
                        "whale does not scale attention by the layer index")) ||
        (rc = want_bool(x, "add_cross_attention", false, false,
                        "whale models are decoders without cross-attention")) ||
        (rc = opt_bool(x, "tie_word_embeddings", true, &md->tied_embeddings)))
        return rc;
    md->mlp = WHALE_MLP_GELU;
    md->norm = WHALE_NORM_LAYERNORM;
    md->position = WHALE_POS_LEARNED;
    md->no_bias = false;
    return 0;
}

/* Mixtral's sparse MoE block on every layer: softmax over all experts,
 * the top k renormalized to sum 1 (Gate=softmax GateRenorm=yes), no
 * capacity limit. Its load-balancing loss is part of the training loss
 * only with output_router_logits (transformers' convention); no z-loss.
 *
 * transformers' load_balancing_loss_func takes the router logits of all L
 * layers as one batch of L N rows: E sum_e F_e Pbar_e, F_e = assignments
 * to e / (L N) (summing to K, not 1), Pbar_e = mean probability over the
 * L N rows. whale's loss is per block, E sum_e f_le P_le with f_le =
 * assignments / (N K), summed over blocks. One layer's HF term is K times
 * whale's, so AuxLoss = coef K / L makes whale's loss coef times the mean
 * over layers of HF's function applied to each layer alone: equal to
 * transformers' when L = 1 (or the layers route alike); otherwise it is
 * larger by coef E sum_e cov_l(F_le, P_le), the covariance over layers
 * (hf_aux_coef_from / _to, docs/models-and-data.md). */
double hf_aux_from_coef(double coef, int topk, int layers)
{
    return coef * topk / layers;
}

/* the inverse, rounded to the 9 digits model.conf keeps, so that
 * import -> export gives back a config's 0.001 rather than 0.0010000000000000002 */
double hf_aux_to_coef(double aux, int topk, int layers)
{
    char b[32];
    snprintf(b, sizeof b, "%.9g", aux * layers / topk);
    return strtod(b, NULL);
}

static int parse_mixtral_moe(struct cfgctx *x, struct whale_model_desc *md)
{
    struct whale_moe_desc *m = &md->moe;
    int rc;
    m->topk = 2;
    if ((rc = get_int(x, "num_local_experts", 2, 4096, &m->experts)) ||
        (rc = opt_int(x, "num_experts_per_tok", 1, 4096, &m->topk)))
        return rc;
    if (m->topk > m->experts) {
        whale_error("%s: field \"num_experts_per_tok\" = %d is more than \"num_local_experts\" "
                    "= %d", x->path, m->topk, m->experts);
        return WHALE_ECONF;
    }
    json_t *j = json_object_get(x->c, "router_jitter_noise");
    if (j && !json_is_null(j) && !(json_is_number(j) && json_number_value(j) == 0)) {
        whale_error("%s: field \"router_jitter_noise\" = %g is not supported: whale's router "
                    "has no input noise", x->path, json_number_value(j));
        return WHALE_ENOTSUP;
    }
    bool aux_on;
    if ((rc = opt_bool(x, "output_router_logits", false, &aux_on)))
        return rc;
    json_t *ac = json_object_get(x->c, "router_aux_loss_coef");
    double coef = json_is_number(ac) ? json_number_value(ac) : 0.001;
    if (!(coef >= 0 && coef <= 1)) {
        whale_error("%s: field \"router_aux_loss_coef\" = %g is out of range 0..1", x->path,
                    coef);
        return WHALE_ECONF;
    }
    m->ffn = md->ffn;
    m->shared = 0;
    m->every = 1;
    m->first = 0;
    m->gate = WHALE_GATE_SOFTMAX;
    m->renorm = true;
    m->capacity = 0;
    m->aux = aux_on ? hf_aux_from_coef(coef, m->topk, md->layers) : 0;
    m->zloss = 0;
    return 0;
}

static int parse_llama(struct cfgctx *x, struct whale_model_desc *md, enum hf_family fam)
{
    int rc;
    double eps;
    if ((rc = get_int(x, "num_hidden_layers", 1, 1 << 16, &md->layers)) ||
        (rc = get_int(x, "hidden_size", 1, 1 << 20, &md->hidden)) ||
        (rc = get_int(x, "num_attention_heads", 1, 1 << 16, &md->heads)) ||
        (rc = get_int(x, "intermediate_size", 1, 1 << 24, &md->ffn)) ||
        (rc = get_int(x, "max_position_embeddings", 1, 1 << 24, &md->seq)) ||
        (rc = get_int(x, "vocab_size", 1, 1 << 30, &md->vocab)))
        return rc;
    md->kv_heads = md->heads;
    if ((rc = opt_int(x, "num_key_value_heads", 1, 1 << 16, &md->kv_heads)))
        return rc;
    if (md->hidden % md->heads) {
        whale_error("%s: field \"hidden_size\" = %d is not divisible by \"num_attention_heads\" "
                    "= %d", x->path, md->hidden, md->heads);
        return WHALE_ENOTSUP;
    }
    int hd = md->hidden / md->heads;
    if ((rc = opt_int(x, "head_dim", 1, 1 << 16, &hd)))
        return rc;
    if (hd != md->hidden / md->heads) {
        whale_error("%s: field \"head_dim\" = %d is not supported: whale's head size is "
                    "hidden_size / num_attention_heads = %d", x->path, hd,
                    md->hidden / md->heads);
        return WHALE_ENOTSUP;
    }
    static const char *const silu[] = {"silu", "swish", NULL};
    if ((rc = want_act(x, "hidden_act", "silu", silu, "whale's gated MLP uses SiLU (SwiGLU)")) ||
        (rc = get_eps(x, "rms_norm_eps", 1e-6, true, &eps)) ||
        (rc = want_bool(x, "mlp_bias", false, false, "whale's Llama MLP has no biases")) ||
        (rc = opt_bool(x, "tie_word_embeddings", false, &md->tied_embeddings)))
        return rc;
    if (fam != HF_QWEN2 &&
        (rc = want_bool(x, "attention_bias", false, false,
                        "whale has q/k/v biases only for Qwen2 (model_type qwen2)")))
        return rc;
    md->norm_eps = (float)eps;
    if ((rc = parse_rope_scaling(x, md, fam)))
        return rc;
    json_t *th = json_object_get(x->c, "rope_theta");
    if (th && !json_is_null(th)) {
        if (!json_is_number(th) || !(json_number_value(th) > 1.0)) {
            whale_error("%s: field \"rope_theta\" must be a number > 1", x->path);
            return WHALE_ECONF;
        }
        md->rope_theta = (float)json_number_value(th);
    } else {
        md->rope_theta = 10000.0f;
    }
    /* Sliding-window attention equals full causal attention while the
     * sequence is no longer than the window: accept a window that covers
     * the sequence (Mistral: Seq is capped at the window), refuse
     * Qwen2's per-layer windows. */
    if (fam == HF_QWEN2) {
        if ((rc = want_bool(x, "use_sliding_window", false, false,
                            "whale attends over the whole sequence")))
            return rc;
    } else {
        json_t *sw = json_object_get(x->c, "sliding_window");
        if (sw && !json_is_null(sw)) {
            if (!json_is_integer(sw) || json_integer_value(sw) < 1) {
                whale_error("%s: field \"sliding_window\" must be null or an integer >= 1",
                            x->path);
                return WHALE_ECONF;
            }
            if (json_integer_value(sw) < md->seq) {
                whale_info("%s: sliding_window = %lld < max_position_embeddings = %d: the "
                           "description's Seq is the window (full attention within it is the "
                           "same computation)", x->path, (long long)json_integer_value(sw),
                           md->seq);
                md->seq = (int)json_integer_value(sw);
            }
        }
    }
    md->mlp = WHALE_MLP_SWIGLU;
    md->norm = WHALE_NORM_RMSNORM;
    md->position = WHALE_POS_ROTARY;
    md->no_bias = fam != HF_QWEN2;
    return fam == HF_MIXTRAL ? parse_mixtral_moe(x, md) : 0;
}

int hf_config_parse(void *cfg_json, const char *path, struct whale_model_desc *md,
                    enum hf_family *fam)
{
    struct cfgctx x = {cfg_json, path};
    memset(md, 0, sizeof *md);
    md->attention = WHALE_ATTN_PLAIN;
    md->rope_theta = 10000.0f;
    const char *mt = json_string_value(json_object_get(x.c, "model_type"));
    if (!mt) {
        whale_error("%s: field \"model_type\" is missing", path);
        return WHALE_ECONF;
    }
    int f = -1;
    for (int i = 0; i < HF_NFAMILIES; i++)
        if (!strcmp(mt, fam_names[i]))
            f = i;
    if (f < 0) {
        whale_error("%s: field \"model_type\" = \"%s\" is not supported (gpt2, llama, mistral, "
                    "qwen2, mixtral)", path, mt);
        return WHALE_ENOTSUP;
    }
    *fam = (enum hf_family)f;
    int rc = f == HF_GPT2 ? parse_gpt2(&x, md) : parse_llama(&x, md, *fam);
    if (rc)
        return rc;
    snprintf(md->name, sizeof md->name, "hf-%s", mt);
    snprintf(md->source, sizeof md->source, "%s", path);
    return whale_model_desc_validate(md, path);
}

int hf_family_of(const struct whale_model_desc *md, enum hf_family *fam)
{
    if (md->mlp == WHALE_MLP_GELU && md->norm == WHALE_NORM_LAYERNORM &&
        md->position == WHALE_POS_LEARNED && !md->no_bias && md->kv_heads == md->heads) {
        *fam = HF_GPT2;
        return 0;
    }
    const struct whale_moe_desc *m = &md->moe;
    if (m->experts > 0) {
        if (md->mlp == WHALE_MLP_SWIGLU && md->norm == WHALE_NORM_RMSNORM &&
            md->position == WHALE_POS_ROTARY && md->no_bias && m->shared == 0 &&
            m->every == 1 && m->first == 0 && m->gate == WHALE_GATE_SOFTMAX && m->renorm &&
            m->capacity == 0 && m->zloss == 0 && m->ffn == md->ffn &&
            md->rope_scaling.kind == WHALE_ROPE_NONE) {
            *fam = HF_MIXTRAL;
            return 0;
        }
        whale_error("%s: a MoE model exports as Mixtral only with MLP=swiglu Norm=rmsnorm "
                    "Position=rotary Bias=no, no RopeScaling, every block MoE (MoEEvery=1 "
                    "MoEFirst=0), Gate=softmax GateRenorm=yes, no SharedExperts, "
                    "CapacityFactor=dropless, ZLoss=0 and ExpertFFN=FFN", md->source);
        return WHALE_ENOTSUP;
    }
    if (md->mlp == WHALE_MLP_SWIGLU && md->norm == WHALE_NORM_RMSNORM &&
        md->position == WHALE_POS_ROTARY) {
        *fam = md->no_bias ? HF_LLAMA : HF_QWEN2;
        return 0;
    }
    whale_error("%s: MLP=%s Norm=%s Position=%s Bias=%s is no Hugging Face family whale "
                "exports (GPT-2: gelu/layernorm/learned/yes; Llama: swiglu/rmsnorm/rotary/no; "
                "Qwen2: swiglu/rmsnorm/rotary/yes)", md->source, whale_mlp_name(md->mlp),
                whale_norm_name(md->norm), whale_pos_name(md->position),
                md->no_bias ? "no" : "yes");
    return WHALE_ENOTSUP;
}

/* A float of the description as the shortest decimal that reads back as
 * the same float (1e-06, not 9.99999997e-07). */
static json_t *jfloat(float v)
{
    char b[32];
    for (int p = 6; p < 10; p++) {
        snprintf(b, sizeof b, "%.*g", p, (double)v);
        if (strtof(b, NULL) == v)
            break;
    }
    return json_real(strtod(b, NULL));
}

#define SETI(k, v) json_object_set_new(c, k, json_integer(v))
int hf_config_fill(void *cfg_json, const struct whale_model_desc *md, enum hf_family fam)
{
    json_t *c = cfg_json;
    static const char *arch[] = {"GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM",
                                 "Qwen2ForCausalLM", "MixtralForCausalLM"};
    json_t *a = json_array();
    json_array_append_new(a, json_string(arch[fam]));
    json_object_set_new(c, "architectures", a);
    json_object_set_new(c, "model_type", json_string(fam_names[fam]));
    SETI("vocab_size", md->vocab);
    json_object_set_new(c, "tie_word_embeddings", json_boolean(md->tied_embeddings));
    if (fam == HF_GPT2) {
        SETI("n_layer", md->layers);
        SETI("n_embd", md->hidden);
        SETI("n_head", md->heads);
        SETI("n_positions", md->seq);
        SETI("n_ctx", md->seq);
        SETI("n_inner", md->ffn);
        json_object_set_new(c, "activation_function", json_string("gelu_new"));
        json_object_set_new(c, "layer_norm_epsilon", json_real(HF_WHALE_EPS));
        return 0;
    }
    SETI("num_hidden_layers", md->layers);
    SETI("hidden_size", md->hidden);
    SETI("num_attention_heads", md->heads);
    SETI("num_key_value_heads", md->kv_heads);
    SETI("intermediate_size", md->ffn);
    if (!json_object_get(c, "max_position_embeddings"))
        SETI("max_position_embeddings", md->seq);
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "rms_norm_eps",
                        md->norm_eps > 0 ? jfloat(md->norm_eps) : json_real(HF_WHALE_EPS));
    json_object_set_new(c, "rope_theta", json_real(md->rope_theta > 0 ? md->rope_theta : 1e4));
    const struct whale_rope_scaling *sc = &md->rope_scaling;
    if (sc->kind == WHALE_ROPE_NONE) {
        json_object_set_new(c, "rope_scaling", json_null());
    } else {
        json_t *rs = json_object();
        json_object_set_new(rs, "rope_type",
                            json_string(sc->kind == WHALE_ROPE_LINEAR ? "linear" : "llama3"));
        json_object_set_new(rs, "factor", jfloat(sc->factor));
        if (sc->kind == WHALE_ROPE_LLAMA3) {
            json_object_set_new(rs, "low_freq_factor", jfloat(sc->low_freq));
            json_object_set_new(rs, "high_freq_factor", jfloat(sc->high_freq));
            json_object_set_new(rs, "original_max_position_embeddings",
                                json_integer(sc->orig_seq));
        }
        json_object_set_new(c, "rope_scaling", rs);
    }
    if (fam == HF_LLAMA) {
        json_object_set_new(c, "attention_bias", json_false());
        json_object_set_new(c, "mlp_bias", json_false());
    }
    if (fam == HF_QWEN2)
        json_object_set_new(c, "use_sliding_window", json_false());
    if (fam == HF_MIXTRAL) {
        SETI("num_local_experts", md->moe.experts);
        SETI("num_experts_per_tok", md->moe.topk);
        json_object_set_new(c, "output_router_logits", json_boolean(md->moe.aux > 0));
        json_object_set_new(c, "router_aux_loss_coef",
                            md->moe.aux > 0
                                ? json_real(hf_aux_to_coef(md->moe.aux, md->moe.topk, md->layers))
                                : json_real(0.001));
        json_object_set_new(c, "router_jitter_noise", json_real(0));
    }
    return 0;
}

int hf_write_conf(const char *path, const struct whale_model_desc *md, const char *from)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        whale_error("cannot write %s: %m", path);
        return WHALE_EIO;
    }
    fprintf(f, "# %s: imported from %s\n", md->name, from);
    fprintf(f, "Name=%s Layers=%d Hidden=%d Heads=%d KVHeads=%d FFN=%d Seq=%d Vocab=%d "
               "MLP=%s Norm=%s Position=%s Bias=%s TiedEmbeddings=%s",
            md->name, md->layers, md->hidden, md->heads, md->kv_heads, md->ffn, md->seq,
            md->vocab, whale_mlp_name(md->mlp), whale_norm_name(md->norm),
            whale_pos_name(md->position), md->no_bias ? "no" : "yes",
            md->tied_embeddings ? "yes" : "no");
    if (md->position == WHALE_POS_ROTARY)
        fprintf(f, " RopeTheta=%.9g", (double)md->rope_theta);
    const struct whale_rope_scaling *sc = &md->rope_scaling;
    if (sc->kind == WHALE_ROPE_LINEAR)
        fprintf(f, " RopeScaling=linear RopeFactor=%.9g", (double)sc->factor);
    else if (sc->kind == WHALE_ROPE_LLAMA3)
        fprintf(f, " RopeScaling=llama3 RopeFactor=%.9g RopeLowFreq=%.9g RopeHighFreq=%.9g "
                   "RopeOrigSeq=%d", (double)sc->factor, (double)sc->low_freq,
                (double)sc->high_freq, sc->orig_seq);
    if (md->norm_eps > 0 && md->norm_eps != 1e-5f)
        fprintf(f, " NormEps=%.9g", (double)md->norm_eps);
    const struct whale_moe_desc *m = &md->moe;
    if (m->experts > 0)
        fprintf(f, " Experts=%d TopK=%d ExpertFFN=%d Gate=%s GateRenorm=%s "
                   "CapacityFactor=dropless AuxLoss=%.9g ZLoss=0", m->experts, m->topk, m->ffn,
                whale_gate_name(m->gate), m->renorm ? "yes" : "no", m->aux);
    fprintf(f, "\n");
    if (fclose(f)) {
        whale_error("cannot write %s: %m", path);
        return WHALE_EIO;
    }
    return 0;
}

void *hf_json_load(const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    if (whale_read_file(path, WHALE_READ_MAX_TEXT, 0, &buf, &len))
        return NULL; /* logged with the path and the reason */
    json_error_t je;
    json_t *j = json_loadb(buf, len, 0, &je);
    free(buf);
    if (!j)
        whale_error("%s:%d: %s", path, je.line, je.text);
    return j;
}

int hf_config_load(const char *hf_dir, struct whale_model_desc *md, enum hf_family *fam)
{
    char p[4096];
    if ((size_t)snprintf(p, sizeof p, "%s/config.json", hf_dir) >= sizeof p) {
        whale_error("%s: path too long", hf_dir);
        return WHALE_EINVAL;
    }
    json_t *c = hf_json_load(p);
    if (!c)
        return WHALE_ECONF;
    int rc = hf_config_parse(c, p, md, fam);
    json_decref(c);
    return rc;
}

int whale_hf_config_read(const char *hf_dir, struct whale_model_desc *md, const char **family)
{
    enum hf_family fam;
    int rc = hf_config_load(hf_dir, md, &fam);
    if (!rc && family)
        *family = hf_family_name(fam);
    return rc;
}
