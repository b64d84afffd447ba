/* Test helper: save or load-and-check a synthetic GPT checkpoint under a
 * parallel layout.
 *   ckpt_synth save|load ROOT TP PP DP ZERO STEP [exact|bf16|fp16] [int8] [zstd] [env]
 * Without `env` every rank is a thread with its own handle (as separate
 * processes would be); with `env` this process is one rank: WHALE_RANK /
 * WHALE_WORLD, else SLURM_PROCID / SLURM_NTASKS (under srun or whale-run).
 * Values are synth_value(name, global index, STEP), so `load` checks every
 * element it restores (exactly; within the codec's bound when compressed).
 * Exit: 0 ok, 1 failure, 2 usage. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"
#include "whale/ckpt.h"
#include "whale/error.h"
#include "whale/log.h"

static const struct synth_model model = {.layers = 4, .hidden = 32, .vocab = 96, .seq = 16};
static int TP, PP, DP, ZERO, WORLD;
static long long STEP;
static bool LOAD, LOSSY;
static whale_ckpt_config base;

struct arg { int rank, rc; };

static int do_load(int rank, whale_ckpt_piece *pc, size_t n)
{
    char *dir;
    int rc = whale_ckpt_resolve(base.root, "latest", &dir);
    if (rc)
        return rc;
    whale_ckpt_reader *r;
    rc = whale_ckpt_reader_open(dir, &r);
    free(dir);
    if (rc)
        return rc;
    rc = whale_ckpt_read(r, pc, n);
    if (!rc && whale_ckpt_reader_info(r)->step != STEP) {
        fprintf(stderr, "ckpt_synth: rank %d: latest is step %lld, expected %lld\n", rank,
                (long long)whale_ckpt_reader_info(r)->step, STEP);
        rc = WHALE_EDATA;
    }
    whale_ckpt_reader_close(r);
    if (rc)
        return rc;
    long bad = 0;
    /* lossy modes: bf16/fp16 weights and int8 moments stay within 1 % here */
    double worst = synth_check(pc, n, STEP, 0, LOSSY ? 1e30 : 0, 1e-30, &bad);
    if (bad) {
        fprintf(stderr, "ckpt_synth: rank %d: %ld elements differ (worst %g)\n", rank, bad, worst);
        return WHALE_EDATA;
    }
    return 0;
}

static void *rank_main(void *p)
{
    struct arg *a = p;
    struct synth_layout l;
    synth_layout_of(TP, PP, DP, ZERO, a->rank, &l);
    whale_ckpt_piece *pc;
    size_t n;
    if (synth_pieces(&model, &l, !LOAD, !LOAD, STEP, &pc, &n)) {
        a->rc = WHALE_EINVAL;
        return NULL;
    }
    if (LOAD) {
        a->rc = do_load(a->rank, pc, n);
    } else {
        whale_ckpt_config c = base;
        c.rank = a->rank;
        c.world = WORLD;
        whale_ckpt *ck;
        a->rc = whale_ckpt_open(&c, &ck);
        if (!a->rc) {
            char plan[128];
            snprintf(plan, sizeof plan, "{\"tp\":%d,\"pp\":%d,\"dp\":%d,\"zero\":%d}", TP, PP,
                     DP, ZERO);
            whale_ckpt_meta m = {.step = STEP, .samples = STEP * 64, .loss_scale = 1,
                                 .plan_json = plan};
            a->rc = whale_ckpt_save(ck, &m, pc, n, NULL);
            int r2 = whale_ckpt_close(ck);
            if (!a->rc)
                a->rc = r2;
        }
    }
    synth_free(pc, n);
    return NULL;
}

static int env_int(const char *a, const char *b, int dflt)
{
    const char *s = getenv(a);
    if (!s || !*s)
        s = getenv(b);
    return s && *s ? atoi(s) : dflt;
}

int main(int argc, char **argv)
{
    if (argc < 8 || (strcmp(argv[1], "save") && strcmp(argv[1], "load"))) {
        fprintf(stderr, "usage: ckpt_synth save|load ROOT TP PP DP ZERO STEP [exact|bf16|fp16] "
                        "[int8] [zstd] [env]\n");
        return 2;
    }
    whale_log_init_from_env();
    LOAD = !strcmp(argv[1], "load");
    whale_ckpt_config_default(&base);
    base.root = argv[2];
    base.chunk_bytes = 16384;
    base.commit_timeout_s = 60;
    TP = atoi(argv[3]); PP = atoi(argv[4]); DP = atoi(argv[5]); ZERO = atoi(argv[6]);
    STEP = atoll(argv[7]);
    WORLD = TP * PP * DP;
    bool env = false;
    for (int i = 8; i < argc; i++) {
        if (!strcmp(argv[i], "bf16")) base.weights = WHALE_CKPT_WEIGHTS_BF16, LOSSY = true;
        else if (!strcmp(argv[i], "fp16")) base.weights = WHALE_CKPT_WEIGHTS_FP16, LOSSY = true;
        else if (!strcmp(argv[i], "int8")) base.quantize_moments = true, LOSSY = true;
        else if (!strcmp(argv[i], "zstd")) base.zstd_level = 3;
        else if (!strcmp(argv[i], "env")) env = true;
    }
    if (TP < 1 || PP < 1 || DP < 1 || ZERO < 0 || ZERO > 3) {
        fprintf(stderr, "ckpt_synth: bad layout\n");
        return 2;
    }
    if (env) { /* one rank of a launched job */
        int rank = env_int("WHALE_RANK", "SLURM_PROCID", -1);
        int world = env_int("WHALE_WORLD", "SLURM_NTASKS", -1);
        if (rank < 0 || world != WORLD) {
            fprintf(stderr, "ckpt_synth: rank %d of %d, layout needs %d ranks\n", rank, world,
                    WORLD);
            return 2;
        }
        whale_log_set_rank(rank);
        if (whale_ckpt_config_from_env(&base))
            return 2;
        base.run_id = NULL; /* from SLURM_JOB_ID.SLURM_STEP_ID or WHALE_CKPT_RUN_ID */
        struct arg a = {.rank = rank};
        rank_main(&a);
        if (a.rc)
            fprintf(stderr, "ckpt_synth: rank %d: %s\n", rank, whale_strerror(a.rc));
        return a.rc ? 1 : 0;
    }
    base.run_id = "synth";
    pthread_t *th = calloc((size_t)WORLD, sizeof *th);
    struct arg *a = calloc((size_t)WORLD, sizeof *a);
    for (int r = 0; r < WORLD; r++) {
        a[r].rank = r;
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    int rc = 0;
    for (int r = 0; r < WORLD; r++) {
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
