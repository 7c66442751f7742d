/* Synchronous sends complete only once a receive took the message: an
 * MPI_Issend from rank 0 to rank 1 stays incomplete while rank 1 has not
 * posted its receive (it waits for a go signal sent after the checks); to
 * itself, an MPI_Issend waits for the receive, and an MPI_Ssend completes
 * against a receive posted before it. */
#define _POSIX_C_SOURCE 199309L
#include "check.h"
#include <time.h>

static void nap_ms(long ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

static void to_self(int rank) {
    int got = -1, val = rank + 100, flag = 0;
    MPI_Request r, s;
    MPI_Irecv(&got, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &r);
    MPI_Ssend(&val, 1, MPI_INT, rank, 5, MPI_COMM_WORLD);
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    CHECK(flag && got == rank + 100, "self, receive first: done %d, value %d", flag, got);

    MPI_Issend(&val, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, &s);
    MPI_Test(&s, &flag, MPI_STATUS_IGNORE);
    CHECK(!flag, "self: MPI_Issend complete before its receive");
    got = -1;
    MPI_Recv(&got, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&s, MPI_STATUS_IGNORE);
    CHECK(got == rank + 100 && s == MPI_REQUEST_NULL, "self, send first: value %d", got);
}

static void pair(int rank) {
    int x = 0, go = 1, flag = 0, early = 0;
    MPI_Request s;
    if (rank == 0) {
        x = 42;
        MPI_Issend(&x, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, &s);
        for (int i = 0; i < 20; i++) {
            MPI_Test(&s, &flag, MPI_STATUS_IGNORE);
            early |= flag;
            nap_ms(2);
        }
        CHECK(!early, "MPI_Issend completed before rank 1 posted its receive");
        MPI_Send(&go, 1, MPI_INT, 1, 2, MPI_COMM_WORLD);
        MPI_Wait(&s, MPI_STATUS_IGNORE);
        MPI_Ssend(&x, 1, MPI_INT, 1, 3, MPI_COMM_WORLD);
    } else {
        MPI_Recv(&go, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(&x, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(x == 42, "MPI_Issend delivered %d", x);
        x = 0;
        MPI_Recv(&x, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(x == 42, "MPI_Ssend delivered %d", x);
    }
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    to_self(rank);
    if (size >= 2 && rank < 2) pair(rank);
    int rc = report("ssend");
    MPI_Finalize();
    return rc;
}
