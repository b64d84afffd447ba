/* Strict parsing of numeric and yes/no environment variables: a value
 * that is not entirely a number in range is an error naming the variable,
 * the value and the allowed range (never atol's silent 0 or wrap-around). */
#ifndef WHALE_ENVNUM_H
#define WHALE_ENVNUM_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The one checked number parser (tools wrap it with their own message):
 * s entirely a decimal integer / a number in [lo, hi] -> 0 and *out, else
 * WHALE_EINVAL and nothing logged (no atol-style silent 0 or wrap-around). */
int whale_parse_long(const char *s, long lo, long hi, long *out);
int whale_parse_double(const char *s, double lo, double hi, double *out);

/* The one size parser: "12G", "512M", "1.5GiB", "64k", "100B" or "4096"
 * (bytes; K/M/G/T are powers of 1024, an optional "B"/"iB" after them)
 * -> bytes; < 0 on a bad value (nothing logged). */
int64_t whale_parse_size(const char *s);

/* A command-line option's value: the checked parsers above, and on error the
 * message "TOOL: --OPT=VALUE: expected an integer in LO..HI" on stderr (tools
 * print before logging is set up). A bare OPT gets its leading "--". */
int whale_opt_long(const char *tool, const char *opt, const char *s, long lo, long hi, long *out);
int whale_opt_int(const char *tool, const char *opt, const char *s, int lo, int hi, int *out);
int whale_opt_double(const char *tool, const char *opt, const char *s, double lo, double hi,
                     double *out);

/* Unset or empty: *out = dflt. Else an integer in [lo, hi] (decimal), or
 * WHALE_EINVAL with the message logged. */
int whale_env_long(const char *name, long lo, long hi, long dflt, long *out);
/* The same for a number (strtod syntax). */
int whale_env_double(const char *name, double lo, double hi, double dflt, double *out);
/* Unset or empty: dflt. 1/yes/true/on or 0/no/false/off, else WHALE_EINVAL. */
int whale_env_bool(const char *name, bool dflt, bool *out);

#ifdef __cplusplus
}
#endif
#endif
