/* Hugging Face checkpoints in and out: config.json + safetensors (one file
 * or sharded with model.safetensors.index.json) of GPT-2, Llama, Mistral,
 * Qwen2 and Mixtral causal language models.
 *
 * Import maps the Hugging Face names and layouts onto whale's (GPT-2's
 * Conv1D weights are [in, out] and its q/k/v fused in c_attn; Llama-style
 * q/k/v/o and gate/up/down projections are torch Linear [out, in] like
 * whale's), writes the model description (.conf) from config.json and a
 * one-rank whale checkpoint whose tensors keep their file dtype (so
 * import -> export -> import is bit-exact); whale-train --resume then
 * reshards it into any TP/PP layout on load. Rotary embeddings need no
 * permutation: whale turns the pairs (i, i + hd/2) of each head, the
 * rotate-half convention of Hugging Face's Llama.
 *
 * Whatever whale cannot compute exactly is refused before anything is
 * written, the message naming the config.json field and its value (or the
 * tensor): rope_scaling types other than linear / llama3, Qwen2's sliding
 * window, a GPT-2 LayerNorm epsilon other than whale's 1e-5, Mixtral's
 * router noise, biases whale does not have,
 * activations other than SiLU / tanh-GeLU, head_dim != hidden/heads,
 * missing, unexpected or misshapen tensors. */
#ifndef WHALE_CKPT_HF_H
#define WHALE_CKPT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "whale/engine.h"
#include "whale/modeldesc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads HF_DIR/config.json (refusals logged naming the field); fills the
 * model description and *family ("gpt2", "llama", "mistral", "qwen2"). */
int whale_hf_config_read(const char *hf_dir, struct whale_model_desc *md, const char **family);

/* Import HF_DIR into OUT_DIR: OUT_DIR/model.conf, OUT_DIR/hf_config.json
 * (the source config.json) and the checkpoint OUT_DIR/step-00000000
 * (a checkpoint root: `whale-train --model OUT_DIR/model.conf --resume
 * OUT_DIR`). Nothing is written when a tensor or field is refused. */
int whale_hf_import(const char *hf_dir, const char *out_dir);

/* Export the checkpoint CKPT_DIR (a root or a step directory, any layout)
 * of the model `model` (a .conf path or preset) as a Hugging Face
 * directory OUT_DIR: config.json (from `hf_config`, a config.json to take
 * the other fields from, may be NULL; then the family follows from the
 * model description), model-0000i-of-0000n.safetensors of at most
 * max_shard_bytes each (one file model.safetensors when everything fits)
 * and model.safetensors.index.json. to_dtype < 0 keeps each tensor's
 * dtype, else WHALE_FLOAT32/BFLOAT16/FLOAT16. */
int whale_hf_export(const char *ckpt_dir, const char *model, const char *hf_config,
                    const char *out_dir, uint64_t max_shard_bytes, int to_dtype);

/* whale-train --init-from: the weights of HF_DIR straight into the
 * engine's parameter (and fp32 master) pieces, whatever its layout: each
 * rank maps the files and copies only its own elements. The same checks
 * as import; AdamW moments and the step are left as they are (fresh). */
int whale_hf_load_engine(const char *hf_dir, whale_engine *e);

#ifdef __cplusplus
}
#endif
#endif
