/* A one-sided transfer cut short by its sender's death must not hurt the
 * target (over UCX 1.13's tcp, a software-emulated put whose
 * origin died made the target abort in ucp_put_handler, "unexpected error:
 * Endpoint timeout", because the target's completion ack to the dead origin
 * is a fatal error inside UCX).
 *
 * Run under whale-run with 3 tasks on 3 nodes (tcp forced with UCX_TLS):
 *   task 0  the target: a large region; it only serves (as a holder or a
 *           spare does) and watches task 1 with small gets until they fail;
 *   task 1  the victim: starts several large puts into task 0 and SIGKILLs
 *           itself while they are in flight;
 *   task 2  a live peer: after the victim's death it puts a pattern into
 *           task 0 and reads it back with a get (the target still serves).
 * Task 0 checks it saw WHALE_EPEER for task 1, that task 2's bytes landed,
 * and that its own process is alive (it prints the OK line). Every survivor
 * prints "rma_sender_death: task N ... OK"; whale-run exits 137 (the victim).
 *
 *   rma_sender_death [--size BYTES] [--delay SECONDS (after the puts, before the kill)]
 *                    [--stop]
 * --stop: the victim stops (SIGSTOP) with its puts in flight, is declared
 * dead by the others (run with WHALE_ELASTIC=1: heartbeats), wakes up and
 * pushes the rest of its bytes at the target, then dies. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>
#include <unistd.h>

#include "whale/comm.h"
#include "whale/elastic.h"
#include "whale/error.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint8_t pat(size_t i, int who)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ (uint64_t)(who + 1) * 0xC2B2AE3D27D4EB4Full;
    x ^= x >> 31;
    return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 40);
}

/* Small gets from `peer` until one fails; returns the error (0: none
 * before the deadline). */
static int watch_peer(whale_remote *peer, double deadline)
{
    uint8_t b[8];
    while (now_s() < deadline) {
        whale_req *r;
        int rc = whale_iget(peer, 0, b, sizeof b, &r);
        if (!rc)
            rc = whale_wait(r);
        if (rc)
            return rc;
        usleep(20000);
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t size = 64u << 20;
    double delay = 0.005;
    bool stop = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--stop"))
            stop = true;
        else if (!strcmp(argv[i], "--delay") && i + 1 < argc)
            delay = strtod(argv[++i], NULL);
        else {
            fprintf(stderr, "usage: rma_sender_death [--size BYTES] [--delay SECONDS] [--stop]\n");
            return 2;
        }
    }
    whale_ctx *ctx;
    int rc = whale_init(&ctx);
    if (rc) {
        fprintf(stderr, "rma_sender_death: init: %s\n", whale_strerror(rc));
        return 1;
    }
    int me = whale_task_id(ctx), nt = whale_ntasks(ctx);
    if (nt != 3 || size < 4096) {
        fprintf(stderr, "rma_sender_death: needs exactly 3 tasks (got %d) and --size >= 4096\n", nt);
        return 2;
    }
    const int target = 0, victim = 1, live = 2;
    whale_group *all = whale_all_tasks(ctx);
    size_t len = me == target ? 2 * size : 4096;
    uint8_t *mem = calloc(1, len), *src = malloc(size), *back = malloc(size);
    if (!mem || !src || !back) {
        fprintf(stderr, "rma_sender_death: out of memory\n");
        return 1;
    }
    whale_region *reg;
    whale_remote **rem;
    if ((rc = whale_region_register(ctx, mem, len, &reg)) ||
        (rc = whale_region_exchange(all, reg, &rem))) {
        fprintf(stderr, "rma_sender_death[task %d]: region: %s\n", me, whale_strerror(rc));
        return 1;
    }
    whale_barrier(all);
    /* a bound against a hang only: an ASan victim on a loaded machine took
     * longer than timeout + 5 s to fill its 64 MiB and die */
    double bound = whale_peer_timeout(ctx) + 120.0;
    if (me == victim) {
        for (size_t i = 0; i < size; i++)
            src[i] = pat(i, victim);
        whale_req *r[4];
        for (int k = 0; k < 4; k++)
            if ((rc = whale_iput(rem[target], 0, src, size, &r[k]))) {
                fprintf(stderr, "rma_sender_death: victim put: %s\n", whale_strerror(rc));
                return 1;
            }
        /* let the first fragments reach the target, then die mid-transfer */
        /* compute (no calls into the library) while the transfers run */
        double t0 = now_s();
        volatile double acc = 0;
        while (now_s() - t0 < delay)
            for (int k = 0; k < 1000; k++)
                acc += k * 0.5;
        if (stop) {
            /* --stop: hang with the puts in flight until the others have
             * declared this task dead, then wake up and push the rest of
             * the bytes at a target that has given up on us, then die */
            printf("rma_sender_death: task %d: stopping with %d puts of %zu bytes in flight\n", me,
                   4, size);
            fflush(stdout);
            pid_t parent = getpid();
            if (fork() == 0) {
                usleep((useconds_t)((whale_peer_timeout(ctx) + 2.0) * 1e6));
                kill(parent, SIGCONT);
                _exit(0);
            }
            raise(SIGSTOP);
            double t1 = now_s();
            bool d = false;
            /* whale_test releases the request once it reports done or failed */
            while (now_s() - t1 < 1.0 && whale_test(r[3], &d) == 0 && !d)
                ;
        }
        printf("rma_sender_death: task %d: dying with %d puts of %zu bytes in flight\n", me, 4, size);
        fflush(stdout);
        raise(SIGKILL);
    }
    double t0 = now_s();
    int err = watch_peer(rem[victim], t0 + bound);
    bool ok = err == WHALE_EPEER;
    if (me == live) {
        /* the target must still serve: a put, then the bytes read back */
        for (size_t i = 0; i < size; i++)
            src[i] = pat(i, live);
        whale_req *r;
        int prc = whale_iput(rem[target], size, src, size, &r);
        if (!prc)
            prc = whale_wait(r);
        if (!prc)
            prc = whale_remote_flush(rem[target]);
        if (!prc)
            prc = whale_iget(rem[target], size, back, size, &r);
        if (!prc)
            prc = whale_wait(r);
        bool same = !prc && !memcmp(src, back, size);
        printf("rma_sender_death: task %d: dead victim gave %s; put+get at the target after the "
               "death: %s: %s\n", me, whale_strerror(err), prc ? whale_strerror(prc) :
               same ? "bytes match" : "BYTES DIFFER", ok && same ? "OK" : "FAILED");
        ok = ok && same;
        /* tell the target we are done: a small put into the flag word */
        uint32_t flag = 0x444f4e45u;
        if (!whale_iput(rem[target], 2 * size - sizeof flag, &flag, sizeof flag, &r))
            whale_wait(r);
        whale_remote_flush(rem[target]);
    } else if (me == target) {
        /* wait for the live peer's flag, then check its bytes */
        uint32_t flag = 0;
        while (now_s() - t0 < 90.0) { /* generous: ASan on a loaded 2-core machine */
            memcpy(&flag, mem + 2 * size - sizeof flag, sizeof flag);
            if (flag == 0x444f4e45u)
                break;
            usleep(20000);
        }
        /* --stop: stay (serving) until after the victim woke up and died */
        while (stop && now_s() - t0 < whale_peer_timeout(ctx) + 5.0)
            usleep(50000);
        size_t bad = 0;
        for (size_t i = 0; i < size - sizeof flag; i++)
            bad += mem[size + i] != pat(i, live);
        bool got = flag == 0x444f4e45u && !bad;
        printf("rma_sender_death: task %d (target): alive after the victim's death; dead victim "
               "gave %s; the live peer's bytes %s: %s\n", me, whale_strerror(err),
               flag != 0x444f4e45u ? "never arrived" : bad ? "differ" : "landed",
               ok && got ? "OK" : "FAILED");
        ok = ok && got;
    }
    fflush(stdout);
    _exit(ok ? 0 : 1); /* the step is broken (a task died): no collective finalize */
}
