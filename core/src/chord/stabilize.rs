//! Ring maintenance: stabilize, notify, check-predecessor, and leave notices.

use std::time::Instant;

use super::msg::{ChordMsg, Peer};
use super::node::{ChordNode, Timer, Traffic};
use super::registry::HANDOVER_HOPS;
use super::requests::Waiting;
use crate::id::Id;

impl ChordNode {
    /// Asks the successor for its predecessor and successor list.
    pub(super) fn stabilize_tick(&mut self, now: Instant) {
        let d = self.jitter(self.cfg.stabilize_period);
        self.timers.set(Timer::Stabilize, now + d);
        if !self.joined() || self.stabilize_busy {
            return;
        }
        match self.succs.first().copied() {
            Some(s) => {
                self.stabilize_busy = true;
                self.request(now, s.addr, ChordMsg::GetPredecessor, Waiting::Stabilize, Traffic::Maintenance);
            }
            None => {
                // Alone: whoever notified us is our successor too.
                if let Some(p) = self.pred {
                    self.set_successor_list(vec![p]);
                    self.send(p.addr, 0, ChordMsg::Notify, Traffic::Maintenance);
                }
            }
        }
    }

    /// The successor told us its predecessor and list: adopt a closer successor if
    /// one appeared, refresh the list, and notify.
    pub(super) fn on_predecessor(
        &mut self,
        now: Instant,
        from: Peer,
        predecessor: Option<Peer>,
        successors: Vec<Peer>,
    ) {
        self.stabilize_busy = false;
        let Some(&s) = self.succs.first() else { return };
        if !self.joined() || s.addr != from.addr {
            return;
        }
        self.succ_strikes = 0;
        let mut list = Vec::with_capacity(self.cfg.successors + 1);
        if let Some(x) = predecessor.filter(|x| x.id.in_open(self.me.id, s.id) && x.addr != self.me.addr) {
            list.push(x);
            // A closer successor appeared: ask it at once, so a node that joined far
            // from its place walks back at network speed, not one step per period.
            self.timers.set(Timer::Stabilize, now);
        }
        list.push(s);
        list.extend(successors.into_iter().take(self.cfg.successors));
        self.set_successor_list(list);
        if let Some(&succ) = self.succs.first() {
            self.send(succ.addr, 0, ChordMsg::Notify, Traffic::Maintenance);
        }
    }

    /// Sets the successor list from `list`, nearest first: cut where it comes back
    /// round to this node, without duplicates, at most r long.
    pub(super) fn set_successor_list(&mut self, list: Vec<Peer>) {
        let mut out: Vec<Peer> = Vec::with_capacity(self.cfg.successors);
        for p in list {
            if p.addr == self.me.addr {
                break;
            }
            if !out.iter().any(|q| q.addr == p.addr) {
                out.push(p);
            }
            if out.len() >= self.cfg.successors {
                break;
            }
        }
        let changed = out.first() != self.succs.first();
        let k = usize::from(self.cfg.replicas.saturating_sub(1));
        let replicas = |l: &[Peer]| l.iter().take(k).map(|p| p.addr).collect::<Vec<_>>();
        if replicas(&out) != replicas(&self.succs) {
            self.registry.replicas_changed();
        }
        self.succs = out;
        if changed {
            self.succ_strikes = 0;
            self.set_successor_fingers();
        }
    }

    /// `from` thinks it might be our predecessor.
    pub(super) fn on_notify(&mut self, now: Instant, from: Peer) {
        if !self.joined() {
            return self.drop_input();
        }
        let alone = self.succs.is_empty();
        let adopt = self.pred != Some(from) && self.pred.is_none_or(|p| from.id.in_open(p.id, self.me.id));
        if !alone && !adopt {
            return;
        }
        if alone {
            self.set_successor_list(vec![from]);
        }
        if !adopt {
            if self.pred != Some(from) {
                // It counts on us as its successor all the same: if we leave, it must
                // know. Our predecessor lies between us: its better successor.
                self.remember_dependent(now, from);
                if let Some(x) = self.pred.filter(|x| x.id.in_open(from.id, self.me.id)) {
                    self.send(from.addr, 0, ChordMsg::NewPredecessor { predecessor: x }, Traffic::Maintenance);
                }
            }
            return;
        }
        let old = self.pred.replace(from);
        self.pred_strikes = 0;
        if let Some(o) = old.filter(|o| o.addr != from.addr) {
            // The old predecessor points past `from`; tell it now rather than at its
            // next stabilize, so corrections ripple at network speed.
            self.send(o.addr, 0, ChordMsg::NewPredecessor { predecessor: from }, Traffic::Maintenance);
        }
        // Registrations outside (from, me] go to `from`: those in (old, from] are its
        // own now, the rest are replicas of its predecessors' (it stands between them
        // and us now). We keep copies as its replica.
        // Its own go as a handover (passed on if it is not their owner after all),
        // the replicas as copies; with no old predecessor, all as a handover.
        let me = self.me.id;
        let own = |k: Id| old.is_none_or(|o| k.in_half_open(o.id, from.id));
        let handed = self.registry.entries(now, |k| !k.in_half_open(from.id, me) && own(k));
        let copies = self.registry.entries(now, |k| !k.in_half_open(from.id, me) && !own(k));
        if old.is_none() {
            // Our range is known again (it may have grown): copy it to our replicas,
            // and fetch from our successor the replicas it holds in it (a copy the
            // failed predecessor sent us may have been lost).
            self.registry.replicas_changed();
            if let Some(s) = self.succs.first().filter(|s| s.addr != from.addr) {
                self.send(s.addr, 0, ChordMsg::Pull { after: from.id }, Traffic::Maintenance);
            }
        }
        if !handed.is_empty() {
            self.hand_over(from.addr, handed, HANDOVER_HOPS);
        }
        if !copies.is_empty() {
            self.send(from.addr, 0, ChordMsg::KeyTransfer { entries: copies }, Traffic::Maintenance);
        }
    }

    /// Our successor `from` adopted `p` as predecessor: if `p` lies between us, it is
    /// our successor now.
    pub(super) fn on_new_predecessor(&mut self, now: Instant, from: Peer, p: Peer) {
        if !self.joined() {
            return self.redirect_join(now, from, p);
        }
        let Some(&s) = self.succs.first() else { return self.drop_input() };
        if !self.joined() || s.addr != from.addr {
            return self.drop_input();
        }
        if p.addr == self.me.addr || !p.id.in_open(self.me.id, s.id) {
            return;
        }
        let mut list = Vec::with_capacity(self.succs.len() + 1);
        list.push(p);
        list.extend(self.succs.iter().copied());
        self.set_successor_list(list);
        self.timers.set(Timer::Stabilize, now);
    }

    /// Pings the predecessor; no answer clears it.
    pub(super) fn check_predecessor_tick(&mut self, now: Instant) {
        let d = self.jitter(self.cfg.check_predecessor_period);
        self.timers.set(Timer::CheckPredecessor, now + d);
        if !self.joined() || self.ping_busy {
            return;
        }
        if let Some(p) = self.pred {
            self.ping_busy = true;
            self.request(now, p.addr, ChordMsg::Ping, Waiting::PingPredecessor, Traffic::Maintenance);
        }
    }

    /// Our successor `from` leaves; its successors take its place.
    pub(super) fn on_leaving_successor(&mut self, now: Instant, from: Peer, successors: Vec<Peer>) {
        if !self.joined() {
            return self.drop_input();
        }
        let was_succ = self.succs.first().is_some_and(|p| p.addr == from.addr);
        self.forget(from.addr);
        self.abandon_requests_to(now, from.addr);
        if !was_succ {
            // Not our successor: its list is no business of ours.
            self.repair_gracefully();
            return;
        }
        let mut list: Vec<Peer> =
            successors.into_iter().take(self.cfg.successors).filter(|p| p.addr != from.addr).collect();
        list.extend(self.succs.iter().copied());
        self.set_successor_list(list);
        self.repair_gracefully();
        if let Some(s) = self.succs.first().copied() {
            self.send(s.addr, 0, ChordMsg::Notify, Traffic::Maintenance);
        }
        // Check the new successor at once: it may be leaving too (its notice to the
        // leaver is lost), and until then lookups would name it as owner.
        self.timers.set(Timer::Stabilize, now);
    }

    /// Our predecessor `from` leaves; its predecessor takes its place.
    pub(super) fn on_leaving_predecessor(&mut self, now: Instant, from: Peer, predecessor: Option<Peer>) {
        if !self.joined() {
            return self.drop_input();
        }
        let was_pred = self.pred.is_some_and(|p| p.addr == from.addr);
        self.forget(from.addr);
        self.abandon_requests_to(now, from.addr);
        if was_pred {
            self.pred = predecessor.filter(|p| p.addr != self.me.addr && p.addr != from.addr);
            self.registry.replicas_changed();
        }
        self.repair_gracefully();
    }

    /// After a neighbour left gracefully: if no successor is left, take the nearest
    /// finger or the predecessor, else stay alone (the leaver said nobody else is there).
    fn repair_gracefully(&mut self) {
        if self.succs.is_empty() {
            if let Some(p) = self.fingers.nearest(self.me.id).or(self.pred) {
                self.succs.push(p);
            }
        }
        self.set_successor_fingers();
    }
}
