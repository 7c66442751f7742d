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
use super::node::{ChordNode, Timer, Traffic, Waiting};
use crate::id::{ID_BITS, Id};
use crate::machine::NodeAddr;
use crate::overlay::OverlayError;

/// Runs of equal fingers, sorted by their first index; adjacent runs hold different nodes.
#[derive(Debug, Clone, Default)]
pub(crate) struct FingerTable {
    runs: Vec<(u8, Peer)>,
}

impl FingerTable {
    /// Finger `i`, if known.
    pub(crate) fn get(&self, i: u32) -> Option<Peer> {
        self.runs.iter().rev().find(|(from, _)| u32::from(*from) <= i).map(|(_, p)| *p)
    }

    /// The run holding finger `i`: its first index and node.
    pub(crate) fn run_at(&self, i: u32) -> Option<(u32, Peer)> {
        self.runs.iter().rev().find(|(from, _)| u32::from(*from) <= i).map(|(f, p)| (u32::from(*f), *p))
    }

    /// The runs, for getters and tests.
    pub(crate) fn runs(&self) -> &[(u8, Peer)] {
        &self.runs
    }

    /// Sets fingers `lo..=hi` to `peer`, keeping what the table said about `hi + 1` onwards.
    pub(crate) fn set_range(&mut self, lo: u32, hi: u32, peer: Peer) {
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
    pub(crate) fn truncate_from(&mut self, from: u32) {
        self.runs.retain(|(f, _)| u32::from(*f) < from);
    }

    /// Forgets a node (it failed or left); its runs fall to the run before them.
    pub(crate) fn remove(&mut self, addr: NodeAddr) {
        self.runs.retain(|(_, p)| p.addr != addr);
        self.runs.dedup_by(|b, a| a.1 == b.1);
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.runs.clear();
    }

    /// Up to `n` distinct fingers in `(own, key)`, closest to `key` first.
    pub(crate) fn closest_preceding(&self, own: Id, key: Id, n: usize) -> Vec<Peer> {
        let mut out: Vec<Peer> = self.runs.iter().map(|(_, p)| *p).filter(|p| p.id.in_open(own, key)).collect();
        out.sort_by_key(|p| p.id.distance_to(key));
        out.dedup();
        out.truncate(n);
        out
    }

    /// The known finger nearest after `own`, a stand-in successor.
    pub(crate) fn nearest(&self, own: Id) -> Option<Peer> {
        self.runs.iter().map(|(_, p)| *p).filter(|p| p.id != own).min_by_key(|p| own.distance_to(p.id))
    }
}

impl ChordNode {
    /// One fix-fingers step: check the run at the cursor, or look its finger up.
    pub(crate) fn fix_fingers_tick(&mut self, now: Instant) {
        let d = self.jitter(self.cfg.fix_fingers_period);
        self.timers.set(Timer::FixFingers, now + d);
        if !self.joined() || self.finger_busy {
            return;
        }
        let Some(&succ) = self.succs.first() else { return };
        self.set_successor_fingers();
        let Some(covered) = last_index_covered(self.me.id, succ.id) else { return };
        let index = self.next_finger.max(covered + 1);
        if index >= ID_BITS {
            return self.pass_done(now);
        }
        self.finger_busy = true;
        match self.fingers.run_at(index) {
            Some((from, node)) if from == index => {
                let what = Waiting::FingerCheck { index, node };
                self.request(now, node.addr, ChordMsg::GetPredecessor, what, Traffic::Maintenance);
            }
            // Unknown, or inherited from the run below: look it up.
            _ => self.start_lookup(now, self.me.id.add_pow2(index), Purpose::Finger { index }),
        }
    }

    /// `node`'s predecessor came back: the finger holds, or it is looked up.
    pub(crate) fn on_finger_check(&mut self, now: Instant, index: u32, node: Peer, pred: Option<Peer>) {
        self.finger_busy = false;
        if !self.joined() {
            return;
        }
        let start = self.me.id.add_pow2(index);
        if pred.is_some_and(|p| start.in_half_open(p.id, node.id)) {
            self.finger_done(now, index, Ok(node));
        } else {
            self.finger_busy = true;
            self.start_lookup(now, start, Purpose::Finger { index });
        }
    }

    /// A pass (about log2 N ticks) ends with a ring check.
    fn pass_done(&mut self, now: Instant) {
        self.next_finger = 0;
        self.fast_fingers = false;
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
    pub(crate) fn finger_done(&mut self, now: Instant, index: u32, result: Result<Peer, OverlayError>) {
        self.finger_busy = false;
        if !self.joined() {
            return;
        }
        let Ok(x) = result else {
            // Retry this finger next tick.
            self.fast_fingers = false;
            return;
        };
        match last_index_covered(self.me.id, x.id) {
            Some(hi) if hi >= index => {
                self.fingers.set_range(index, hi, x);
                self.next_finger = hi + 1;
                if self.next_finger >= ID_BITS {
                    self.pass_done(now);
                } else if self.fast_fingers {
                    self.timers.set(Timer::FixFingers, now);
                }
            }
            _ => {
                // No node between the start and this one: the fingers from here wrap to us.
                self.fingers.truncate_from(index);
                self.pass_done(now);
            }
        }
    }

    /// Takes the successor's fingers as a first guess of ours; the fast pass after
    /// joining checks each run.
    pub(crate) fn adopt_fingers(&mut self, runs: Vec<(u8, Peer)>) {
        if !self.joined() {
            return;
        }
        for (from, x) in runs.into_iter().take(ID_BITS as usize) {
            let from = u32::from(from);
            // Fingers this pass already settled stay.
            if x.addr == self.me.addr || from >= ID_BITS || from < self.next_finger {
                continue;
            }
            if let Some(hi) = last_index_covered(self.me.id, x.id).filter(|hi| *hi >= from) {
                self.fingers.set_range(from, hi, x);
            }
        }
        self.set_successor_fingers();
    }
}

/// Index of the highest finger that `peer` can be: the largest `i` with
/// `own + 2^i ∈ (own, peer]`, i.e. ⌊log2(peer - own)⌋. `None` when `peer == own`.
pub(crate) fn last_index_covered(own: Id, peer: Id) -> Option<u32> {
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
