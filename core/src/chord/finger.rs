//! The finger table, stored compactly, and fix-fingers.
//!
//! Finger `i` is the first node succeeding `id + 2^i`. In a ring of N nodes only
//! about log2 N of the 160 fingers differ, so the table keeps one entry per run of
//! equal fingers: `(first index of the run, node)`. A node holds ~20 entries, not 160.
//!
//! Fix-fingers walks the runs, one per tick. A run `(i, x)` still holds while
//! `id + 2^i ∈ (pred(x), x]`, which one `GetPredecessor` to `x` checks; only when it
//! does not (a node joined in between, or `x` is gone) does a lookup run. A lookup
//! for finger `i` that returns `x` settles every finger up to ⌊log2(x - id)⌋ at once,
//! so a full pass costs about log2 N checks, not 160 lookups.

use std::time::Instant;

use rand::Rng;

use super::lookup::Purpose;
use super::msg::{ChordMsg, Peer};
use super::node::{ChordNode, Timer, Traffic};
use super::requests::Waiting;
use crate::id::{ID_BITS, Id};
use crate::machine::NodeAddr;
use crate::overlay::OverlayError;

/// The finger table and the state of its fix-fingers pass.
///
/// Invariants ([`FingerTable::check_invariants`]): runs sorted by their first index,
/// every index below [`ID_BITS`], adjacent runs hold different nodes, no run names
/// this node, and the pass cursor never passes [`ID_BITS`].
#[derive(Debug, Clone, Default)]
pub(super) struct FingerTable {
    /// Runs of equal fingers: (first index, node).
    runs: Vec<(u8, Peer)>,
    /// Next finger index the fix-fingers pass refreshes.
    next: u32,
    /// A finger check or lookup is in flight.
    busy: bool,
    /// The first pass after joining runs its lookups back to back.
    fast: bool,
}

/// What the fix-fingers pass does next (see [`FingerTable::next_fix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fix {
    /// Nothing now: a check or lookup is in flight, or the successor is this node.
    Wait,
    /// Every finger is settled: the pass is over.
    PassOver,
    /// Ask finger `index`'s node for its predecessor: does the run still hold?
    Check { index: u32, node: Peer },
    /// Look finger `index` up.
    Lookup { index: u32 },
}

/// What a settled finger leaves of the pass (see [`FingerTable::found`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// Every finger is settled: the pass is over.
    PassOver,
    /// Go on with the next finger at once (the first pass after joining).
    Now,
    /// Go on at the next tick.
    Later,
}

impl FingerTable {
    /// Finger `i`, if known.
    pub(super) fn get(&self, i: u32) -> Option<Peer> {
        self.runs.iter().rev().find(|(from, _)| u32::from(*from) <= i).map(|(_, p)| *p)
    }

    /// The run holding finger `i`: its first index and node.
    pub(super) fn run_at(&self, i: u32) -> Option<(u32, Peer)> {
        self.runs.iter().rev().find(|(from, _)| u32::from(*from) <= i).map(|(f, p)| (u32::from(*f), *p))
    }

    /// The runs, for getters and tests.
    pub(super) fn runs(&self) -> &[(u8, Peer)] {
        &self.runs
    }

    /// Sets fingers `lo..=hi` to `peer`, keeping what the table said about `hi + 1` onwards.
    pub(super) fn set_range(&mut self, lo: u32, hi: u32, peer: Peer) {
        debug_assert!(lo <= hi && hi < ID_BITS, "finger range {lo}..={hi}");
        let after = if hi + 1 < ID_BITS { self.get(hi + 1) } else { None };
        let mut runs: Vec<(u8, Peer)> = Vec::with_capacity(self.runs.len() + 2);
        runs.extend(self.runs.iter().copied().filter(|(from, _)| u32::from(*from) < lo));
        runs.push((lo as u8, peer));
        if let Some(a) = after {
            runs.push(((hi + 1) as u8, a));
        }
        runs.extend(self.runs.iter().copied().filter(|(from, _)| u32::from(*from) > hi + 1));
        runs.dedup_by(|b, a| a.1 == b.1);
        self.runs = runs;
    }

    /// Forgets the runs starting at `from` or later.
    pub(super) fn truncate_from(&mut self, from: u32) {
        self.runs.retain(|(f, _)| u32::from(*f) < from);
    }

    /// Forgets a node (it failed or left); its runs fall to the run before them.
    /// True if it was a finger.
    pub(super) fn remove(&mut self, addr: NodeAddr) -> bool {
        let had = self.runs.iter().any(|(_, p)| p.addr == addr);
        if had {
            self.runs.retain(|(_, p)| p.addr != addr);
            self.runs.dedup_by(|b, a| a.1 == b.1);
        }
        had
    }

    /// Forgets every finger (the pass state stays).
    pub(super) fn clear(&mut self) {
        self.runs.clear();
    }

    /// Fingers up to the successor's distance are the successor.
    pub(super) fn set_successor(&mut self, own: Id, succ: Peer) {
        if let Some(hi) = last_index_covered(own, succ.id) {
            self.set_range(0, hi, succ);
        }
    }

    /// Takes another node's runs as a first guess of ours (`own` is this node);
    /// fingers the current pass already settled stay.
    pub(super) fn adopt(&mut self, own: Peer, runs: Vec<(u8, Peer)>) {
        for (from, x) in runs.into_iter().take(ID_BITS as usize) {
            let from = u32::from(from);
            if x.addr == own.addr || from >= ID_BITS || from < self.next {
                continue;
            }
            if let Some(hi) = last_index_covered(own.id, x.id).filter(|hi| *hi >= from) {
                self.set_range(from, hi, x);
            }
        }
    }

    // ---- the fix-fingers pass ----------------------------------------------------------

    /// A new pass from finger 0, its lookups back to back (just joined).
    pub(super) fn start_fast_pass(&mut self) {
        self.next = 0;
        self.fast = true;
    }

    /// The pass is over: the next starts from finger 0, at the normal pace.
    pub(super) fn end_pass(&mut self) {
        self.next = 0;
        self.fast = false;
    }

    /// Whether a finger check or lookup is in flight.
    pub(super) fn busy(&self) -> bool {
        self.busy
    }

    /// A finger lookup is in flight.
    pub(super) fn lookup_started(&mut self) {
        self.busy = true;
    }

    /// The check or lookup in flight ended (or was abandoned).
    pub(super) fn idle(&mut self) {
        self.busy = false;
    }

    /// A finger lookup failed: retry it at the next tick, not at once.
    pub(super) fn slow_down(&mut self) {
        self.fast = false;
    }

    /// The pass's next step, with `succ` the successor of `own`: the fingers up to
    /// the successor are set at once; the first run after them is checked if it
    /// starts at the cursor, else looked up. Marks the table busy for a check or a
    /// lookup.
    pub(super) fn next_fix(&mut self, own: Id, succ: Peer) -> Fix {
        if self.busy {
            return Fix::Wait;
        }
        self.set_successor(own, succ);
        let Some(covered) = last_index_covered(own, succ.id) else { return Fix::Wait };
        let index = self.next.max(covered + 1);
        if index >= ID_BITS {
            return Fix::PassOver;
        }
        self.busy = true;
        match self.run_at(index) {
            Some((from, node)) if from == index => Fix::Check { index, node },
            // Unknown, or inherited from the run below: look it up.
            _ => Fix::Lookup { index },
        }
    }

    /// Finger `index` of `own` is `x`, and so is every later finger whose start
    /// lies in (own, x]; with none there, the fingers from `index` on wrap to `own`.
    pub(super) fn found(&mut self, own: Id, index: u32, x: Peer) -> Found {
        match last_index_covered(own, x.id) {
            Some(hi) if hi >= index => {
                self.set_range(index, hi, x);
                self.next = hi + 1;
                if self.next >= ID_BITS {
                    Found::PassOver
                } else if self.fast {
                    Found::Now
                } else {
                    Found::Later
                }
            }
            _ => {
                self.truncate_from(index);
                Found::PassOver
            }
        }
    }

    /// Panics if an invariant (see the type's docs) does not hold.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(super) fn check_invariants(&self, own: NodeAddr) {
        assert!(self.runs.windows(2).all(|w| w[0].0 < w[1].0), "finger runs out of order: {:?}", self.runs);
        assert!(self.runs.iter().all(|(i, _)| u32::from(*i) < ID_BITS), "a finger past the ring: {:?}", self.runs);
        assert!(self.runs.windows(2).all(|w| w[0].1 != w[1].1), "adjacent finger runs alike: {:?}", self.runs);
        assert!(self.runs.iter().all(|(_, p)| p.addr != own), "a finger names this node");
        assert!(self.next <= ID_BITS, "finger cursor {} past the ring", self.next);
    }

    /// Up to `n` distinct fingers in `(own, key)`, closest to `key` first.
    pub(super) fn closest_preceding(&self, own: Id, key: Id, n: usize) -> Vec<Peer> {
        let mut out: Vec<Peer> = self.runs.iter().map(|(_, p)| *p).filter(|p| p.id.in_open(own, key)).collect();
        out.sort_by_key(|p| p.id.distance_to(key));
        out.dedup();
        out.truncate(n);
        out
    }

    /// The known finger nearest after `own`, a stand-in successor.
    pub(super) fn nearest(&self, own: Id) -> Option<Peer> {
        self.runs.iter().map(|(_, p)| *p).filter(|p| p.id != own).min_by_key(|p| own.distance_to(p.id))
    }
}

impl ChordNode {
    /// One fix-fingers step: check the run at the cursor, or look its finger up.
    pub(super) fn fix_fingers_tick(&mut self, now: Instant) {
        let d = self.jitter(self.cfg.fix_fingers_period);
        self.timers.set(Timer::FixFingers, now + d);
        if !self.joined() || self.fingers.busy() {
            return;
        }
        let Some(&succ) = self.succs.first() else { return };
        match self.fingers.next_fix(self.me.id, succ) {
            Fix::Wait => {}
            Fix::PassOver => self.pass_done(now),
            Fix::Check { index, node } => {
                let what = Waiting::FingerCheck { index, node };
                self.request(now, node.addr, ChordMsg::GetPredecessor, what, Traffic::Maintenance);
            }
            Fix::Lookup { index } => self.start_lookup(now, self.me.id.add_pow2(index), Purpose::Finger { index }),
        }
    }

    /// `node`'s predecessor came back: the finger holds, or it is looked up.
    pub(super) fn on_finger_check(&mut self, now: Instant, index: u32, node: Peer, pred: Option<Peer>) {
        self.fingers.idle();
        if !self.joined() {
            return;
        }
        let start = self.me.id.add_pow2(index);
        if pred.is_some_and(|p| start.in_half_open(p.id, node.id)) {
            self.finger_done(now, index, Ok(node));
        } else {
            self.fingers.lookup_started();
            self.start_lookup(now, start, Purpose::Finger { index });
        }
    }

    /// A pass (about log2 N ticks) ends with a ring check.
    fn pass_done(&mut self, now: Instant) {
        self.fingers.end_pass();
        self.ring_check(now);
    }

    /// Looks this node's own id up through a random finger or bootstrap contact: a
    /// view from elsewhere in the ring. If it names a closer successor, or a node that
    /// should know us, the answer goes through `merge_step`; this is what joins rings
    /// that loss, partitions or a creator gone alone have split (Chord's stabilize
    /// alone cannot merge interleaved rings).
    fn ring_check(&mut self, now: Instant) {
        let succ = self.succs.first().map(|p| p.addr);
        let mut contacts: Vec<NodeAddr> = self.fingers.runs().iter().map(|(_, p)| p.addr).collect();
        contacts.extend(self.bootstrap.iter().copied());
        contacts.retain(|a| *a != self.me.addr && Some(*a) != succ);
        if contacts.is_empty() {
            return;
        }
        let k = self.rng.random_range(0..contacts.len());
        self.join_lookup(now, contacts[k]);
    }

    /// Finger `index` is `x`, and so is every later finger whose start lies in (me, x].
    pub(super) fn finger_done(&mut self, now: Instant, index: u32, result: Result<Peer, OverlayError>) {
        self.fingers.idle();
        if !self.joined() {
            return;
        }
        let Ok(x) = result else {
            // Retry this finger next tick.
            self.fingers.slow_down();
            return;
        };
        match self.fingers.found(self.me.id, index, x) {
            Found::PassOver => self.pass_done(now),
            Found::Now => self.timers.set(Timer::FixFingers, now),
            Found::Later => {}
        }
    }

    /// Takes the successor's fingers as a first guess of ours; the fast pass after
    /// joining checks each run.
    pub(super) fn adopt_fingers(&mut self, runs: Vec<(u8, Peer)>) {
        if !self.joined() {
            return;
        }
        self.fingers.adopt(self.me, runs);
        self.set_successor_fingers();
    }

    /// Fingers up to the successor's distance are the successor.
    pub(super) fn set_successor_fingers(&mut self) {
        if let Some(&s) = self.succs.first() {
            self.fingers.set_successor(self.me.id, s);
        }
    }
}

/// Index of the highest finger that `peer` can be: the largest `i` with
/// `own + 2^i ∈ (own, peer]`, i.e. ⌊log2(peer - own)⌋. `None` when `peer == own`.
pub(super) fn last_index_covered(own: Id, peer: Id) -> Option<u32> {
    own.distance_to(peer).log2()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u32) -> Peer {
        Peer::from_addr(NodeAddr::loopback(n, 1))
    }

    #[test]
    fn runs_merge_and_split() {
        let mut t = FingerTable::default();
        assert!(t.runs().is_empty());
        t.set_range(0, 159, peer(1));
        assert_eq!(t.runs().len(), 1);
        t.set_range(10, 20, peer(2));
        assert_eq!(t.get(9), Some(peer(1)));
        assert_eq!(t.get(10), Some(peer(2)));
        assert_eq!(t.get(20), Some(peer(2)));
        assert_eq!(t.get(21), Some(peer(1)));
        assert_eq!(t.runs().len(), 3);
        t.set_range(21, 159, peer(2));
        assert_eq!(t.runs().len(), 2, "equal neighbours merge");
        t.remove(peer(2).addr);
        assert_eq!(t.get(100), Some(peer(1)));
        t.set_range(5, 7, peer(3));
        t.truncate_from(6);
        assert_eq!(t.get(6), Some(peer(3)));
        assert_eq!(t.runs().len(), 2);
    }

    #[test]
    fn closest_preceding_orders_by_distance_to_key() {
        let own = Id::ZERO;
        let mut t = FingerTable::default();
        let a = Peer { id: Id::pow2(10), addr: NodeAddr::loopback(1, 1) };
        let b = Peer { id: Id::pow2(20), addr: NodeAddr::loopback(2, 1) };
        let c = Peer { id: Id::pow2(30), addr: NodeAddr::loopback(3, 1) };
        t.set_range(0, 10, a);
        t.set_range(11, 20, b);
        t.set_range(21, 159, c);
        assert_eq!(t.closest_preceding(own, Id::pow2(25), 3), vec![b, a]);
        assert_eq!(t.closest_preceding(own, Id::pow2(40), 1), vec![c]);
        assert_eq!(t.nearest(own), Some(a));
        assert_eq!(last_index_covered(own, Id::pow2(20)), Some(20));
    }
}
