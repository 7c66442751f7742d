//! Membership: joining through the bootstrap list, failure repair, rejoining or
//! merging back after losing every contact, and the graceful leave.

use std::time::Instant;

use rand::Rng;

use super::lookup::{LookupState, Purpose};
use super::msg::{ChordMsg, Peer};
use super::node::{ChordNode, MAX_DEPENDENTS, MAX_REJOIN, Phase, STRIKES, Timer, Traffic};
use super::registry::HANDOVER_HOPS;
use super::requests::{Pending, Waiting};
use crate::machine::NodeAddr;
use crate::overlay::{OverlayError, OverlayEvent};
use crate::time::TimerTable;

impl ChordNode {
    /// The node is now part of a ring: through `succ`, or alone.
    pub(super) fn become_joined(&mut self, now: Instant) {
        self.phase = Phase::Joined;
        self.event(OverlayEvent::Joined);
        self.fingers.start_fast_pass();
        self.set_successor_fingers();
        self.timers.clear(Timer::Join);
        self.timers.set(Timer::Stabilize, now);
        self.timers.set(Timer::FixFingers, now);
        let d = self.jitter(self.cfg.check_predecessor_period);
        self.timers.set(Timer::CheckPredecessor, now + d);
        if self.registry.has_own() {
            self.timers.set(Timer::Refresh, now);
        }
    }

    /// Looks up this node's own id through `contact`, to join or merge.
    pub(super) fn join_lookup(&mut self, now: Instant, contact: NodeAddr) {
        let deadline = now + self.cfg.lookup_timeout;
        let state = LookupState::new(self.me.id, Purpose::Join, deadline, vec![Peer::from_addr(contact)]);
        self.ask_next(now, Box::new(state));
    }

    /// Tries the current contact (bootstrap list, then remembered peers), or
    /// schedules the next round.
    pub(super) fn join_attempt(&mut self, now: Instant) {
        let Phase::Joining { contact, backoff, reported } = self.phase.clone() else {
            return self.merge_attempt(now);
        };
        let n = self.bootstrap.len();
        let addr = if contact < n { self.bootstrap.get(contact) } else { self.rejoin.get(contact - n) };
        if let Some(&addr) = addr {
            return self.join_lookup(now, addr);
        }
        if self.bootstrap.is_empty() {
            // The ring's creator lost everyone it knew: a ring of one again, which
            // keeps trying to merge back through the peers it remembers.
            self.merge_backoff = self.cfg.join_backoff_min;
            self.become_joined(now);
            let d = self.jitter(self.merge_backoff);
            self.timers.set(Timer::Join, now + d);
            return;
        }
        // Every contact failed: never create a second ring, report and retry later.
        if !reported {
            self.event(OverlayEvent::Disconnected);
        }
        let next = backoff.saturating_mul(2).min(self.cfg.join_backoff_max);
        self.phase = Phase::Joining { contact: 0, backoff: next, reported: true };
        let d = self.jitter(backoff);
        self.timers.set(Timer::Join, now + d);
    }

    /// A creator that fell back to a ring of one asks a remembered peer where it
    /// belongs, until that peer's ring agrees with its own (others may have joined
    /// it meanwhile, so being alone again is not the end of it).
    fn merge_attempt(&mut self, now: Instant) {
        if !self.joined() || self.rejoin.is_empty() {
            self.rejoin = Vec::new();
            return;
        }
        let k = self.rng.random_range(0..self.rejoin.len());
        self.join_lookup(now, self.rejoin[k]);
        let d = self.jitter(self.merge_backoff);
        self.merge_backoff = self.merge_backoff.saturating_mul(2).min(self.cfg.join_backoff_max);
        self.timers.set(Timer::Join, now + d);
    }

    /// The join (or merge, or ring-check) lookup ended.
    pub(super) fn join_done(&mut self, now: Instant, result: Result<Peer, OverlayError>) {
        let Phase::Joining { .. } = self.phase else {
            if let (Ok(owner), true) = (result, self.joined()) {
                self.merge_step(now, owner);
            }
            return;
        };
        match result {
            Ok(owner) if owner.addr != self.me.addr => {
                // Joined only once the successor answers as a member: the answer may be
                // stale (it left or lost its ring meanwhile), and a node that takes a
                // gone successor is stranded. Its list fills ours at once, too.
                self.confirm_join_with(now, vec![owner]);
            }
            _ => self.join_failed(now),
        }
    }

    /// The join through the current contact failed: try the next one.
    pub(super) fn join_failed(&mut self, now: Instant) {
        if let Phase::Joining { contact, backoff, reported } = self.phase.clone() {
            self.phase = Phase::Joining { contact: contact + 1, backoff, reported };
            self.join_attempt(now);
        }
    }

    /// `pred` (which has this node as successor) sent its list: the first node
    /// after us in it is our successor, or `pred` itself if none is.
    pub(super) fn join_behind(&mut self, now: Instant, pred: Peer, successors: Vec<Peer>) {
        if !matches!(self.phase, Phase::Joining { .. }) {
            return;
        }
        let me = self.me.addr;
        // Our successor is the first of them that answers; `pred` itself when none
        // does (then we are the only two, or stabilization walks on from there).
        let mut candidates: Vec<Peer> =
            successors.into_iter().filter(|p| p.addr != me && p.addr != pred.addr).collect();
        candidates.truncate(self.cfg.successors);
        if candidates.is_empty() {
            return self.join_confirmed(now, pred, Vec::new());
        }
        candidates.push(pred);
        self.confirm_join_with(now, candidates);
    }

    /// Asks the first of `candidates` for its successor list, to confirm it as our
    /// successor; the rest are tried in turn if it does not answer. With none left,
    /// the join through the current contact failed.
    pub(super) fn confirm_join_with(&mut self, now: Instant, mut candidates: Vec<Peer>) {
        if !matches!(self.phase, Phase::Joining { .. }) {
            return;
        }
        if candidates.is_empty() {
            return self.join_failed(now);
        }
        let next = candidates.remove(0);
        // Notify first (a link delivers in order): the successor adopts us as its
        // predecessor before it answers, so from the moment we report `Joined` it
        // answers for our range as we do, and hands us its keys in it.
        self.send(next.addr, 0, ChordMsg::Notify, Traffic::Maintenance);
        let what = Waiting::SuccessorList { fallback: candidates };
        self.request(now, next.addr, ChordMsg::GetSuccessorList, what, Traffic::Maintenance);
    }

    /// A joining node that lost its ring got a request from `addr`, a member that
    /// still counts on it: join through it at once (once per contact; the rounds
    /// keep it on the list), before it gives up on us and drops out too.
    pub(super) fn rejoin_hint(&mut self, now: Instant, addr: NodeAddr) {
        if !matches!(self.phase, Phase::Joining { .. }) || self.bootstrap.contains(&addr) || self.rejoin.contains(&addr)
        {
            return;
        }
        self.remember_rejoin(addr);
        self.join_lookup(now, addr);
    }

    /// A joining node got a stabilize request from `addr`: a member whose successor
    /// it still is. Joins right after it (as when a join lookup through a contact
    /// comes back to this node), unless that is already under way.
    pub(super) fn join_behind_member(&mut self, now: Instant, addr: NodeAddr) {
        if !matches!(self.phase, Phase::Joining { .. })
            || self.requests.any_to(addr, |w| matches!(w, Waiting::JoinBehind))
        {
            return;
        }
        self.remember_rejoin(addr);
        self.request(now, addr, ChordMsg::GetSuccessorList, Waiting::JoinBehind, Traffic::Maintenance);
    }

    /// Adds `addr` to the peers tried after the bootstrap list.
    fn remember_rejoin(&mut self, addr: NodeAddr) {
        if self.bootstrap.contains(&addr) || self.rejoin.contains(&addr) {
            return;
        }
        if self.rejoin.len() >= MAX_REJOIN {
            self.rejoin.pop();
        }
        self.rejoin.push(addr);
    }

    /// The successor `from` being confirmed did not adopt us: its predecessor `p`
    /// lies between us (it joined meanwhile). Confirm `p` instead, `from` failing that.
    pub(super) fn redirect_join(&mut self, now: Instant, from: Peer, p: Peer) {
        let ids = self.requests.ids_to_where(from.addr, |w| matches!(w, Waiting::SuccessorList { .. }));
        if p.addr == self.me.addr || !p.id.in_open(self.me.id, from.id) || ids.is_empty() {
            return self.drop_input();
        }
        let mut candidates = vec![p, from];
        for id in ids {
            if let Some(Pending { what: Waiting::SuccessorList { fallback }, .. }) = self.requests.remove(id) {
                candidates.extend(fallback.into_iter().filter(|c| c.addr != p.addr && c.addr != from.addr));
            }
        }
        self.confirm_join_with(now, candidates);
    }

    /// The successor found by the join lookup answered with its list: joined.
    pub(super) fn join_confirmed(&mut self, now: Instant, owner: Peer, successors: Vec<Peer>) {
        if !matches!(self.phase, Phase::Joining { .. }) {
            return;
        }
        self.rejoin = Vec::new();
        self.succs = vec![owner];
        self.pred = None;
        self.become_joined(now);
        let mut list = vec![owner];
        list.extend(successors.into_iter().take(self.cfg.successors));
        self.set_successor_list(list);
        // Start from the successor's fingers, which are nearly ours.
        self.request(now, owner.addr, ChordMsg::GetFingers, Waiting::Fingers, Traffic::Maintenance);
    }

    /// A remembered peer's ring (or, for a ring check, any far node) says `owner`
    /// succeeds this node.
    fn merge_step(&mut self, now: Instant, owner: Peer) {
        let succ = self.succs.first().copied();
        if owner.addr == self.me.addr || Some(owner) == succ {
            // That ring is ours: nothing left to merge.
            self.rejoin = Vec::new();
            self.timers.clear(Timer::Join);
        } else if succ.is_none_or(|s| owner.id.in_open(self.me.id, s.id)) {
            // A closer successor from the other ring: take it, stabilization zips on.
            let mut list = vec![owner];
            list.extend(self.succs.iter().copied());
            self.set_successor_list(list);
            self.timers.set(Timer::Stabilize, now);
        } else {
            // Ours is closer: let the other ring's node learn of us instead.
            self.send(owner.addr, 0, ChordMsg::Notify, Traffic::Maintenance);
        }
    }

    /// Every contact is gone (`last` was the last one): rejoin through the bootstrap
    /// list and the peers it remembers; a node without a bootstrap list (it created
    /// the ring) becomes a ring of one if none answers, and keeps trying to merge.
    pub(super) fn lost_all(&mut self, now: Instant, last: NodeAddr) {
        // Remember who we knew: they may only have looked dead (loss, a partition).
        let candidates = self
            .succs
            .iter()
            .chain(self.fingers.runs().iter().map(|(_, p)| p))
            .chain(self.pred.iter())
            .chain(self.dependents.iter().filter(|(_, until)| *until > now).map(|(p, _)| p));
        let mut known: Vec<NodeAddr> = std::mem::take(&mut self.rejoin);
        for a in candidates.map(|p| p.addr).chain([last]) {
            if a != self.me.addr && !self.bootstrap.contains(&a) && !known.contains(&a) {
                known.push(a);
            }
        }
        known.truncate(MAX_REJOIN);
        self.rejoin = known;
        self.pred = None;
        self.succs.clear();
        self.fingers.clear();
        if self.bootstrap.is_empty() && self.rejoin.is_empty() {
            return;
        }
        self.event(OverlayEvent::Disconnected);
        self.phase = Phase::Joining { contact: 0, backoff: self.cfg.join_backoff_min, reported: true };
        for t in [Timer::Stabilize, Timer::FixFingers, Timer::CheckPredecessor, Timer::Refresh] {
            self.timers.clear(t);
        }
        self.fingers.idle();
        self.stabilize_busy = false;
        self.ping_busy = false;
        self.join_attempt(now);
    }

    /// Forgets `addr` everywhere without repairing anything. True if it was known.
    pub(super) fn forget(&mut self, addr: NodeAddr) -> bool {
        let mut known = false;
        if self.pred.is_some_and(|p| p.addr == addr) {
            self.pred = None;
            self.pred_strikes = 0;
            known = true;
        }
        let before = self.succs.len();
        self.succs.retain(|p| p.addr != addr);
        known |= self.succs.len() != before;
        let had_finger = self.fingers.remove(addr);
        known || had_finger
    }

    /// A request to `addr` timed out. The successor and the predecessor get a second
    /// chance (a lost message is not a crash: dropping a live successor on one loss
    /// can split the ring); anyone else is dropped at once.
    pub(super) fn peer_silent(&mut self, now: Instant, addr: NodeAddr) {
        if self.succs.first().is_some_and(|p| p.addr == addr) {
            self.succ_strikes += 1;
            if self.succ_strikes < STRIKES {
                self.timers.set(Timer::Stabilize, now);
                return;
            }
        } else if self.pred.is_some_and(|p| p.addr == addr) {
            self.pred_strikes += 1;
            if self.pred_strikes < STRIKES {
                self.timers.set(Timer::CheckPredecessor, now);
                return;
            }
        }
        self.peer_failed(now, addr);
    }

    /// `addr` answered that it is out of the ring (rejoining). It is no predecessor
    /// or finger any more, and goes to the end of the successor list: the others
    /// are asked first, but if every one of them is gone, this node is what remains
    /// of its ring and that node joins back right behind it when a stabilize
    /// reaches it (see `join_behind_member`), instead of both waiting for a ring.
    pub(super) fn peer_not_joined(&mut self, now: Instant, addr: NodeAddr) {
        if !self.joined() {
            return;
        }
        if self.pred.is_some_and(|p| p.addr == addr) {
            self.pred = None;
            self.pred_strikes = 0;
        }
        self.fingers.remove(addr);
        let Some(at) = self.succs.iter().position(|p| p.addr == addr) else { return };
        let mut list = self.succs.clone();
        let p = list.remove(at);
        list.push(p);
        self.set_successor_list(list);
        self.set_successor_fingers();
        if at == 0 && self.succs.len() > 1 {
            self.timers.set(Timer::Stabilize, now);
        }
    }

    /// A peer could not be reached (or stayed silent): drop it and repair the successor.
    pub(super) fn peer_failed(&mut self, now: Instant, addr: NodeAddr) {
        if !self.joined() || addr == self.me.addr {
            return;
        }
        let was_succ = self.succs.first().is_some_and(|p| p.addr == addr);
        if !self.forget(addr) {
            return;
        }
        if self.succs.is_empty() {
            // The successor list is spent: the nearest finger stands in, else the
            // predecessor (a live member: stabilize walks back from it to our place,
            // and the ring check merges if it only closes a ring of two). Dropping
            // out instead makes this node a hole every neighbour falls into.
            match self.fingers.nearest(self.me.id).or(self.pred) {
                Some(p) => self.succs.push(p),
                None => return self.lost_all(now, addr),
            }
        }
        if was_succ {
            self.succ_strikes = 0;
            self.set_successor_fingers();
            self.timers.set(Timer::Stabilize, now);
        }
    }

    /// Remembers a node that has this one as its successor (see `dependents`).
    pub(super) fn remember_dependent(&mut self, now: Instant, node: Peer) {
        self.dependents.retain(|(p, until)| *until > now && p.addr != node.addr);
        if self.dependents.len() >= MAX_DEPENDENTS {
            self.dependents.remove(0);
        }
        let until = now + self.cfg.stabilize_period * 2 + self.cfg.request_timeout;
        self.dependents.push((node, until));
    }

    /// Graceful leave: every neighbour this node knows (predecessor, successors and
    /// nodes that just joined before it) learns the others in its place, and the
    /// stored registrations go to the successor.
    pub(super) fn leave(&mut self, now: Instant) {
        if self.joined() {
            // Never a neighbour that already missed an answer: it may have crashed, and
            // a node handed only dead neighbours is cut off.
            let suspect = |p: &Peer| {
                (self.pred_strikes > 0 && self.pred == Some(*p))
                    || (self.succ_strikes > 0 && self.succs.first() == Some(p))
            };
            let mut known: Vec<Peer> =
                self.pred.iter().copied().chain(self.succs.iter().copied()).filter(|p| !suspect(p)).collect();
            for (j, until) in std::mem::take(&mut self.dependents) {
                if until > now && j.addr != self.me.addr && !known.iter().any(|p| p.addr == j.addr) {
                    known.push(j);
                }
            }
            // Their successor candidates: the known nodes, then the fingers (far, but
            // alive as far as we know: a fallback when the ring is still forming and
            // the near ones are gone too).
            let mut candidates = known.clone();
            for &(_, f) in self.fingers.runs() {
                if !suspect(&f) && !candidates.iter().any(|p| p.addr == f.addr) {
                    candidates.push(f);
                }
            }
            if let Some(s) = self.succs.first().copied() {
                // Its new predecessor: the known node closest before it.
                let predecessor =
                    known.iter().copied().filter(|p| p.addr != s.addr).min_by_key(|p| p.id.distance_to(s.id));
                self.send(s.addr, 0, ChordMsg::LeavingToSuccessor { predecessor }, Traffic::Maintenance);
                // To the next successors too: the first may be leaving at the same time.
                let entries = self.registry.take_all(now);
                let n = usize::from(self.cfg.replicas.max(1));
                let targets: Vec<_> = self.succs.iter().take(n).map(|p| p.addr).collect();
                for to in targets.into_iter().filter(|_| !entries.is_empty()) {
                    let entries = entries.clone();
                    self.hand_over(to, entries, HANDOVER_HOPS);
                }
            }
            // Everyone that may have this node as successor: the others, nearest first.
            let first = self.succs.first().map(|p| p.addr);
            for &x in known.iter().filter(|p| Some(p.addr) != first) {
                let mut successors: Vec<Peer> = candidates.iter().copied().filter(|p| p.addr != x.addr).collect();
                successors.sort_by_key(|p| x.id.distance_to(p.id));
                successors.truncate(self.cfg.successors);
                self.send(x.addr, 0, ChordMsg::LeavingToPredecessor { successors }, Traffic::Maintenance);
            }
        }
        self.phase = Phase::Left;
        self.timers = TimerTable::default();
        self.requests.clear();
        self.registry.clear();
        self.pred = None;
        self.succs.clear();
        self.fingers.clear();
        self.dependents.clear();
        self.event(OverlayEvent::Left);
    }
}
