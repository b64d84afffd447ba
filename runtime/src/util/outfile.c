/* Output files of the tools (whale/outfile.h): created without following a
 * link, and every later write checked, with one warning per file. */
#include "whale/error.h"
#include "whale/log.h"
#include "whale/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The files opened here, so that a write error can name the file and be
 * reported once (a full disk fails every later line as well). */
struct out_rec {
    FILE *f;
    char *path;
    bool failed;
};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct out_rec *recs;
static size_t nrec, caprec;

/* Called with mu held. */
static struct out_rec *find(FILE *f)
{
    for (size_t i = 0; i < nrec; i++)
        if (recs[i].f == f)
            return &recs[i];
    return NULL;
}

static void remember(FILE *f, const char *path)
{
    pthread_mutex_lock(&mu);
    struct out_rec *old = find(f); /* a file closed with plain fclose: its FILE is reused */
    if (old) {
        free(old->path);
        *old = recs[--nrec];
    }
    if (nrec == caprec) {
        size_t c = caprec ? caprec * 2 : 8;
        struct out_rec *r = realloc(recs, c * sizeof *r);
        if (r) {
            recs = r;
            caprec = c;
        }
    }
    if (nrec < caprec) {
        recs[nrec].f = f;
        recs[nrec].path = strdup(path);
        recs[nrec].failed = false;
        nrec++;
    }
    pthread_mutex_unlock(&mu);
}

static FILE *open_out(const char *path, int how, bool priv)
{
    /* O_NOFOLLOW: a link planted under the name (another user's, in /tmp)
     * must not redirect the write to the file it points at */
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | how, priv ? 0600 : 0644);
    if (fd < 0)
        return NULL;
    /* an existing file keeps its mode on O_TRUNC: make private ones so */
    if (priv)
        fchmod(fd, 0600);
    FILE *f = fdopen(fd, how & O_APPEND ? "a" : "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    remember(f, path);
    return f;
}

FILE *whale_fopen_output(const char *path, bool priv)
{
    return open_out(path, O_TRUNC, priv);
}

FILE *whale_fopen_append(const char *path, bool priv)
{
    return open_out(path, O_APPEND, priv);
}

const char *whale_output_strerror(int err)
{
    if (err == ELOOP)
        return "it is a symbolic link (output files are never written through a link)";
    return strerror(err);
}

/* err: the errno of a failed flush/close, 0 when only the stream's error
 * flag tells (an earlier buffered write failed). */
static int failed(FILE *f, int err, const char *what)
{
    if (!err)
        err = EIO;
    pthread_mutex_lock(&mu);
    struct out_rec *r = find(f);
    bool first = r && !r->failed;
    if (r)
        r->failed = true;
    char path[1024];
    snprintf(path, sizeof path, "%s", r && r->path ? r->path : "an output file");
    pthread_mutex_unlock(&mu);
    if (first || !r)
        whale_warn("cannot %s %s: %s (the run goes on; what is written there from now on is "
                   "lost)", what, path, strerror(err));
    return WHALE_EIO;
}

int whale_output_flush(FILE *f)
{
    if (!f)
        return 0;
    errno = 0;
    if (fflush(f))
        return failed(f, errno, "write");
    if (ferror(f))
        return failed(f, 0, "write");
    return 0;
}

int whale_output_close(FILE *f)
{
    if (!f)
        return 0;
    int rc = 0;
    errno = 0;
    if (fflush(f) || ferror(f))
        rc = failed(f, errno, "write");
    /* the record goes before fclose: a closed stream's pointer is not
     * compared with anything (its value is indeterminate after the free) */
    char *path = NULL;
    bool warned = false;
    pthread_mutex_lock(&mu);
    struct out_rec *r = find(f);
    if (r) {
        path = r->path;
        warned = r->failed;
        *r = recs[--nrec];
    }
    pthread_mutex_unlock(&mu);
    errno = 0;
    if (fclose(f) && !rc) {
        int e = errno ? errno : EIO;
        if (!warned)
            whale_warn("cannot close %s: %s (the run goes on; what is written there from now "
                       "on is lost)", path ? path : "an output file", strerror(e));
        rc = WHALE_EIO;
    }
    free(path);
    return rc;
}
