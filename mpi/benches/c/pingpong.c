/* Ping-pong between ranks 0 and 1: for each size, 5 repetitions of `iters`
 * round trips; rank 0 prints "pp <size> <median half round trip in us>".
 * Then a window of 64 non-blocking 1 MiB sends (and receives), answered by a
 * zero-byte message, 5 repetitions: "win <size> <median MB/s>".
 * Usage: pingpong [quick]   (the same sizes and counts as the p2pmp rank program) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long iters(long size, int quick) {
    long base = size <= 1024 ? 20000 : size <= (256 << 10) ? 2000 : 200;
    return quick ? base / 10 : base;
}

int main(int argc, char **argv) {
    static const long sizes[] = {1, 8, 1024, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
    int rank, quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = malloc(4 << 20);
    memset(buf, 7, 4 << 20);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        long size = sizes[s], n = iters(size, quick);
        double samples[5];
        for (int rep = 0; rep < 5; rep++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            for (long i = 0; i < n; i++) {
                if (rank == 0) {
                    MPI_Send(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                    MPI_Recv(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    MPI_Recv(buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)size, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
                }
            }
            samples[rep] = (MPI_Wtime() - t) * 1e6 / (2.0 * (double)n);
        }
        qsort(samples, 5, sizeof samples[0], cmp);
        if (rank == 0) printf("pp %ld %.4f\n", size, samples[2]);
        fflush(stdout);
    }
    {
        long size = 1 << 20, n = quick ? 2 : 10;
        char *wb = malloc((size_t)size * 64);
        memset(wb, 7, (size_t)size * 64);
        MPI_Request rq[64];
        double samples[5];
        for (int rep = 0; rep < 5; rep++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            for (long i = 0; i < n; i++) {
                if (rank == 0) {
                    for (int k = 0; k < 64; k++) MPI_Isend(wb + (long)k * size, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &rq[k]);
                    MPI_Waitall(64, rq, MPI_STATUSES_IGNORE);
                    MPI_Recv(wb, 0, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    for (int k = 0; k < 64; k++) MPI_Irecv(wb + (long)k * size, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &rq[k]);
                    MPI_Waitall(64, rq, MPI_STATUSES_IGNORE);
                    MPI_Send(wb, 0, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
                }
            }
            samples[rep] = (double)size * 64.0 * (double)n / ((MPI_Wtime() - t) * 1e6);
        }
        qsort(samples, 5, sizeof samples[0], cmp);
        if (rank == 0) printf("win %ld %.1f\n", size, samples[2]);
        fflush(stdout);
        free(wb);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
