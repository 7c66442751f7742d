//! Chord: a ring of 160-bit ids where each key lives on its successor.
//!
//! [`ChordNode`] is a sans-IO [`Machine`](crate::machine::Machine): it joins
//! through a bootstrap list, keeps its successor list, predecessor and fingers
//! fresh on timers (stabilize, fix-fingers, check-predecessor), answers and runs
//! iterative lookups with a hop budget and a deadline, stores replicated
//! registrations with a TTL, and leaves gracefully.
//!
//! - `node`: the machine ([`ChordNode`]): the state it composes, its timers, the
//!   input dispatch (where a sender's id is checked against its address), and
//!   `ChordNode::check_invariants`, the node's own consistency check.
//! - `requests`: the outstanding requests (`Outstanding`: ids, deadlines, what
//!   each waits for) and what a request without a useful answer leads to.
//! - `membership`: join, failure repair, rejoin or merge, graceful leave.
//! - `stabilize`: stabilize / notify / check-predecessor, leave notices.
//! - `lookup`: iterative lookups.
//! - `owner_check`: a lookup's named owner confirmed by the owner itself (a
//!   protocol step, one round trip).
//! - `finger`: the compact finger table with its fix-fingers pass (`FingerTable`).
//! - `registry`: stored and own registrations (`Registry`), refresh, replication,
//!   queries, key transfer.
//! - `msg`: the wire messages ([`ChordMsg`]).
//! - [`check`]: the checker with global knowledge no node has ([`check::RingTruth`]:
//!   the true ring of a simulated network, and how far each node's view is from
//!   it), for tests, benchmarks and the status page; never used by a node.
//!
//! Three kinds of checking, kept apart: `owner_check` is part of the protocol;
//! `ChordNode::check_invariants` asserts what must hold inside one node after any
//! input (tests and fuzzers call it); [`check`] judges a whole network from outside.
//!
//! # Lookups and hops
//! Lookups are iterative: the asking node asks the closest preceding finger it
//! knows, which answers "my successor (or I) own the key" or with its own closest
//! preceding fingers; a silent hop is routed around through the next candidate (and
//! finally the successor list). Hops count the remote nodes asked; a node that finds
//! the owner in its own table (itself or its successor) answers with 0 hops. Routing
//! uses fingers only, as in the Chord paper, so the mean is about ½·log2 N.
//! Under churn the last hop's successor pointer may lag, so an application lookup
//! or query whose owner was named by another node asks that owner for its
//! predecessor before answering (`owner_check`): one round trip, counted apart from the
//! hops in [`ChordStats::owner_checks`].
//!
//! # Failures
//! A send failure drops the peer at once; a timeout drops it too, except the
//! successor and predecessor, which get a second chance (a lost message is not a
//! crash). A node whose successor list and fingers are all gone rejoins through its
//! bootstrap list and the peers it remembers, reporting `Disconnected`; it never
//! creates a second ring on its own, except the ring's creator (no bootstrap list),
//! which falls back to a ring of one and keeps asking remembered peers until their
//! ring and its own agree.
//!
//! # Cost
//! About 1-3 KB per node (fingers are runs of equal entries, ~log2 N of them).
//! Steady state, a node sends ~3.5 messages a second of its own (stabilize, notify,
//! half a ping, one finger check) plus as many replies: fix-fingers checks a finger
//! with one `GetPredecessor` and looks it up only when it moved. A joining node
//! copies its successor's fingers, and `NewPredecessor` hints make corrections
//! ripple at network speed, so even thousands of nodes joining at once through one
//! contact converge in tens of seconds.

use std::time::Duration;

pub mod check;
mod finger;
mod lookup;
mod membership;
mod msg;
mod node;
mod owner_check;
mod registry;
mod requests;
mod stabilize;

#[cfg(test)]
mod tests;

pub use msg::{ChordMsg, Entry, Peer, Step};
pub use node::{ChordNode, ChordStats};

/// Tuning of a Chord node. [`ChordConfig::default`] gives the values of the design.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChordConfig {
    /// Length r of the successor list.
    pub successors: usize,
    /// Copies of each registration: the owner plus `replicas - 1` successors.
    pub replicas: u8,
    /// How often to ask the successor for its predecessor and list.
    pub stabilize_period: Duration,
    /// How often to refresh one finger (the first pass after joining runs back to back).
    pub fix_fingers_period: Duration,
    /// How often to ping the predecessor.
    pub check_predecessor_period: Duration,
    /// How long to wait for any one reply.
    pub request_timeout: Duration,
    /// How long a lookup (or query) may take in all, retries included.
    pub lookup_timeout: Duration,
    /// Hop budget of a lookup.
    pub max_hops: u32,
    /// First wait before retrying the bootstrap list after every contact failed.
    pub join_backoff_min: Duration,
    /// Longest wait between rounds of join attempts. Short: a node joining
    /// through a contact that is itself still joining waits this long after the
    /// contact joins, and such waits add up along a chain of joiners.
    pub join_backoff_max: Duration,
    /// What the node registers and stores at most.
    pub limits: crate::overlay::Limits,
}

impl Default for ChordConfig {
    fn default() -> Self {
        ChordConfig {
            successors: 8,
            replicas: 3,
            stabilize_period: Duration::from_secs(1),
            fix_fingers_period: Duration::from_secs(1),
            check_predecessor_period: Duration::from_secs(2),
            request_timeout: Duration::from_millis(500),
            lookup_timeout: Duration::from_secs(5),
            max_hops: 64,
            join_backoff_min: Duration::from_secs(1),
            join_backoff_max: Duration::from_secs(8),
            limits: crate::overlay::Limits::default(),
        }
    }
}
