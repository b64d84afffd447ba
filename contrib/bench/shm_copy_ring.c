/* The copy bound of a one-node collective: p processes in a ring, each
 * copying its vector into a shared slot while its successor copies it out
 * (1 MiB slots, 4 deep, generation flags as in comm/collectives/shm_coll.c). Every
 * byte crosses one process boundary through memory, which is what a ring
 * step of an allreduce costs at best; busbw of an allreduce is directly
 * comparable to this figure.
 *
 *   shm_copy_ring P BYTES ITERS   ->   "copyring P BYTES GBPS" (best of ITERS)
 *
 * Built by contrib/bench/comm-vs-openmpi.sh. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define SLOT (1u << 20)
#define DEPTH 4

struct flags {
    uint64_t put, got;
    char pad[48];
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Spin (the bound: no sleep, no syscall) unless there are more processes
 * than cores, where a spinning waiter would hold the core its peer needs. */
static int g_yield;
static void wait_ge(const uint64_t *f, uint64_t v)
{
    int spins = 0;
    while (__atomic_load_n(f, __ATOMIC_ACQUIRE) < v) {
        if (g_yield && ++spins > 64)
            sched_yield();
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
}

/* Rank r: ITERS passes; per pass every piece goes into my slot and my
 * predecessor's piece comes out into my destination. Returns the best pass
 * time. */
static double rank_main(int r, int p, size_t pieces, int iters, struct flags *fl, char *slots)
{
    char *src = malloc(pieces * SLOT), *dst = malloc(pieces * SLOT);
    if (!src || !dst)
        exit(1);
    memset(src, r + 1, pieces * SLOT);
    memset(dst, 0, pieces * SLOT);
    int prev = (r + p - 1) % p, next = (r + 1) % p;
    double best = 1e30;
    uint64_t gen = 0;
    for (int it = 0; it < iters; it++) {
        double t0 = now();
        size_t out = 0;
        for (size_t i = 0; i < pieces; i++) {
            gen++;
            /* my slot gen % DEPTH is free once my successor took gen - DEPTH */
            if (gen > DEPTH)
                wait_ge(&fl[next].got, gen - DEPTH);
            memcpy(slots + ((size_t)r * DEPTH + gen % DEPTH) * SLOT, src + i * SLOT, SLOT);
            __atomic_store_n(&fl[r].put, gen, __ATOMIC_RELEASE);
            /* take whatever my predecessor has ready, without waiting */
            while (out < gen && __atomic_load_n(&fl[prev].put, __ATOMIC_ACQUIRE) > out) {
                uint64_t g = out + 1;
                memcpy(dst + ((g - 1) % pieces) * SLOT, slots + ((size_t)prev * DEPTH + g % DEPTH) * SLOT, SLOT);
                __atomic_store_n(&fl[r].got, g, __ATOMIC_RELEASE);
                out = g;
            }
        }
        while (out < gen) {
            wait_ge(&fl[prev].put, out + 1);
            uint64_t g = out + 1;
            memcpy(dst + ((g - 1) % pieces) * SLOT, slots + ((size_t)prev * DEPTH + g % DEPTH) * SLOT, SLOT);
            __atomic_store_n(&fl[r].got, g, __ATOMIC_RELEASE);
            out = g;
        }
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    if (dst[0] != (char)(prev + 1))
        fprintf(stderr, "shm_copy_ring: rank %d got wrong data\n", r);
    free(src);
    free(dst);
    return best;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: shm_copy_ring P BYTES ITERS\n");
        return 2;
    }
    int p = atoi(argv[1]), iters = atoi(argv[3]);
    size_t n = strtoull(argv[2], NULL, 10);
    if (p < 2 || p > 64 || n < SLOT || iters < 1) {
        fprintf(stderr, "shm_copy_ring: P in 2..64, BYTES >= %u, ITERS >= 1\n", SLOT);
        return 2;
    }
    size_t pieces = n / SLOT;
    g_yield = p > (int)sysconf(_SC_NPROCESSORS_ONLN);
    size_t seg = (size_t)p * sizeof(struct flags) + (size_t)p * DEPTH * SLOT + 64 * sizeof(double);
    char *m = mmap(NULL, seg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    struct flags *fl = (struct flags *)m;
    char *slots = m + (size_t)p * sizeof(struct flags);
    double *best = (double *)(slots + (size_t)p * DEPTH * SLOT);
    for (int r = 1; r < p; r++)
        if (fork() == 0) {
            best[r] = rank_main(r, p, pieces, iters, fl, slots);
            _exit(0);
        }
    best[0] = rank_main(0, p, pieces, iters, fl, slots);
    while (wait(NULL) > 0)
        ;
    double worst = 0;
    for (int r = 0; r < p; r++)
        worst = best[r] > worst ? best[r] : worst;
    printf("copyring %d %zu %.3f\n", p, pieces * SLOT, (double)(pieces * SLOT) / worst / 1e9);
    return 0;
}
