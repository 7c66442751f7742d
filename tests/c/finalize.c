/* MPI_Init then MPI_Finalize and nothing else (issue #13: a rank could leave
 * finalize's barrier before its message reached a peer, which then waited
 * forever). With "print", rank 0 prints a line first (the hang was likeliest
 * then). With "sleep", every rank sleeps a minute first (the launcher's
 * MPIEXEC_TIMEOUT test). With "skip", rank 1 returns from main without
 * MPI_Finalize; with "exit", it calls exit(0) while rank 0 waits for its
 * message, and with "exit3", exit(3): each must fail the job (the last with
 * its own status), not leave rank 0 waiting. With "fork", every rank forks a
 * child that exits 0 at once: it is no rank, and its status stays 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        int status = -1;
        pid_t child = fork();
        if (child == 0) exit(0);
        waitpid(child, &status, 0);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        printf("fork: rank %d's child exited %d\n", rank, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    if (argc > 1 && (strcmp(argv[1], "skip") == 0 || strncmp(argv[1], "exit", 4) == 0)) {
        int token = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 1 && strcmp(argv[1], "skip") == 0) return 0;
        if (rank == 1) exit(strcmp(argv[1], "exit3") == 0 ? 3 : 0);
        if (rank == 0 && strcmp(argv[1], "skip") != 0)
            MPI_Recv(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
    return 0;
}
