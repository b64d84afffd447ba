/* Shared by the checkpoint unit tests: a scratch root for a test's saves
 * and a file check. Include after <cmocka.h>. */
#ifndef WHALE_TEST_CKPT_FIXTURE_H
#define WHALE_TEST_CKPT_FIXTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A new directory /tmp/whale-ckpt-TAG-XXXXXX (the caller frees the name
 * and removes the directory). */
static inline char *ckpt_test_root(const char *tag)
{
    char t[256];
    snprintf(t, sizeof t, "/tmp/whale-ckpt-%s-XXXXXX", tag);
    char *d = mkdtemp(t);
    assert_non_null(d);
    return strdup(d);
}

/* Does ROOT/NAME exist? */
static inline bool ckpt_test_exists(const char *root, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, name);
    return access(p, F_OK) == 0;
}

#endif
