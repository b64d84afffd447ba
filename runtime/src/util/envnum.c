/* Strict environment numbers and output files (whale/envnum.h,
 * whale/outfile.h). */
#include "whale/envnum.h"
#include "whale/error.h"
#include "whale/knobs.h"
#include "whale/log.h"
#include "whale/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int whale_env_long(const char *name, long lo, long hi, long dflt, long *out)
{
    const char *s = whale_knob_getenv(name); /* declared in the knob table */
    if (!s || !*s) {
        *out = dflt;
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        whale_error("%s=%s: expected an integer in %ld..%ld", name, s, lo, hi);
        return WHALE_EINVAL;
    }
    *out = v;
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

FILE *whale_fopen_output(const char *path, bool priv)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, priv ? 0600 : 0644);
    if (fd < 0)
        return NULL;
    /* an existing file keeps its mode on O_TRUNC: make private ones so */
    if (priv)
        fchmod(fd, 0600);
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}
