//! Joining: a new node picks a random point, routes to it through a contact, and
//! asks the point's owner for a zone. The owner halves the zone holding the point
//! along its longest side (lowest dimension on ties) and hands the half with the
//! point over, with the registrations in it and the nodes abutting it; a node
//! that owns several zones hands the whole one holding the point instead (which
//! undoes a takeover's fragmentation). The newcomer probes every neighbour it was
//! given, the owner announces its smaller zone, and each side's table is exact
//! again within a round trip. A node whose every zone went (it was freed and not
//! used, or lost a conflict) joins again the same way.

use std::time::{Duration, Instant};

use rand::Rng;

use super::msg::{CanMsg, Entry, NodeInfo, Peer};
use super::node::{CanNode, MAX_LIST, MAX_REJOIN, Phase, Timer, Traffic, Waiting, random_point};
use super::route::Purpose;
use super::zone::{Point, Zone};
use crate::machine::NodeAddr;
use crate::overlay::{OverlayError, OverlayEvent};

/// Most redirects of one join to larger zones.
const MAX_REDIRECTS: u8 = 8;

impl CanNode {
    /// The node is part of a network now, owning `zones`.
    pub(crate) fn become_joined(&mut self, now: Instant, zones: Vec<Zone>) {
        self.phase = Phase::Joined;
        self.zones = zones;
        self.normalize_zones();
        self.version += 1;
        self.rejoin.clear();
        self.event(OverlayEvent::Joined);
        self.timers.clear(Timer::Join);
        let d = self.jitter(self.cfg.heartbeat_period);
        self.timers.set(Timer::Heartbeat, now + d);
        if !self.own.is_empty() {
            self.timers.set(Timer::Refresh, now);
        }
    }

    /// Tries the current contact (bootstrap list, then remembered peers), or
    /// schedules the next round.
    pub(crate) fn join_attempt(&mut self, now: Instant) {
        let Phase::Joining { contact, backoff, reported } = self.phase.clone() else { return };
        let n = self.bootstrap.len();
        let addr = if contact < n { self.bootstrap.get(contact) } else { self.rejoin.get(contact - n) };
        if let Some(&addr) = addr {
            // After a near miss, from the node that answered: it is next to the point.
            let via = self.join_via.take().unwrap_or(addr);
            let target = self.join_point;
            return self.start_route_via(now, target, Purpose::Join, Some(via));
        }
        if self.bootstrap.is_empty() && self.rejoin.is_empty() {
            // The network's creator, alone with nobody to ask: the whole space again.
            let root = Zone::root(self.dims());
            return self.become_joined(now, vec![root]);
        }
        // Every contact failed: never start a second network; report and retry later.
        if !reported {
            self.event(OverlayEvent::Disconnected);
        }
        let next = backoff.saturating_mul(2).min(self.cfg.join_backoff_max);
        self.phase = Phase::Joining { contact: 0, backoff: next, reported: true };
        let d = self.jitter(backoff);
        self.timers.set(Timer::Join, now + d);
    }

    /// The route to the join point ended.
    pub(crate) fn join_done(&mut self, now: Instant, result: Result<Peer, OverlayError>) {
        if !matches!(self.phase, Phase::Joining { .. }) {
            return;
        }
        match result {
            Ok(owner) if owner.addr != self.me.addr => {
                let body = CanMsg::Join { point: self.join_point, dims: self.dims() as u8 };
                self.request(now, owner.addr, body, Waiting::Join { redirects: 0 }, Traffic::Maintenance);
            }
            _ => self.join_failed(now),
        }
    }

    /// The join through the current contact failed: try the next one.
    pub(crate) fn join_failed(&mut self, now: Instant) {
        if let Phase::Joining { contact, backoff, reported } = self.phase.clone() {
            self.phase = Phase::Joining { contact: contact + 1, backoff, reported };
            self.join_attempt(now);
        }
    }

    /// The owner `from` moved on or was busy: route again shortly, starting from it.
    pub(crate) fn join_retry(&mut self, now: Instant, from: NodeAddr) {
        if matches!(self.phase, Phase::Joining { .. }) {
            self.join_via = Some(from);
            let d = Duration::from_millis(self.rng.random_range(50..250));
            self.timers.set(Timer::Join, now + d);
        }
    }

    /// The network has `dims` dimensions: this node cannot join it.
    pub(crate) fn on_wrong_dims(&mut self, now: Instant, from: Peer, rid: u64, dims: u8) {
        let Some(p) = self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Join { .. } | Waiting::Hop(_))) else {
            return;
        };
        if !matches!(self.phase, Phase::Joining { .. }) {
            // A member never routes to a node of another shape but by a peer's mistake.
            return self.request_failed(now, p);
        }
        let reason = format!(
            "{} runs CAN with {dims} dimensions and this node {}: a network runs one overlay, one shape",
            from.addr,
            self.dims()
        );
        self.event(OverlayEvent::Refused { contact: from.addr, reason });
        self.join_failed(now);
    }

    /// A joiner asks for the zone holding `point`.
    pub(crate) fn on_join(&mut self, now: Instant, from: Peer, rid: u64, point: Point, dims: u8) {
        if usize::from(dims) != self.dims() || point.dims() != self.dims() {
            let dims = self.dims() as u8;
            return self.send(from.addr, rid, CanMsg::WrongDims { dims }, Traffic::Reply);
        }
        if !self.joined() {
            return self.send(from.addr, rid, CanMsg::NotJoined, Traffic::Reply);
        }
        if self.leaving.is_some() || self.reserved.is_some() {
            return self.send(from.addr, rid, CanMsg::Busy, Traffic::Reply);
        }
        let Some(&zone) = self.zones.iter().find(|z| z.contains(&point)) else {
            return self.send(from.addr, rid, CanMsg::NotOwner, Traffic::Reply);
        };
        if self.zones.len() == 1
            && let Some((to, point)) = self.larger_neighbour(&zone)
        {
            return self.send(from.addr, rid, CanMsg::JoinElsewhere { to, point }, Traffic::Reply);
        }
        let give = if self.zones.len() > 1 {
            zone
        } else {
            let Some((a, b)) = zone.halves() else {
                return self.send(from.addr, rid, CanMsg::NotOwner, Traffic::Reply);
            };
            let (give, keep) = if a.contains(&point) { (a, b) } else { (b, a) };
            self.zones.push(keep);
            give
        };
        self.zones.retain(|z| *z != zone);
        let entries = self.entries_in(now, &give);
        let mut neighbours: Vec<NodeInfo> =
            self.table.iter().filter(|n| n.info.zones.iter().any(|z| z.abuts(&give))).map(|n| n.info.clone()).collect();
        neighbours.truncate(MAX_LIST - 1);
        // Our zones changed: announce them (a new version) before describing ourselves.
        self.zones_changed(None, &[]);
        if self.zones.iter().any(|z| z.abuts(&give)) {
            neighbours.push(self.info());
        }
        let joiner = NodeInfo { peer: from, version: 0, zones: vec![give] };
        self.learn_provisional(now, joiner);
        self.send(from.addr, rid, CanMsg::JoinAccept { zone: give, neighbours, entries }, Traffic::Reply);
    }

    /// The neighbour whose zone is larger than `zone` and the largest (the lowest
    /// id of equals), with the middle of that zone: where a joiner should ask
    /// instead, so that zones stay near equal. `None` when none is larger.
    fn larger_neighbour(&self, zone: &Zone) -> Option<(Peer, Point)> {
        let (depth, peer, z) = self
            .table
            .iter()
            .filter(|n| n.direct && n.info.zones.len() == 1)
            .map(|n| (n.info.zones[0].depth(), n.info.peer, n.info.zones[0]))
            .min_by_key(|(d, p, _)| (*d, p.id))?;
        if depth >= zone.depth() {
            return None;
        }
        let middle: Vec<u32> = (0..self.dims())
            .map(|k| {
                let (lo, hi) = z.interval(k);
                // Below 2^32: the middle of an interval within [0, 2^32).
                ((lo + hi) / 2) as u32
            })
            .collect();
        Some((peer, Point::new(&middle)?))
    }

    /// The owner we asked sends us on to a neighbour with a larger zone.
    pub(crate) fn on_join_elsewhere(&mut self, now: Instant, from: Peer, rid: u64, to: Peer, point: Point) {
        let fits = |w: &Waiting| matches!(w, Waiting::Join { .. });
        let Some(Waiting::Join { redirects }) = self.take_pending(rid, from.addr, fits).map(|p| p.what) else {
            return;
        };
        if !matches!(self.phase, Phase::Joining { .. }) || point.dims() != self.dims() || redirects >= MAX_REDIRECTS {
            // Chained redirects only ever go to larger zones; this many means
            // stale tables: route to our own point again instead.
            return self.join_retry(now, from.addr);
        }
        self.join_point = point;
        let body = CanMsg::Join { point, dims: self.dims() as u8 };
        self.request(now, to.addr, body, Waiting::Join { redirects: redirects + 1 }, Traffic::Maintenance);
    }

    /// Adds a node we just gave a zone to, before it has spoken for itself.
    fn learn_provisional(&mut self, now: Instant, info: NodeInfo) {
        if self.abuts_me(&info.zones) && self.table.get(info.peer.addr).is_none() {
            let n = super::table::Neighbour { info, heard: now, direct: false, list: Vec::new(), synced: false };
            self.table.insert(n);
            self.list_dirty = true;
        }
    }

    /// Our join was accepted: `zone` is ours.
    pub(crate) fn on_join_accept(
        &mut self,
        now: Instant,
        from: Peer,
        rid: u64,
        zone: Zone,
        neighbours: Vec<NodeInfo>,
        entries: Vec<Entry>,
    ) {
        let expected =
            self.pending.get(&rid).is_some_and(|p| p.to == from.addr && matches!(p.what, Waiting::Join { .. }));
        if expected {
            self.pending.remove(&rid);
        } else if !self.joined() || zone.dims() != self.dims() {
            // Not asked for and nothing to add it to: the owner takes it back when
            // our silence shows (it never counted on us).
            return self.drop_input();
        }
        if zone.dims() != self.dims() {
            return self.drop_input();
        }
        // A late answer to an earlier attempt is a zone all the same: its owner
        // gave it up for us.
        if self.joined() {
            self.zones.push(zone);
        } else {
            self.become_joined(now, vec![zone]);
        }
        for e in entries.into_iter().take(self.cfg.limits.total) {
            self.store_entry(now, e);
        }
        for info in neighbours.into_iter().take(MAX_LIST) {
            if info.peer.addr == from.addr && self.sane(&info, from.addr) {
                self.learn(now, info);
            } else {
                self.learn_hint(now, info);
            }
        }
        self.zones_changed(None, &[from.addr]);
    }

    /// Every zone is gone while joined (freed and not used, or lost to a conflict):
    /// join again as a new node through the nodes we knew.
    pub(crate) fn lost_zones(&mut self, now: Instant) {
        self.stats.rejoins += 1;
        let mut known: Vec<NodeAddr> = std::mem::take(&mut self.rejoin);
        let recent: Vec<NodeAddr> = self.known.iter().rev().copied().collect();
        for a in self.table.addrs().into_iter().chain(recent) {
            if !known.contains(&a) && !self.bootstrap.contains(&a) {
                known.push(a);
            }
        }
        known.truncate(MAX_REJOIN);
        self.rejoin = known;
        self.table.clear();
        self.takeovers.clear();
        self.timers.clear(Timer::Heartbeat);
        self.timers.clear(Timer::Takeover);
        self.timers.clear(Timer::Refresh);
        let dims = self.dims();
        self.join_point = random_point(&mut self.rng, dims);
        self.event(OverlayEvent::Disconnected);
        self.phase = Phase::Joining { contact: 0, backoff: self.cfg.join_backoff_min, reported: true };
        self.join_attempt(now);
    }
}
