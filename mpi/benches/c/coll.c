/* Collectives: MPI_Allreduce (MPI_SUM on doubles), MPI_Alltoall and MPI_Bcast
 * (bytes) of 8 B, 64 KiB and 1 MiB per rank (per block for Alltoall), and
 * MPI_Barrier (printed as 8 B only); for
 * each, rank 0 prints "coll <op> <bytes> <median µs per call>" over 5
 * repetitions. Usage: coll [quick] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int iters(long bytes, int quick) {
    int n = bytes <= 8 ? 2000 : bytes <= (64 << 10) ? 100 : 10;
    return quick ? (n / 10 > 1 ? n / 10 : 1) : n;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rank, size, quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *ops[4] = {"allreduce", "alltoall", "bcast", "barrier"};
    long sizes[3] = {8, 64 << 10, 1 << 20};
    char *a = malloc((size_t)(1 << 20) * size), *b = malloc((size_t)(1 << 20) * size);
    memset(a, 1, (size_t)(1 << 20) * size);
    for (int o = 0; o < 4; o++) {
        for (int s = 0; s < 3; s++) {
            long bytes = sizes[s];
            if (o == 3 && bytes != 8) continue;
            int n = iters(bytes, quick);
            double t[5];
            for (int rep = 0; rep < 5; rep++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                for (int i = 0; i < n; i++) {
                    if (o == 0) MPI_Allreduce(a, b, (int)(bytes / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                    else if (o == 1) MPI_Alltoall(a, (int)bytes, MPI_BYTE, b, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
                    else if (o == 2) MPI_Bcast(a, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
                    else MPI_Barrier(MPI_COMM_WORLD);
                }
                t[rep] = (MPI_Wtime() - t0) * 1e6 / n;
            }
            qsort(t, 5, sizeof t[0], cmp);
            if (rank == 0) printf("coll %s %ld %.3f\n", ops[o], bytes, t[2]);
            fflush(stdout);
        }
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
