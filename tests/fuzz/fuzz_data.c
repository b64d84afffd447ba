/* Training data shards (llm.c token files, raw bytes): header checks and
 * the first batch. */
#include "fuzz_common.h"
#include "whale/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    const char *dir = fuzz_scratch();
    fuzz_write(dir, "x.bin", data, size);
    char p[256];
    snprintf(p, sizeof p, "%s/x.bin", dir);
    struct whale_data_config c = {
        .paths = p, .format = WHALE_DATA_AUTO, .vocab = 50304, .seq = 4,
        .local_batch = 2, .dp_rank = 0, .dp_size = 1, .prefetch = false,
    };
    whale_data *d = NULL;
    if (whale_data_open(&c, &d) == 0) {
        int32_t in[8], tg[8];
        whale_data_next(d, 0, in, tg);
        whale_data_next(d, 12345, in, tg);
        whale_data_close(d);
    }
    return 0;
}
