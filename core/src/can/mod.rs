//! CAN, the Content Addressable Network: a d-dimensional torus of `u32`
//! coordinates tiled by zones, each owned by one node; a key lives at the owner of
//! the point its SHA-1 digest maps to.
//!
//! [`CanNode`] is a sans-IO [`Machine`](crate::machine::Machine) with the same
//! commands and events as Chord ([`crate::overlay`]): it joins by splitting the
//! zone of a random point, keeps its neighbour table exact with announcements and
//! heartbeats, routes greedily, stores replicated registrations, hands its zones
//! over when it leaves, and takes over the zones of a neighbour that fails.
//!
//! - `zone`: points, zones and the split tree ([`Point`], [`Zone`]).
//! - `node`: the machine, its state, timers, requests and the input dispatch.
//! - `table`: the neighbour table, heartbeats, probes, and conflicts.
//! - `route`: greedy iterative routing.
//! - `join`: joining by splitting, and rejoining.
//! - `leave`: graceful departure (buddy merge, pair search, hand-offs).
//! - `takeover`: failure detection and takeover.
//! - `gaps`: finding unknown neighbours and unowned space next to a node's zones.
//! - `registry`: registrations, replicas, queries.
//! - `msg`: the wire messages ([`CanMsg`]).
//! - [`check`]: a checker with global knowledge, for tests and benchmarks.
//!
//! # Knowledge
//! A node learns only from messages: its own zones, and its neighbours' zones as
//! each neighbour last described them. Nothing global (the set of all zones, who
//! owns a point far away) lives in a node; that belongs to [`check`].
//!
//! # Cost
//! A node keeps one entry per neighbour (about 2d in a balanced tiling), and
//! sends each one a heartbeat per period, its table every `list_every`th one: about
//! 2d messages a second at the defaults, and none in reply. A route takes about
//! (d/4)·N^(1/d) hops. A joining node gets its whole routing state (its zone and
//! neighbours) in one answer and needs one probe round trip to confirm it.

use std::time::Duration;

pub mod check;
mod gaps;
#[cfg(any(test, feature = "fuzzing"))]
mod invariants;
mod join;
mod leave;
mod msg;
mod node;
mod registry;
mod route;
mod table;
mod takeover;
mod zone;

#[cfg(test)]
mod tests;

pub use msg::{CanMsg, Entry, NodeInfo, Peer, RouteStep};
pub use node::{CanNode, CanStats};
pub use zone::{MAX_DIMS, Point, Region, Zone, volumes_sum_to_one};

/// Tuning of a CAN node. [`CanConfig::default`] gives the values of the design.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanConfig {
    /// Dimensions of the torus, 1 to [`MAX_DIMS`]. Every node of a network must
    /// agree; a joiner with another value is refused.
    pub dims: usize,
    /// How often a node sends each neighbour a heartbeat.
    pub heartbeat_period: Duration,
    /// A neighbour silent for this long has failed.
    pub dead_after: Duration,
    /// Wait before claiming a failed neighbour's zones, times (1 + rank) where
    /// rank 0 is the neighbour with the smallest zones.
    pub takeover_delay: Duration,
    /// Every how many heartbeats one carries the whole neighbour table.
    pub list_every: u32,
    /// How long to wait for any one reply.
    pub request_timeout: Duration,
    /// How long a route (or query) may take in all, detours included.
    pub lookup_timeout: Duration,
    /// Hop budget of a route.
    pub max_hops: u32,
    /// First wait before retrying the bootstrap list after every contact failed.
    pub join_backoff_min: Duration,
    /// Longest wait between rounds of join attempts.
    pub join_backoff_max: Duration,
    /// How long a leaving node tries to hand its zones over before it just goes.
    pub leave_timeout: Duration,
    /// How long a node freed by a pair search waits for the leaving node's zone.
    pub reservation: Duration,
    /// What the node registers and stores at most.
    pub limits: crate::overlay::Limits,
}

impl Default for CanConfig {
    fn default() -> Self {
        CanConfig {
            dims: 2,
            heartbeat_period: Duration::from_secs(1),
            dead_after: Duration::from_millis(3500),
            takeover_delay: Duration::from_millis(300),
            list_every: 4,
            request_timeout: Duration::from_millis(500),
            lookup_timeout: Duration::from_secs(10),
            max_hops: 1024,
            join_backoff_min: Duration::from_secs(1),
            join_backoff_max: Duration::from_secs(8),
            leave_timeout: Duration::from_secs(20),
            reservation: Duration::from_secs(2),
            limits: crate::overlay::Limits::default(),
        }
    }
}
