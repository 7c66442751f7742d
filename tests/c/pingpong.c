/* Ping-pong between ranks 0 and 1 with messages from 0 bytes to 1 MiB (eager
 * and rendezvous), checking content, status and MPI_Get_count; other ranks
 * only join the final report. Usage: pingpong [rounds] (default 20). */
#include <stdlib.h>
#include <string.h>
#include "check.h"

int main(int argc, char **argv) {
    int rank, size;
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    static const int lens[] = {0, 1, 7, 1000, 65536, 65537, 1 << 20};
    unsigned char *buf = malloc(1 << 20), *want = malloc(1 << 20);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0] && size >= 2; li++) {
        int len = lens[li];
        for (int r = 0; r < rounds; r++) {
            for (int i = 0; i < len; i++) want[i] = (unsigned char)(i * 31 + r + li);
            MPI_Status st;
            if (rank == 0) {
                memcpy(buf, want, len);
                MPI_Send(buf, len, MPI_BYTE, 1, r, MPI_COMM_WORLD);
                memset(buf, 0, len);
                MPI_Recv(buf, 1 << 20, MPI_BYTE, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            } else if (rank == 1) {
                MPI_Recv(buf, 1 << 20, MPI_BYTE, 0, r, MPI_COMM_WORLD, &st);
                MPI_Send(buf, len, MPI_BYTE, 0, r + 1000, MPI_COMM_WORLD);
            }
            if (rank <= 1) {
                int count;
                MPI_Get_count(&st, MPI_BYTE, &count);
                CHECK(count == len, "len %d: count %d", len, count);
                CHECK(st.MPI_SOURCE == 1 - rank, "source %d", st.MPI_SOURCE);
                CHECK(st.MPI_TAG == (rank == 0 ? r + 1000 : r), "tag %d", st.MPI_TAG);
                CHECK(memcmp(buf, want, len) == 0, "len %d round %d: content differs", len, r);
            }
        }
        if (rank == 0) printf("pingpong: %d bytes x %d ok\n", len, rounds);
    }
    /* Counts in elements of a wider type, and a byte count that is not a multiple. */
    if (rank <= 1 && size >= 2) {
        double d[5] = {1.5, 2.5, 3.5, 4.5, 5.5}, got[5] = {0};
        MPI_Status st;
        int count;
        if (rank == 0) {
            MPI_Send(d, 5, MPI_DOUBLE, 1, 9, MPI_COMM_WORLD);
            MPI_Send(d, 3, MPI_BYTE, 1, 10, MPI_COMM_WORLD);
        } else {
            MPI_Recv(got, 5, MPI_DOUBLE, 0, 9, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_DOUBLE, &count);
            CHECK(count == 5 && got[4] == 5.5, "doubles: count %d, last %g", count, got[4]);
            MPI_Recv(got, 40, MPI_BYTE, 0, 10, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(count == MPI_UNDEFINED, "3 bytes as ints: %d", count);
        }
    }
    free(buf);
    free(want);
    int code = report("pingpong");
    MPI_Finalize();
    return code;
}
