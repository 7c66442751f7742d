//! Graceful departure: a leaving node hands each of its zones to another node.
//!
//! - **Buddy merge.** If the zone's buddy (the other half of its parent) is one
//!   neighbour's zone, that neighbour takes it and the two merge into the parent.
//! - **Pair search.** Otherwise the buddy is split further. The leaving node asks
//!   a neighbour inside the buddy; that node checks its own zone's buddy, and if
//!   it too is split, names the nodes inside it, and so on down the split tree
//!   (each step is deeper, so the search ends) until a node whose buddy is one
//!   zone: it hands its zone to that buddy's owner (a merge), and, free now,
//!   tells the leaving node, which hands it the leaving zone.
//! - **Hand-offs.** A node gives a zone up the moment it sends it (so nothing it
//!   says afterwards claims it) and takes it back if the receiver refuses or
//!   stays silent; the receiver announces its new zones. A node that cannot hand
//!   its zones over within `leave_timeout` (say, its neighbours keep leaving too)
//!   goes anyway and asks its neighbours to take them over as after a crash.

use std::time::{Duration, Instant};

use rand::Rng;

use super::msg::{CanMsg, Entry, NodeInfo, Peer};
use super::node::{CanNode, Give, Leaving, MAX_LIST, Phase, Reservation, Timer, Traffic, Waiting};
use super::zone::Zone;
use crate::machine::NodeAddr;
use crate::overlay::OverlayEvent;
use crate::overlay::store::Store;
use crate::time::TimerTable;

impl CanNode {
    /// `Leave` command.
    pub(crate) fn leave(&mut self, now: Instant) {
        self.own.clear();
        if !self.joined() || self.leaving.is_some() {
            if self.leaving.is_none() {
                self.finish_leave();
            }
            return;
        }
        self.leaving = Some(Leaving { give_up_at: now + self.cfg.leave_timeout, busy: false });
        self.leave_step(now);
    }

    /// Hands the next zone over, or finishes.
    pub(crate) fn leave_step(&mut self, now: Instant) {
        let Some(l) = self.leaving else { return };
        if l.busy {
            return;
        }
        if self.zones.is_empty() {
            return self.finish_leave();
        }
        if now >= l.give_up_at {
            return self.give_up_leave();
        }
        if self.normalize_zones() {
            self.zones_changed(None, &[]);
        }
        // The deepest zone first: its buddy is the likeliest to be one zone.
        let Some(&z) = self.zones.iter().max_by_key(|z| (z.depth(), z.lo().to_vec())) else { return };
        let Some(buddy) = z.sibling() else {
            // The whole space: alone, nobody to hand it to.
            return self.finish_leave();
        };
        if let Some(owner) = self.table.owner_of(&buddy).map(|n| n.info.peer) {
            return self.handoff(now, z, owner.addr, Give::Leave);
        }
        let inside = self.table.iter().find(|n| n.info.zones.iter().any(|x| buddy.covers(x))).map(|n| n.info.peer.addr);
        match inside {
            Some(to) => {
                self.set_leave_busy(true);
                let wait = self.cfg.request_timeout * 3;
                let body = CanMsg::FindPair { region: buddy };
                self.request_for(now, to, body, Waiting::FindPair { zone: z }, Traffic::Maintenance, wait);
            }
            // Our table does not show the buddy yet: the heartbeats will.
            None => self.leave_retry(now),
        }
    }

    fn set_leave_busy(&mut self, busy: bool) {
        if let Some(l) = &mut self.leaving {
            l.busy = busy;
        }
    }

    /// The step failed or was refused: try again shortly.
    pub(crate) fn leave_retry(&mut self, now: Instant) {
        if self.leaving.is_none() {
            return;
        }
        self.set_leave_busy(false);
        let d = Duration::from_millis(self.rng.random_range(100..600));
        self.timers.set(Timer::Leave, now + d);
    }

    /// Every zone handed over: gone.
    fn finish_leave(&mut self) {
        self.phase = Phase::Left;
        self.leaving = None;
        self.timers = TimerTable::default();
        self.pending.clear();
        self.table.clear();
        self.takeovers.clear();
        self.store = Store::default();
        self.zones.clear();
        self.event(OverlayEvent::Left);
    }

    /// Out of time: the neighbours take the zones over as after a crash (they hold
    /// copies of the registrations).
    fn give_up_leave(&mut self) {
        for to in self.table.addrs() {
            self.send(to, 0, CanMsg::Gone, Traffic::Maintenance);
        }
        self.finish_leave();
    }

    /// The registrations stored here whose point lies in `zone`.
    pub(crate) fn entries_in(&self, now: Instant, zone: &Zone) -> Vec<Entry> {
        let dims = self.dims();
        self.store.entries(now, |k| zone.contains(&super::zone::Point::of_key(k, dims)))
    }

    /// Gives `zone` up and sends it to `to`.
    pub(crate) fn handoff(&mut self, now: Instant, zone: Zone, to: NodeAddr, purpose: Give) {
        let entries = self.entries_in(now, &zone);
        let mut neighbours: Vec<NodeInfo> =
            self.table.iter().filter(|n| n.info.zones.iter().any(|z| z.abuts(&zone))).map(|n| n.info.clone()).collect();
        // Failed neighbours whose zones we were about to take over: the receiver
        // takes our part in that.
        for t in &self.takeovers {
            if t.zones.iter().any(|z| z.abuts(&zone)) {
                neighbours.push(NodeInfo { peer: t.dead, version: 0, zones: t.zones.clone() });
            }
        }
        neighbours.truncate(MAX_LIST - 1);
        self.zones.retain(|z| *z != zone);
        self.stats.handoffs += 1;
        if purpose == Give::Leave {
            self.set_leave_busy(true);
        }
        let what = Waiting::Handoff { zone, purpose, neighbours: neighbours.clone() };
        let body = CanMsg::Handoff { zone, entries, neighbours };
        self.request(now, to, body, what, Traffic::Maintenance);
        // After the hand-off on the same link: the receiver hears it first.
        self.zones_changed(None, &[]);
    }

    /// A hand-off was refused or went unanswered: the zone is ours again, and so
    /// are the neighbours we dropped with it (probed again).
    pub(crate) fn handoff_failed(&mut self, now: Instant, zone: Zone, purpose: Give, neighbours: Vec<NodeInfo>) {
        if self.phase != Phase::Joined {
            return;
        }
        self.zones.push(zone);
        self.zones_changed(None, &[]);
        for info in neighbours {
            self.learn_hint(now, info);
        }
        match purpose {
            Give::Leave => self.leave_retry(now),
            Give::Pair { leaver, request_id } => self.send(leaver, request_id, CanMsg::Retry, Traffic::Reply),
        }
    }

    /// A zone handed to us: merge it with its buddy, or take it as the node freed
    /// for its sender.
    pub(crate) fn on_handoff(
        &mut self,
        now: Instant,
        from: Peer,
        rid: u64,
        zone: Zone,
        entries: Vec<Entry>,
        neighbours: Vec<NodeInfo>,
    ) {
        if zone.dims() != self.dims() {
            return self.drop_input();
        }
        let freed_for_it = self.reserved.is_some_and(|r| r.leaver == from.addr);
        let buddy_here = zone.sibling().is_some_and(|s| self.zones.contains(&s));
        if !freed_for_it && !buddy_here {
            return self.send(from.addr, rid, CanMsg::Retry, Traffic::Reply);
        }
        if freed_for_it {
            self.reserved = None;
            self.timers.clear(Timer::Reserve);
        }
        self.zones.push(zone);
        for e in entries.into_iter().take(self.cfg.limits.total) {
            self.store_entry(now, e);
        }
        // The sender gave the zone up: forget its old description of it.
        self.table.remove(from.addr);
        self.zones_changed(None, &[]);
        for info in neighbours.into_iter().take(MAX_LIST) {
            if info.peer.addr != from.addr {
                self.learn_hint(now, info);
            }
        }
        let info = self.info();
        self.send(from.addr, rid, CanMsg::Accepted { info }, Traffic::Reply);
    }

    /// Our hand-off was taken.
    pub(crate) fn on_accepted(&mut self, now: Instant, from: Peer, rid: u64, info: NodeInfo) {
        let fits = |w: &Waiting| matches!(w, Waiting::Handoff { .. });
        let Some(Waiting::Handoff { purpose, .. }) = self.take_pending(rid, from.addr, fits).map(|p| p.what) else {
            return;
        };
        if self.sane(&info, from.addr) {
            self.learn(now, info);
        }
        match purpose {
            Give::Leave => {
                self.set_leave_busy(false);
                self.leave_step(now);
            }
            Give::Pair { leaver, request_id } => {
                let until = now + self.cfg.reservation;
                self.reserved = Some(Reservation { leaver, until });
                self.timers.set(Timer::Reserve, until);
                self.send(leaver, request_id, CanMsg::Freed, Traffic::Reply);
            }
        }
    }

    /// A leaving node looks for a pair of buddies inside `region`.
    pub(crate) fn on_find_pair(&mut self, now: Instant, from: Peer, rid: u64, region: Zone) {
        let giving = self.pending.any(|p| matches!(p.what, Waiting::Handoff { .. }));
        if self.leaving.is_some() || self.reserved.is_some() || giving || region.dims() != self.dims() {
            return self.send(from.addr, rid, CanMsg::Busy, Traffic::Reply);
        }
        let Some(&mine) = self.zones.iter().filter(|z| region.covers(z)).max_by_key(|z| z.depth()) else {
            return self.send(from.addr, rid, CanMsg::Retry, Traffic::Reply);
        };
        let Some(buddy) = mine.sibling() else {
            return self.send(from.addr, rid, CanMsg::Retry, Traffic::Reply);
        };
        if self.zones.contains(&buddy) {
            // Both halves are ours: merge them, and let the leaver look again.
            self.zones_changed(None, &[]);
            return self.send(from.addr, rid, CanMsg::Retry, Traffic::Reply);
        }
        if let Some(owner) = self.table.owner_of(&buddy).map(|n| n.info.peer.addr) {
            if owner == from.addr {
                return self.send(from.addr, rid, CanMsg::Retry, Traffic::Reply);
            }
            // Answered once the buddy's owner took our zone (see `on_accepted`).
            return self.handoff(now, mine, owner, Give::Pair { leaver: from.addr, request_id: rid });
        }
        let mut candidates: Vec<NodeInfo> = self
            .table
            .iter()
            .filter(|n| n.info.zones.iter().any(|z| buddy.covers(z)))
            .map(|n| n.info.clone())
            .collect();
        if candidates.is_empty() {
            return self.send(from.addr, rid, CanMsg::Retry, Traffic::Reply);
        }
        candidates.truncate(4);
        self.send(from.addr, rid, CanMsg::Deeper { region: buddy, candidates }, Traffic::Reply);
    }

    /// The pair search found a node and freed it: hand it our zone.
    pub(crate) fn on_freed(&mut self, now: Instant, from: Peer, rid: u64) {
        let fits = |w: &Waiting| matches!(w, Waiting::FindPair { .. });
        let Some(Waiting::FindPair { zone }) = self.take_pending(rid, from.addr, fits).map(|p| p.what) else {
            return;
        };
        self.set_leave_busy(false);
        if self.leaving.is_some() && self.zones.contains(&zone) {
            self.handoff(now, zone, from.addr, Give::Leave);
        } else {
            self.leave_retry(now);
        }
    }

    /// The pair search goes on deeper, inside `region`.
    pub(crate) fn on_deeper(&mut self, now: Instant, from: Peer, rid: u64, region: Zone, candidates: Vec<NodeInfo>) {
        let fits = |w: &Waiting| matches!(w, Waiting::FindPair { .. });
        let Some(Waiting::FindPair { zone }) = self.take_pending(rid, from.addr, fits).map(|p| p.what) else {
            return;
        };
        let next = candidates
            .iter()
            .take(MAX_LIST)
            .find(|c| {
                c.peer.addr != self.me.addr && c.zones.iter().any(|z| z.dims() == self.dims() && region.covers(z))
            })
            .map(|c| c.peer.addr);
        match next {
            Some(to) if self.leaving.is_some() && region.dims() == self.dims() => {
                let wait = self.cfg.request_timeout * 3;
                let body = CanMsg::FindPair { region };
                self.request_for(now, to, body, Waiting::FindPair { zone }, Traffic::Maintenance, wait);
            }
            _ => self.leave_retry(now),
        }
    }

    /// A freed node's leaver never came: it joins again (see `lost_zones`).
    pub(crate) fn reservation_expired(&mut self, now: Instant) {
        if self.reserved.is_some_and(|r| r.until <= now) {
            self.reserved = None;
        }
    }
}
