/* Ping-pong after a pause: `rounds` times, both ranks pause `ms` ms after a
 * barrier (as a program that computes between exchanges does), then rank 0
 * times `count` round trips of 8 bytes with rank 1; rank 0 prints
 * "pause <median us a hop> <worst us a hop>" over the rounds.
 * Usage: pause [rounds: 10, 1 to 1000] [ms: 20, at most 60000] [count: 1000]
 * (a value out of range takes the default). */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rank;
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    long count = argc > 3 ? atol(argv[3]) : 1000;
    if (rounds < 1 || rounds > 1000) rounds = 10;
    if (ms < 0 || ms > 60000) ms = 20;
    if (count < 1) count = 1000;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char b[8] = {0};
    double hop[1000];
    for (int k = 0; k < rounds; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        struct timespec left = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&left, &left) != 0 && errno == EINTR) {
        }
        double t0 = MPI_Wtime();
        for (long i = 0; i < count; i++) {
            if (rank == 0) {
                MPI_Send(b, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(b, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(b, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(b, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
        }
        hop[k] = (MPI_Wtime() - t0) * 1e6 / (2.0 * count);
    }
    qsort(hop, rounds, sizeof(double), cmp);
    if (rank == 0) printf("pause %.4f %.4f\n", hop[rounds / 2], hop[rounds - 1]);
    MPI_Finalize();
    return 0;
}
