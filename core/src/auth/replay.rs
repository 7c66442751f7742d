//! The replay guard: a signed request is taken once, and only while its
//! timestamp is within a window of the node's wall clock. Pure: the wall clock
//! (`now_ms`) is passed in.
//!
//! A job signature is taken the same way by each executor, but for one
//! holder (the node that offered it): that node may offer the job again
//! (placement tried again after a refusal elsewhere, a restart under a new
//! wire id), which is no replay; another node presenting it is, unless
//! the holder named it one of the job's deputies (which take the job over,
//! in turn, when the holder is gone), or the holder was lost: then the
//! first node to present it holds it (a deputy taking over a job whose
//! holder died before it could name any; the nodes that could present it
//! are those that were given the offer, and so the job's files, already).

use std::collections::{BTreeMap, BTreeSet};

use super::{AuthError, PublicKey};

/// Remembers each (key, nonce) taken within the window, and for whom
/// (`H`: nobody for tool requests); bounded.
#[derive(Debug)]
pub struct ReplayGuard<H = ()> {
    window_ms: u64,
    cap: usize,
    /// (key, nonce) -> who holds it.
    seen: BTreeMap<(PublicKey, u64), Holding<H>>,
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

/// A signature taken, and who may present it again.
#[derive(Debug)]
struct Holding<H> {
    holder: H,
    /// The deputies the holder named: each may present it too.
    deputies: Vec<H>,
    /// The holder was lost: whoever presents it next holds it.
    lost: bool,
}

impl<H: PartialEq> Holding<H> {
    fn held_by(&mut self, holder: H) {
        (self.holder, self.deputies, self.lost) = (holder, Vec::new(), false);
    }
}

/// Most deputies a holder may name for one signature.
pub const MAX_DEPUTIES: usize = 4;

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
        if let Some(h) = self.seen.get_mut(&(key, nonce)) {
            if again && (h.lost || h.deputies.contains(&holder)) {
                // A deputy took the job over: it holds it now.
                h.held_by(holder);
                return Ok(());
            }
            return if again && h.holder == holder { Ok(()) } else { Err(AuthError::Replayed) };
        }
        if self.seen.len() >= self.cap {
            return Err(AuthError::Busy);
        }
        self.seen.insert((key, nonce), Holding { holder, deputies: Vec::new(), lost: false });
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
        for ((_, n), h) in self.seen.iter_mut() {
            if *n == nonce && h.holder == *from {
                h.held_by(to.clone());
            }
        }
    }

    /// Node `gone` was lost: the signatures it held go to whoever presents
    /// them next (see the module docs).
    pub fn holder_lost(&mut self, gone: &H) {
        for h in self.seen.values_mut() {
            h.lost |= h.holder == *gone;
        }
    }

    /// Holder `from` of signatures with `nonce` names `deputies` (at most
    /// [`MAX_DEPUTIES`]): each may present them too, and holds them once it
    /// does (the job's holder is gone and the deputy places it anew).
    pub fn name_deputies(&mut self, nonce: u64, from: &H, deputies: &[H])
    where
        H: Clone,
    {
        let named: Vec<H> = deputies.iter().filter(|d| *d != from).take(MAX_DEPUTIES).cloned().collect();
        for ((_, n), h) in self.seen.iter_mut() {
            if *n == nonce && h.holder == *from {
                h.deputies.clone_from(&named);
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
