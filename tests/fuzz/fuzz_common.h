/* Shared bits of the libFuzzer harnesses: input as a NUL-terminated
 * string, input written to a private scratch file, and a silent log (the
 * parsers log every refusal; printing millions of them would only slow
 * the fuzzer down). */
#ifndef WHALE_FUZZ_COMMON_H
#define WHALE_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "whale/log.h"

static void fuzz_null_sink(int level, const char *line, void *user)
{
    (void)level;
    (void)line;
    (void)user;
}

static inline void fuzz_quiet(void)
{
    whale_log_set_sink(fuzz_null_sink, NULL);
}

/* Copy of the input with a terminating NUL (caller frees). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* A scratch directory of this process (created once). */
static inline const char *fuzz_scratch(void)
{
    static char dir[64];
    if (!dir[0]) {
        /* memory-backed when possible: every execution writes a file */
        snprintf(dir, sizeof dir, "%s/whale-fuzz-%d-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
        if (!mkdtemp(dir))
            abort();
    }
    return dir;
}

/* Write the input to dir/name (replacing it). */
static inline void fuzz_write(const char *dir, const char *name, const uint8_t *data, size_t size)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size))
        abort();
    fclose(f);
}

#endif
