/* Test helper: save a synthetic GPT checkpoint under a parallel layout,
 * every rank a thread with its own handle (as separate processes would).
 *   ckpt_synth ROOT TP PP DP ZERO STEP [exact|bf16|fp16] [int8] [zstd]
 * The values are synth_value(name, global index, STEP): a reader can
 * recompute every element. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"
#include "whale/ckpt.h"
#include "whale/error.h"

static const struct synth_model model = {.layers = 4, .hidden = 32, .vocab = 96, .seq = 16};
static int TP, PP, DP, ZERO;
static long long STEP;
static whale_ckpt_config base;

struct arg { int rank, rc; };

static void *rank_main(void *p)
{
    struct arg *a = p;
    struct synth_layout l;
    synth_layout_of(TP, PP, DP, ZERO, a->rank, &l);
    whale_ckpt_piece *pc;
    size_t n;
    if (synth_pieces(&model, &l, true, true, STEP, &pc, &n)) {
        a->rc = 1;
        return NULL;
    }
    whale_ckpt_config c = base;
    c.rank = a->rank;
    c.world = TP * PP * DP;
    whale_ckpt *ck;
    a->rc = whale_ckpt_open(&c, &ck);
    if (!a->rc) {
        char plan[128];
        snprintf(plan, sizeof plan, "{\"tp\":%d,\"pp\":%d,\"dp\":%d,\"zero\":%d}", TP, PP, DP, ZERO);
        whale_ckpt_meta m = {.step = STEP, .samples = STEP * 64, .loss_scale = 1, .plan_json = plan};
        a->rc = whale_ckpt_save(ck, &m, pc, n, NULL);
        int r2 = whale_ckpt_close(ck);
        if (!a->rc)
            a->rc = r2;
    }
    synth_free(pc, n);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: ckpt_synth ROOT TP PP DP ZERO STEP [exact|bf16|fp16] [int8] [zstd]\n");
        return 2;
    }
    whale_ckpt_config_default(&base);
    base.root = argv[1];
    base.run_id = "synth";
    base.chunk_bytes = 16384;
    TP = atoi(argv[2]); PP = atoi(argv[3]); DP = atoi(argv[4]); ZERO = atoi(argv[5]);
    STEP = atoll(argv[6]);
    for (int i = 7; i < argc; i++) {
        if (!strcmp(argv[i], "bf16")) base.weights = WHALE_CKPT_WEIGHTS_BF16;
        else if (!strcmp(argv[i], "fp16")) base.weights = WHALE_CKPT_WEIGHTS_FP16;
        else if (!strcmp(argv[i], "int8")) base.quantize_moments = true;
        else if (!strcmp(argv[i], "zstd")) base.zstd_level = 3;
    }
    int world = TP * PP * DP;
    pthread_t *th = calloc((size_t)world, sizeof *th);
    struct arg *a = calloc((size_t)world, sizeof *a);
    for (int r = 0; r < world; r++) {
        a[r].rank = r;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    int rc = 0;
    for (int r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        if (a[r].rc) {
            fprintf(stderr, "ckpt_synth: rank %d: %s\n", r, whale_strerror(a[r].rc));
            rc = 1;
        }
    }
    free(th);
    free(a);
    return rc;
}
