/*
 * p2pmp.h of libp2pmpi: application-level checkpoints (see the Rust side,
 * p2pmp_mpi::ckpt, for how a coordinated checkpoint is taken). Include it
 * beside mpi.h; `p2pmpicc` finds both.
 *
 * Every call returns MPI_SUCCESS or an MPI error class (through the world
 * communicator's error handler, like any MPI call) and must be made between
 * MPI_Init and MPI_Finalize by the thread that called MPI_Init. Hooks run
 * inside P2P_Snapshot or P2P_Recover and must not call MPI.
 */
#ifndef P2PMPI_P2PMP_H
#define P2PMPI_P2PMP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* add or update a region saved with every checkpoint (id >= 0) */
int  P2P_Protect(int id, void *ptr, size_t bytes);
int  P2P_Unprotect(int id);
/* after MPI_Init and the P2P_Protect calls: when this process resumes from a
   checkpoint, fill every protected region from it and set *restarted = 1;
   otherwise set it to 0 */
int  P2P_Recover(int *restarted);
/* a safe point, called by every rank of MPI_COMM_WORLD the same number of
   times, like a collective: the job's coordinated checkpoint is taken here
   when one is due (the job's interval) or asked for (`p2pjob checkpoint
   JOB`); returns MPI_SUCCESS */
int  P2P_Snapshot(void);
/* the original system's hooks, called before and after a checkpoint and on
   restart */
void ckpt_on_preckpt(void (*f)(void *), void *arg);
void ckpt_on_postckpt(void (*f)(void *), void *arg);
void ckpt_on_restart(void (*f)(void *), void *arg);

#ifdef __cplusplus
}
#endif

#endif
