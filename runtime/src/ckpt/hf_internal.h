/* Hugging Face interchange (whale/ckpt_hf.h): the name and layout table
 * shared by import and export. */
#ifndef WHALE_CKPT_HF_INTERNAL_H
#define WHALE_CKPT_HF_INTERNAL_H

#include "ckpt_internal.h"
#include "whale/ckpt_hf.h"

#include <stdbool.h>

enum hf_family { HF_GPT2 = 0, HF_LLAMA, HF_MISTRAL, HF_QWEN2, HF_MIXTRAL, HF_NFAMILIES };

/* How one whale tensor is made of Hugging Face tensors (and back). */
enum hf_op {
    HF_COPY,      /* same elements in the same order (shapes may differ: c_attn.bias) */
    HF_TRANSPOSE, /* GPT-2 Conv1D [in, out] -> whale [out, in] */
    HF_STACK,     /* whale (k, ...) = k Hugging Face tensors (q|k|v, k|v) */
    HF_GPT2_QKV,  /* c_attn.weight [C, 3C] -> whale (3, C, C): qkv[j][o][i] = W[i][j C + o] */
    HF_ZERO,      /* whale bias Hugging Face's model does not have (Qwen2's o/mlp biases):
                   * zeros on import, must still be zeros on export */
};

struct hf_ent {
    char whale[96];
    int ndim;
    int64_t shape[3];
    enum hf_op op;
    int nsrc;
    char src[3][128];
    int sndim;
    int64_t sshape[2]; /* shape of each Hugging Face tensor */
};

/* The table for a model (prefix: "transformer." or "" for GPT-2, "model."
 * for the others). *out is malloc'd. */
int hf_map_build(const struct whale_model_desc *md, enum hf_family fam, const char *prefix,
                 struct hf_ent **out, size_t *n);

/* config.json (parsed) -> description; refusals name the field. */
/* A JSON file of a model directory (config.json, the shard index), read
 * through whale/readfile.h (regular file, bounded, non-blocking); NULL with
 * the reason logged. The caller json_decref()s it. */
void *hf_json_load(const char *path);
/* HF_DIR/config.json read and parsed (hf_config_parse). */
int hf_config_load(const char *hf_dir, struct whale_model_desc *md, enum hf_family *fam);
int hf_config_parse(void *cfg_json, const char *path, struct whale_model_desc *md,
                    enum hf_family *fam);
/* description -> config.json object fields (set on `cfg`, a json_t *). */
int hf_config_fill(void *cfg_json, const struct whale_model_desc *md, enum hf_family fam);
const char *hf_family_name(enum hf_family f);
/* The family a description is (for export without a config.json). */
int hf_family_of(const struct whale_model_desc *md, enum hf_family *fam);
/* Mixtral's router_aux_loss_coef <-> whale's AuxLoss (hf_config.c says how
 * the two losses relate). */
double hf_aux_from_coef(double coef, int topk, int layers);
double hf_aux_to_coef(double aux, int topk, int layers);
/* Writes the description as a .conf file. */
int hf_write_conf(const char *path, const struct whale_model_desc *md, const char *from);

/* safetensors sources of an import, mapped (hf_src.c) */
struct hf_file {
    char path[4096];
    int fd;
    void *map;
    size_t len;
    uint64_t doff;
    ckpt_st_entry *e;
    size_t n;
};

struct hf_src {
    struct hf_file *f;
    size_t nf;
};

struct hf_found {
    struct hf_file *f;
    ckpt_st_entry *e;
};


void hf_src_close(struct hf_src *s);
int  hf_src_open(const char *dir, struct hf_src *s);
bool hf_find(struct hf_src *s, const char *name, struct hf_found *out);
const void *hf_tdata(const struct hf_found *x);
/* src [a, b] -> dst [b, a], elements of es bytes */
void hf_transpose(void *dst, const void *src, int64_t a, int64_t b, size_t es);
/* bf16 -> fp32 for a destination written once and not read soon (the
 * import's weights): streaming stores where the CPU has them (hf_cvt.c) */
void hf_bf16_to_f32_stream(float *dst, const uint16_t *src, size_t n);
/* Every source of the table present, float, of the expected shape
 * (logged, naming the tensor); *used marks the sources taken; *dt0 the
 * dtype of the first. */
int  hf_check_all(struct hf_src *s, struct hf_ent *m, size_t nm, const char *dir,
                  unsigned char **used, enum whale_dtype *dt0);
/* No source left over (besides buffers and a tied head equal to `embed`). */
int  hf_check_leftovers(struct hf_src *s, const unsigned char *used, bool tied,
                        const char *embed, const char *dir);

#endif
