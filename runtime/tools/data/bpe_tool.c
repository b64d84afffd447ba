/* whale-bpe: encode a file with a tokenizer.json (ids, one per line, to
 * stdout) or decode ids back (for tests and throughput figures).
 * Usage: whale-bpe encode|decode TOKENIZER.json FILE [--threads N] */
#define _GNU_SOURCE
#include "bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *slurp(const char *p, size_t *len)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b)
        b[n] = 0;
    *len = (size_t)n;
    return b;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "encode") && strcmp(argv[1], "decode"))) {
        fprintf(stderr, "usage: whale-bpe encode|decode TOKENIZER.json FILE\n");
        return 2;
    }
    size_t tl, fl;
    char *tj = slurp(argv[2], &tl), *in = slurp(argv[3], &fl), err[512] = "";
    if (!tj || !in) {
        fprintf(stderr, "whale-bpe: cannot read %s\n", !tj ? argv[2] : argv[3]);
        return 1;
    }
    wd_bpe *b;
    if (wd_bpe_load_bytes(tj, tl, &b, err, sizeof err)) {
        fprintf(stderr, "whale-bpe: %s\n", err);
        return 1;
    }
    if (!strcmp(argv[1], "encode")) {
        int32_t *ids = NULL;
        size_t n = 0, cap = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (wd_bpe_encode(b, in, fl, &ids, &n, &cap, err, sizeof err)) {
            fprintf(stderr, "whale-bpe: %s\n", err);
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        fprintf(stderr, "whale-bpe: %zu bytes -> %zu tokens in %.3f s (%.2f MB/s)\n", fl, n, s,
                (double)fl / s / 1e6);
        for (size_t i = 0; i < n; i++)
            printf("%d\n", ids[i]);
        free(ids);
    } else {
        size_t n = 0, cap = 1024;
        int32_t *ids = malloc(cap * sizeof *ids);
        for (char *p = in, *e; *p; p = e) {
            long v = strtol(p, &e, 10);
            if (e == p)
                break;
            if (n == cap)
                ids = realloc(ids, (cap *= 2) * sizeof *ids);
            ids[n++] = (int32_t)v;
        }
        char *out;
        size_t len;
        if (wd_bpe_decode(b, ids, n, &out, &len, err, sizeof err)) {
            fprintf(stderr, "whale-bpe: %s\n", err);
            return 1;
        }
        fwrite(out, 1, len, stdout);
        free(out);
        free(ids);
    }
    wd_bpe_free(b);
    free(tj);
    free(in);
    return 0;
}
