/* Temporary files renamed into place at the end (see outdir.h). */
#define _GNU_SOURCE
#include "outdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "whale/data.h"

#define ERR(...) (fprintf(stderr, "whale-data: " __VA_ARGS__), fputc('\n', stderr))

static int mkdirs(const char *dir)
{
    char *p = strdup(dir);
    if (!p)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0777) < 0 && errno != EEXIST) {
            ERR("cannot create %s: %s", p, strerror(errno));
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, 0777) < 0 && errno != EEXIST ? -1 : 0;
    if (rc)
        ERR("cannot create %s: %s", p, strerror(errno));
    free(p);
    struct stat sb;
    if (!rc && (stat(dir, &sb) < 0 || !S_ISDIR(sb.st_mode))) {
        ERR("%s: not a directory", dir);
        rc = -1;
    }
    return rc;
}

int wd_out_init(struct wd_out *o, const char *dir)
{
    memset(o, 0, sizeof *o);
    if (mkdirs(dir))
        return -1;
    o->dir = strdup(dir);
    return o->dir ? 0 : -1;
}

FILE *wd_out_open(struct wd_out *o, const char *name)
{
    char *tmp = NULL, *fin = NULL;
    if (asprintf(&tmp, "%s/.%s.tmp.%d", o->dir, name, (int)getpid()) < 0)
        return NULL;
    if (asprintf(&fin, "%s/%s", o->dir, name) < 0) {
        free(tmp);
        return NULL;
    }
    char **t = realloc(o->tmp, sizeof(char *) * (o->n + 1));
    if (t)
        o->tmp = t;
    char **f = realloc(o->name, sizeof(char *) * (o->n + 1));
    if (f)
        o->name = f;
    if (!t || !f) {
        free(tmp);
        free(fin);
        return NULL;
    }
    /* never through a link planted under the temporary name; the rename
     * below replaces a link at the final name instead of following it */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!fp) {
        ERR("cannot write %s: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(tmp);
        free(fin);
        return NULL;
    }
    o->tmp[o->n] = tmp;
    o->name[o->n] = fin;
    o->n++;
    return fp;
}

int wd_out_close(struct wd_out *o, FILE *f)
{
    (void)o;
    int rc = 0;
    if (fflush(f) || ferror(f) || fsync(fileno(f)))
        rc = -1;
    int e = errno;
    if (fclose(f))
        rc = -1;
    if (rc)
        ERR("writing into %s failed: %s", o->dir, strerror(e ? e : errno));
    return rc;
}

int wd_out_write(struct wd_out *o, const char *name, const void *buf, size_t len)
{
    FILE *f = wd_out_open(o, name);
    if (!f)
        return -1;
    if (len && fwrite(buf, 1, len, f) != len) {
        fclose(f);
        ERR("writing %s/%s failed: %s", o->dir, name, strerror(errno));
        return -1;
    }
    return wd_out_close(o, f);
}

int wd_out_commit(struct wd_out *o)
{
    for (int i = 0; i < o->n; i++)
        if (rename(o->tmp[i], o->name[i])) {
            ERR("cannot rename %s to %s: %s", o->tmp[i], o->name[i], strerror(errno));
            return -1;
        }
    int dfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* the renames themselves survive a crash */
        fsync(dfd);
        close(dfd);
    }
    for (int i = 0; i < o->n; i++) {
        free(o->tmp[i]);
        o->tmp[i] = NULL;
    }
    return 0;
}

void wd_out_abort(struct wd_out *o)
{
    for (int i = 0; i < o->n; i++)
        if (o->tmp[i])
            unlink(o->tmp[i]);
    wd_out_free(o);
}

void wd_out_free(struct wd_out *o)
{
    for (int i = 0; i < o->n; i++) {
        free(o->tmp[i]);
        free(o->name[i]);
    }
    free(o->tmp);
    free(o->name);
    free(o->dir);
    memset(o, 0, sizeof *o);
}

int wd_write_shard(struct wd_out *o, const char *name, const int32_t *const *parts,
                   const size_t *lens, size_t nparts, bool wide)
{
    size_t total = 0;
    for (size_t i = 0; i < nparts; i++)
        total += lens[i];
    if (total == 0 || total > INT32_MAX) {
        ERR("%s: %zu tokens do not fit one shard (1..%d)", name, total, INT32_MAX);
        return -1;
    }
    FILE *f = wd_out_open(o, name);
    if (!f)
        return -1;
    int32_t hdr[WHALE_LLMC_HEADER_INTS] = { WHALE_LLMC_MAGIC, wide ? 2 : 1, (int32_t)total };
    int rc = fwrite(hdr, sizeof hdr, 1, f) == 1 ? 0 : -1;
    uint16_t buf[4096];
    for (size_t i = 0; i < nparts && !rc; i++)
        for (size_t k = 0; k < lens[i] && !rc;) {
            size_t m = lens[i] - k < 4096 ? lens[i] - k : 4096;
            if (wide) { /* int32 ids >= 0 are their uint32 */
                rc = fwrite(parts[i] + k, 4, m, f) == m ? 0 : -1;
            } else {
                for (size_t j = 0; j < m; j++)
                    buf[j] = (uint16_t)parts[i][k + j];
                rc = fwrite(buf, 2, m, f) == m ? 0 : -1;
            }
            k += m;
        }
    if (rc) {
        ERR("writing %s/%s failed: %s", o->dir, name, strerror(errno));
        fclose(f);
        return -1;
    }
    return wd_out_close(o, f);
}
