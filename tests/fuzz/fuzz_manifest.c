/* Checkpoint manifests: the input becomes manifest.json of a checkpoint
 * whose shard files are the seed shards of tests/fuzz/data (copied into a
 * scratch directory once), then the reader opens, verifies and restores
 * from it - the paths of `whale-ckpt verify`, `--resume` and `convert`. */
#include "fuzz_common.h"
#include "ckpt/ckpt_internal.h"
#include "whale/ckpt.h"

#include <sys/stat.h>

static void copy_seed_shards(const char *dir)
{
    const char *src = getenv("WHALE_FUZZ_DATA");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/rank-00000' && cp '%s'/rank-00000/*.safetensors '%s/rank-00000/'",
             dir, src ? src : WHALE_FUZZ_DATA_DIR, dir);
    if (system(cmd) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *dir;
    fuzz_quiet();
    if (!dir) {
        dir = fuzz_scratch();
        copy_seed_shards(dir);
    }
    fuzz_write(dir, "manifest.json", data, size);
    whale_ckpt_reader *r = NULL;
    if (whale_ckpt_reader_open_all(dir, &r) == 0) {
        int bad = 0;
        whale_ckpt_verify(r, &bad);
        const whale_ckpt_info *in = whale_ckpt_reader_info(r);
        for (size_t i = 0; i < in->ntensors && i < 4; i++) {
            const char *name;
            enum whale_dtype dt;
            int nd;
            int64_t shape[WHALE_CKPT_MAX_DIMS];
            whale_ckpt_reader_tensor(r, i, &name, &dt, &nd, shape);
            int64_t n;
            if (!ckpt_numel_ok(nd, shape, &n) || n > (1 << 20))
                continue; /* accepted but too big to restore here */
            float *buf = malloc((size_t)n * 8 + 8);
            whale_ckpt_piece p;
            whale_ckpt_piece_full(&p, name, WHALE_FLOAT32, nd, shape, buf);
            whale_ckpt_read(r, &p, 1);
            free(buf);
        }
        unsigned char rng[64];
        size_t len;
        whale_ckpt_reader_rng(r, 0, rng, sizeof rng, &len);
        whale_ckpt_reader_close(r);
    }
    return 0;
}
