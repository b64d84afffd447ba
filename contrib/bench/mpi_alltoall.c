/* Open MPI side of a2a-vs-openmpi.sh: MPI_Alltoall (bytes) timed like
 * whale-bench comm alltoall (warmup, barrier, mean of N iterations, the
 * slowest rank). SIZE is one rank's send buffer (nccl-tests convention,
 * SIZE/p to each peer). Prints "size time_us busbw_GBps" per size, busbw =
 * size / time x (p-1)/p.
 * usage: mpi_alltoall ITERS WARMUP SIZE_BYTES... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    int iters = argc > 1 ? atoi(argv[1]) : 20, warm = argc > 2 ? atoi(argv[2]) : 5;
    for (int a = 3; a < argc; a++) {
        size_t bytes = strtoull(argv[a], NULL, 10), per = bytes / (size_t)p / 4 * 4;
        char *x = malloc(per * (size_t)p + 64), *y = malloc(per * (size_t)p + 64);
        memset(x, rank, per * (size_t)p);
        memset(y, 0, per * (size_t)p);
        for (int k = 0; k < warm; k++)
            MPI_Alltoall(x, (int)per, MPI_BYTE, y, (int)per, MPI_BYTE, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int k = 0; k < iters; k++)
            MPI_Alltoall(x, (int)per, MPI_BYTE, y, (int)per, MPI_BYTE, MPI_COMM_WORLD);
        double dt = (MPI_Wtime() - t0) / iters, tmax;
        MPI_Allreduce(&dt, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        size_t tot = per * (size_t)p;
        if (rank == 0)
            printf("%zu %.3f %.3f\n", tot, tmax * 1e6, (double)tot / tmax / 1e9 * (p - 1) / p);
        free(x);
        free(y);
    }
    MPI_Finalize();
    return 0;
}
