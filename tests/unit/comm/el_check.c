/* Multi-process check of the elastic membership layer (whale/elastic.h),
 * run under whale-run (or srun) with spares:
 *
 *   el_check SCENARIO [--victims R1,R2,...] [--steps N] [--pause MS]
 *
 * Working ranks run allreduce "steps" (sum of rank+1, checked exactly) and
 * call whale_elastic_progress; spares wait in whale_spare_wait. Scenarios:
 *   idle     nobody fails; spares must be released (WHALE_EDONE) and their
 *            CPU time while waiting (from /proc) is printed and must stay
 *            small (a blocked spare, not a polling one);
 *   kill     the victims SIGKILL themselves at step 3 (together);
 *   stop     the victims SIGSTOP themselves at step 3 (HANG by silence);
 *            rank 0 of the new world SIGKILLs them after the recovery;
 *   during   the first victim dies at step 3; the second dies as soon as it
 *            sees the failure (a failure during the agreement);
 *   minority the victims stop (SIGSTOP) and are the majority side's lowest
 *            tasks: the rest must get WHALE_EMINORITY and stop;
 *   again    the first victim dies at step 3; after the recovery the rank
 *            it was replaced by dies too (a second event);
 *   busy     the victims compute without calling into the library (their
 *            heartbeats go on) until excluded for no progress
 *            (WHALE_HANG_TIMEOUT, HANG), then get WHALE_EMINORITY;
 *   pause    the victims SIGSTOP themselves at step 3 and a child of each
 *            sends it SIGCONT after --resume MS: with WHALE_NODE_GRACE
 *            longer than that, every task must see one RESUMED event (no
 *            failed rank, same degrees) and finish;
 *   external steps of 0.2 s; failures come from outside (a cluster test
 *            kills a node or cuts its link); a cut-off task that gets
 *            WHALE_EMINORITY prints "stops as a minority" and exits 0.
 * Every task first prints "el_check: start task T rank R node N".
 * After each recovery every working rank checks the event (failed ranks,
 * kind, replacement tasks are spares of the old epoch or dropped DP
 * replicas) and that an allreduce on the new world gives the exact sum;
 * promoted spares join in. Output: "el_check: OK ..." lines, one event
 * line with the phase times (printed, never asserted). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "whale/comm.h"
#include "whale/elastic.h"
#include "whale/error.h"

static int g_task, g_fail;
static pid_t *g_pids;

#define FAIL(...)                                             \
    do {                                                      \
        g_fail++;                                             \
        fprintf(stderr, "el_check[task %d]: ", g_task);       \
        fprintf(stderr, __VA_ARGS__);                         \
        fputc('\n', stderr);                                  \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of this process (all threads) from /proc. */
static double cpu_s(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!rp || sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static bool is_victim(const int *v, int nv, int rank)
{
    for (int i = 0; i < nv; i++)
        if (v[i] == rank)
            return true;
    return false;
}

/* One step: allreduce of rank+1 over the world; 0 or the error. */
static int step(whale_ctx *ctx)
{
    int w = whale_world_size(ctx), r = whale_rank(ctx);
    float fx = (float)(r + 1), fy = 0;
    int rc = whale_allreduce(whale_world(ctx), &fx, &fy, 1, WHALE_FLOAT32, WHALE_SUM);
    if (rc)
        return rc;
    float want = (float)w * (float)(w + 1) / 2;
    if (fy != want)
        FAIL("allreduce over the world of %d gave %g, want %g (epoch %llu)", w, fy, want,
             (unsigned long long)whale_elastic_epoch(ctx));
    /* Sizes on both sides of every algorithm switch: each member picks the
     * schedule from its own copy of the cost model, so a promoted spare
     * that kept other link figures than the survivors waits for messages
     * nobody sends (the hang after recovery under srun). */
    static float big[1 << 18];
    for (size_t n = 16; n <= sizeof big / sizeof big[0]; n *= 8) {
        for (size_t i = 0; i < n; i++)
            big[i] = (float)(r + 1);
        if ((rc = whale_allreduce(whale_world(ctx), big, big, n, WHALE_FLOAT32, WHALE_SUM)))
            return rc;
        if (big[0] != want || big[n - 1] != want)
            FAIL("allreduce of %zu floats over the world of %d gave %g, want %g", n, w, big[n - 1],
                 want);
    }
    whale_elastic_progress(ctx);
    return 0;
}

static void print_event(whale_ctx *ctx, const struct whale_membership_event *ev)
{
    char fl[256] = "";
    size_t o = 0;
    for (int i = 0; i < ev->nfailed && i < WHALE_MAX_FAILED && o < sizeof fl - 40; i++)
        o += (size_t)snprintf(fl + o, sizeof fl - o, "%s%d(task %d %s->%d)", i ? "," : "",
                              ev->failed_rank[i], ev->failed_task[i], whale_detect_name(ev->failed_how[i]),
                              ev->replacement_task[i]);
    printf("el_check: task %d event epoch %llu %s how %s failed [%s] spares-failed %d "
           "dp %d->%d agreed_step %lld detect %.3f s agree %.3f s rebuild %.3f s -> rank %d\n",
           g_task, (unsigned long long)ev->epoch, whale_recovery_name(ev->kind),
           whale_detect_name(ev->how), fl, ev->nfailed_spares, ev->old_grid.dp, ev->dp,
           (long long)ev->agreed_step, ev->detect_s, ev->agree_s, ev->rebuild_s, whale_rank(ctx));
    fflush(stdout);
}

/* Checks every survivor can make on an event. */
static void check_event(whale_ctx *ctx, const struct whale_membership_event *ev, const int *vic,
                        int nv, int old_world)
{
    if (ev->kind == WHALE_RECOVERY_RESUMED) {
        if (ev->nfailed != 0 || ev->dp != ev->old_grid.dp)
            FAIL("a RESUMED event with %d failed rank(s), DP %d -> %d", ev->nfailed,
                 ev->old_grid.dp, ev->dp);
    } else if (ev->nfailed < 1) {
        FAIL("event lists no failed rank");
    }
    for (int i = 0; i < ev->nfailed && i < WHALE_MAX_FAILED; i++) {
        if (nv > 0 && !is_victim(vic, nv, ev->failed_rank[i]) && ev->epoch == 1)
            FAIL("rank %d reported failed but was no victim", ev->failed_rank[i]);
        if (ev->failed_rank[i] < 0 || ev->failed_rank[i] >= old_world)
            FAIL("failed rank %d out of range", ev->failed_rank[i]);
        if (ev->kind == WHALE_RECOVERY_REPLACED && ev->replacement_task[i] >= 0 &&
            whale_rankmap_task(ctx, ev->failed_rank[i]) != ev->replacement_task[i])
            FAIL("rank map: rank %d is on task %d, event says task %d", ev->failed_rank[i],
                 whale_rankmap_task(ctx, ev->failed_rank[i]), ev->replacement_task[i]);
    }
    int tp, pp, dp;
    whale_degrees(ctx, &tp, &pp, &dp);
    if (tp != ev->tp || pp != ev->pp || dp != ev->dp)
        FAIL("degrees %dx%dx%d differ from the event's %dx%dx%d", tp, pp, dp, ev->tp, ev->pp, ev->dp);
    if (whale_rank(ctx) >= 0) {
        int t, p, d;
        whale_coords(ctx, &t, &p, &d);
        if (whale_rank(ctx) != ((p * dp) + d) * tp + t)
            FAIL("rank %d does not match coordinates tp %d pp %d dp %d", whale_rank(ctx), t, p, d);
        if (whale_rankmap_task(ctx, whale_rank(ctx)) != whale_task_id(ctx))
            FAIL("rank map does not name this task for its own rank");
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: el_check idle|kill|stop|pause|during|minority|again|external [--victims LIST] [--steps N] [--pause MS] [--resume MS]\n");
        return 2;
    }
    const char *sc = argv[1];
    int vic[16], nv = 0, steps = 8, pause_ms = 0, resume_ms = 10000;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--victims") && i + 1 < argc) {
            char *s = argv[++i];
            while (*s && nv < 16) {
                vic[nv++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    s++;
            }
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--resume") && i + 1 < argc) {
            resume_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--pause") && i + 1 < argc) {
            pause_ms = atoi(argv[++i]); /* per step: a run that outlasts the peer timeout */
        } else {
            fprintf(stderr, "el_check: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    whale_ctx *ctx;
    int rc = whale_init(&ctx);
    if (rc) {
        fprintf(stderr, "el_check: init: %s\n", whale_strerror(rc));
        return 1;
    }
    g_task = whale_task_id(ctx);
    int nt = whale_ntasks(ctx);
    /* every task's pid, to SIGKILL stopped victims at the end */
    g_pids = calloc((size_t)nt, sizeof *g_pids);
    int32_t me = (int32_t)getpid();
    int32_t *pids = calloc((size_t)nt, sizeof *pids);
    if (!g_pids || !pids || whale_allgather(whale_all_tasks(ctx), &me, pids, 1, WHALE_INT32)) {
        fprintf(stderr, "el_check: pid exchange failed\n");
        return 1;
    }
    for (int t = 0; t < nt; t++)
        g_pids[t] = pids[t];
    int victim_task[16];
    for (int i = 0; i < nv; i++)
        victim_task[i] = whale_rankmap_task(ctx, vic[i]);
    int old_world = whale_world_size(ctx);
    bool minority = !strcmp(sc, "minority");
    /* external: failures come from outside (a node killed, a link cut);
     * slow steps give the harness time to act, and a minority exits 0. */
    bool external = !strcmp(sc, "external");
    {
        char host[256] = "?";
        const char *nd = getenv("WHALE_NODE");
        if (!nd && gethostname(host, sizeof host) == 0)
            nd = host;
        printf("el_check: start task %d rank %d node %s\n", g_task, whale_rank(ctx), nd ? nd : host);
        fflush(stdout);
    }
    struct whale_membership_event ev;
    int events = 0;
    if (whale_is_spare(ctx)) {
        double c0 = cpu_s(), w0 = now_s();
        rc = whale_spare_wait(ctx, &ev);
        double cpu = cpu_s() - c0, wall = now_s() - w0;
        if (!strcmp(sc, "idle")) {
            printf("el_check: spare task %d waited %.2f s using %.3f s of CPU: %s\n", g_task, wall,
                   cpu, rc == WHALE_EDONE ? "released" : whale_strerror(rc));
            if (rc != WHALE_EDONE)
                FAIL("spare wait returned %s, want WHALE_EDONE", whale_strerror(rc));
            /* a polling spare burns its core: far more than 0.3 s in 3 s */
            if (wall > 2.0 && cpu > 0.1 * wall)
                FAIL("spare used %.2f s of CPU in %.2f s of waiting", cpu, wall);
        }
        if ((minority || external) && rc == WHALE_EMINORITY) {
            printf("el_check: task %d stops as a minority: OK\n", g_task);
            fflush(stdout);
            _exit(0);
        }
        if (rc == WHALE_EDONE)
            goto done;
        if (rc) {
            FAIL("spare wait: %s", whale_strerror(rc));
            goto done;
        }
        events++;
        print_event(ctx, &ev);
        check_event(ctx, &ev, vic, nv, old_world);
        if (!strcmp(sc, "again") && ev.epoch == 1) {
            /* this task replaced the first victim: now it dies too */
            raise(SIGKILL);
        }
    }
    /* A promoted spare starts at the step after the agreed one, like the
     * survivors, who roll back to it: everyone runs the same collectives. */
    int s0 = events ? (int)ev.agreed_step + 1 : 0;
    for (int s = s0; s < steps; s++) {
        if (s == 3 && events == 0) {
            /* Line everybody up so that several victims fail together. */
            int brc = whale_barrier(whale_world(ctx));
            if (!is_victim(vic, nv, whale_rank(ctx))) {
                if (brc) {
                    rc = brc;
                    goto failed;
                }
                goto run;
            }
            usleep(100000);
            bool first = whale_rank(ctx) == vic[0];
            if (!strcmp(sc, "kill") || (!strcmp(sc, "during") && first) ||
                (!strcmp(sc, "again") && first))
                raise(SIGKILL);
            if (!strcmp(sc, "stop") || minority)
                raise(SIGSTOP);
            if (!strcmp(sc, "pause")) {
                /* a frozen node that thaws: stopped, then continued */
                pid_t parent = getpid(), c = fork();
                if (c == 0) {
                    usleep((useconds_t)resume_ms * 1000);
                    kill(parent, SIGCONT);
                    _exit(0);
                }
                raise(SIGSTOP);
                if (c > 0)
                    waitpid(c, NULL, 0);
                printf("el_check: task %d continued after %d ms\n", g_task, resume_ms);
                fflush(stdout);
            }
            if (!strcmp(sc, "busy")) {
                /* compute without progress (heartbeats go on): the others
                 * must fail it for no progress (WHALE_HANG_TIMEOUT) and it
                 * must learn that it was left out */
                double t0 = now_s();
                volatile double x = 0;
                while (!whale_elastic_check(ctx) && now_s() - t0 < 60)
                    for (int k = 0; k < 100000; k++)
                        x += k;
                rc = whale_elastic_recover(ctx, s - 1, &ev);
                printf("el_check: task %d (busy) after %.1f s: recover gave %s: %s\n", g_task,
                       now_s() - t0, whale_strerror(rc), rc == WHALE_EMINORITY ? "OK" : "FAILED");
                fflush(stdout);
                _exit(rc == WHALE_EMINORITY ? 0 : 1);
            }
        }
    run:
        if (external)
            usleep(200000);
        if (pause_ms > 0)
            usleep((useconds_t)pause_ms * 1000);
        rc = step(ctx);
        if (!rc)
            continue;
    failed:
        /* a failure: recover and redo this step */
        if (!strcmp(sc, "during") && is_victim(vic, nv, whale_rank(ctx)) && events == 0)
            raise(SIGKILL); /* dies while the others agree */
        rc = whale_elastic_recover(ctx, s - 1, &ev);
        if (minority) {
            printf("el_check: task %d: recover gave %s: %s\n", g_task, whale_strerror(rc),
                   rc == WHALE_EMINORITY ? "OK" : "FAILED");
            fflush(stdout);
            for (int i = 0; i < nv; i++)
                kill(g_pids[victim_task[i]], SIGKILL);
            _exit(rc == WHALE_EMINORITY ? 0 : 1);
        }
        if (external && rc == WHALE_EMINORITY) {
            printf("el_check: task %d stops as a minority: OK\n", g_task);
            fflush(stdout);
            _exit(0);
        }
        if (rc) {
            FAIL("recover at step %d: %s", s, whale_strerror(rc));
            break;
        }
        events++;
        print_event(ctx, &ev);
        check_event(ctx, &ev, vic, nv, old_world);
        /* the victim may have finished a step its peers could not */
        if (events == 1 && (ev.agreed_step > s - 1 || ev.agreed_step < s - 2))
            FAIL("agreed step %lld, want %d or %d", (long long)ev.agreed_step, s - 2, s - 1);
        if (!strcmp(sc, "stop") && whale_rank(ctx) == 0)
            for (int i = 0; i < nv; i++)
                kill(g_pids[victim_task[i]], SIGKILL);
        if (whale_is_spare(ctx)) {
            /* our DP replica was dropped: wait like a spare */
            rc = whale_spare_wait(ctx, &ev);
            if (rc != WHALE_EDONE)
                FAIL("dropped rank: spare wait gave %s, want WHALE_EDONE", whale_strerror(rc));
            goto done;
        }
        s = (int)ev.agreed_step; /* roll back: redo from agreed_step + 1 */
    }
    if (!strcmp(sc, "idle"))
        sleep(3); /* "compute" without calls: the spare keeps waiting, nobody is suspected */
    if (!strcmp(sc, "idle") ? events != 0 : events < 1)
        FAIL("%d membership events, want %s", events, !strcmp(sc, "idle") ? "0" : ">= 1");
    if (!strcmp(sc, "pause") && (events != 1 || ev.kind != WHALE_RECOVERY_RESUMED))
        FAIL("%d membership event(s), the last %s; want one RESUMED", events,
             events ? whale_recovery_name(ev.kind) : "none");
done:;
    int fr = whale_rank(ctx), fw = whale_world_size(ctx);
    rc = whale_finalize(ctx);
    if (rc)
        FAIL("finalize: %s", whale_strerror(rc));
    if (!g_fail)
        printf("el_check: OK task %d %s, rank %d of %d after %d event(s)\n", g_task, sc, fr, fw,
               events);
    free(pids);
    free(g_pids);
    return g_fail ? 1 : 0;
}
