//! The library's error type.

use std::io;

use p2pmp_core::mpi::MpiError;
use p2pmp_core::wire::WireError;
use thiserror::Error;

/// Everything an MPI call can fail with.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The environment the node gives a rank is missing or malformed.
    #[error("environment variable {var}: {problem}")]
    Env { var: &'static str, problem: String },
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The local node answered badly or not at all.
    #[error("local node: {0}")]
    Node(String),
    /// Malformed bytes from the local node.
    #[error("wire error: {0}")]
    Wire(#[from] WireError),
    /// A call the engine refuses (bad rank, negative tag, ...).
    #[error(transparent)]
    Mpi(#[from] MpiError),
    /// A message is longer than the receive buffer, or not a whole number of elements.
    #[error("message of {got} bytes does not fit a buffer of {want} bytes")]
    Truncated { got: usize, want: usize },
    /// A rank stayed unreachable until the deadline.
    #[error("rank {rank} unreachable: {why}")]
    Unreachable { rank: u32, why: String },
    /// Arguments that cannot work (e.g. buffer lengths that differ between ranks).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A rank that is not in the group or communicator.
    #[error("{0}")]
    Rank(String),
    /// A group that cannot serve (a process twice, not a subset, ...).
    #[error("{0}")]
    Group(String),
    /// A communicator that cannot serve the call (an intercommunicator where an
    /// intracommunicator is needed, ...).
    #[error("{0}")]
    Comm(String),
    /// A checkpoint that cannot be written or used (corrupt, of another rank,
    /// regions that do not match what the program protects).
    #[error("checkpoint: {0}")]
    Checkpoint(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
