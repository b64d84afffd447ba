/* Chrome trace writer (JSON array of complete events). */
#include "trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_int.h"
#include "whale/error.h"
#include "whale/log.h"

int eng_trace_open(struct eng_trace *t, const char *path, int rank, int world)
{
    memset(t, 0, sizeof *t);
    char buf[4096];
    const char *r = strstr(path, "%r");
    if (r) {
        snprintf(buf, sizeof buf, "%.*s%d%s", (int)(r - path), path, rank, r + 2);
    } else if (world > 1) {
        const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
        if (dot && (!slash || dot > slash))
            snprintf(buf, sizeof buf, "%.*s.%d%s", (int)(dot - path), path, rank, dot);
        else
            snprintf(buf, sizeof buf, "%s.%d", path, rank);
    } else {
        snprintf(buf, sizeof buf, "%s", path);
    }
    t->f = fopen(buf, "w");
    if (!t->f) {
        whale_error("WHALE_TRACE: cannot create %s: %s", buf, strerror(errno));
        return WHALE_EIO;
    }
    t->rank = rank;
    t->t0 = eng_now();
    fprintf(t->f, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                  "\"args\":{\"name\":\"rank %d\"}}", rank, rank);
    t->n = 1;
    return 0;
}

void eng_trace_span(struct eng_trace *t, const char *name, const char *cat, int mb, double a,
                    double b)
{
    if (!t || !t->f)
        return;
    fprintf(t->f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,"
                  "\"ts\":%.3f,\"dur\":%.3f",
            name, cat, t->rank, (a - t->t0) * 1e6, (b - a) * 1e6);
    if (mb >= 0)
        fprintf(t->f, ",\"args\":{\"mb\":%d}", mb);
    fputc('}', t->f);
    t->n++;
}

void eng_trace_close(struct eng_trace *t)
{
    if (!t || !t->f)
        return;
    fputs("\n]\n", t->f);
    fclose(t->f);
    t->f = NULL;
}
