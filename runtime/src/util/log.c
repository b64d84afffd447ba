/* Process-wide logger. State is a few atomics so any thread (progress
 * engine, checkpoint writer, prefetcher) may log without locking; one
 * formatted line is written with a single write() so lines from concurrent
 * threads/ranks do not interleave. */
#include "whale/log.h"
#include "whale/knobs.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static atomic_int g_level = WHALE_LOG_WARN;
static atomic_int g_rank = -1;
static whale_log_sink_fn g_sink;
static void *g_sink_user;

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };

int whale_log_level_parse(const char *s)
{
    if (!s || !*s)
        return -1;
    for (int i = 0; i <= WHALE_LOG_TRACE; i++)
        if (!strcasecmp(s, level_names[i]))
            return i;
    if (!strcasecmp(s, "warning"))
        return WHALE_LOG_WARN;
    if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
        return s[0] - '0';
    return -1;
}

int whale_log_init_from_env(void)
{
    const char *e = whale_knob_getenv("WHALE_LOG");
    int lvl = whale_log_level_parse(e);
    if (lvl >= 0)
        atomic_store(&g_level, lvl);
    else if (e && *e)
        whale_log(WHALE_LOG_WARN, "WHALE_LOG='%s' is not one of error|warn|info|debug|trace|0-4; keeping %s",
                  e, level_names[atomic_load(&g_level)]);
    return atomic_load(&g_level);
}

void whale_log_set_level(int level)
{
    if (level < WHALE_LOG_ERROR)
        level = WHALE_LOG_ERROR;
    if (level > WHALE_LOG_TRACE)
        level = WHALE_LOG_TRACE;
    atomic_store(&g_level, level);
}

int whale_log_get_level(void) { return atomic_load(&g_level); }
void whale_log_set_rank(int rank) { atomic_store(&g_rank, rank); }
int whale_log_get_rank(void) { return atomic_load(&g_rank); }
int whale_log_enabled(int level) { return level <= atomic_load(&g_level); }

void whale_log_set_sink(whale_log_sink_fn fn, void *user)
{
    g_sink_user = user;
    g_sink = fn;
}

void whale_vlog(int level, const char *fmt, va_list ap)
{
    if (!whale_log_enabled(level))
        return;
    char line[2048];
    size_t n = 0;
    int rank = atomic_load(&g_rank);
    if (!g_sink) {
        int k = rank >= 0 ? snprintf(line, sizeof line, "whale[%d]: ", rank)
                          : snprintf(line, sizeof line, "whale: ");
        n = (size_t)k;
        if (level != WHALE_LOG_INFO) {
            k = snprintf(line + n, sizeof line - n, "%s: ", level_names[level]);
            n += (size_t)k;
        }
    }
    int k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    if (k < 0)
        return;
    n += (size_t)k;
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    while (n > 0 && line[n - 1] == '\n')
        n--;
    if (g_sink) {
        line[n] = '\0';
        g_sink(level, line, g_sink_user);
        return;
    }
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void whale_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    whale_vlog(level, fmt, ap);
    va_end(ap);
}
