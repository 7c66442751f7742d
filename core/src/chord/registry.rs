//! Registrations: the store with TTLs, the node's own registrations and their
//! refresh, replication down the successor list, queries and key transfer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::lookup::Purpose;
use super::msg::{ChordMsg, Entry, Peer};
use super::node::{ChordNode, Timer, Traffic, Waiting};
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::overlay::{CommandError, OverlayError, OverlayEvent, Token};

/// Attempts of a query (lookup, then ask the owner) before it reports a timeout.
const QUERY_ATTEMPTS: u8 = 3;
/// How often a handed-over entry may be passed on towards its owner.
pub(crate) const HANDOVER_HOPS: u8 = 8;
/// Shortest interval between refreshes of one registration.
const MIN_REFRESH: Duration = Duration::from_millis(100);

/// One of this node's own registrations.
#[derive(Debug, Clone)]
pub(crate) struct OwnReg {
    pub(crate) name: String,
    pub(crate) value: String,
    pub(crate) ttl: Duration,
    pub(crate) next_refresh: Instant,
}

/// A query waiting for the owner's values.
#[derive(Debug)]
pub(crate) struct QueryState {
    pub(crate) token: Token,
    pub(crate) name: String,
    pub(crate) attempt: u8,
    pub(crate) deadline: Instant,
}

/// Values stored under one name.
#[derive(Debug, Clone)]
struct Slot {
    key: Id,
    values: Vec<(String, Instant)>,
}

/// Registrations stored at this node (as owner or replica), each with its expiry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Store {
    names: BTreeMap<String, Slot>,
    len: usize,
}

impl Store {
    /// Stores or refreshes one value. False when a limit refused it.
    fn put(&mut self, name: String, value: String, expires: Instant, per_name: usize, total: usize) -> bool {
        let full = self.len >= total;
        let slot = match self.names.get_mut(&name) {
            Some(s) => s,
            None if full => return false,
            None => {
                let key = Id::hash(&name);
                self.names.entry(name).or_insert(Slot { key, values: Vec::new() })
            }
        };
        if let Some(v) = slot.values.iter_mut().find(|(v, _)| *v == value) {
            v.1 = v.1.max(expires);
            return true;
        }
        if full || slot.values.len() >= per_name {
            return false;
        }
        slot.values.push((value, expires));
        self.len += 1;
        true
    }

    /// Removes one value (a withdrawn registration).
    fn remove(&mut self, name: &str, value: &str) {
        let Some(slot) = self.names.get_mut(name) else { return };
        let before = slot.values.len();
        slot.values.retain(|(v, _)| v != value);
        self.len -= before - slot.values.len();
        if slot.values.is_empty() {
            self.names.remove(name);
        }
    }

    /// Live values under `name`, sorted.
    pub(crate) fn values(&self, name: &str, now: Instant) -> Vec<String> {
        let mut out: Vec<String> = self
            .names
            .get(name)
            .map(|s| s.values.iter().filter(|(_, e)| *e > now).map(|(v, _)| v.clone()).collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Every value under `name`, sorted, expired or not.
    pub(crate) fn peek(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> =
            self.names.get(name).map(|s| s.values.iter().map(|(v, _)| v.clone()).collect()).unwrap_or_default();
        out.sort();
        out
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Drops expired values; returns the next expiry.
    fn sweep(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut removed = 0;
        self.names.retain(|_, slot| {
            let before = slot.values.len();
            slot.values.retain(|(_, e)| *e > now);
            removed += before - slot.values.len();
            for (_, e) in &slot.values {
                next = Some(next.map_or(*e, |n| n.min(*e)));
            }
            !slot.values.is_empty()
        });
        self.len -= removed;
        next
    }

    /// Live entries whose key satisfies `pick`, with their remaining TTL.
    pub(crate) fn entries(&self, now: Instant, pick: impl Fn(Id) -> bool) -> Vec<Entry> {
        let mut out = Vec::new();
        for (name, slot) in &self.names {
            if !pick(slot.key) {
                continue;
            }
            for (value, e) in &slot.values {
                if *e > now {
                    // At least 1 ms: a TTL of 0 withdraws a value (see `store_entry`).
                    let ttl_ms = u64::try_from(e.duration_since(now).as_millis()).unwrap_or(u64::MAX).max(1);
                    out.push(Entry { name: name.clone(), value: value.clone(), ttl_ms });
                }
            }
        }
        out
    }
}

impl ChordNode {
    fn check_sizes(&self, name: &str, value: &str) -> Result<(), CommandError> {
        if name.len() > self.cfg.max_name_len {
            return Err(CommandError::TooLarge { what: "name", len: name.len(), max: self.cfg.max_name_len });
        }
        if value.len() > self.cfg.max_value_len {
            return Err(CommandError::TooLarge { what: "value", len: value.len(), max: self.cfg.max_value_len });
        }
        Ok(())
    }

    fn refresh_interval(ttl: Duration) -> Duration {
        (ttl / 3).max(MIN_REFRESH)
    }

    /// `Register` command: remember it as our own and store it now (if joined).
    pub(crate) fn register(
        &mut self,
        now: Instant,
        name: String,
        value: String,
        ttl: Duration,
    ) -> Result<(), CommandError> {
        self.check_sizes(&name, &value)?;
        let ttl = ttl.min(self.cfg.max_ttl);
        self.own.retain(|r| r.name != name || r.value != value);
        let reg = OwnReg { name, value, ttl, next_refresh: now };
        self.own.push(reg);
        self.refresh_tick(now);
        Ok(())
    }

    /// `Unregister` command: stop refreshing the value and withdraw it from its
    /// owner and replicas now (a registration of TTL 0). Best effort: a copy the
    /// withdrawal misses expires with its TTL.
    pub(crate) fn unregister(&mut self, now: Instant, name: String, value: String) {
        let before = self.own.len();
        self.own.retain(|r| r.name != name || r.value != value);
        if self.own.len() < before && self.joined() {
            self.start_lookup(now, Id::hash(&name), Purpose::Register { name, value, ttl_ms: 0 });
        }
    }

    /// Sends every own registration that is due to its owner; re-arms the timer.
    pub(crate) fn refresh_tick(&mut self, now: Instant) {
        if !self.joined() {
            // Refreshed all at once when the node joins.
            self.timers.clear(Timer::Refresh);
            return;
        }
        let mut due = Vec::new();
        for r in &mut self.own {
            if r.next_refresh <= now {
                r.next_refresh = now + Self::refresh_interval(r.ttl);
                due.push((r.name.clone(), r.value.clone(), r.ttl));
            }
        }
        for (name, value, ttl) in due {
            let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
            self.start_lookup(now, Id::hash(&name), Purpose::Register { name, value, ttl_ms });
        }
        match self.own.iter().map(|r| r.next_refresh).min() {
            Some(t) => self.timers.set(Timer::Refresh, t),
            None => self.timers.clear(Timer::Refresh),
        }
    }

    /// The owner of a registration is known: store it there.
    pub(crate) fn register_at(&mut self, now: Instant, owner: Peer, name: String, value: String, ttl_ms: u64) {
        let replicas = self.cfg.replicas.saturating_sub(1);
        let entry = Entry { name, value, ttl_ms };
        if owner.addr == self.me.addr {
            if !self.owns(Id::hash(&entry.name)) {
                // A stale lookup (the ring is moving): as for a remote owner's NotOwner.
                return self.retry_registration(now, &entry.name, &entry.value);
            }
            self.on_register(now, entry, replicas);
        } else {
            let what = Waiting::Register { name: entry.name.clone(), value: entry.value.clone() };
            self.request(now, owner.addr, ChordMsg::Register { entry, replicas }, what, Traffic::Maintenance);
        }
    }

    /// A registration did not reach its owner (lookup failed, owner silent): try
    /// again after a stabilization period, long before the regular refresh.
    pub(crate) fn retry_registration(&mut self, now: Instant, name: &str, value: &str) {
        let at = now + self.cfg.stabilize_period;
        let Some(reg) = self.own.iter_mut().find(|r| r.name == name && r.value == value) else {
            return; // unregistered meanwhile
        };
        reg.next_refresh = reg.next_refresh.min(at);
        if self.timers.get(Timer::Refresh).is_none_or(|t| t > at) {
            self.timers.set(Timer::Refresh, at);
        }
    }

    /// Whether `key` lies in this node's range (predecessor, itself], as far as it knows.
    pub(crate) fn owns(&self, key: Id) -> bool {
        self.pred.is_none_or(|p| key.in_half_open(p.id, self.me.id))
    }

    /// Copies the registrations this node owns to its first `replicas - 1`
    /// successors, if they or the owned range changed since the last time: a crash
    /// of the owner then finds them at its successor, not only at the next refresh.
    pub(crate) fn sync_replicas(&mut self, now: Instant) {
        if !std::mem::take(&mut self.replicas_dirty) || !self.joined() || self.store.len() == 0 {
            return;
        }
        let Some(p) = self.pred else { return };
        let k = usize::from(self.cfg.replicas.saturating_sub(1));
        // In a ring of at most `replicas` nodes (our predecessor is among the
        // successors we replicate to) we are a replica of every node's keys.
        let small_ring = self.succs.iter().take(k).any(|s| s.addr == p.addr);
        // Otherwise keys between us and our successor are its own, never ours as
        // owner or replica: a leaving node with a stale view handed them here. Copy
        // them on (a copy: the successor may be stale too; ours expires unrefreshed).
        if let Some(&s) = self.succs.first().filter(|s| !small_ring && !p.id.in_open(self.me.id, s.id)) {
            let me = self.me.id;
            let ahead = self.store.entries(now, |k| k.in_half_open(me, s.id));
            if !ahead.is_empty() {
                self.hand_over(s.addr, ahead, HANDOVER_HOPS);
            }
        }
        let me = self.me.id;
        let entries = self.store.entries(now, |k| k.in_half_open(p.id, me));
        if entries.is_empty() {
            return;
        }
        let targets: Vec<_> = self.succs.iter().take(k).map(|p| p.addr).collect();
        for to in targets {
            self.send(to, 0, ChordMsg::KeyTransfer { entries: entries.clone() }, Traffic::Maintenance);
        }
    }

    /// Stores one entry; an owner passes copies to its next `replicas` successors.
    pub(crate) fn on_register(&mut self, now: Instant, entry: Entry, replicas: u8) {
        if !self.joined() {
            return self.drop_input();
        }
        if replicas > 0 {
            let n = usize::from(replicas).min(self.succs.len());
            let targets: Vec<_> = self.succs.iter().take(n).map(|p| p.addr).collect();
            for to in targets {
                self.send(to, 0, ChordMsg::Register { entry: entry.clone(), replicas: 0 }, Traffic::Maintenance);
            }
        }
        self.store_entry(now, entry);
    }

    /// Stores (or refreshes) one entry; an entry with a TTL of 0 withdraws its value.
    fn store_entry(&mut self, now: Instant, entry: Entry) {
        if entry.name.len() > self.cfg.max_name_len || entry.value.len() > self.cfg.max_value_len {
            return self.drop_input();
        }
        if entry.ttl_ms == 0 {
            return self.store.remove(&entry.name, &entry.value);
        }
        let ttl = Duration::from_millis(entry.ttl_ms).min(self.cfg.max_ttl);
        let expires = Self::later(now, ttl);
        let (per_name, total) = (self.cfg.max_values_per_name, self.cfg.max_stored);
        if !self.store.put(entry.name, entry.value, expires, per_name, total) {
            return self.drop_input();
        }
        if self.timers.get(Timer::Expire).is_none_or(|t| t > expires) {
            self.timers.set(Timer::Expire, expires);
        }
    }

    /// Hands `entries` over to `to` (see [`ChordMsg::Handover`]).
    pub(crate) fn hand_over(&mut self, to: NodeAddr, entries: Vec<Entry>, hops: u8) {
        self.send(to, 0, ChordMsg::Handover { entries, hops }, Traffic::Maintenance);
    }

    /// Registrations copied here as a replica (`hops` 0), or handed over.
    ///
    /// Handed-over entries this node does not own go on towards their owner, as far
    /// as `hops` allow: ahead, in (us, successor], to the successor; behind our
    /// range to the predecessor. The sender's view may be stale: a leaver whose
    /// successor was not us yet, a node that handed its range over just before we
    /// adopted a newer predecessor. Never back to the sender.
    pub(crate) fn on_entries(&mut self, now: Instant, from: Peer, entries: Vec<Entry>, hops: u8) {
        // While joining, only from the successor being confirmed (it adopted us on
        // our notify and hands over our range).
        let confirming = || self.pending.any(|p| p.to == from.addr && matches!(p.what, Waiting::SuccessorList { .. }));
        if !self.joined() && !confirming() {
            return self.drop_input();
        }
        let me = self.me.id;
        let forward = hops > 0;
        // Not back to the successor when it sent them: in a ring of fewer than
        // `replicas` nodes its copies wrap round to here.
        let succ = self
            .succs
            .first()
            .copied()
            .filter(|s| forward && s.addr != from.addr && self.pred.is_none_or(|p| !p.id.in_open(me, s.id)));
        let pred = self.pred.filter(|p| forward && p.addr != from.addr);
        let (mut ahead, mut behind) = (Vec::new(), Vec::new());
        for e in entries {
            let key = Id::hash(&e.name);
            // Keys that are ours now (a leaving predecessor's) go on to our replicas.
            self.replicas_dirty |= self.pred.is_some() && self.owns(key);
            if succ.is_some_and(|s| key.in_half_open(me, s.id)) {
                ahead.push(e.clone());
            } else if pred.is_some_and(|p| !key.in_half_open(p.id, me)) {
                behind.push(e.clone());
            }
            self.store_entry(now, e);
        }
        for (to, entries) in [(succ, ahead), (pred, behind)] {
            if let (Some(to), false) = (to, entries.is_empty()) {
                self.hand_over(to.addr, entries, hops - 1);
            }
        }
    }

    /// Our predecessor `from` owns (`after`, `from`] now: copy it what we hold there.
    pub(crate) fn on_pull(&mut self, now: Instant, from: Peer, after: Id) {
        if !self.joined() || self.pred.is_some_and(|p| p.addr != from.addr) {
            return self.drop_input();
        }
        let entries = self.store.entries(now, |k| k.in_half_open(after, from.id));
        if !entries.is_empty() {
            self.send(from.addr, 0, ChordMsg::KeyTransfer { entries }, Traffic::Maintenance);
        }
    }

    pub(crate) fn expire_tick(&mut self, now: Instant) {
        match self.store.sweep(now) {
            Some(t) => self.timers.set(Timer::Expire, t),
            None => self.timers.clear(Timer::Expire),
        }
    }

    /// Every stored entry with its remaining TTL, emptying the store (graceful leave).
    pub(crate) fn take_all_entries(&mut self, now: Instant) -> Vec<Entry> {
        let out = self.store.entries(now, |_| true);
        self.store = Store::default();
        out
    }

    // ---- queries -------------------------------------------------------------------

    /// `Query` command.
    pub(crate) fn query(&mut self, now: Instant, token: Token, name: String) -> Result<(), CommandError> {
        self.check_sizes(&name, "")?;
        if !self.joined() {
            self.event(OverlayEvent::QueryDone { token, name, result: Err(OverlayError::NotConnected) });
            return Ok(());
        }
        let deadline = now + self.cfg.lookup_timeout;
        self.start_lookup(now, Id::hash(&name), Purpose::Query { token, name, attempt: 0, deadline });
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
        let body = ChordMsg::Query { name: name.clone() };
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

    /// The owner did not answer: look the name up again, or give up.
    pub(crate) fn query_failed(&mut self, now: Instant, q: QueryState) {
        let QueryState { token, name, attempt, deadline } = q;
        if attempt + 1 < QUERY_ATTEMPTS && now < deadline && self.joined() {
            let key = Id::hash(&name);
            self.start_lookup(now, key, Purpose::Query { token, name, attempt: attempt + 1, deadline });
        } else {
            self.event(OverlayEvent::QueryDone { token, name, result: Err(OverlayError::Timeout) });
        }
    }
}
