/* Checkpoint and restart of a ring (p2pmp.h). Each iteration passes a token
 * around all ranks (rank 0 pausing 1 ms, so that a run lasts long enough for
 * several checkpoint intervals), folds it into a per-rank checksum and calls
 * P2P_Snapshot.
 * The token, the iteration and the checksum are protected; a restarted process
 * (P2PMP_RESTART) resumes from its checkpoint and must end with the results of
 * an undisturbed run. Usage: ckpt loops [die_at [trace_every]]: with die_at
 * (-1: never), rank 1 (or 0 on one rank) exits with status 3 at that iteration
 * unless it was restarted; with trace_every, each rank appends "rank R
 * iteration I" to trace.txt in its working directory at every multiple of it,
 * before the safe point, so a rank that moves must find the file as it left
 * it for the lines to run on without a gap or a repeat. */
#define _POSIX_C_SOURCE 199309L
#include <mpi.h>
#include <p2pmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

struct counts {
    int pre, post, restart;
};

static void count(void *arg) { ++*(int *)arg; }

int main(int argc, char **argv) {
    int rank, size, restarted = -1;
    long loops = argc > 1 ? atol(argv[1]) : 100;
    long die_at = argc > 2 ? atol(argv[2]) : -1;
    long trace_every = argc > 3 ? atol(argv[3]) : 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long i = 0, token = 0;
    unsigned long sum[64] = {0};
    struct counts hooks = {0, 0, 0};
    ckpt_on_preckpt(count, &hooks.pre);
    ckpt_on_postckpt(count, &hooks.post);
    ckpt_on_restart(count, &hooks.restart);
    CHECK(P2P_Protect(0, &i, sizeof i) == MPI_SUCCESS, "protect i");
    CHECK(P2P_Protect(1, &token, sizeof token) == MPI_SUCCESS, "protect token");
    CHECK(P2P_Protect(7, sum, sizeof sum) == MPI_SUCCESS, "protect sum");
    CHECK(P2P_Protect(8, &size, sizeof size) == MPI_SUCCESS, "protect a region to drop");
    CHECK(P2P_Unprotect(8) == MPI_SUCCESS, "unprotect");
    CHECK(P2P_Recover(&restarted) == MPI_SUCCESS, "recover");
    CHECK(restarted == 0 || restarted == 1, "restarted is %d", restarted);
    CHECK(hooks.restart == restarted, "restart hook ran %d times", hooks.restart);
    if (restarted) printf("resumed at iteration %ld\n", i);
    /* i counts the iterations done: what a checkpoint saves is a whole step. */
    while (i < loops) {
        if (i == die_at && !restarted && rank == (size > 1 ? 1 : 0)) {
            fprintf(stderr, "rank %d dies at iteration %ld\n", rank, i);
            fflush(stdout);
            _exit(3);
        }
        if (rank == 0) {
            struct timespec ms = {0, 1000 * 1000};
            nanosleep(&ms, NULL);
            long out = token + 1;
            MPI_Sendrecv(&out, 1, MPI_LONG, next, 1, &token, 1, MPI_LONG, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token++;
            MPI_Send(&token, 1, MPI_LONG, next, 1, MPI_COMM_WORLD);
        }
        sum[i % 64] = sum[i % 64] * 31 + (unsigned long)token;
        i++;
        if (trace_every > 0 && i % trace_every == 0) {
            FILE *trace = fopen("trace.txt", "a");
            CHECK(trace != NULL, "open trace.txt");
            fprintf(trace, "rank %d iteration %ld\n", rank, i);
            CHECK(fclose(trace) == 0, "close trace.txt");
        }
        CHECK(P2P_Snapshot() == MPI_SUCCESS, "snapshot at %ld", i);
        if (hooks.pre) CHECK(hooks.pre == hooks.post, "hooks %d before, %d after", hooks.pre, hooks.post);
    }
    unsigned long h = 0;
    for (int k = 0; k < 64; k++) h = h * 1000003 + sum[k];
    unsigned long all = 0;
    MPI_Reduce(&h, &all, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    int taken = hooks.post, most = 0;
    MPI_Reduce(&taken, &most, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ckpt: token %ld, checksum %lx\n", token, all);
        printf("ckpt: checkpoints taken %d\n", most);
    }
    if (rank == 0) CHECK(token == loops * size, "token %ld", token);
    int rc = report("ckpt");
    MPI_Finalize();
    return rc;
}
