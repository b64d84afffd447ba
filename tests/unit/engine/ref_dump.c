/* One forward and backward of a whole small model (embedding, blocks, head)
 * on weights the test chooses, written out for tests/unit/engine/
 * torch_reference.py, which recomputes them independently with PyTorch.
 *
 *   ref_dump "MODEL DESCRIPTION" OUT.txt [zero-router]
 *
 * OUT.txt, one tensor per line: "kind name ndim dims... values..." with kind
 * w (weight), g (gradient of the mean token loss), t (tokens), y (targets);
 * then "loss VALUE". Weights are the engine's initialisation plus uniform
 * noise of 0.3, so attention is far from uniform and norms far from 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "whale/engine.h"
#include "whale/modeldesc.h"

static uint64_t rs = 20261201;
static float urand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0) * 2.0f - 1.0f;
}

static void put(FILE *f, const char *kind, const struct eng_param *p, const float *v)
{
    fprintf(f, "%s %s %d", kind, p->name, p->ndim);
    for (int k = 0; k < p->ndim; k++)
        fprintf(f, " %lld", (long long)p->gshape[k]);
    for (size_t i = 0; i < p->numel; i++)
        fprintf(f, " %.9g", v[i]);
    fputc('\n', f);
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: ref_dump 'MODEL DESCRIPTION' OUT.txt [zero-router]\n");
        return 2;
    }
    struct whale_engine_config c;
    whale_engine_config_defaults(&c);
    if (whale_model_desc_parse_string(argv[1], "ref_dump", &c.model))
        return 1;
    c.seq = c.model.seq;
    c.micro_batch = 2;
    c.threads = 1;
    whale_engine *e = NULL;
    if (eng_create(&c, NULL, NULL, &e))
        return 1;
    const size_t N = (size_t)e->d.B * e->d.T, C = e->d.C;
    int32_t *tok = malloc(N * 4), *tgt = malloc(N * 4);
    for (size_t i = 0; i < N; i++) {
        tok[i] = (int32_t)((urand() * 0.5f + 0.5f) * (e->d.Vg - 1));
        tgt[i] = (int32_t)((urand() * 0.5f + 0.5f) * (e->d.Vg - 1));
    }
    for (size_t i = 0; i < e->P; i++)
        e->W[i] += 0.3f * urand();
    /* zero-router: MoE routers of zeros, every logit equal: the tie rule
     * (lower expert index first) and the capacity order decide alone */
    for (int i = 0; argc == 4 && i < e->np; i++)
        if (strstr(e->params[i].name, "moe.router"))
            memset(e->W + e->params[i].flat, 0, e->params[i].numel * sizeof(float));
    memset(e->G, 0, e->P * sizeof(float));
    /* forward through every layer, boundaries in e->xb */
    double loss = 0;
    struct whale_moe_stats ms = { 0 }; /* MoE blocks: their auxiliary losses join the loss */
    for (int li = 0; li < e->nl; li++) {
        struct eng_layer *l = &e->layers[li];
        struct eng_io io = { 0 };
        io.tokens = tok;
        io.targets = tgt;
        io.in = li > 0 ? e->xb + (size_t)(li - 1) * N * C : NULL;
        io.out = li < e->nl - 1 ? e->xb + (size_t)li * N * C : NULL;
        io.saved = e->saved + e->saved_off[li];
        io.scratch = e->scratch;
        io.att_tmp = e->att_tmp;
        io.moe = &ms;
        if (l->ops->forward(l, &io))
            return 1;
        loss = (io.loss_sum + ms.loss_sum) / (double)N;
    }
    for (int li = e->nl - 1; li >= 0; li--) {
        struct eng_layer *l = &e->layers[li];
        struct eng_io io = { 0 };
        io.tokens = tok;
        io.targets = tgt;
        io.in = li > 0 ? e->xb + (size_t)(li - 1) * N * C : NULL;
        io.saved = e->saved + e->saved_off[li];
        io.scratch = e->scratch;
        io.att_tmp = e->att_tmp;
        io.dstream = e->dstream;
        io.dloss = 1.0f / (float)N;
        io.need_dinput = li > 0;
        if (l->ops->backward(l, &io))
            return 1;
    }
    FILE *f = fopen(argv[2], "w");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fprintf(f, "t tokens 2 %d %d", e->d.B, e->d.T);
    for (size_t i = 0; i < N; i++)
        fprintf(f, " %d", tok[i]);
    fprintf(f, "\ny targets 2 %d %d", e->d.B, e->d.T);
    for (size_t i = 0; i < N; i++)
        fprintf(f, " %d", tgt[i]);
    fputc('\n', f);
    for (int i = 0; i < e->np; i++) {
        put(f, "w", &e->params[i], e->W + e->params[i].flat);
        put(f, "g", &e->params[i], e->G + e->params[i].flat);
    }
    /* means per MoE block forward, as whale_step_stats reports them */
    double nf = ms.forwards > 0 ? (double)ms.forwards : 1.0;
    fprintf(f, "moe %.12g %.12g %lld\n", ms.aux / nf, ms.zloss / nf, (long long)ms.dropped);
    fprintf(f, "loss %.12g\n", loss);
    int rc = fclose(f) ? 1 : 0;
    free(tok);
    free(tgt);
    whale_engine_destroy(e);
    return rc;
}
