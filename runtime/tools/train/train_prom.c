/* Prometheus exposition for whale-train (train_prom.h).
 *
 * The HTTP endpoint is deliberately tiny: one thread, one connection at a
 * time, GET /metrics only, no request data echoed back, a 2 s limit to read
 * a request (a client that sends nothing cannot hold the thread longer),
 * bound to 127.0.0.1 unless the user names another address. It never
 * touches the training state: the step loop hands it a copy of the text. */
#define _GNU_SOURCE
#include "train_prom.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static void add(struct train_prom_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add(struct train_prom_text *t, const char *fmt, ...)
{
    if (t->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = t->cap - t->len;
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->buf && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap - t->len <= (size_t)n)
            cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b) {
            t->oom = 1;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

void train_prom_metric(struct train_prom_text *t, const char *name, const char *type,
                       const char *help, const char *labels, double value)
{
    if (!isfinite(value))
        return; /* a diverged loss: no sample rather than NaN on a dashboard */
    add(t, "# HELP %s %s\n# TYPE %s %s\n%s%s %.17g\n", name, help, name, type, name, labels,
        value);
}

static void esc(char *out, size_t n, const char *v)
{
    size_t k = 0;
    for (; v && *v && k + 3 < n; v++) {
        if (*v == '\\' || *v == '"') {
            out[k++] = '\\';
            out[k++] = *v;
        } else if (*v == '\n') {
            out[k++] = '\\';
            out[k++] = 'n';
        } else {
            out[k++] = *v;
        }
    }
    out[k] = '\0';
}

void train_prom_labels(char *out, size_t n, const char *job, const char *step, int rank,
                       const char *node)
{
    char j[128], s[64], nd[256];
    esc(j, sizeof j, job);
    esc(s, sizeof s, step);
    esc(nd, sizeof nd, node);
    snprintf(out, n, "{slurm_job_id=\"%s\",slurm_step_id=\"%s\",rank=\"%d\",node=\"%s\"}", j, s,
             rank, nd);
}

int train_prom_write_file(const char *path, const char *text, size_t len)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            close(fd);
            unlink(tmp);
            return -e;
        }
        off += (size_t)w;
    }
    fchmod(fd, 0644); /* whatever the umask: the collector reads it as another user */
    if (close(fd) || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

/* ---- the HTTP endpoint ------------------------------------------------------ */

struct train_prom_server {
    int lfd, wake[2];
    pthread_t th;
    pthread_mutex_t mu;
    char *text;
    size_t len;
};

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void serve_one(struct train_prom_server *s, int fd)
{
    struct timeval tv = { .tv_sec = 2 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char req[2048];
    size_t got = 0;
    while (got < sizeof req - 1) { /* the request line and headers; the body is ignored */
        ssize_t r = recv(fd, req + got, sizeof req - 1 - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    req[got] = '\0';
    static const char nf[] = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                             "Content-Length: 29\r\nConnection: close\r\n\r\n"
                             "only GET /metrics is served\r\n";
    if (strncmp(req, "GET /metrics ", 13) && strncmp(req, "GET /metrics?", 13) &&
        strncmp(req, "GET / ", 6)) {
        send_all(fd, nf, sizeof nf - 1);
        return;
    }
    pthread_mutex_lock(&s->mu);
    char hdr[256];
    int hn = snprintf(hdr, sizeof hdr, "HTTP/1.0 200 OK\r\nContent-Type: text/plain; "
                      "version=0.0.4; charset=utf-8\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n", s->len);
    send_all(fd, hdr, (size_t)hn);
    if (s->len)
        send_all(fd, s->text, s->len);
    pthread_mutex_unlock(&s->mu);
}

static void *serve(void *arg)
{
    struct train_prom_server *s = arg;
    for (;;) {
        struct pollfd p[2] = { { .fd = s->lfd, .events = POLLIN }, { .fd = s->wake[0], .events = POLLIN } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        if (p[0].revents & POLLIN) {
            int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) {
                serve_one(s, fd);
                close(fd);
            }
        }
    }
    return NULL;
}

int train_prom_server_start(const char *bind_addr, int port, struct train_prom_server **out,
                            int *bound_port)
{
    *out = NULL;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (inet_pton(AF_INET, bind_addr ? bind_addr : "127.0.0.1", &sa.sin_addr) != 1)
        return -EINVAL;
    struct train_prom_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, rc = 0;
    if (s->lfd < 0) {
        rc = -errno;
        free(s);
        return rc;
    }
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t sl = sizeof sa;
    if (bind(s->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(s->lfd, 8) ||
        getsockname(s->lfd, (struct sockaddr *)&sa, &sl) || pipe2(s->wake, O_CLOEXEC)) {
        rc = -errno;
        close(s->lfd);
        free(s);
        return rc;
    }
    pthread_mutex_init(&s->mu, NULL);
    if ((rc = pthread_create(&s->th, NULL, serve, s))) {
        close(s->lfd);
        close(s->wake[0]);
        close(s->wake[1]);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return -rc;
    }
    *bound_port = ntohs(sa.sin_port);
    *out = s;
    return 0;
}

void train_prom_server_set(struct train_prom_server *s, const char *text, size_t len)
{
    if (!s)
        return;
    char *c = malloc(len + 1);
    if (!c)
        return; /* keep serving the previous text */
    memcpy(c, text, len);
    c[len] = '\0';
    pthread_mutex_lock(&s->mu);
    free(s->text);
    s->text = c;
    s->len = len;
    pthread_mutex_unlock(&s->mu);
}

void train_prom_server_stop(struct train_prom_server *s)
{
    if (!s)
        return;
    char b = 1;
    if (write(s->wake[1], &b, 1) < 0) { /* the thread then stays in poll: do not join */
        return;
    }
    pthread_join(s->th, NULL);
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    free(s->text);
    free(s);
}
