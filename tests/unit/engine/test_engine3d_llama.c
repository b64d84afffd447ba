/* The layout equivalence of test_engine3d.c with Llama-style blocks:
 * RMSNorm, SwiGLU, rotary positions, grouped-query attention (4 query heads
 * over 2 KV heads: split over TP=2, replicated on TP=4 with gradients summed
 * over TP), no biases, an untied output head (vocabulary-parallel, its own
 * bucket under PP) and blocked attention. Every layout's loss at every step
 * equals the single-rank Llama run within 1e-5 relative. */
#include "whale/modeldesc.h"
static void t3d_llama(struct whale_model_desc *m)
{
    m->kv_heads = 2;
    m->mlp = WHALE_MLP_SWIGLU;
    m->norm = WHALE_NORM_RMSNORM;
    m->position = WHALE_POS_ROTARY;
    m->rope_theta = 10000.0f;
    m->no_bias = true;
    m->tied_embeddings = false;
    m->attention = WHALE_ATTN_FLASH;
}
#define T3D_MODEL_SETUP t3d_llama
#define T3D_SELECTIVE_SAVES 0 /* blocked attention keeps no T x T probabilities */
#include "test_engine3d.c"
