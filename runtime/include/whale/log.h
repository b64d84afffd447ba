/* Logging for every Whale module, the plugin included.
 *
 * Level from WHALE_LOG (error|warn|info|debug|trace or 0-4, default warn
 * for the library, info for tools that call whale_log_set_level). Every line
 * is "whale[<rank>]: LEVEL: message" once the rank is known, "whale: ..."
 * before. The SPANK plugin redirects lines into Slurm's log with a sink. */
#ifndef WHALE_LOG_H
#define WHALE_LOG_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

enum whale_log_level {
    WHALE_LOG_ERROR = 0,
    WHALE_LOG_WARN  = 1,
    WHALE_LOG_INFO  = 2,
    WHALE_LOG_DEBUG = 3,
    WHALE_LOG_TRACE = 4,
};

typedef void (*whale_log_sink_fn)(int level, const char *line, void *user);

/* Read WHALE_LOG; safe to call repeatedly. Returns the level in force. */
int  whale_log_init_from_env(void);
void whale_log_set_level(int level);
int  whale_log_get_level(void);
/* Prefix every later line with this rank (-1: no rank). */
void whale_log_set_rank(int rank);
int  whale_log_get_rank(void);
/* Replace stderr output (NULL restores stderr). */
void whale_log_set_sink(whale_log_sink_fn fn, void *user);
/* Parse "error".."trace" or "0".."4"; returns the level or -1. */
int  whale_log_level_parse(const char *s);

void whale_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void whale_vlog(int level, const char *fmt, va_list ap);
int  whale_log_enabled(int level);

#define whale_error(...) whale_log(WHALE_LOG_ERROR, __VA_ARGS__)
#define whale_warn(...)  whale_log(WHALE_LOG_WARN, __VA_ARGS__)
#define whale_info(...)  whale_log(WHALE_LOG_INFO, __VA_ARGS__)
#define whale_debug(...) do { if (whale_log_enabled(WHALE_LOG_DEBUG)) whale_log(WHALE_LOG_DEBUG, __VA_ARGS__); } while (0)
#define whale_trace(...) do { if (whale_log_enabled(WHALE_LOG_TRACE)) whale_log(WHALE_LOG_TRACE, __VA_ARGS__); } while (0)

#ifdef __cplusplus
}
#endif
#endif
