//! The replay guard: a signed request is taken once, and only while its
//! timestamp is within a window of the node's wall clock. Pure: the wall clock
//! (`now_ms`) is passed in.

use std::collections::{BTreeMap, BTreeSet};

use super::{AuthError, PublicKey};

/// Remembers each (key, nonce) taken within the window; bounded.
#[derive(Debug)]
pub struct ReplayGuard {
    window_ms: u64,
    cap: usize,
    /// (key, nonce) -> its timestamp.
    seen: BTreeMap<(PublicKey, u64), u64>,
    /// The same entries by timestamp, to forget the old ones in order.
    by_time: BTreeSet<(u64, PublicKey, u64)>,
}

/// How far a request's timestamp may be from the node's clock: 5 minutes.
pub const REPLAY_WINDOW_MS: u64 = 5 * 60 * 1000;

/// Most requests remembered at once; past it new requests are refused (fail
/// closed) until old ones leave the window.
pub const REPLAY_CAP: usize = 100_000;

impl Default for ReplayGuard {
    fn default() -> Self {
        ReplayGuard::new(REPLAY_WINDOW_MS, REPLAY_CAP)
    }
}

impl ReplayGuard {
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

    /// Takes a request of `key` stamped `ts_ms` with `nonce` at wall clock
    /// `now_ms`: refused outside the window, when seen before, or when full.
    pub fn check(&mut self, now_ms: u64, key: PublicKey, ts_ms: u64, nonce: u64) -> Result<(), AuthError> {
        if ts_ms.abs_diff(now_ms) > self.window_ms {
            return Err(AuthError::Stale { skew_ms: i128::from(ts_ms) - i128::from(now_ms) });
        }
        self.forget_before(now_ms.saturating_sub(self.window_ms));
        if self.seen.contains_key(&(key, nonce)) {
            return Err(AuthError::Replayed);
        }
        if self.seen.len() >= self.cap {
            return Err(AuthError::Busy);
        }
        self.seen.insert((key, nonce), ts_ms);
        self.by_time.insert((ts_ms, key, nonce));
        Ok(())
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
