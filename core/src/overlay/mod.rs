//! What both overlays (Chord in [`crate::chord`], CAN in [`crate::can`]) share,
//! so the daemon node ([`crate::node::OverlayNode`]), the simulator and the
//! benchmarks run over either: the commands and events, the [`Overlay`]
//! interface both nodes implement, the network's [`OverlayKind`], and the state
//! both keep alike: registrations with their expiry and refresh schedule
//! (`store`, under the same [`Limits`]) and outstanding requests with their
//! deadlines (`requests`). MPI ranks never speak to the overlay: their node
//! resolves process keys for them ([`crate::local`]).

use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::id::Id;
use crate::machine::{Machine, NodeAddr};

pub(crate) mod requests;
pub(crate) mod store;

pub use store::Limits;

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

    /// The peer a message names (its id and address as decoded), if the id is
    /// the one its address maps to. The one place a claimed id is checked.
    pub fn checked(id: Id, addr: NodeAddr) -> Result<Self, IdMismatch> {
        if addr.id() == id { Ok(Peer { id, addr }) } else { Err(IdMismatch { claimed: id, addr }) }
    }
}

/// A peer claimed an id that is not the one its address maps to (see [`Peer::checked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{addr} claims id {claimed}, not the id of its address")]
pub struct IdMismatch {
    /// The id the message claimed.
    pub claimed: Id,
    /// The address it came with.
    pub addr: NodeAddr,
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

/// Which overlay a network runs, and in what shape. Every node of a network runs
/// the same one: a node of another kind is refused, with this in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OverlayKind {
    /// Chord, a ring of SHA-1 ids.
    Chord,
    /// CAN, a torus of `dims` dimensions.
    Can { dims: u8 },
}

impl fmt::Display for OverlayKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverlayKind::Chord => write!(f, "Chord"),
            OverlayKind::Can { dims } => write!(f, "CAN ({dims} dimensions)"),
        }
    }
}

/// Message counts of an overlay node, the same for both overlays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OverlayTraffic {
    /// Messages sent in all.
    pub sent: u64,
    /// Sent to keep the overlay (maintenance, joins, leaves, replicas, refreshes).
    pub maintenance: u64,
    /// Sent for the application's commands.
    pub user: u64,
    /// Replies to peers' requests.
    pub replies: u64,
    /// Application lookups answered with an owner, and their hops in all.
    pub lookups_ok: u64,
    pub lookup_hops: u64,
    /// Application lookups that failed.
    pub lookups_failed: u64,
}

/// One interface over both overlay nodes: build one, drive it as a [`Machine`]
/// with [`OverlayCommand`]s, read its [`OverlayEvent`]s, and ask the few things
/// the simulator, the benchmarks and the daemon need to know of it.
pub trait Overlay:
    Machine<Command = OverlayCommand, Event = OverlayEvent, CmdError = CommandError> + fmt::Debug + Sized
{
    /// The node's tunables.
    type Config: Clone + fmt::Debug;

    /// A node listening at `addr` that joins through `bootstrap` (or starts a
    /// network alone with none). Drain `poll_action` afterwards.
    fn create(config: Self::Config, addr: NodeAddr, bootstrap: Vec<NodeAddr>, now: Instant, seed: u64) -> Self;
    /// The overlay and shape this node runs.
    fn kind(&self) -> OverlayKind;
    /// The node's id (SHA-1 of its address).
    fn node_id(&self) -> Id;
    /// Part of a network now.
    fn joined(&self) -> bool;
    /// Finished a graceful leave.
    fn left(&self) -> bool;
    /// Every value stored here under `name` (copies included).
    fn stored(&self, name: &str) -> Vec<String>;
    /// Distinct nodes in the routing state (fingers, successors and predecessor;
    /// or neighbours).
    fn routing_entries(&self) -> usize;
    /// Message counts so far.
    fn traffic(&self) -> OverlayTraffic;
}
