//! Failure and takeover: a neighbour that stops answering (silent for
//! `dead_after`, or a refused connection) has failed, and one of its neighbours
//! takes its zones over.
//!
//! Every neighbour that finds the failure ranks the failed node's neighbours it
//! knows (from the failed node's last table and its own) by the volume they own,
//! smallest first, then by id, and waits `takeover_delay` times one more than its
//! rank. The first to wake claims the zones (less any part a live node it knows
//! owns already) and sends the claim to the failed node's neighbours and its own;
//! a node that hears the claim before waking stands down. Should two claim all
//! the same (they found the failure at different times, or knew different
//! neighbours), the conflict rule of `table` keeps exactly one owner. Registrations come
//! from the replicas every owner keeps at its neighbours (see `registry`).

use std::time::Instant;

use super::msg::{NodeInfo, Peer};
use super::node::{CanNode, Timer};
use super::table::{any_abut, carve};
use super::zone::{Zone, total_volume};
use crate::machine::NodeAddr;

/// A takeover round for one failed node.
#[derive(Debug, Clone)]
pub(crate) struct Takeover {
    pub(crate) dead: Peer,
    /// What of its zones nobody is known to own yet.
    pub(crate) zones: Vec<Zone>,
    /// Who hears the claim: the failed node's neighbours as far as known.
    pub(crate) notify: Vec<NodeAddr>,
    /// When this node claims, unless someone else does first.
    pub(crate) at: Instant,
}

impl CanNode {
    /// `addr` has failed (or left without handing over): forget it, and take part
    /// in the takeover of its zones.
    pub(crate) fn declare_dead(&mut self, now: Instant, addr: NodeAddr) {
        self.mark_dead(now, addr);
        let Some(n) = self.table.remove(addr) else { return };
        self.list_dirty = true;
        if !self.joined() || n.info.zones.is_empty() {
            return;
        }
        let dz = n.info.zones;
        // The failed node's neighbours as far as we know them, ranked smallest first.
        let mut cands: Vec<(f64, crate::id::Id, NodeAddr)> =
            vec![(total_volume(&self.zones), self.me.id, self.me.addr)];
        let known: Vec<NodeInfo> = n.list.into_iter().chain(self.table.infos()).collect();
        for c in known {
            let a = c.peer.addr;
            if a == addr || a == self.me.addr || self.is_dead(a, now) || cands.iter().any(|(_, _, x)| *x == a) {
                continue;
            }
            if any_abut(&c.zones, &dz) {
                cands.push((total_volume(&c.zones), c.peer.id, a));
            }
        }
        cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let rank = cands.iter().position(|(_, _, a)| *a == self.me.addr).unwrap_or(0);
        let notify: Vec<NodeAddr> = cands.iter().map(|(_, _, a)| *a).filter(|a| *a != self.me.addr).collect();
        let at = now + self.cfg.takeover_delay * (1 + rank as u32);
        let dead = n.info.peer;
        match self.takeovers.iter_mut().find(|t| t.dead.addr == addr) {
            Some(t) => {
                t.zones.extend(dz);
                t.at = t.at.min(at);
            }
            None => self.takeovers.push(Takeover { dead, zones: dz, notify, at }),
        }
        self.rearm_takeover();
    }

    fn rearm_takeover(&mut self) {
        match self.takeovers.iter().map(|t| t.at).min() {
            Some(t) => self.timers.set(Timer::Takeover, t),
            None => self.timers.clear(Timer::Takeover),
        }
    }

    /// A live node owns what `info` says: nobody needs to take that over.
    pub(crate) fn takeover_seen(&mut self, info: &NodeInfo) {
        if self.takeovers.is_empty() {
            return;
        }
        for t in &mut self.takeovers {
            for z in &info.zones {
                t.zones = carve(std::mem::take(&mut t.zones), z);
            }
        }
        self.takeovers.retain(|t| !t.zones.is_empty());
        self.rearm_takeover();
    }

    /// Claims the zones of every takeover round that is due.
    pub(crate) fn takeover_tick(&mut self, now: Instant) {
        let (due, rest): (Vec<Takeover>, Vec<Takeover>) =
            std::mem::take(&mut self.takeovers).into_iter().partition(|t| t.at <= now);
        self.takeovers = rest;
        for t in due {
            self.claim(t);
        }
        self.rearm_takeover();
    }

    fn claim(&mut self, t: Takeover) {
        if !self.joined() {
            return;
        }
        // A leaving node claims too (it may be the failed node's last neighbour),
        // and hands what it claimed over with the rest.
        let mut pieces = t.zones;
        let owned: Vec<Zone> =
            self.table.iter().flat_map(|n| n.info.zones.iter().copied()).chain(self.zones.iter().copied()).collect();
        for z in &owned {
            pieces = carve(pieces, z);
        }
        if pieces.is_empty() {
            return;
        }
        self.stats.takeovers += pieces.len() as u64;
        self.zones.extend(pieces);
        self.zones_changed(Some(t.dead), &t.notify);
    }

    /// `from` claims the zones of `dead`.
    pub(crate) fn on_claim(&mut self, now: Instant, from: Peer, info: NodeInfo, dead: Peer) {
        if !self.sane(&info, from.addr) {
            return self.drop_input();
        }
        if !self.joined() {
            return;
        }
        if dead.addr == self.me.addr {
            // Thought dead, but alive: the conflict rule settles who keeps what.
            self.learn(now, info);
            let me = self.info();
            return self.send(from.addr, 0, super::msg::CanMsg::Update { info: me }, super::node::Traffic::Maintenance);
        }
        if self.table.get(dead.addr).is_some() {
            self.declare_dead(now, dead.addr);
        } else {
            self.mark_dead(now, dead.addr);
        }
        self.learn(now, info);
    }

    /// `from` leaves without handing its zones over: its neighbours take them over now.
    pub(crate) fn on_gone(&mut self, now: Instant, from: Peer) {
        if self.joined() {
            self.peer_failed(now, from.addr);
        }
    }
}
