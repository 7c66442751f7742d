/* Trial-division factoring of N: rank r tries 2+r, 2+r+size, ...; every K
 * candidates the ranks agree (MPI_Allreduce, MPI_MIN over found factors) on
 * whether one was found. Rank 0 prints "factor: N = p x q" and, on stderr, the
 * time. Usage: factor [N [K]] (default 4611686039902224373, two primes near
 * 2^31, K 500). Also a demo program. Built with FACTOR_CKPT (factor_ckpt.c),
 * each round ends at a safe point (p2pmp.h: the next candidate and the factor
 * found are protected), and a resumed rank says where it resumed. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef FACTOR_CKPT
#include <p2pmp.h>
#endif

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned long long n = argc > 1 ? strtoull(argv[1], NULL, 10) : 4611686039902224373ULL;
    long k = argc > 2 ? atol(argv[2]) : 500;
    if (n < 4 || k < 1) {
        if (rank == 0) fprintf(stderr, "usage: factor [N >= 4 [K >= 1]]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* floor(sqrt(n)) by Newton's method, without floating point */
    unsigned long long limit = n, y = (n + 1) / 2;
    while (y < limit) {
        limit = y;
        y = (limit + n / limit) / 2;
    }
    unsigned long long cand = 2 + (unsigned long long)rank, step = (unsigned long long)size;
    /* "None found" is 2^63 - 1, not ~0: MPICH 4.0.2 compares MPI_UNSIGNED_LONG_LONG
     * as signed in MPI_MIN, so values of 2^63 and above would win. */
    unsigned long long none = 0x7fffffffffffffffULL, found = none, global = none;
    int restarted = 0;
#ifdef FACTOR_CKPT
    P2P_Protect(0, &cand, sizeof cand);
    P2P_Protect(1, &found, sizeof found);
    P2P_Recover(&restarted);
    if (restarted) printf("resumed at candidate %llu\n", cand);
#endif
    /* A resumed rank is inside the loop, where the others are. */
    if (!restarted) MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (;;) {
        for (long i = 0; i < k && cand <= limit && found == none; i++, cand += step)
            if (n % cand == 0) found = cand;
        int more = cand <= limit, any_more;
        MPI_Allreduce(&found, &global, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&more, &any_more, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        if (global != none || !any_more) break;
#ifdef FACTOR_CKPT
        P2P_Snapshot();
#endif
    }
    if (rank == 0) {
        if (global == none) printf("factor: %llu is prime\n", n);
        else printf("factor: %llu = %llu x %llu\n", n, global, n / global);
        fprintf(stderr, "factor: %.6f s on %d ranks\n", MPI_Wtime() - t0, size);
    }
    MPI_Finalize();
    return 0;
}
