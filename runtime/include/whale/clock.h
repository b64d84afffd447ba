/* The one clock for durations: monotonic seconds as a double. Header-only
 * (static inline) so that the plugin, the library and the tools share it
 * without an exported symbol; never the wall clock, which NTP can step. */
#ifndef WHALE_CLOCK_H
#define WHALE_CLOCK_H

#include <time.h>

static inline double whale_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double whale_now_ms(void)
{
    return 1e3 * whale_now_s();
}

#endif
