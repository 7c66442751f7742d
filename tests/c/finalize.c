/* MPI_Init then MPI_Finalize and nothing else (issue #13: a rank could leave
 * finalize's barrier before its message reached a peer, which then waited
 * forever). With "print", rank 0 prints a line first (the hang was likeliest
 * then). With "sleep", every rank sleeps a minute first (the launcher's
 * MPIEXEC_TIMEOUT test). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank = -1, size = 0;
    MPI_Init(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "print") == 0) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (rank == 0) printf("finalize: rank 0 of %d\n", size);
    }
    if (argc > 1 && strcmp(argv[1], "sleep") == 0) sleep(60);
    MPI_Finalize();
    return 0;
}
