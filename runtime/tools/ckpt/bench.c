/* whale-ckpt bench: what a checkpoint costs a training loop.
 *
 *  sync      whale_ckpt_save with async off: the loop stops for the whole
 *            save (hash, write, fsync, commit) -- the baseline;
 *  async     snapshot copy in whale_ckpt_save, persist in the background
 *            while a compute loop (stand-in for forward/backward) runs;
 *  deferred  the snapshot copy also runs in the background, the loop calls
 *            whale_ckpt_fence before its "optimizer step".
 * Stall = time the loop is blocked (save + fence). The compute loop also
 * counts its own iterations, so the slowdown the background thread causes
 * on a shared CPU is reported too, not hidden.
 * Then: persist bandwidth, incremental bytes with half the layers frozen,
 * and size + restore error for each compression mode. */
#define _GNU_SOURCE
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_tool.h"
#include "synth.h"
#include "whale/ckpt.h"
#include "whale/error.h"
#include "whale/clock.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A compute-bound loop on a cache-resident array for `ms`; returns iterations. */
static volatile float sink_f;
static long compute(double ms)
{
    float a[256];
    for (int i = 0; i < 256; i++)
        a[i] = (float)i * 1e-3f;
    long it = 0;
    double t_end = whale_now_s() + ms * 1e-3;
    while (whale_now_s() < t_end) {
        for (int r = 0; r < 64; r++)
            for (int i = 0; i < 256; i++)
                a[i] = a[i] * 0.999f + 1e-4f;
        it++;
    }
    sink_f = a[7];
    return it;
}

static void rm_rf(const char *p)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0)
        fprintf(stderr, "bench: could not remove %s\n", p);
}

static whale_ckpt_config base_cfg(const char *root)
{
    whale_ckpt_config c;
    whale_ckpt_config_default(&c);
    /* WHALE_CKPT_WRITERS, _PRIORITY, ... as whale-train would take them */
    if (whale_ckpt_config_from_env(&c))
        whale_ckpt_config_default(&c);
    c.root = root;
    c.keep = 0;
    c.run_id = "bench";
    return c;
}

struct rel { double max_rel, l2_num, l2_den; };

static void errors(const whale_ckpt_piece *got, const whale_ckpt_piece *want, size_t n,
                   const char *prefix, struct rel *r)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n; i++) {
        bool is_opt = !strncmp(want[i].name, "opt.", 4);
        if (prefix ? strncmp(want[i].name, prefix, strlen(prefix)) : is_opt)
            continue;
        int64_t k = whale_ckpt_piece_numel(&want[i]);
        const float *a = got[i].data, *b = want[i].data;
        for (int64_t j = 0; j < k; j++) {
            double d = fabs((double)a[j] - b[j]);
            r->l2_num += d * d;
            r->l2_den += (double)b[j] * b[j];
            if (fabs(b[j]) > 1e-6 && d / fabs(b[j]) > r->max_rel)
                r->max_rel = d / fabs(b[j]);
        }
    }
}

int ckpt_tool_bench(const char *dir, double mb, int repeat, double compute_ms, const char *part)
{
    bool do_persist = part && !strcmp(part, "persist"); /* the synchronous save only */
    bool do_stall = !part || !strcmp(part, "stall") || do_persist;
    bool do_incr = !part || !strcmp(part, "incremental");
    bool do_comp = !part || !strcmp(part, "compression");
    bool do_load = part && !strcmp(part, "load"); /* asked for by name only */
    struct synth_model m = {.hidden = 512, .vocab = 8192, .seq = 256};
    double per_layer = 3.0 * 4 * (12.0 * 512 * 512 + 13.0 * 512) / 1048576;
    double emb = 3.0 * 4 * (8192.0 + 256) * 512 / 1048576;
    m.layers = (int)((mb - emb) / per_layer + 0.5);
    if (m.layers < 2)
        m.layers = 2;
    m.layers += m.layers % 2;
    struct synth_layout l;
    synth_layout_of(1, 1, 1, 0, 0, &l);
    whale_ckpt_piece *p;
    size_t n;
    if (synth_pieces(&m, &l, true, true, 1, &p, &n))
        return 1;
    double bytes = (double)synth_numel(&m) * 4;
    printf("model: %d layers, hidden %d, vocab %d: %.1f MiB of parameters + Adam moments\n",
           m.layers, m.hidden, m.vocab, bytes / 1048576);
    printf("RESULT bytes=%.0f\n", bytes);
    char root[4096];
    snprintf(root, sizeof root, "%s/whale-ckpt-bench", dir);
    rm_rf(root);
    int rc = 0;
    whale_ckpt_meta meta = {.step = 1};

    /* baseline compute rate */
    long base_it = do_stall && !do_persist ? compute(compute_ms) : 1;

    /* ---- sync / async / deferred ---- */
    double *t_sync = calloc((size_t)repeat, 8), *st_async = calloc((size_t)repeat, 8),
           *st_def = calloc((size_t)repeat, 8), *bw = calloc((size_t)repeat, 8),
           *slow_async = calloc((size_t)repeat, 8), *slow_def = calloc((size_t)repeat, 8),
           *pers_async = calloc((size_t)repeat, 8), *in_place = calloc((size_t)repeat, 8);
    for (int k = 0; k < repeat && !rc && do_stall; k++) {
        /* persist: the background save of an async checkpoint (what training
         * waits on between saves), written from the snapshot buffer */
        for (int mode = do_persist ? 1 : 0; mode < (do_persist ? 2 : 3) && !rc; mode++) {
            whale_ckpt_config c = base_cfg(root);
            c.incremental = false;
            c.async = mode > 0;
            c.snapshot = mode == 2 ? WHALE_CKPT_SNAPSHOT_DEFERRED : WHALE_CKPT_SNAPSHOT_COPY;
            whale_ckpt *ck;
            if ((rc = whale_ckpt_open(&c, &ck)))
                break;
            meta.step = k * 10 + mode + 1;
            if (c.async) { /* warm the snapshot buffer (allocated once per run) */
                whale_ckpt_save(ck, &meta, p, n, NULL);
                whale_ckpt_wait(ck);
                meta.step += 100;
            }
            sync();
            double t0 = whale_now_s();
            rc = whale_ckpt_save(ck, &meta, p, n, NULL);
            double t1 = whale_now_s();
            long it = 0;
            if (c.async)
                it = compute(compute_ms); /* forward + backward of the next step */
            double t2 = whale_now_s();
            whale_ckpt_fence(ck);        /* before the optimizer step */
            double t3 = whale_now_s();
            if (!rc)
                rc = whale_ckpt_wait(ck);
            whale_ckpt_stats s;
            whale_ckpt_last_stats(ck, &s);
            whale_ckpt_close(ck);
            if (mode == 0 || do_persist) {
                t_sync[k] = t1 - t0;
                bw[k] = (double)s.bytes_written / s.persist_s;
                in_place[k] = (double)s.bytes_in_place / (double)(s.bytes_written ? s.bytes_written : 1);
            }
            if (mode > 0 && !do_persist) {
                double stall = (t1 - t0) + (t3 - t2);
                double slow = 1.0 - (double)it / (double)base_it * (compute_ms * 1e-3) / (t2 - t1);
                (mode == 1 ? st_async : st_def)[k] = stall;
                (mode == 1 ? slow_async : slow_def)[k] = slow;
                if (mode == 1)
                    pers_async[k] = s.persist_s;
            }
            rm_rf(root);
        }
    }
    if (!rc && do_persist) {
        double ts = median(t_sync, repeat), b = median(bw, repeat);
        double ip = median(in_place, repeat);
        printf("background persist of an async save: %.1f MB/s (hash, stage, write, fsync, "
               "commit), %.0f %% of the bytes written from the snapshot in place\n", b / 1e6,
               100 * ip);
        printf("RESULT save_s=%.4f persist_MBps=%.1f in_place=%.3f\n", ts, b / 1e6, ip);
    } else if (!rc && do_stall) {
        double ts = median(t_sync, repeat), sa = median(st_async, repeat),
               sd = median(st_def, repeat), b = median(bw, repeat);
        printf("sync save                 %8.3f s  (median of %d)\n", ts, repeat);
        printf("async stall (copy)        %8.3f s  = %5.1f %% of sync; compute slowed %4.1f %% "
               "during the %.0f ms persist overlap (persist %.3f s)\n", sa, 100 * sa / ts,
               100 * median(slow_async, repeat), compute_ms, median(pers_async, repeat));
        printf("async stall (deferred)    %8.3f s  = %5.1f %% of sync; compute slowed %4.1f %%\n",
               sd, 100 * sd / ts, 100 * median(slow_def, repeat));
        printf("persist bandwidth (sync)  %8.1f MB/s (written bytes / hash+write+fsync+commit)\n",
               b / 1e6);
        printf("RESULT sync_s=%.4f async_stall_s=%.4f deferred_stall_s=%.4f persist_MBps=%.1f\n",
               ts, sa, sd, b / 1e6);
    }

    /* ---- incremental: half the layers frozen ---- */
    if (!rc && do_incr) {
        struct synth_model fm = m;
        fm.frozen = m.layers / 2;
        whale_ckpt_config c = base_cfg(root);
        c.async = false;
        whale_ckpt_stats s[2];
        for (int step = 1; step <= 2 && !rc; step++) {
            whale_ckpt_piece *q;
            size_t nq;
            synth_pieces(&fm, &l, true, true, step, &q, &nq);
            whale_ckpt *ck;
            if (!(rc = whale_ckpt_open(&c, &ck))) {
                meta.step = step;
                rc = whale_ckpt_save(ck, &meta, q, nq, NULL);
                whale_ckpt_last_stats(ck, &s[step - 1]);
                whale_ckpt_close(ck);
            }
            synth_free(q, nq);
        }
        rm_rf(root);
        if (!rc) {
            printf("incremental, %d of %d layers frozen: step 2 wrote %.1f MiB of %.1f MiB "
                   "(%.1f %%), linked %.1f MiB; save %.3f s vs %.3f s full\n", fm.frozen,
                   m.layers, s[1].bytes_written / 1048576.0, s[1].bytes_logical / 1048576.0,
                   100.0 * s[1].bytes_written / s[1].bytes_logical,
                   s[1].bytes_linked / 1048576.0, s[1].persist_s, s[0].persist_s);
            printf("RESULT incremental_written_frac=%.4f\n",
                   (double)s[1].bytes_written / s[1].bytes_logical);
        }
    }

    /* ---- load: the bytes of a saved checkpoint read back from the disk
     * (page cache dropped for its files) by whale_ckpt_read, whose
     * WHALE_CKPT_READERS threads read tensors in parallel ---- */
    double *lbw = calloc((size_t)repeat, 8);
    double lbytes = 0;
    if (!rc && do_load) {
        whale_ckpt_config c = base_cfg(root);
        c.async = false;
        c.incremental = false;
        whale_ckpt *ck;
        if (!(rc = whale_ckpt_open(&c, &ck))) {
            meta.step = 1;
            rc = whale_ckpt_save(ck, &meta, p, n, NULL);
            whale_ckpt_stats s;
            whale_ckpt_last_stats(ck, &s);
            lbytes = (double)s.bytes_stored;
            whale_ckpt_close(ck);
        }
    }
    for (int k = 0; k < repeat && !rc && do_load; k++) {
        char sd[4200];
        snprintf(sd, sizeof sd, "%s/step-00000001/rank-00000", root);
        sync();
        DIR *d = opendir(sd);
        struct dirent *e;
        while (d && (e = readdir(d))) { /* out of the page cache: read from the disk */
            char f[8400];
            snprintf(f, sizeof f, "%s/%s", sd, e->d_name);
            int fd = open(f, O_RDONLY);
            if (fd >= 0) {
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
                close(fd);
            }
        }
        if (d)
            closedir(d);
        whale_ckpt_piece *q;
        size_t nq;
        synth_pieces(&m, &l, false, false, 1, &q, &nq);
        char *dd;
        whale_ckpt_reader *r;
        double t0 = whale_now_s();
        if (!(rc = whale_ckpt_resolve(root, NULL, &dd))) {
            if (!(rc = whale_ckpt_reader_open(dd, &r))) {
                rc = whale_ckpt_read(r, q, nq);
                whale_ckpt_reader_close(r);
            }
            free(dd);
        }
        lbw[k] = lbytes / (whale_now_s() - t0);
        synth_free(q, nq);
    }
    if (!rc && do_load) {
        printf("load (whale_ckpt_read, page cache dropped): %.1f MB/s of %.1f MB stored\n",
               median(lbw, repeat) / 1e6, lbytes / 1e6);
        printf("RESULT load_MBps=%.1f stored_bytes=%.0f\n", median(lbw, repeat) / 1e6, lbytes);
    }
    if (do_load)
        rm_rf(root);
    free(lbw);

    /* ---- compression modes ---- */
    struct { const char *name; enum whale_ckpt_wstore w; bool q; int z; } modes[] = {
        {"exact", WHALE_CKPT_WEIGHTS_EXACT, false, 0},
        {"zstd-3", WHALE_CKPT_WEIGHTS_EXACT, false, 3},
        {"bf16-weights", WHALE_CKPT_WEIGHTS_BF16, false, 0},
        {"fp16-weights", WHALE_CKPT_WEIGHTS_FP16, false, 0},
        {"int8-weights", WHALE_CKPT_WEIGHTS_INT8, false, 0},
        {"int8-weights+mom", WHALE_CKPT_WEIGHTS_INT8, true, 0},
        {"int8-moments", WHALE_CKPT_WEIGHTS_EXACT, true, 0},
        {"bf16+int8", WHALE_CKPT_WEIGHTS_BF16, true, 0},
        {"bf16+int8+zstd-3", WHALE_CKPT_WEIGHTS_BF16, true, 3},
    };
    if (!rc && do_comp)
        printf("\n%-18s %10s %7s %9s %11s %11s %11s %11s\n", "mode", "stored", "ratio", "save s",
               "w max rel", "w rel L2", "m rel L2", "v rel L2");
    double exact_bytes = 0;
    for (size_t k = 0; k < sizeof modes / sizeof modes[0] && !rc && do_comp; k++) {
        whale_ckpt_config c = base_cfg(root);
        c.async = false;
        c.incremental = false;
        c.weights = modes[k].w;
        c.quantize_moments = modes[k].q;
        c.zstd_level = modes[k].z;
        whale_ckpt *ck;
        if ((rc = whale_ckpt_open(&c, &ck)))
            break;
        meta.step = 1;
        rc = whale_ckpt_save(ck, &meta, p, n, NULL);
        whale_ckpt_stats s;
        whale_ckpt_last_stats(ck, &s);
        whale_ckpt_close(ck);
        if (rc)
            break;
        whale_ckpt_piece *q;
        size_t nq;
        synth_pieces(&m, &l, false, false, 1, &q, &nq);
        char *d;
        whale_ckpt_reader *r;
        if (!(rc = whale_ckpt_resolve(root, NULL, &d))) {
            if (!(rc = whale_ckpt_reader_open(d, &r))) {
                rc = whale_ckpt_read(r, q, nq);
                whale_ckpt_reader_close(r);
            }
            free(d);
        }
        if (!rc) {
            struct rel w, mm, vv;
            errors(q, p, n, NULL, &w);
            errors(q, p, n, "opt.m.", &mm);
            errors(q, p, n, "opt.v.", &vv);
            if (k == 0)
                exact_bytes = (double)s.bytes_stored;
            printf("%-18s %10.1f %6.3fx %9.3f %11.2e %11.2e %11.2e %11.2e\n", modes[k].name,
                   s.bytes_stored / 1048576.0, exact_bytes / (double)s.bytes_stored, s.persist_s,
                   w.max_rel, sqrt(w.l2_num / w.l2_den), sqrt(mm.l2_num / mm.l2_den),
                   sqrt(vv.l2_num / vv.l2_den));
            printf("RESULT mode=%s ratio=%.4f\n", modes[k].name, exact_bytes / (double)s.bytes_stored);
        }
        synth_free(q, nq);
        rm_rf(root);
    }
    synth_free(p, n);
    free(t_sync); free(st_async); free(st_def); free(bw); free(slow_async); free(slow_def);
    free(pers_async);
    free(in_place);
    if (rc)
        fprintf(stderr, "whale-ckpt bench: failed: %s\n", whale_strerror(rc));
    return rc;
}
