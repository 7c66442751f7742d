//! The neighbour table: what a node knows of the nodes whose zones abut its own,
//! kept exact on both sides of every change.
//!
//! - **First-hand only.** An entry's zones come from a message the neighbour sent
//!   itself (heartbeat, update, probe, reply, claim), never from a third node:
//!   lists heard second hand (a heartbeat's neighbour table, a join's or hand-off's
//!   list) only make the node probe, and the probed node's answer decides. The one
//!   exception is a list handed over with a zone (join, hand-off): its entries go
//!   in as provisional at once, so the new owner can route, and are probed.
//! - **Every change announced.** A node whose zones change sends its new
//!   description to its old and new neighbours; each keeps it if the zones abut
//!   its own and drops it otherwise.
//! - **Heartbeats repair the rest.** Each period a node sends every neighbour its
//!   zones (and every few periods its table). A receiver that is no neighbour
//!   answers with its own zones so the sender drops it; one that sees a node in the
//!   list abutting it that it does not know probes it. A neighbour silent for
//!   `dead_after` has failed (see `takeover`).
//! - **Conflicts.** Two nodes owning overlapping zones (a takeover race, a node
//!   wrongly thought dead) settle it from first-hand descriptions alone: the
//!   larger zone gives up the smaller one's part; of two equal zones the node
//!   with the lower id keeps it. Nothing is lost either way, both sides reach the
//!   same answer, and neither answer changes as their other zones do. Two owners
//!   that do not know each other meet through a common neighbour, whose table
//!   (sent with its heartbeats) names both.

use std::time::Instant;

use super::msg::{CanMsg, NodeInfo, Peer};
use super::node::{CanNode, MAX_LIST, Timer, Traffic, Waiting};
use super::zone::Zone;
use crate::machine::NodeAddr;

/// Times a node that answered a probe while joining is probed again.
const REPROBES: u8 = 5;

/// What a node knows of one neighbour.
#[derive(Debug, Clone)]
pub(crate) struct Neighbour {
    pub(crate) info: NodeInfo,
    /// When the neighbour last sent us anything.
    pub(crate) heard: Instant,
    /// The description came from the neighbour itself (not from a list handed over).
    pub(crate) direct: bool,
    /// Its neighbour table as of its last heartbeat that carried one.
    pub(crate) list: Vec<NodeInfo>,
    /// It has a copy of the registrations we own.
    pub(crate) synced: bool,
}

/// Neighbours by address.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table(Vec<Neighbour>);

impl Table {
    fn position(&self, addr: NodeAddr) -> Result<usize, usize> {
        self.0.binary_search_by(|n| n.info.peer.addr.cmp(&addr))
    }

    pub(crate) fn get(&self, addr: NodeAddr) -> Option<&Neighbour> {
        self.position(addr).ok().map(|i| &self.0[i])
    }

    pub(crate) fn get_mut(&mut self, addr: NodeAddr) -> Option<&mut Neighbour> {
        self.position(addr).ok().map(|i| &mut self.0[i])
    }

    pub(crate) fn insert(&mut self, n: Neighbour) {
        match self.position(n.info.peer.addr) {
            Ok(i) => self.0[i] = n,
            Err(i) => self.0.insert(i, n),
        }
    }

    pub(crate) fn remove(&mut self, addr: NodeAddr) -> Option<Neighbour> {
        self.position(addr).ok().map(|i| self.0.remove(i))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Neighbour> {
        self.0.iter()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Neighbour> {
        self.0.iter_mut()
    }

    pub(crate) fn retain(&mut self, f: impl FnMut(&Neighbour) -> bool) {
        self.0.retain(f);
    }

    pub(crate) fn addrs(&self) -> Vec<NodeAddr> {
        self.0.iter().map(|n| n.info.peer.addr).collect()
    }

    pub(crate) fn infos(&self) -> Vec<NodeInfo> {
        self.0.iter().map(|n| n.info.clone()).collect()
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// The neighbour owning exactly `zone` (as one of its zones).
    pub(crate) fn owner_of(&self, zone: &Zone) -> Option<&Neighbour> {
        self.0.iter().find(|n| n.info.zones.contains(zone))
    }
}

/// Whether some zone of `a` abuts some zone of `b`.
pub(crate) fn any_abut(a: &[Zone], b: &[Zone]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.abuts(y)))
}

/// Whether some zone of `a` shares a point with some zone of `b`.
pub(crate) fn any_intersect(a: &[Zone], b: &[Zone]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.intersects(y)))
}

/// `pieces` minus `z`: pieces inside `z` go, a piece covering `z` keeps the rest.
pub(crate) fn carve(pieces: Vec<Zone>, z: &Zone) -> Vec<Zone> {
    let mut out = Vec::with_capacity(pieces.len());
    for p in pieces {
        if z.covers(&p) {
            continue;
        }
        if p.covers(z) {
            out.extend(p.minus(z));
        } else {
            out.push(p);
        }
    }
    out
}

impl CanNode {
    /// Whether zones `zones` would be this node's neighbours (abut, no overlap).
    pub(crate) fn abuts_me(&self, zones: &[Zone]) -> bool {
        any_abut(&self.zones, zones) && !any_intersect(&self.zones, zones)
    }

    /// Takes a description that came from the node itself.
    pub(crate) fn learn(&mut self, now: Instant, info: NodeInfo) {
        let addr = info.peer.addr;
        if addr == self.me.addr {
            return;
        }
        self.dead.retain(|(a, _)| *a != addr);
        if self.table.get(addr).is_some_and(|n| info.version < n.info.version) {
            return self.drop_input(); // older than what we have
        }
        if self.joined() {
            self.resolve_conflicts(&info);
        }
        self.takeover_seen(&info);
        let abut = self.joined() && self.abuts_me(&info.zones);
        if abut {
            self.remember(addr);
        }
        match (self.table.get_mut(addr), abut) {
            (Some(n), true) => {
                if n.info.zones != info.zones {
                    // Its zones changed: it gets the copies we hold for its zones.
                    n.synced = false;
                    self.list_dirty = true;
                }
                n.info = info;
                n.heard = now;
                n.direct = true;
            }
            (Some(_), false) => {
                self.table.remove(addr);
                self.list_dirty = true;
                if self.joined() && !any_intersect(&self.zones, &info.zones) {
                    // It gave the part next to us away: its answer names who has it.
                    self.probe(now, addr);
                }
            }
            (None, true) => {
                let n = Neighbour { info, heard: now, direct: true, list: Vec::new(), synced: false };
                self.table.insert(n);
                self.list_dirty = true;
                // Tell the other neighbours at once: should one of us fail now, the
                // rest know whom to coordinate the takeover with.
                let soon = now + self.cfg.heartbeat_period / 10;
                if self.timers.get(Timer::Heartbeat).is_some_and(|t| t > soon) {
                    self.timers.set(Timer::Heartbeat, soon);
                }
            }
            (None, false) => {}
        }
    }

    /// Remembers a node heard from directly (newest last, a bounded list): where to
    /// route from when our neighbours cannot find a point (see `gaps`).
    pub(crate) fn remember(&mut self, addr: NodeAddr) {
        self.known.retain(|a| *a != addr);
        if self.known.len() >= super::node::MAX_REJOIN {
            self.known.remove(0);
        }
        self.known.push(addr);
    }

    /// Takes a description heard second hand, with a zone handed over: a node that
    /// abuts us goes in as provisional and is probed.
    pub(crate) fn learn_hint(&mut self, now: Instant, info: NodeInfo) {
        let addr = info.peer.addr;
        if addr == self.me.addr || !self.sane_zones(&info.zones) {
            return;
        }
        if self.is_dead(addr, now) {
            // A failed node whose zones were handed to us with ours: its takeover
            // is ours to take part in now.
            if self.joined() && self.table.get(addr).is_none() && self.abuts_me(&info.zones) {
                let n = Neighbour { info, heard: now, direct: false, list: Vec::new(), synced: true };
                self.table.insert(n);
                self.declare_dead(now, addr);
            }
            return;
        }
        if self.table.get(addr).is_none() && self.abuts_me(&info.zones) {
            let n = Neighbour { info, heard: now, direct: false, list: Vec::new(), synced: false };
            self.table.insert(n);
            self.list_dirty = true;
        }
        self.probe(now, addr);
    }

    /// A neighbour list heard second hand: probes the nodes in it that would be our
    /// neighbours (or overlap us) but are unknown here.
    pub(crate) fn hearsay(&mut self, now: Instant, list: &[NodeInfo]) {
        for info in list.iter().take(MAX_LIST) {
            let addr = info.peer.addr;
            if addr == self.me.addr || self.table.get(addr).is_some() || self.is_dead(addr, now) {
                continue;
            }
            if self.sane_zones(&info.zones)
                && (any_abut(&self.zones, &info.zones) || any_intersect(&self.zones, &info.zones))
            {
                self.probe(now, addr);
            }
        }
    }

    /// Asks `addr` for its zones, unless a probe to it is under way already.
    pub(crate) fn probe(&mut self, now: Instant, addr: NodeAddr) {
        if self.pending.any(|p| p.to == addr && matches!(p.what, Waiting::Probe)) {
            return;
        }
        let info = self.info();
        self.request(now, addr, CanMsg::Probe { info }, Waiting::Probe, Traffic::Maintenance);
    }

    /// `addr` answered a probe while still joining: probe it again in half a
    /// heartbeat period (a few times at most).
    pub(crate) fn probe_later(&mut self, now: Instant, addr: NodeAddr) {
        let at = now + self.cfg.heartbeat_period / 2;
        let room = self.reprobe.len() < MAX_LIST;
        match self.reprobe.iter_mut().find(|(a, _, _)| *a == addr) {
            Some((_, t, n)) if *n < REPROBES => {
                *t = at;
                *n += 1;
            }
            Some(_) => {}
            None if room => self.reprobe.push((addr, at, 1)),
            None => {}
        }
        let soon = self.timers.get(Timer::Heartbeat).is_none_or(|t| t > at);
        if soon && self.joined() {
            self.timers.set(Timer::Heartbeat, at);
        }
    }

    /// A probe got no answer: a provisional entry (never heard from) is taken for
    /// failed; anyone else is left to the heartbeats.
    pub(crate) fn probe_failed(&mut self, now: Instant, addr: NodeAddr) {
        match self.table.get(addr) {
            Some(n) if !n.direct => self.declare_dead(now, addr),
            Some(_) => {}
            None => self.mark_dead(now, addr),
        }
    }

    pub(crate) fn is_dead(&self, addr: NodeAddr, now: Instant) -> bool {
        self.dead.iter().any(|(a, until)| *a == addr && *until > now)
    }

    /// Remembers `addr` as failed for a while: hearsay does not bring it back.
    pub(crate) fn mark_dead(&mut self, now: Instant, addr: NodeAddr) {
        self.dead.retain(|(a, until)| *until > now && *a != addr);
        if self.dead.len() >= MAX_LIST {
            self.dead.remove(0);
        }
        self.dead.push((addr, now + self.cfg.dead_after * 4));
    }

    /// Settles zones that both this node and `info`'s node own (see the module docs).
    fn resolve_conflicts(&mut self, info: &NodeInfo) {
        if !any_intersect(&self.zones, &info.zones) {
            return;
        }
        let mut mine = self.zones.clone();
        let (mut changed, mut tell) = (false, false);
        for t in &info.zones {
            let mut next = Vec::with_capacity(mine.len());
            for m in mine {
                if !m.intersects(t) {
                    next.push(m);
                } else if m == *t {
                    // The lower id keeps it: a rule that cannot change while the two
                    // learn of each other (unlike one on the zones they own), so
                    // exactly one of them gives way.
                    if self.me.id < info.peer.id {
                        next.push(m);
                        tell = true;
                    } else {
                        changed = true;
                    }
                } else if m.covers(t) {
                    next.extend(m.minus(t));
                    changed = true;
                } else {
                    // Theirs covers ours: they give our part up once they hear of us.
                    next.push(m);
                    tell = true;
                }
            }
            mine = next;
        }
        if changed {
            self.stats.conflicts += 1;
            self.zones = mine;
            self.zones_changed(None, &[info.peer.addr]);
        } else if tell {
            let me = self.info();
            self.send(info.peer.addr, 0, CanMsg::Update { info: me }, Traffic::Maintenance);
        }
    }

    /// Merges every pair of buddy zones this node owns; true if any merged.
    pub(crate) fn normalize_zones(&mut self) -> bool {
        let mut merged = false;
        loop {
            self.zones.sort();
            self.zones.dedup();
            // Zones are dyadic: two that meet are one inside the other. A zone
            // inside a bigger one we own (a replayed or forged hand-off, a late
            // join answer) adds nothing.
            let zones = self.zones.clone();
            self.zones.retain(|z| !zones.iter().any(|o| o != z && o.covers(z)));
            let pair = self.zones.iter().find_map(|z| z.sibling().filter(|s| self.zones.contains(s)).map(|s| (*z, s)));
            let Some((a, b)) = pair else { return merged };
            // A zone with a sibling has a parent.
            let parent = a.parent().expect("a zone with a buddy has a parent");
            self.zones.retain(|z| *z != a && *z != b);
            self.zones.push(parent);
            merged = true;
        }
    }

    /// This node's zones changed: a new version, neighbours that no longer abut
    /// dropped, and the new description sent to the old and new neighbours and to
    /// `extra` (as a claim of `dead`'s zones when it is one).
    pub(crate) fn zones_changed(&mut self, claim_of: Option<Peer>, extra: &[NodeAddr]) {
        self.normalize_zones();
        self.version += 1;
        let mut targets = self.table.addrs();
        let zones = self.zones.clone();
        self.table.retain(|n| any_abut(&zones, &n.info.zones) && !any_intersect(&zones, &n.info.zones));
        for n in self.table.iter_mut() {
            n.synced = false;
        }
        self.list_dirty = true;
        targets.extend(extra.iter().copied());
        targets.sort();
        targets.dedup();
        let info = self.info();
        let me = self.me.addr;
        for to in targets.into_iter().filter(|a| *a != me) {
            let body = match claim_of {
                Some(dead) => CanMsg::Claim { info: info.clone(), dead },
                None => CanMsg::Update { info: info.clone() },
            };
            self.send(to, 0, body, Traffic::Maintenance);
        }
    }

    /// Sends every neighbour our zones (and now and then our table), then judges
    /// the silent ones.
    pub(crate) fn heartbeat_tick(&mut self, now: Instant) {
        if !self.joined() {
            return self.timers.clear(Timer::Heartbeat);
        }
        self.beats = self.beats.wrapping_add(1);
        let list = (self.list_dirty || self.beats % self.cfg.list_every.max(1) == 0).then(|| self.table.infos());
        self.list_dirty = false;
        let info = self.info();
        for to in self.table.addrs() {
            let body = CanMsg::Heartbeat { info: info.clone(), neighbours: list.clone() };
            self.send(to, 0, body, Traffic::Maintenance);
        }
        let silent: Vec<NodeAddr> = self
            .table
            .iter()
            .filter(|n| now.saturating_duration_since(n.heard) > self.cfg.dead_after)
            .map(|n| n.info.peer.addr)
            .collect();
        for addr in silent {
            self.declare_dead(now, addr);
        }
        self.dead.retain(|(_, until)| *until > now);
        let due: Vec<NodeAddr> = self.reprobe.iter().filter(|(_, t, _)| *t <= now).map(|(a, _, _)| *a).collect();
        for addr in due {
            if let Some(r) = self.reprobe.iter_mut().find(|(a, _, _)| *a == addr) {
                // Not again unless it answers `NotJoined` again.
                r.1 = now + self.cfg.dead_after * 4;
            }
            self.probe(now, addr);
        }
        self.reprobe.retain(|(_, t, n)| *t > now && *n <= REPROBES);
        if self.beats % 2 == 0 {
            self.discover_gaps(now);
        }
        let d = self.jitter(self.cfg.heartbeat_period);
        self.timers.set(Timer::Heartbeat, now + d);
    }

    pub(crate) fn on_heartbeat(&mut self, now: Instant, from: Peer, info: NodeInfo, neighbours: Option<Vec<NodeInfo>>) {
        if !self.sane(&info, from.addr) {
            return self.drop_input();
        }
        if !self.joined() {
            return;
        }
        self.learn(now, info);
        if self.table.get(from.addr).is_none() {
            // It counts us as a neighbour and we are not: tell it what we own.
            let me = self.info();
            return self.send(from.addr, 0, CanMsg::Update { info: me }, Traffic::Maintenance);
        }
        if let Some(mut list) = neighbours {
            list.truncate(MAX_LIST);
            self.hearsay(now, &list);
            if let Some(n) = self.table.get_mut(from.addr) {
                n.list = list;
            }
        }
    }

    pub(crate) fn on_update(&mut self, now: Instant, from: Peer, info: NodeInfo) {
        if !self.sane(&info, from.addr) {
            return self.drop_input();
        }
        if self.joined() {
            self.learn(now, info);
        }
    }

    pub(crate) fn on_probe(&mut self, now: Instant, from: Peer, rid: u64, info: NodeInfo) {
        if !self.sane(&info, from.addr) {
            return self.drop_input();
        }
        // Our neighbours that abut the prober: it may have missed some while zones
        // moved on both sides of it at once.
        let neighbours: Vec<NodeInfo> = self
            .table
            .iter()
            .filter(|n| n.info.peer.addr != from.addr && any_abut(&n.info.zones, &info.zones))
            .map(|n| n.info.clone())
            .collect();
        self.learn(now, info);
        let me = self.info();
        self.send(from.addr, rid, CanMsg::ProbeReply { info: me, neighbours }, Traffic::Reply);
    }

    pub(crate) fn on_probe_reply(&mut self, now: Instant, from: Peer, rid: u64, info: NodeInfo, hints: Vec<NodeInfo>) {
        if self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Probe)).is_none() {
            return;
        }
        if !self.sane(&info, from.addr) {
            return self.drop_input();
        }
        if self.joined() {
            self.learn(now, info);
            self.hearsay(now, &hints);
        }
    }

    /// `addr` could not be reached: a neighbour has failed; anyone else is
    /// remembered as gone for a while.
    pub(crate) fn peer_failed(&mut self, now: Instant, addr: NodeAddr) {
        if self.table.get(addr).is_some() {
            self.declare_dead(now, addr);
        } else {
            self.mark_dead(now, addr);
        }
    }
}
