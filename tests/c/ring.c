/* Ring: an integer token goes around all ranks `loops` times, each rank adding
 * one. Rank 0 prints the token (loops x size when nothing was lost) and, on
 * stderr, the time. Usage: ring [loops] (default 1000). Also a demo program. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size;
    long loops = argc > 1 ? atol(argv[1]) : 1000;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long token = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < loops; i++) {
        if (rank == 0) {
            /* Sendrecv, not Send then Recv: on one rank a blocking send to itself
             * before the receive is posted may wait forever (MPICH's does). */
            long out = token + 1;
            MPI_Sendrecv(&out, 1, MPI_LONG, next, 1, &token, 1, MPI_LONG, prev, 1, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token++;
            MPI_Send(&token, 1, MPI_LONG, next, 1, MPI_COMM_WORLD);
        }
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0) {
        printf("ring: %d ranks, %ld loops, token %ld (%s)\n", size, loops, token,
               token == loops * size ? "ok" : "WRONG");
        fprintf(stderr, "ring: %.6f s, %.2f us per hop\n", t, loops ? t * 1e6 / (loops * size) : 0.0);
    }
    MPI_Finalize();
    return token == loops * size || rank != 0 ? 0 : 1;
}
