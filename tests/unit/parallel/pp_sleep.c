/* pp_sleep: the pipeline executor over the real runtime (whale_init, the
 * PP group, UCX send/recv) with passes that sleep a fixed time instead of
 * computing, so the measured bubble reflects the schedule, the executor and
 * the transport only, not CPU contention.
 *
 *   whale-run -n P --pp P pp_sleep [--schedule 1f1b|gpipe|interleaved]
 *       [--interleave V] [-m M] [--fwd-ms F] [--bwd-ms B] [--bytes N] [--steps S]
 *
 * Pipeline rank 0 prints one line: measured bubble (step / (v m (F+B)) - 1),
 * idle against its own passes as they ran (step / compute - 1: a sleep
 * that overshoots on a busy machine is not the pipeline's doing), (p-1)/(v m),
 * the simulator's prediction with the measured transfer latency, and per
 * step: blocking waits (voluntary context switches of the stepping thread),
 * preemptions, and the CPU time of the other threads (UCX progress); then a
 * RESULT line of the same figures. --spin busy-waits the passes instead.
 * Used by contrib/bench/pipeline-bubble.py. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>

#include "whale/comm.h"
#include "whale/error.h"
#include "whale/log.h"
#include "whale/parallel.h"
#include "whale/progress.h"
#include "whale/trace.h"

struct ctx {
    double fwd, bwd;
    bool spin;     /* busy passes (no wake-up from a sleep inside the pass) */
    bool loose;    /* a plain nanosleep per pass (overshoots by the wake-up) */
    size_t bytes;
    char *buf;     /* one message buffer per (kind, chunk, mb) */
    int v, m;
};

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts))
        ;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last part of a pass spins: a sleep overshoots by the wake-up
 * (50-200 us here), and on the peer that overshoot lands on this rank's
 * critical path, where the bench would count it as bubble. */
#define SPIN_TAIL_S 300e-6

static void pass(const struct ctx *x, double s)
{
    if (x->loose) {
        sleep_s(s);
        return;
    }
    double end = now() + s;
    if (!x->spin && s > SPIN_TAIL_S) {
        double until = end - SPIN_TAIL_S;
        struct timespec ts = { (time_t)until, (long)((until - (double)(time_t)until) * 1e9) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
            ;
    }
    while (now() < end)
        ;
}

static double cpu(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int f_cb(void *u, int c, int mb, int fl)
{
    (void)c; (void)mb; (void)fl;
    pass(u, ((struct ctx *)u)->fwd);
    return 0;
}

static int b_cb(void *u, int c, int mb, int fl)
{
    (void)c; (void)mb; (void)fl;
    pass(u, ((struct ctx *)u)->bwd);
    return 0;
}

static char *slot(struct ctx *x, int io, enum whale_pp_kind k, int c, int mb)
{
    return x->buf + ((((size_t)io * 2 + (size_t)k) * (size_t)x->v + (size_t)c) * (size_t)x->m +
                     (size_t)mb) * x->bytes;
}

static void *rbuf(void *u, enum whale_pp_kind k, int c, int mb) { return slot(u, 0, k, c, mb); }
static const void *sbuf(void *u, enum whale_pp_kind k, int c, int mb) { return slot(u, 1, k, c, mb); }

int main(int argc, char **argv)
{
    enum whale_schedule kind = WHALE_SCHED_1F1B;
    int v = 1, m = 8, steps = 5;
    double fwd_ms = 10, bwd_ms = 20;
    long bytes = 1 << 16;
    static const struct option lo[] = {
        { "schedule", required_argument, 0, 's' }, { "interleave", required_argument, 0, 'v' },
        { "fwd-ms", required_argument, 0, 'f' }, { "bwd-ms", required_argument, 0, 'b' },
        { "bytes", required_argument, 0, 'n' }, { "steps", required_argument, 0, 'S' },
        { "spin", no_argument, 0, 'P' }, { "loose", no_argument, 0, 'L' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
    };
    int c;
    bool spin = false, loose = false;
    while ((c = getopt_long(argc, argv, "m:h", lo, NULL)) != -1) {
        switch (c) {
        case 's':
            if (whale_schedule_parse(optarg, &kind)) {
                fprintf(stderr, "pp_sleep: --schedule=%s: expected 1f1b, gpipe or interleaved\n",
                        optarg);
                return 2;
            }
            break;
        case 'v': v = atoi(optarg); break;
        case 'm': m = atoi(optarg); break;
        case 'f': fwd_ms = atof(optarg); break;
        case 'b': bwd_ms = atof(optarg); break;
        case 'n': bytes = atol(optarg); break;
        case 'S': steps = atoi(optarg); break;
        case 'P': spin = true; break;
        case 'L': loose = true; break;
        case 'h':
            printf("usage: pp_sleep [--schedule S] [--interleave V] [-m M] [--fwd-ms F] "
                   "[--bwd-ms B] [--bytes N] [--steps S] [--spin | --loose]\n"
                   "  passes sleep, then spin their last 0.3 ms (exact durations);\n"
                   "  --spin: spin all of it; --loose: a plain nanosleep (overshoots)\n");
            return 0;
        default: return 2;
        }
    }
    if (v < 1 || m < 1 || steps < 1 || bytes < 1 || fwd_ms < 0 || bwd_ms < 0) {
        fprintf(stderr, "pp_sleep: bad arguments\n");
        return 2;
    }
    whale_ctx *ctx;
    if (whale_init(&ctx))
        return 1;
    struct whale_par_comm pp;
    whale_par_comm_from_group(&pp, whale_pp_group(ctx));
    /* WHALE_TRACE=FILE: the executor's spans (passes, receive waits, sends) */
    if (whale_trace_init(whale_rank(ctx), whale_world_size(ctx)))
        return 1;
    struct whale_pp_schedule s;
    int rc = whale_pp_schedule_build(kind, pp.size, v, m, pp.rank, &s);
    struct ctx x = { fwd_ms / 1e3 / v, bwd_ms / 1e3 / v, spin, loose, (size_t)bytes, NULL, v, m };
    /* sleeps end when asked (the default slack is 50 us) */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    x.buf = calloc((size_t)4 * v * m, (size_t)bytes);
    double best = 1e30, sum = 0, comp = 0, best_idle = 1e30;
    double other_cpu = 0; /* CPU seconds of the process's other threads (all of them) */
    double prog_cpu = 0;  /* of which the progress thread (whale_progress_stats) */
    uint64_t prog_sleeps = 0, prog_busy = 0; /* its kernel sleeps; arms refused (events) */
    long ivcsw = 0;
    long vcsw = 0; /* the stepping thread's voluntary context switches: each is a block + wake-up */
    if (!rc && x.buf) {
        struct whale_pp_hooks h = { .user = &x, .forward = f_cb, .backward = b_cb,
                                    .recv_buf = rbuf, .send_buf = sbuf,
                                    .msg_bytes = (size_t)bytes };
        for (int i = 0; i <= steps && !rc; i++) {
            whale_barrier(whale_pp_group(ctx) ? whale_pp_group(ctx) : whale_world(ctx));
            double t0 = now();
            struct whale_pp_stats ps;
            struct rusage ru0, ru1;
            getrusage(RUSAGE_THREAD, &ru0);
            struct whale_progress_stats g0, g1;
            whale_progress_stats(ctx, &g0);
            double p0 = cpu(CLOCK_PROCESS_CPUTIME_ID), th0 = cpu(CLOCK_THREAD_CPUTIME_ID);
            rc = whale_pp_run(&pp, &s, &h, &ps);
            double dt = now() - t0;
            double p1 = cpu(CLOCK_PROCESS_CPUTIME_ID), th1 = cpu(CLOCK_THREAD_CPUTIME_ID);
            getrusage(RUSAGE_THREAD, &ru1);
            whale_progress_stats(ctx, &g1);
            if (i > 0) {
                prog_cpu += g1.thread_cpu_s - g0.thread_cpu_s;
                prog_sleeps += g1.sleeps - g0.sleeps;
                prog_busy += g1.busy - g0.busy;
                vcsw += ru1.ru_nvcsw - ru0.ru_nvcsw;
                ivcsw += ru1.ru_nivcsw - ru0.ru_nivcsw;
                other_cpu += (p1 - p0) - (th1 - th0);
            }
            if (i > 0) { /* the first step wires up endpoints */
                sum += dt;
                best = dt < best ? dt : best;
                /* idle against this rank's own passes as they really ran
                 * (a sleep or a descheduled spin overshoots: that is not
                 * the pipeline's bubble) */
                comp += ps.t_compute;
                double idle = dt / ps.t_compute - 1;
                best_idle = idle < best_idle ? idle : best_idle;
            }
        }
    }
    /* transfer latency of one message, for the simulator's prediction */
    double lat = 0;
    if (!rc && pp.size > 1) {
        void *req;
        whale_barrier(whale_pp_group(ctx));
        double t0 = now();
        for (int i = 0; i < 20 && !rc; i++) {
            if (pp.rank == 0) {
                rc = pp.isend(&pp, x.buf, x.bytes, 1, 7, &req);
                rc = rc ? rc : pp.wait(&pp, req);
                rc = rc ? rc : pp.irecv(&pp, x.buf, x.bytes, 1, 8, &req);
                rc = rc ? rc : pp.wait(&pp, req);
            } else if (pp.rank == 1) {
                rc = pp.irecv(&pp, x.buf, x.bytes, 0, 7, &req);
                rc = rc ? rc : pp.wait(&pp, req);
                rc = rc ? rc : pp.isend(&pp, x.buf, x.bytes, 0, 8, &req);
                rc = rc ? rc : pp.wait(&pp, req);
            }
        }
        lat = (now() - t0) / 40;
    }
    if (!rc && pp.rank == 0) {
        double ideal = (double)v * m * (x.fwd + x.bwd);
        struct whale_pp_schedule *all = calloc((size_t)pp.size, sizeof *all);
        struct whale_pp_sim_result r = { 0 };
        for (int k = 0; k < pp.size; k++)
            whale_pp_schedule_build(kind, pp.size, v, m, k, &all[k]);
        struct whale_pp_sim_cost cost = { x.fwd, x.bwd, lat };
        whale_pp_simulate(all, pp.size, &cost, NULL, &r);
        for (int k = 0; k < pp.size; k++)
            whale_pp_schedule_free(&all[k]);
        free(all);
        double med = sum / steps;
        printf("pp_sleep: schedule %s p %d v %d m %d fwd %.1f ms bwd %.1f ms msg %ld B %s: "
               "step mean %.4f s best %.4f s, bubble %.3f (best %.3f), idle/own passes %.3f "
               "(best %.3f), theory (p-1)/(vm) %.3f, simulated with %.0f us transfers %.3f, "
               "%.1f blocking waits, %.1f preemptions, %.1f ms of the progress thread's CPU and "
               "%.1f ms of all other threads' CPU per step\n",
               whale_schedule_name(kind), pp.size, v, m, fwd_ms, bwd_ms, bytes,
               spin ? "spin" : "sleep", med, best, med / ideal - 1, best / ideal - 1,
               sum / comp - 1, best_idle, (double)(pp.size - 1) / (v * m), lat * 1e6,
               r.ok ? r.bubble : -1.0, (double)vcsw / steps, (double)ivcsw / steps,
               1e3 * prog_cpu / steps, 1e3 * other_cpu / steps);
        printf("RESULT sched=%s p=%d v=%d m=%d bubble=%.4f bubble_best=%.4f idle=%.4f "
               "idle_best=%.4f theory=%.4f vcsw=%.1f ivcsw=%.1f prog_cpu_ms=%.2f other_cpu_ms=%.2f "
               "sleeps=%.1f busy=%.1f\n",
               whale_schedule_name(kind), pp.size, v, m, med / ideal - 1, best / ideal - 1,
               sum / comp - 1, best_idle, (double)(pp.size - 1) / (v * m), (double)vcsw / steps,
               (double)ivcsw / steps, 1e3 * prog_cpu / steps, 1e3 * other_cpu / steps,
               (double)prog_sleeps / steps, (double)prog_busy / steps);
    }
    whale_pp_schedule_free(&s);
    free(x.buf);
    whale_trace_close();
    whale_finalize(ctx);
    return rc ? 1 : 0;
}
