/* Transformer description shared by the planner, the engine and the
 * plugin: loaded from a preset name (config/models/NAME.conf) or a file.
 *
 * File format (whale.conf syntax), e.g. config/models/gpt-1.7b.conf:
 *   Name=gpt-1.7b Layers=24 Hidden=2304 Heads=24 Seq=2048 Vocab=51200
 *   FFN=9216 KVHeads=24 TiedEmbeddings=yes
 * and a Llama-style block (config/models/llama3-8b.conf):
 *   Name=llama3-8b Layers=32 Hidden=4096 Heads=32 KVHeads=8 FFN=14336
 *   Seq=8192 Vocab=128256 MLP=swiglu Norm=rmsnorm Position=rotary Bias=no
 *   TiedEmbeddings=no Attention=flash Precision=bf16
 *
 * Architecture keys and their defaults (the defaults are the GPT-2 block
 * the wave-1 files always meant, so those files keep their meaning):
 *   MLP=gelu|swiglu|geglu        gelu: fc1 + GeLU + fc2 (two matrices);
 *                                swiglu/geglu: gate and up projections
 *                                (h x FFN each) + down (three matrices)
 *   Norm=layernorm|rmsnorm       layernorm has a scale and a bias per
 *                                channel, rmsnorm only a scale
 *   Position=learned|rotary|alibi  learned: a Seq x Hidden table; rotary
 *                                and alibi add no parameters
 *   Bias=yes|no                  biases on the linear layers
 *   KVHeads=N                    grouped-query (1 < N < Heads) or
 *                                multi-query (N = 1) attention
 *   TiedEmbeddings=yes|no        output projection shares the token table
 *   Attention=plain|flash        plain: scores materialised (a s^2 per
 *                                sequence kept for backward); flash: fused
 *                                kernel, no s^2 activations
 *   RopeTheta=X                  rotary base (default 10000; Llama 3: 500000)
 *   RopeScaling=none|linear|llama3  context extension of the rotary
 *                                frequencies (whale/rope.h; Hugging Face's
 *                                rope_scaling): linear divides every one by
 *                                RopeFactor; llama3 (Llama 3.1) also takes
 *                                RopeLowFreq, RopeHighFreq and RopeOrigSeq
 *   NormEps=X                    epsilon of the norms (default 1e-5; Qwen2:
 *                                1e-6); the engine runs other values with
 *                                Norm=rmsnorm only
 *   Precision=auto|fp32|bf16|fp16  training precision the model is meant
 *                                for (auto: what the plan runs: fp32 on CPU
 *                                ranks, bf16 on GPUs)
 *
 * Mixture of experts (Experts=0 or absent: every block is dense; the keys
 * below Experts are refused without it):
 *   Experts=N                    routed experts per MoE block (2..4096)
 *   TopK=K                       experts each token is sent to (1..Experts; 1)
 *   ExpertFFN=F                  inner width of one expert (default FFN;
 *                                smaller: fine-grained experts)
 *   SharedExperts=S              experts every token goes through, added
 *                                unweighted (DeepSeek-MoE; 0)
 *   MoEEvery=N MoEFirst=I        blocks I, I+N, I+2N, ... (0-based) are MoE
 *                                blocks (1 and 0: every block)
 *   Gate=softmax|sigmoid         gate function of the router logits (softmax)
 *   GateRenorm=yes|no            top-k gates divided by their sum (no)
 *   CapacityFactor=X|dropless    expert capacity ceil(X * tokens * K / Experts)
 *                                per micro-batch, later tokens dropped;
 *                                dropless (default): no cap
 *   AuxLoss=A                    load-balancing loss coefficient (0.01):
 *                                A * Experts * sum_e f_e * P_e
 *   ZLoss=Z                      router z-loss coefficient (0.001):
 *                                Z * mean_t logsumexp(logits_t)^2
 */
#ifndef WHALE_MODELDESC_H
#define WHALE_MODELDESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "whale/rope.h"

#ifdef __cplusplus
extern "C" {
#endif

enum whale_mlp_kind { WHALE_MLP_GELU = 0, WHALE_MLP_SWIGLU, WHALE_MLP_GEGLU };
enum whale_norm_kind { WHALE_NORM_LAYERNORM = 0, WHALE_NORM_RMSNORM };
enum whale_pos_kind { WHALE_POS_LEARNED = 0, WHALE_POS_ROTARY, WHALE_POS_ALIBI };
enum whale_attn_kind { WHALE_ATTN_PLAIN = 0, WHALE_ATTN_FLASH };
enum whale_gate_kind { WHALE_GATE_SOFTMAX = 0, WHALE_GATE_SIGMOID };

/* The MoE keys of a description (experts == 0: dense model). */
struct whale_moe_desc {
    int experts;       /* routed experts per MoE block */
    int topk;          /* experts per token */
    int ffn;           /* inner width of one expert */
    int shared;        /* shared experts (each of width ffn), always active */
    int every, first;  /* MoE blocks: first, first + every, ... (0-based) */
    enum whale_gate_kind gate;
    bool renorm;       /* top-k gates renormalised to sum 1 */
    double capacity;   /* capacity factor; 0: dropless */
    double aux;        /* load-balancing loss coefficient */
    double zloss;      /* router z-loss coefficient */
};

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
    /* architecture (defaults: the GPT-2 block) */
    enum whale_mlp_kind mlp;
    enum whale_norm_kind norm;
    enum whale_pos_kind position;
    bool no_bias;      /* linear layers without biases (Bias=no); a zeroed struct is GPT-2's */
    enum whale_attn_kind attention;
    bool precision_set;/* Precision= given (else auto: the plan's default) */
    int precision;     /* enum whale_precision (whale/planfile.h) when precision_set */
    char source[256];  /* file it was loaded from (messages) */
    float rope_theta;  /* RopeTheta= (rotary base); 0 in a struct built in code: 10000 */
    struct whale_moe_desc moe; /* mixture of experts (moe.experts == 0: dense) */
    struct whale_rope_scaling rope_scaling; /* RopeScaling= and its keys (zero: none) */
    float norm_eps;    /* NormEps=; 0 in a struct built in code: 1e-5 */
};

/* Load a preset by name (searched in $WHALE_MODEL_PATH (':'-separated),
 * the installed data dir, then the source tree) or a path (anything with a
 * '/' or ending in .conf). Errors are logged with file:line. */
int whale_model_desc_load(const char *name_or_path, struct whale_model_desc *out);
int whale_model_desc_parse_string(const char *text, const char *origin,
                                  struct whale_model_desc *out);
/* Checks consistency (heads divide hidden, ...); logs the reason. */
int whale_model_desc_validate(const struct whale_model_desc *m, const char *origin);

/* Whether the description is a plain GPT-2 block (MLP=gelu Norm=layernorm
 * Position=learned Bias=yes), the only block the wave-1 engine runs.
 * Returns 0, or WHALE_ENOTSUP with `why` naming the model file and the
 * first field that differs ("llama.conf: MLP=swiglu: ..."). */
int whale_model_desc_gpt2_check(const struct whale_model_desc *m, char *why, size_t why_len);

/* Names of the enum values as the file spells them. */
const char *whale_mlp_name(enum whale_mlp_kind k);
const char *whale_norm_name(enum whale_norm_kind k);
const char *whale_pos_name(enum whale_pos_kind k);
const char *whale_attn_name(enum whale_attn_kind k);
const char *whale_gate_name(enum whale_gate_kind k);

/* Parameters of one transformer block (attention + MLP + norms + biases);
 * a dense block in a MoE model. */
int64_t whale_model_desc_block_params(const struct whale_model_desc *m);
/* Whether block `i` (0-based) is a MoE block. */
bool whale_model_desc_is_moe(const struct whale_model_desc *m, int i);
/* MoE blocks of the model. */
int whale_model_desc_moe_blocks(const struct whale_model_desc *m);
/* Parameters of one MoE block: all of them, and the active ones (what one
 * token's forward uses: router, TopK routed experts and the shared ones). */
int64_t whale_model_desc_moe_block_params(const struct whale_model_desc *m, bool active);
/* Parameters one token's forward uses (whale_model_desc_params for a dense
 * model): what FLOP counts per token are based on. */
int64_t whale_model_desc_active_params(const struct whale_model_desc *m);
/* Parameter count of the model described (embeddings included; the
 * output projection counted once when tied). */
int64_t whale_model_desc_params(const struct whale_model_desc *m);

#ifdef __cplusplus
}
#endif
#endif
