/* Every WHALE_* environment variable in one table (name, type, default,
 * meaning): the code reads them through whale_knob_getenv(), the tools
 * print the table (whale-train --help-env, whale-run --help-env) and
 * whale-train(1)'s table is checked against it (tests/unit/tools/knobs.sh, which
 * also fails on a "WHALE_..." literal in the code that is not declared
 * here). The contract names (rank, degrees, plan: whale/env.h) are in the
 * table too, as type "contract": the plugin or whale-run sets them. */
#ifndef WHALE_KNOBS_H
#define WHALE_KNOBS_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct whale_knob {
    const char *name;    /* WHALE_... */
    const char *type;    /* int, number, bool, size, enum, spec, path, string, contract */
    const char *dflt;    /* what unset means */
    const char *meaning; /* one line */
};

/* The table, ended by { NULL }. */
extern const struct whale_knob whale_knobs[];

/* The declared knob of that name, or NULL. */
const struct whale_knob *whale_knob_find(const char *name);
/* getenv() of a declared knob; an undeclared name is a bug (logged once at
 * warning level) and still read. */
const char *whale_knob_getenv(const char *name);
/* The table as text (markdown: a table for documents), knobs whose name starts
 * with prefix (NULL: all). */
void whale_knobs_print(FILE *f, const char *prefix, int markdown);

#ifdef __cplusplus
}
#endif
#endif
