/* The cost of the C ABI layer per call, without the network: one rank sends a
 * message to itself and receives it, `iters` times per batch; rank 0 prints
 * "self <bytes> <median thread-CPU ns per send+receive pair>" over 15 batches,
 * for 8 B and 1 KiB. Thread CPU time, so other load on the host (which
 * preempts the process) does not count. Usage: selfloop [iters] */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    int rank;
    static const int sizes[] = {8, 1024};
    char buf[1024] = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int s = 0; s < 2; s++) {
        double samples[15];
        for (int b = 0; b < 15; b++) {
            double t = cpu_ns();
            for (long i = 0; i < iters; i++) {
                MPI_Send(buf, sizes[s], MPI_BYTE, rank, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, sizes[s], MPI_BYTE, rank, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
            samples[b] = (cpu_ns() - t) / (double)iters;
        }
        qsort(samples, 15, sizeof samples[0], cmp);
        if (rank == 0) printf("self %d %.2f\n", sizes[s], samples[7]);
    }
    MPI_Finalize();
    return 0;
}
