//! libp2pmpi: the MPI-1 C ABI of p2pmp, declared in `mpi/include/mpi.h`.
//!
//! An ordinary MPI C program builds with `p2pmpicc prog.c -o prog` (or
//! `cc -I mpi/include prog.c -L<target dir> -lp2pmpi`) and runs with
//! `p2pjob run -n N ./prog`. Every call goes through `p2pmp_mpi::World`.
//!
//! - Handles are ints (`mpi.h`); communicators are the world, self and their
//!   duplicates, each on its own engine ids ([`p2pmp_mpi::CommId`]).
//! - Every argument is checked before anything starts; a failure goes to the
//!   communicator's error handler: `MPI_ERRORS_ARE_FATAL` (default) prints the
//!   function, the error class and why, then ends the process with a non-zero
//!   code, which fails the job; `MPI_ERRORS_RETURN` returns the class.
//! - Threading: `MPI_THREAD_FUNNELED` at most; the state is a thread-local of
//!   the thread that called `MPI_Init` (no lock; another thread's calls are
//!   refused), which is why handles share communicators through `Rc`.
//!
//! Modules by concern: [`consts`] (the header's values), [`types`] and
//! [`type_api`] (datatypes), [`ops`],
//! [`status`], [`buf`] (checked pointers), [`error`], [`state`], [`comm`],
//! [`init`], [`p2p`], [`request`], [`coll`].

// The exported functions carry the standard's names (MPI_Comm_rank, ...).
#![allow(non_snake_case)]

pub mod attr;
pub mod bsend;
mod buf;
pub mod ckpt;
pub mod coll;
mod comm;
pub mod comm_api;
mod consts;
pub mod errh;
pub mod error;
pub mod group;
mod handles;
pub mod info;
pub mod init;
pub mod intercoll;
pub mod ops;
pub mod p2p;
pub mod request;
mod state;
pub mod status;
pub mod topo;
pub mod type_api;
mod types;
