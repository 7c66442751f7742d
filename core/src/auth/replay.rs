//! The replay guard: a signed request is taken once, and only while its
//! timestamp is within a window of the node's wall clock. Pure: the wall clock
//! (`now_ms`) is passed in.
//!
//! A job signature is taken the same way by each executor, but for one
//! holder (the node that offered it): that node may offer the job again
//! (placement tried again after a refusal elsewhere, a restart under a new
//! wire id), which is no replay; another node presenting it is.

use std::collections::{BTreeMap, BTreeSet};

use super::{AuthError, PublicKey};

/// Remembers each (key, nonce) taken within the window, and for whom
/// (`H`: nobody for tool requests); bounded.
#[derive(Debug)]
pub struct ReplayGuard<H = ()> {
    window_ms: u64,
    cap: usize,
    /// (key, nonce) -> its timestamp and holder.
    seen: BTreeMap<(PublicKey, u64), (u64, H)>,
    /// The same entries by timestamp, to forget the old ones in order.
    by_time: BTreeSet<(u64, PublicKey, u64)>,
}

/// How far a request's timestamp may be from the node's clock: 5 minutes.
pub const REPLAY_WINDOW_MS: u64 = 5 * 60 * 1000;

/// How far a job signature's timestamp may be from an executor's clock: 7
/// days. A job is offered again long after it was signed: placement tried
/// again after it waited for free slots, a restart from scratch under a new
/// wire id, both by the node that first offered it (which
/// [`ReplayGuard::check_for`] lets through); a node that captured the offer
/// cannot present it where it was taken before, in that window.
pub const JOB_SIGNATURE_WINDOW_MS: u64 = 7 * 24 * 3600 * 1000;

/// Most requests remembered at once; past it new requests are refused (fail
/// closed) until old ones leave the window.
pub const REPLAY_CAP: usize = 100_000;

impl<H: PartialEq> Default for ReplayGuard<H> {
    fn default() -> Self {
        ReplayGuard::new(REPLAY_WINDOW_MS, REPLAY_CAP)
    }
}

impl ReplayGuard {
    /// Takes a request of `key` stamped `ts_ms` with `nonce` at wall clock
    /// `now_ms`: refused outside the window, when seen before, or when full.
    pub fn check(&mut self, now_ms: u64, key: PublicKey, ts_ms: u64, nonce: u64) -> Result<(), AuthError> {
        self.take(now_ms, key, ts_ms, nonce, (), false)
    }
}

impl<H: PartialEq> ReplayGuard<H> {
    /// A guard taking timestamps within `window_ms` of the clock, remembering at
    /// most `cap` requests.
    pub fn new(window_ms: u64, cap: usize) -> Self {
        ReplayGuard { window_ms, cap, seen: BTreeMap::new(), by_time: BTreeSet::new() }
    }

    /// How many requests it remembers.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether it remembers none.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Takes a signature of `key` stamped `ts_ms` with `nonce` for `holder`
    /// at wall clock `now_ms`: refused outside the window, when another
    /// holder took it before, or when full; the same holder may present it
    /// again within the window.
    pub fn check_for(
        &mut self,
        now_ms: u64,
        key: PublicKey,
        ts_ms: u64,
        nonce: u64,
        holder: H,
    ) -> Result<(), AuthError> {
        self.take(now_ms, key, ts_ms, nonce, holder, true)
    }

    /// The window, then the cache: a pair seen before passes only for the
    /// same holder, and only if `again` (holders may present theirs again).
    fn take(
        &mut self,
        now_ms: u64,
        key: PublicKey,
        ts_ms: u64,
        nonce: u64,
        holder: H,
        again: bool,
    ) -> Result<(), AuthError> {
        if ts_ms.abs_diff(now_ms) > self.window_ms {
            return Err(AuthError::Stale {
                skew_ms: i128::from(ts_ms) - i128::from(now_ms),
                window_ms: self.window_ms,
            });
        }
        self.forget_before(now_ms.saturating_sub(self.window_ms));
        if let Some((_, seen)) = self.seen.get(&(key, nonce)) {
            return if again && *seen == holder { Ok(()) } else { Err(AuthError::Replayed) };
        }
        if self.seen.len() >= self.cap {
            return Err(AuthError::Busy);
        }
        self.seen.insert((key, nonce), (ts_ms, holder));
        self.by_time.insert((ts_ms, key, nonce));
        Ok(())
    }

    /// Signatures with `nonce` taken for holder `from` are `to`'s from now
    /// on: `from` is gone and `to`, the deputy it named, holds its jobs
    /// (and may offer them again to place ranks anew).
    pub fn hand_over(&mut self, nonce: u64, from: &H, to: H)
    where
        H: Clone,
    {
        for ((_, n), (_, holder)) in self.seen.iter_mut() {
            if *n == nonce && holder == from {
                *holder = to.clone();
            }
        }
    }

    /// Forgets requests stamped before `oldest`: they are outside the window, so
    /// a replay of one is refused as stale anyway.
    fn forget_before(&mut self, oldest: u64) {
        while let Some(&(ts, key, nonce)) = self.by_time.first() {
            if ts >= oldest {
                break;
            }
            self.by_time.pop_first();
            self.seen.remove(&(key, nonce));
        }
    }
}
