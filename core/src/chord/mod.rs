//! Chord: a ring of 160-bit ids where each key lives on its successor.
//!
//! [`ChordNode`] is a sans-IO [`Machine`](crate::machine::Machine): it joins
//! through a bootstrap list, keeps its successor list, predecessor and fingers
//! fresh on timers (stabilize, fix-fingers, check-predecessor), answers and runs
//! iterative lookups with a hop budget and a deadline, stores replicated
//! registrations with a TTL, and leaves gracefully.
//!
//! - `node`: the machine, its state and the input dispatch.
//! - `membership`: join, failure repair, rejoin or merge, graceful leave.
//! - `stabilize`: stabilize / notify / check-predecessor, leave notices.
//! - `lookup`: iterative lookups and fix-fingers.
//! - `finger`: the compact finger table.
//! - `registry`: stored registrations, refresh, queries, key transfer.
//! - `msg`: the wire messages.

use std::time::Duration;

pub mod check;
mod finger;
mod lookup;
mod membership;
mod msg;
mod node;
mod registry;
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
    /// Longest wait between rounds of join attempts.
    pub join_backoff_max: Duration,
    /// Longest registration name, in bytes.
    pub max_name_len: usize,
    /// Longest registration value, in bytes.
    pub max_value_len: usize,
    /// Longest TTL honoured; longer ones (from commands or peers) are cut to this.
    pub max_ttl: Duration,
    /// Most values stored under one name.
    pub max_values_per_name: usize,
    /// Most values a node stores in all; more are dropped and counted.
    pub max_stored: usize,
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
            join_backoff_max: Duration::from_secs(30),
            max_name_len: 256,
            max_value_len: 1024,
            max_ttl: Duration::from_secs(24 * 3600),
            max_values_per_name: 1024,
            max_stored: 100_000,
        }
    }
}
