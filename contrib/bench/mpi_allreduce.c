/* Open MPI side of comm-vs-openmpi.sh: MPI_Allreduce (float, sum) timed
 * like whale-bench comm (warmup, barrier, mean of N iterations, slowest
 * rank). Prints "size time_us busbw_GBps peak_rss_MiB" per size: the
 * largest rank's peak RSS so far (sizes in ascending order: the peak of
 * the largest size run yet), beside whale-bench comm's.
 * usage: mpi_allreduce ITERS WARMUP SIZE_BYTES... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    int iters = argc > 1 ? atoi(argv[1]) : 20, warm = argc > 2 ? atoi(argv[2]) : 5;
    for (int a = 3; a < argc; a++) {
        size_t bytes = strtoull(argv[a], NULL, 10), n = bytes / sizeof(float);
        float *x = malloc(n * sizeof *x + 64), *y = malloc(n * sizeof *y + 64);
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(rank + i % 7);
        for (int k = 0; k < warm; k++)
            MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int k = 0; k < iters; k++)
            MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double dt = (MPI_Wtime() - t0) / iters, tmax;
        MPI_Allreduce(&dt, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        struct rusage ru;
        double rss = getrusage(RUSAGE_SELF, &ru) ? -1 : ru.ru_maxrss / 1024.0, rssmax;
        MPI_Allreduce(&rss, &rssmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%zu %.3f %.3f %.1f\n", n * sizeof(float), tmax * 1e6,
                   (double)(n * sizeof(float)) / tmax / 1e9 * 2.0 * (p - 1) / p, rssmax);
        free(x);
        free(y);
    }
    MPI_Finalize();
    return 0;
}
