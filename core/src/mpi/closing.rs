//! Leaving (`MPI_Finalize`): when a rank may close its connections and go.
//!
//! A rank may leave once, for every peer, either the peer acknowledged every
//! frame we sent it and we told it every acknowledgement and credit we owe, or
//! the peer is known to be gone. While closing, acknowledgements go out at once
//! (no delay), so a rank that leaves has acknowledged everything it received.
//!
//! "Gone" needs evidence gathered *while closing*: the driver reports each
//! failed attempt to reach a peer ([`MpiEngine::handle_unreachable`]). A
//! failure seen before closing proves nothing (the peer may not have
//! registered its address yet: ranks start at different times), and counting
//! it is what lost a finalize barrier message: a rank whose first connection
//! attempt failed took the peer for gone, left, and the peer waited forever for
//! it. A peer counts as gone when an attempt failed while closing and either
//! we heard from it before (it did exist and was reachable, so failing now means
//! it withdrew its address and left), or the attempts kept failing for
//! [`GONE_GRACE`].

use std::time::{Duration, Instant};

use super::MpiEngine;

/// How long attempts to reach a peer never heard from must keep failing, while
/// closing, before the peer counts as gone.
pub const GONE_GRACE: Duration = Duration::from_secs(2);

impl MpiEngine {
    /// Starts leaving: acknowledgements and credit owed go out at once, and from
    /// now on without delay. Idempotent.
    pub fn start_closing(&mut self, now: Instant) {
        if self.closing {
            return;
        }
        self.closing = true;
        for q in 0..self.size {
            if q != self.rank {
                self.schedule_ack(now, q);
            }
        }
    }

    /// Whether [`MpiEngine::start_closing`] was called.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// The driver tried to reach `peer` and could not (no address registered, the
    /// connection refused). Counts only while closing; a reconnect clears it.
    pub fn handle_unreachable(&mut self, now: Instant, peer: u32) {
        if !self.closing || peer == self.rank {
            return;
        }
        if let Some(p) = self.peers.get_mut(peer as usize) {
            p.unreachable_since.get_or_insert(now);
        }
    }

    /// Whether `peer` is known to be gone (see the module docs).
    pub fn is_gone(&self, now: Instant, peer: u32) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| {
            p.unreachable_since.is_some_and(|t| p.heard || now.saturating_duration_since(t) >= GONE_GRACE)
        })
    }

    /// Whether this rank, closing, may leave now: every peer has everything from
    /// us (frames acknowledged, acknowledgements told) or is gone. False before
    /// [`MpiEngine::start_closing`].
    pub fn may_leave(&self, now: Instant) -> bool {
        self.closing
            && (0..self.size).all(|q| {
                let p = &self.peers[q as usize];
                q == self.rank || (p.unacked.is_empty() && !p.needs_ack()) || self.is_gone(now, q)
            })
    }

    /// When [`MpiEngine::may_leave`] may turn true by time alone (a peer's grace
    /// running out), if it waits for that.
    pub fn leave_deadline(&self) -> Option<Instant> {
        if !self.closing {
            return None;
        }
        self.peers.iter().filter(|p| !p.heard).filter_map(|p| p.unreachable_since).map(|t| t + GONE_GRACE).min()
    }
}
