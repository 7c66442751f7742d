//! p2pmp-mpi: the MPI library p2pmp applications link.
//!
//! ```no_run
//! use p2pmp_mpi::{ANY_SOURCE, Op};
//!
//! let mut world = p2pmp_mpi::init()?;
//! let (rank, size) = (world.rank(), world.size());
//! if rank == 0 {
//!     world.send(&[42u64], 1 % size, 7)?;
//! }
//! if rank == 1 % size {
//!     let (v, status) = world.recv::<u64>(ANY_SOURCE, Some(7))?;
//!     assert_eq!((v[0], status.source), (42, 0));
//! }
//! let total = world.allreduce(&[rank as u64], Op::Sum)?;
//! assert_eq!(total[0], (0..size as u64).sum());
//! world.finalize()?;
//! # Ok::<(), p2pmp_mpi::Error>(())
//! ```
//!
//! - [`init`] reads `P2PMP_JOB` (hex job id), `P2PMP_RANK`, `P2PMP_SIZE`,
//!   `P2PMP_NODE` (the local node's control address) and `P2PMP_HOST` (its
//!   host's address; loopback when unset), listens on an ephemeral port of that
//!   address and registers the process key (SHA-1 of job id and rank) with the
//!   node, with the public half of a fresh Noise key. TCP links between hosts
//!   are encrypted and authenticated with those keys (`P2PMP_ENCRYPT`: `auto`,
//!   the default, `always` or `never`; see `transport`); ranks of one host use
//!   shared memory (`P2PMP_SHM=0` turns it off). A process started alone,
//!   with none of the first four set, is a world of one rank with a node of
//!   its own (MPI's singleton init; see [`local_node`]).
//! - [`World`]: point-to-point (`send`, `recv`, `isend`, `irecv`, `wait`,
//!   `waitall`, `test`, `probe`, `iprobe`) and collectives (`barrier`, `bcast`,
//!   `reduce`, `allreduce`, `gather`, `scatter`, `allgather`, `alltoall`) over
//!   [`Pod`] element types (`u8`..`u64`, `i8`..`i64`, `f32`, `f64`) and raw
//!   [`bytes::Bytes`] (a received message's bytes are a [`Payload`]: up to
//!   [`Payload::INLINE`] held in place, without an allocation); byte-level
//!   collectives with any combining function, commutative or not
//!   ([`Combine`]: `reduce_bytes`, `allreduce_bytes`, `scan_bytes`,
//!   `reduce_scatter_bytes`) and with blocks of any length
//!   (`gatherv_bytes`, `scatterv_bytes`, `allgatherv_bytes`, `alltoallv_bytes`);
//!   `cancel` (receives, and sends no receive took yet) and `forget`.
//! - [`Group`] and [`Comm`]: MPI-1 groups and communicators; `comm_dup`,
//!   `comm_split`, `comm_create`, `intercomm_create`, `intercomm_merge` make
//!   them, `isend_in` / `irecv_in` / `collectives_in` use them, and the
//!   `inter_*` collectives run on intercommunicators ([`InterRoot`]).
//! - [`ckpt`]: application-level checkpoints: `protect` regions, take the
//!   job's coordinated checkpoint at `snapshot` safe points, `recover` them when
//!   the process resumes (`P2PMP_RESTART`), with pre/post/restart hooks.
//! - [`datatype`]: derived datatypes as [`datatype::Layout`]s (the (offset,
//!   length) runs of a committed type) with packing.
//! - Matching, eager/rendezvous, flow control and resend-after-reconnect are the
//!   sans-IO engine of `p2pmp_core::mpi`, and when to resolve, connect, back off
//!   and give up is its link machine (`p2pmp_core::mpi::Links`); this crate only
//!   moves frames over TCP (see `transport`, one connection per rank pair) on
//!   the calling thread, resolving and connecting without waiting, and between
//!   ranks of one host through shared memory; a blocking call polls while a
//!   core is free and the answer is likely near, yields when this host's ranks
//!   outnumber its cores (then, until other work is seen on the machine,
//!   each also keeps to a core of its own place among them, so that they
//!   spread evenly; `P2PMP_SPREAD=0` leaves that to the kernel) or when the
//!   shared-memory peer it waits for may need its core (then the higher
//!   rank of the two also moves to another core, unless it was pinned),
//!   and sleeps when the wait is long (in `recv` on the one TCP peer it
//!   waits for, else in `epoll`, woken by a doorbell for shared memory);
//!   [`SpinPolicy`] fixes the policy instead.
//!
//! A message's way crosses this crate, `p2pmp-core` and `bytes`, and their
//! functions that are neither generic nor `#[inline]` are inlined across
//! crates only by link-time optimisation: build programs for speed
//! with `lto = "fat"` and `codegen-units = 1` in the release profile, as this
//! workspace does (an 8 B shared-memory ping-pong: 0.245 us a message
//! against 0.302 without).

pub mod ckpt;
mod coll;
mod collv;
mod comm;
mod create;
pub mod datatype;
mod done;
mod env;
mod error;
mod exit;
mod flat;
mod group;
mod intercoll;
pub mod local_node;
mod node_client;
mod pod;
mod progress;
mod reduce;
mod reqmap;
mod shm;
mod sock;
mod transport;
mod world;

pub use ckpt::CheckpointStats;
pub use comm::{Comm, CommId};
pub use env::{
    DEFAULT_FAILURE_TIMEOUT, ENCRYPT_VAR, Encrypt, FAILURE_TIMEOUT_VAR, HOST_VAR, JOB_VAR, NODE_VAR, RANK_VAR, RankEnv,
    SIZE_VAR, parse_hex, to_hex,
};
pub use error::{Error, Result};
pub use exit::{ending_on_purpose, exit_on_purpose};
pub use group::{Group, Similarity};
pub use intercoll::InterRoot;
pub use pod::{Op, Pod, shared_bytes};
pub use progress::{SpinPolicy, WaitStats};
pub use reduce::Combine;
pub use world::{ANY_SOURCE, ANY_TAG, Completed, Message, Payload, Request, Status, World, init};
