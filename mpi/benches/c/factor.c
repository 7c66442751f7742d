/* Trial-division factoring of N: rank r tries 2+r, 2+r+size, ...; every K
 * candidates each rank sends its found factor (0 if none) to rank 0, which
 * answers all with the global one. Rank 0 prints "factor <seconds> <factor>".
 * Usage: factor <N> <K> */
#include <mpi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned long long n = strtoull(argv[1], NULL, 10);
    long k = atol(argv[2]);
    unsigned long long limit = (unsigned long long)sqrtl((long double)n);
    while (limit * limit > n) limit--;
    while ((limit + 1) * (limit + 1) <= n) limit++;
    unsigned long long cand = 2 + (unsigned long long)rank, step = (unsigned long long)size, found = 0, global = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (;;) {
        for (long i = 0; i < k && cand <= limit; i++, cand += step) {
            if (n % cand == 0) { found = cand; break; }
        }
        if (rank == 0) {
            global = found;
            for (int src = 1; src < size; src++) {
                unsigned long long f;
                MPI_Recv(&f, 1, MPI_UNSIGNED_LONG_LONG, src, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (global == 0) global = f;
            }
            for (int dst = 1; dst < size; dst++)
                MPI_Send(&global, 1, MPI_UNSIGNED_LONG_LONG, dst, 3, MPI_COMM_WORLD);
        } else {
            MPI_Send(&found, 1, MPI_UNSIGNED_LONG_LONG, 0, 2, MPI_COMM_WORLD);
            MPI_Recv(&global, 1, MPI_UNSIGNED_LONG_LONG, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        if (global != 0) break;
    }
    if (rank == 0) printf("factor %.6f %llu\n", MPI_Wtime() - t0, global);
    MPI_Finalize();
    return 0;
}
