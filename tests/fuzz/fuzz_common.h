/* Shared bits of the libFuzzer harnesses: input as a NUL-terminated
 * string, input written to a private scratch file, and a silent log (the
 * parsers log every refusal; printing millions of them would only slow
 * the fuzzer down). */
#ifndef WHALE_FUZZ_COMMON_H
#define WHALE_FUZZ_COMMON_H

#include <dirent.h>
#include <fcntl.h>
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

/* The scratch directory's name (a function: an unused static array would
 * warn in harnesses without files). */
static inline char *fuzz_scratch_name(void)
{
    static char dir[64];
    return dir;
}

/* Remove name under the directory dfd, with what it holds (the harnesses
 * write files and a checkpoint's rank-* folders; links are not followed). */
static inline void fuzz_rm_tree(int dfd, const char *name)
{
    if (unlinkat(dfd, name, 0) == 0)
        return;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                fuzz_rm_tree(dirfd(d), e->d_name);
        closedir(d);
    } else if (fd >= 0) {
        close(fd);
    }
    unlinkat(dfd, name, AT_REMOVEDIR);
}

/* At exit (libFuzzer ends -max_total_time runs with exit()): the scratch
 * directory and what the harness wrote into it go, so that /dev/shm does
 * not fill with whale-fuzz-* directories. A crashed harness cannot do
 * this; contrib/fuzz.sh removes its directory by the harness's pid. */
static inline void fuzz_scratch_remove(void)
{
    char *dir = fuzz_scratch_name();
    if (dir[0])
        fuzz_rm_tree(AT_FDCWD, dir);
}

/* A scratch directory of this process (created once, removed at exit). */
static inline const char *fuzz_scratch(void)
{
    char *dir = fuzz_scratch_name();
    if (!dir[0]) {
        /* memory-backed when possible: every execution writes a file */
        snprintf(dir, 64, "%s/whale-fuzz-%d-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
        if (!mkdtemp(dir))
            abort();
        atexit(fuzz_scratch_remove);
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
