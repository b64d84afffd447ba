/* safetensors headers (checkpoint shards, convert --from-safetensors). */
#include "fuzz_common.h"
#include "ckpt/ckpt_internal.h"

#include <fcntl.h>
#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    const char *dir = fuzz_scratch();
    fuzz_write(dir, "x.safetensors", data, size);
    char p[256];
    snprintf(p, sizeof p, "%s/x.safetensors", dir);
    int fd = open(p, O_RDONLY);
    if (fd < 0)
        abort();
    ckpt_st_entry *e = NULL;
    size_t n = 0;
    uint64_t doff, fsz;
    void *meta = NULL;
    if (ckpt_st_read_header(fd, p, &e, &n, &doff, &fsz, &meta) == 0) {
        for (size_t i = 0; i < n; i++) /* accepted entries lie inside the file */
            if (e[i].end < e[i].begin || doff + e[i].end > fsz)
                abort();
        ckpt_st_entries_free(e, n);
        json_decref(meta);
    }
    close(fd);
    return 0;
}
