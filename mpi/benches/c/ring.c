/* Ring: a 10-byte token goes around all ranks `loops` times, 3 repetitions;
 * rank 0 prints "ring <median seconds>". Usage: ring <loops> */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size;
    long loops = argc > 1 ? atol(argv[1]) : 1000;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char tok[10] = {0};
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    double t[3];
    for (int rep = 0; rep < 3; rep++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < loops; i++) {
            if (rank == 0) {
                MPI_Send(tok, 10, MPI_BYTE, next, 1, MPI_COMM_WORLD);
                MPI_Recv(tok, 10, MPI_BYTE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(tok, 10, MPI_BYTE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(tok, 10, MPI_BYTE, next, 1, MPI_COMM_WORLD);
            }
        }
        t[rep] = MPI_Wtime() - t0;
    }
    /* median of three */
    double a = t[0], b = t[1], c = t[2];
    double m = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
    if (rank == 0) printf("ring %.6f\n", m);
    MPI_Finalize();
    return 0;
}
