/* Strict environment numbers (whale/envnum.h) and whale_output_private
 * (whale/outfile.h; the files themselves: outfile.c). */
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/outfile.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int whale_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return WHALE_EINVAL;
    *out = v;
    return 0;
}

int whale_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !(v >= lo && v <= hi)) /* NaN fails too */
        return WHALE_EINVAL;
    *out = v;
    return 0;
}

/* A bare option name is printed with its leading "--", as the user typed it. */
static const char *dashes(const char *opt)
{
    return opt[0] == '-' ? "" : "--";
}

int whale_opt_long(const char *tool, const char *opt, const char *s, long lo, long hi, long *out)
{
    if (whale_parse_long(s, lo, hi, out)) {
        fprintf(stderr, "%s: %s%s=%s: expected an integer in %ld..%ld\n", tool, dashes(opt), opt,
                s ? s : "", lo, hi);
        return WHALE_EINVAL;
    }
    return 0;
}

int whale_opt_int(const char *tool, const char *opt, const char *s, int lo, int hi, int *out)
{
    long v;
    int rc = whale_opt_long(tool, opt, s, lo, hi, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

int whale_opt_double(const char *tool, const char *opt, const char *s, double lo, double hi,
                     double *out)
{
    if (whale_parse_double(s, lo, hi, out)) {
        fprintf(stderr, "%s: %s%s=%s: expected a number in %g..%g\n", tool, dashes(opt), opt,
                s ? s : "", lo, hi);
        return WHALE_EINVAL;
    }
    return 0;
}

int whale_env_long(const char *name, long lo, long hi, long dflt, long *out)
{
    const char *s = whale_knob_getenv(name); /* declared in the knob table */
    if (!s || !*s) {
        *out = dflt;
        return 0;
    }
    if (whale_parse_long(s, lo, hi, out)) {
        whale_error("%s=%s: expected an integer in %ld..%ld", name, s, lo, hi);
        return WHALE_EINVAL;
    }
    return 0;
}

int whale_env_double(const char *name, double lo, double hi, double dflt, double *out)
{
    const char *s = whale_knob_getenv(name); /* declared in the knob table */
    if (!s || !*s) {
        *out = dflt;
        return 0;
    }
    if (whale_parse_double(s, lo, hi, out)) {
        whale_error("%s=%s: expected a number in %g..%g", name, s, lo, hi);
        return WHALE_EINVAL;
    }
    return 0;
}

int whale_env_bool(const char *name, bool dflt, bool *out)
{
    const char *s = whale_knob_getenv(name); /* declared in the knob table */
    if (!s || !*s) {
        *out = dflt;
        return 0;
    }
    if (!strcmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "true") ||
        !strcasecmp(s, "on")) {
        *out = true;
        return 0;
    }
    if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "false") ||
        !strcasecmp(s, "off")) {
        *out = false;
        return 0;
    }
    whale_error("%s=%s: expected 1/yes/true/on or 0/no/false/off", name, s);
    return WHALE_EINVAL;
}

bool whale_output_private(void)
{
    bool p = false;
    if (whale_env_bool("WHALE_CKPT_PRIVATE", false, &p))
        return true;
    return p;
}

int64_t whale_parse_size(const char *s)
{
    if (!s || !*s)
        return -1;
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0) || v > 9e18)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    case 'B': end++; break; /* "100B": bytes, as whale-bench comm always took */
    default: return -1;
    }
    if (mul > 1 && (!strcasecmp(end, "ib") || !strcasecmp(end, "b")))
        end += strlen(end);
    if (*end)
        return -1;
    if (v * mul > 9e18)
        return -1;
    return (int64_t)(v * mul);
}
