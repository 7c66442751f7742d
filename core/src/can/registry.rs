//! Registrations over CAN: the same API as Chord's. A name lives at the owner of
//! the point its SHA-1 maps to; the registering node stores it there through a
//! route and refreshes it every third of its TTL; the owner copies what it owns to
//! every neighbour (at once for a new entry, in full for a new neighbour or after
//! its zones change), so whichever neighbour takes a crashed owner's zone over
//! already holds its registrations. Entries travel with their zone on a join split
//! or hand-off; copies no longer needed expire with their TTL.

use std::time::{Duration, Instant};

use super::msg::{CanMsg, Entry, Peer};
use super::node::{CanNode, Timer, Traffic, Waiting};
use super::route::Purpose;
use super::zone::Point;
use crate::id::Id;
use crate::overlay::store::{Put, QueryState};
use crate::overlay::{CommandError, OverlayError, OverlayEvent, Token};

/// Attempts of a query (route, then ask the owner) before it reports a timeout.
const QUERY_ATTEMPTS: u8 = 3;

impl CanNode {
    /// `Register` command: remember it as our own and store it now (if joined).
    pub(crate) fn register(
        &mut self,
        now: Instant,
        name: String,
        value: String,
        ttl: Duration,
    ) -> Result<(), CommandError> {
        self.cfg.limits.check_sizes(&name, &value)?;
        self.own.add(now, name, value, ttl.min(self.cfg.limits.max_ttl));
        self.refresh_tick(now);
        Ok(())
    }

    /// `Unregister` command: stop refreshing the value and withdraw it from its
    /// owner (and so from the owner's neighbours) with a TTL of 0.
    pub(crate) fn unregister(&mut self, now: Instant, name: String, value: String) {
        if self.own.remove(&name, &value) && self.joined() {
            let target = Point::of_key(Id::hash(&name), self.dims());
            self.start_route(now, target, Purpose::Register { name, value, ttl_ms: 0 });
        }
    }

    /// Sends every own registration that is due to its owner; re-arms the timer.
    pub(crate) fn refresh_tick(&mut self, now: Instant) {
        if !self.joined() || self.leaving.is_some() {
            // Refreshed all at once when the node joins.
            self.timers.clear(Timer::Refresh);
            return;
        }
        for (name, value, ttl_ms) in self.own.take_due(now) {
            let target = Point::of_key(Id::hash(&name), self.dims());
            self.start_route(now, target, Purpose::Register { name, value, ttl_ms });
        }
        match self.own.next_due() {
            Some(t) => self.timers.set(Timer::Refresh, t),
            None => self.timers.clear(Timer::Refresh),
        }
    }

    /// The owner of a registration is known: store it there.
    pub(crate) fn register_at(&mut self, now: Instant, owner: Peer, name: String, value: String, ttl_ms: u64) {
        let entry = Entry { name, value, ttl_ms };
        if owner.addr != self.me.addr {
            let what = Waiting::Register { name: entry.name.clone(), value: entry.value.clone() };
            return self.request(now, owner.addr, CanMsg::Register { entry }, what, Traffic::Maintenance);
        }
        if self.owns_key(Id::hash(&entry.name)) {
            self.store_owned(now, entry);
        } else {
            self.retry_registration(now, &entry.name, &entry.value);
        }
    }

    /// A registration did not reach its owner: try again a heartbeat period later,
    /// long before the regular refresh.
    pub(crate) fn retry_registration(&mut self, now: Instant, name: &str, value: &str) {
        let at = now + self.cfg.heartbeat_period;
        if self.own.retry_at(name, value, at) && self.timers.get(Timer::Refresh).is_none_or(|t| t > at) {
            self.timers.set(Timer::Refresh, at);
        }
    }

    /// A node stores one of its registrations here.
    pub(crate) fn on_register(&mut self, now: Instant, from: Peer, rid: u64, entry: Entry) {
        if !self.owns_key(Id::hash(&entry.name)) {
            return self.send(from.addr, rid, CanMsg::NotOwner, Traffic::Reply);
        }
        self.store_owned(now, entry);
        self.send(from.addr, rid, CanMsg::Registered, Traffic::Reply);
    }

    /// Stores an entry we own and copies it to every neighbour.
    fn store_owned(&mut self, now: Instant, entry: Entry) {
        for to in self.table.addrs() {
            self.send(to, 0, CanMsg::Replicate { entries: vec![entry.clone()] }, Traffic::Maintenance);
        }
        self.store_entry(now, entry);
    }

    /// Stores one entry (owned, a copy, or handed over with a zone).
    pub(crate) fn store_entry(&mut self, now: Instant, entry: Entry) {
        match self.store.store(now, entry, &self.cfg.limits) {
            Put::Stored(expires) => {
                if self.timers.get(Timer::Expire).is_none_or(|t| t > expires) {
                    self.timers.set(Timer::Expire, expires);
                }
            }
            Put::Withdrawn => {}
            Put::Refused => self.drop_input(),
        }
    }

    /// Copies of a neighbour's registrations.
    pub(crate) fn on_replicate(&mut self, now: Instant, _from: Peer, entries: Vec<Entry>) {
        if !self.joined() {
            return self.drop_input();
        }
        for e in entries.into_iter().take(self.cfg.limits.total) {
            self.store_entry(now, e);
        }
    }

    /// Brings neighbours that are new (or whose zones or ours changed) up to date:
    /// each gets a copy of what we own, and what we hold for its own zones (a node
    /// that took a failed zone over without having been its neighbour for long
    /// gets the failed owner's registrations from the others that were).
    pub(crate) fn sync_replicas(&mut self, now: Instant) {
        if !self.joined() || self.table.iter().all(|n| n.synced) {
            return;
        }
        let unsynced: Vec<_> =
            self.table.iter().filter(|n| !n.synced).map(|n| (n.info.peer.addr, n.info.zones.clone())).collect();
        for n in self.table.iter_mut() {
            n.synced = true;
        }
        if self.store.len() == 0 {
            return;
        }
        let dims = self.dims();
        for (to, theirs) in unsynced {
            let zones = &self.zones;
            let entries = self.store.entries(now, |k| {
                let p = Point::of_key(k, dims);
                zones.iter().chain(&theirs).any(|z| z.contains(&p))
            });
            if !entries.is_empty() {
                self.send(to, 0, CanMsg::Replicate { entries }, Traffic::Maintenance);
            }
        }
    }

    pub(crate) fn expire_tick(&mut self, now: Instant) {
        match self.store.sweep(now) {
            Some(t) => self.timers.set(Timer::Expire, t),
            None => self.timers.clear(Timer::Expire),
        }
    }

    // ---- queries -------------------------------------------------------------------

    /// `Query` command.
    pub(crate) fn query(&mut self, now: Instant, token: Token, name: String) -> Result<(), CommandError> {
        self.cfg.limits.check_sizes(&name, "")?;
        if !self.joined() {
            self.event(OverlayEvent::QueryDone { token, name, result: Err(OverlayError::NotConnected) });
            return Ok(());
        }
        let deadline = now + self.cfg.lookup_timeout;
        let target = Point::of_key(Id::hash(&name), self.dims());
        self.start_route(now, target, Purpose::Query { token, name, attempt: 0, deadline });
        Ok(())
    }

    /// The owner of a queried name is known: ask it (or answer from here).
    pub(crate) fn query_at(
        &mut self,
        now: Instant,
        owner: Peer,
        token: Token,
        name: String,
        attempt: u8,
        deadline: Instant,
    ) {
        if owner.addr == self.me.addr {
            let values = self.store.values(&name, now);
            self.event(OverlayEvent::QueryDone { token, name, result: Ok(values) });
            return;
        }
        let body = CanMsg::Query { name: name.clone() };
        let state = QueryState { token, name, attempt, deadline };
        self.request(now, owner.addr, body, Waiting::Query(Box::new(state)), Traffic::User);
    }

    pub(crate) fn on_query_result(&mut self, from: Peer, rid: u64, values: Vec<String>) {
        let Some(p) = self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Query(_))) else { return };
        if let Waiting::Query(q) = p.what {
            let QueryState { token, name, .. } = *q;
            self.event(OverlayEvent::QueryDone { token, name, result: Ok(values) });
        }
    }

    /// The owner did not answer: route to the name again, or give up.
    pub(crate) fn query_failed(&mut self, now: Instant, q: QueryState) {
        let QueryState { token, name, attempt, deadline } = q;
        if attempt + 1 < QUERY_ATTEMPTS && now < deadline && self.joined() {
            let target = Point::of_key(Id::hash(&name), self.dims());
            self.start_route(now, target, Purpose::Query { token, name, attempt: attempt + 1, deadline });
        } else {
            self.event(OverlayEvent::QueryDone { token, name, result: Err(OverlayError::Timeout) });
        }
    }
}
