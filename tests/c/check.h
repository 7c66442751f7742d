/* A tiny check helper shared by the C test programs: CHECK counts and reports
 * failures; report() sums them over all ranks and rank 0 prints one line. */
#ifndef P2PMP_TEST_CHECK_H
#define P2PMP_TEST_CHECK_H
#include <mpi.h>
#include <stdio.h>

static int check_failures = 0, check_count = 0;

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        check_count++;                                                              \
        if (!(cond)) {                                                              \
            int r_;                                                                 \
            MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                     \
            printf("FAIL rank %d %s:%d: ", r_, __FILE__, __LINE__);                 \
            printf(__VA_ARGS__);                                                    \
            printf("\n");                                                           \
            check_failures++;                                                       \
        }                                                                           \
    } while (0)

/* The error class of a return code (codes need not be their classes). */
static inline int err_class(int rc) {
    int c = rc;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &c);
    return c;
}

/* Rank 0 prints "<name>: <checks> checks, <failures> failures" (summed over
 * ranks); returns the process exit code. */
static int report(const char *name) {
    int counts[2] = {check_count, check_failures}, total[2];
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Reduce(counts, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: %d checks, %d failures\n", name, total[0], total[1]);
    return check_failures != 0;
}
#endif
