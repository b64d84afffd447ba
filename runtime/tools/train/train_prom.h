/* Prometheus output of whale-train (train_prom.c): the node_exporter
 * textfile-collector format written atomically (temp file + rename), and
 * an optional HTTP endpoint that serves the same text on GET /metrics. */
#ifndef WHALE_TRAIN_PROM_H
#define WHALE_TRAIN_PROM_H

#include <stddef.h>

struct train_prom_text {
    char *buf;
    size_t len, cap;
    int oom;
};

/* Append one metric with its HELP and TYPE lines; labels is the
 * already-formatted {k="v",...} part (from train_prom_labels). */
void train_prom_metric(struct train_prom_text *t, const char *name, const char *type,
                       const char *help, const char *labels, double value);
/* {slurm_job_id="..",slurm_step_id="..",rank="..",node=".."} with the
 * values escaped as the exposition format asks (\\, \", \n). */
void train_prom_labels(char *out, size_t n, const char *job, const char *step, int rank,
                       const char *node);

/* Write text to path through path.tmp.<pid> and rename(2): a collector
 * never reads half a file. Mode 0644 (node_exporter runs as another user).
 * 0 or -errno. */
int train_prom_write_file(const char *path, const char *text, size_t len);

struct train_prom_server;
/* Listen on bind_addr:port (port 0: the kernel picks; *bound_port says
 * which) and serve the latest text from a thread. 0 or negative errno. */
int train_prom_server_start(const char *bind_addr, int port, struct train_prom_server **out,
                            int *bound_port);
/* Replace the text it serves (copied). */
void train_prom_server_set(struct train_prom_server *s, const char *text, size_t len);
void train_prom_server_stop(struct train_prom_server *s);

#endif
