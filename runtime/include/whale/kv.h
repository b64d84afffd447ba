/* Slurm-style "Key=Value Key2=Value2" line files (whale.conf, model presets,
 * calibration profiles). '#' starts a comment, a trailing '\' continues the
 * line, values may be double-quoted, keys are case-insensitive as in
 * slurm.conf. Every error names file:line. */
#ifndef WHALE_KV_H
#define WHALE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How much of a key or value an error message echoes: a longer one is cut
 * (and marked with "...") so that a line of many KiB cannot push the
 * reason out of the log line. Use as
 *     whale_error("%s:%d: " WHALE_KV_ECHO_FMT ": reason", f, n, WHALE_KV_ECHO_ARG(s)); */
#define WHALE_KV_ECHO_FMT "%.64s%s"
#define WHALE_KV_ECHO_ARG(s) (s), (strlen(s) > 64 ? "..." : "")

struct whale_kv {
    char *key;
    char *value;
};

struct whale_kv_line {
    const char *file;   /* name used in messages */
    int line;           /* 1-based line of the first physical line */
    struct whale_kv *kv;
    int n;
};

/* Called once per logical non-empty line; non-zero return stops parsing and
 * is returned by the parse function. */
typedef int (*whale_kv_line_fn)(const struct whale_kv_line *l, void *user);

int whale_kv_parse_file(const char *path, whale_kv_line_fn fn, void *user);
int whale_kv_parse_string(const char *text, const char *name, whale_kv_line_fn fn, void *user);

/* Case-insensitive lookup on one line (NULL when absent). */
const struct whale_kv *whale_kv_find(const struct whale_kv_line *l, const char *key);

/* Typed conversions; on error log "file:line: Key=value: reason" and return
 * WHALE_ECONF. Integers accept K/M/G/T (x1024) suffixes when units=true. */
int whale_kv_to_long(const struct whale_kv_line *l, const struct whale_kv *kv,
                     long min, long max, bool units, long *out);
int whale_kv_to_double(const struct whale_kv_line *l, const struct whale_kv *kv,
                       double min, double max, double *out);
int whale_kv_to_bool(const struct whale_kv_line *l, const struct whale_kv *kv, bool *out);

#ifdef __cplusplus
}
#endif
#endif
