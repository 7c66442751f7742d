//! The vocabulary both overlays (Chord, CAN) share, so the job layer and the MPI
//! library can run over either.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::id::Id;
use crate::machine::NodeAddr;

pub(crate) mod requests;
pub(crate) mod store;

/// A node of an overlay: its id and where it listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Peer {
    /// The node id (SHA-1 of `addr`).
    pub id: Id,
    /// The node's advertised address.
    pub addr: NodeAddr,
}

impl Peer {
    /// The peer listening at `addr`, with the id that address maps to.
    pub fn from_addr(addr: NodeAddr) -> Self {
        Peer { id: addr.id(), addr }
    }
}

/// One registration in flight between nodes (replication, key transfer, handover).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The registered name; its key is SHA-1(name).
    pub name: String,
    /// One value under that name.
    pub value: String,
    /// Milliseconds of life left.
    pub ttl_ms: u64,
}

/// A caller-chosen number that comes back with the answer to a command.
pub type Token = u64;

/// What an application asks of its overlay node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverlayCommand {
    /// Find the node responsible for `key`.
    Lookup { token: Token, key: Id },
    /// Store `value` under `name` for `ttl`, and keep refreshing it until
    /// [`OverlayCommand::Unregister`] or leave.
    Register { name: String, value: String, ttl: Duration },
    /// Withdraw a registration: stop refreshing it and remove it from its owner
    /// (and replicas) now. Best effort: a copy the withdrawal misses expires with
    /// its TTL.
    Unregister { name: String, value: String },
    /// Every live value registered under `name`.
    Query { token: Token, name: String },
    /// Leave gracefully: hand over what this node stores and tell the neighbours.
    Leave,
}

/// Where a key lives, and how many overlay hops it took to find out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupResult {
    /// The responsible node's id.
    pub owner_id: Id,
    /// The responsible node's address.
    pub owner: NodeAddr,
    /// Overlay hops the lookup took (0 when the asking node owns the key).
    pub hops: u32,
}

/// Why an overlay request gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum OverlayError {
    /// No answer before the deadline, retries included.
    #[error("no answer before the deadline")]
    Timeout,
    /// The hop budget ran out before the owner was found.
    #[error("hop budget exhausted")]
    HopBudget,
    /// The node is not (or no longer) part of a network.
    #[error("not connected to an overlay")]
    NotConnected,
}

/// What an overlay node reports to its application.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OverlayEvent {
    /// The node is part of a network (created alone, or joined through a contact).
    Joined,
    /// The node lost every contact and is rejoining through its bootstrap list.
    Disconnected,
    /// Answer to [`OverlayCommand::Lookup`].
    LookupDone { token: Token, key: Id, result: Result<LookupResult, OverlayError> },
    /// Answer to [`OverlayCommand::Query`]: every live value under `name`.
    QueryDone { token: Token, name: String, result: Result<Vec<String>, OverlayError> },
    /// A graceful leave finished: everything stored here was handed over.
    Left,
    /// A contact refused this node's join because it runs another overlay or
    /// another shape of it (`reason` says which, for a person to read). The node
    /// goes on trying its other contacts.
    Refused { contact: NodeAddr, reason: String },
}

/// A command the node cannot carry out in its current state (API misuse).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The node has left; it takes no more commands.
    #[error("the node has left the overlay")]
    Left,
    /// A name or value over the size limit.
    #[error("{what} of {len} bytes exceeds the limit of {max}")]
    TooLarge { what: &'static str, len: usize, max: usize },
}
