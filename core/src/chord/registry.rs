//! Registrations: the store with TTLs, the node's own registrations and their
//! refresh, replication down the successor list, queries and key transfer.

use std::time::{Duration, Instant};

use super::lookup::Purpose;
use super::msg::{ChordMsg, Entry, Peer};
use super::node::{ChordNode, Timer, Traffic};
use super::requests::Waiting;
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::overlay::store::{Limits, OwnRegs, Put, QueryState, Store};
use crate::overlay::{CommandError, OverlayError, OverlayEvent, Token};

/// Attempts of a query (lookup, then ask the owner) before it reports a timeout.
const QUERY_ATTEMPTS: u8 = 3;
/// How often a handed-over entry may be passed on towards its owner.
pub(super) const HANDOVER_HOPS: u8 = 8;

/// The registrations a node keeps: those it stores (as owner or replica) with
/// their expiry, and its own, which it refreshes at their owner.
///
/// Invariant ([`Registry::check_invariants`]): the store holds no more values
/// than the limits allow.
#[derive(Debug, Default)]
pub(super) struct Registry {
    /// Registrations stored here, as owner or replica.
    store: Store,
    /// This node's own registrations, refreshed until unregistered.
    own: OwnRegs,
    /// The owned registrations must be copied to the replicas again (the first
    /// successors or the owned range changed); done at the end of the input.
    replicas_dirty: bool,
}

impl Registry {
    /// Stores (or refreshes) one entry within `limits`; a TTL of 0 withdraws its value.
    pub(super) fn put(&mut self, now: Instant, entry: Entry, limits: &Limits) -> Put {
        self.store.store(now, entry, limits)
    }

    /// Live values stored under `name`, sorted.
    pub(super) fn values(&self, name: &str, now: Instant) -> Vec<String> {
        self.store.values(name, now)
    }

    /// Every value stored under `name`, expired ones too until the next sweep; sorted.
    pub(super) fn peek(&self, name: &str) -> Vec<String> {
        self.store.peek(name)
    }

    /// Number of values stored.
    pub(super) fn len(&self) -> usize {
        self.store.len()
    }

    /// Live stored entries whose key satisfies `pick`, with their remaining TTL.
    pub(super) fn entries(&self, now: Instant, pick: impl Fn(Id) -> bool) -> Vec<Entry> {
        self.store.entries(now, pick)
    }

    /// Drops expired values; returns the next expiry.
    pub(super) fn sweep(&mut self, now: Instant) -> Option<Instant> {
        self.store.sweep(now)
    }

    /// Every stored entry with its remaining TTL, emptying the store.
    pub(super) fn take_all(&mut self, now: Instant) -> Vec<Entry> {
        let out = self.store.entries(now, |_| true);
        self.store = Store::default();
        out
    }

    /// Remembers an own registration, due for refresh at once.
    pub(super) fn add_own(&mut self, now: Instant, name: String, value: String, ttl: Duration) {
        self.own.add(now, name, value, ttl);
    }

    /// Forgets an own registration; false if it was not one.
    pub(super) fn remove_own(&mut self, name: &str, value: &str) -> bool {
        self.own.remove(name, value)
    }

    /// Whether the node has registrations of its own.
    pub(super) fn has_own(&self) -> bool {
        !self.own.is_empty()
    }

    /// The own registrations due for refresh at `now`, as (name, value, TTL in ms).
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<(String, String, u64)> {
        self.own.take_due(now)
    }

    /// When the next own registration is due.
    pub(super) fn next_refresh(&self) -> Option<Instant> {
        self.own.next_due()
    }

    /// Refreshes own registration (`name`, `value`) at `at`; false if it is gone.
    pub(super) fn retry_own_at(&mut self, name: &str, value: &str, at: Instant) -> bool {
        self.own.retry_at(name, value, at)
    }

    /// The owned registrations must go to the replicas again.
    pub(super) fn replicas_changed(&mut self) {
        self.replicas_dirty = true;
    }

    /// Whether the owned registrations must go to the replicas again; clears it.
    pub(super) fn take_replicas_changed(&mut self) -> bool {
        std::mem::take(&mut self.replicas_dirty)
    }

    /// Forgets every registration, stored and own (graceful leave).
    pub(super) fn clear(&mut self) {
        self.own.clear();
        self.store = Store::default();
    }

    /// Panics if an invariant (see the type's docs) does not hold.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(super) fn check_invariants(&self, limits: &Limits) {
        assert!(self.store.len() <= limits.total, "{} values stored, limit {}", self.store.len(), limits.total);
    }
}

impl ChordNode {
    /// `Register` command: remember it as our own and store it now (if joined).
    pub(super) fn register(
        &mut self,
        now: Instant,
        name: String,
        value: String,
        ttl: Duration,
    ) -> Result<(), CommandError> {
        self.cfg.limits.check_sizes(&name, &value)?;
        self.registry.add_own(now, name, value, ttl.min(self.cfg.limits.max_ttl));
        self.refresh_tick(now);
        Ok(())
    }

    /// `Unregister` command: stop refreshing the value and withdraw it from its
    /// owner and replicas now (a registration of TTL 0). Best effort: a copy the
    /// withdrawal misses expires with its TTL.
    pub(super) fn unregister(&mut self, now: Instant, name: String, value: String) {
        if self.registry.remove_own(&name, &value) && self.joined() {
            self.start_lookup(now, Id::hash(&name), Purpose::Register { name, value, ttl_ms: 0 });
        }
    }

    /// Sends every own registration that is due to its owner; re-arms the timer.
    pub(super) fn refresh_tick(&mut self, now: Instant) {
        if !self.joined() {
            // Refreshed all at once when the node joins.
            self.timers.clear(Timer::Refresh);
            return;
        }
        for (name, value, ttl_ms) in self.registry.take_due(now) {
            self.start_lookup(now, Id::hash(&name), Purpose::Register { name, value, ttl_ms });
        }
        match self.registry.next_refresh() {
            Some(t) => self.timers.set(Timer::Refresh, t),
            None => self.timers.clear(Timer::Refresh),
        }
    }

    /// The owner of a registration is known: store it there.
    pub(super) fn register_at(&mut self, now: Instant, owner: Peer, name: String, value: String, ttl_ms: u64) {
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
    pub(super) fn retry_registration(&mut self, now: Instant, name: &str, value: &str) {
        let at = now + self.cfg.stabilize_period;
        if !self.registry.retry_own_at(name, value, at) {
            return; // unregistered meanwhile
        }
        if self.timers.get(Timer::Refresh).is_none_or(|t| t > at) {
            self.timers.set(Timer::Refresh, at);
        }
    }

    /// Whether `key` lies in this node's range (predecessor, itself], as far as it knows.
    pub(super) fn owns(&self, key: Id) -> bool {
        self.pred.is_none_or(|p| key.in_half_open(p.id, self.me.id))
    }

    /// Copies the registrations this node owns to its first `replicas - 1`
    /// successors, if they or the owned range changed since the last time: a crash
    /// of the owner then finds them at its successor, not only at the next refresh.
    pub(super) fn sync_replicas(&mut self, now: Instant) {
        if !self.registry.take_replicas_changed() || !self.joined() || self.registry.len() == 0 {
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
            let ahead = self.registry.entries(now, |k| k.in_half_open(me, s.id));
            if !ahead.is_empty() {
                self.hand_over(s.addr, ahead, HANDOVER_HOPS);
            }
        }
        let me = self.me.id;
        let entries = self.registry.entries(now, |k| k.in_half_open(p.id, me));
        if entries.is_empty() {
            return;
        }
        let targets: Vec<_> = self.succs.iter().take(k).map(|p| p.addr).collect();
        for to in targets {
            self.send(to, 0, ChordMsg::KeyTransfer { entries: entries.clone() }, Traffic::Maintenance);
        }
    }

    /// Stores one entry; an owner passes copies to its next `replicas` successors.
    pub(super) fn on_register(&mut self, now: Instant, entry: Entry, replicas: u8) {
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
        match self.registry.put(now, entry, &self.cfg.limits) {
            Put::Stored(expires) => {
                if self.timers.get(Timer::Expire).is_none_or(|t| t > expires) {
                    self.timers.set(Timer::Expire, expires);
                }
            }
            Put::Withdrawn => {}
            Put::Refused => self.drop_input(),
        }
    }

    /// Hands `entries` over to `to` (see [`ChordMsg::Handover`]).
    pub(super) fn hand_over(&mut self, to: NodeAddr, entries: Vec<Entry>, hops: u8) {
        self.send(to, 0, ChordMsg::Handover { entries, hops }, Traffic::Maintenance);
    }

    /// Registrations copied here as a replica (`hops` 0), or handed over.
    ///
    /// Handed-over entries this node does not own go on towards their owner, as far
    /// as `hops` allow: ahead, in (us, successor], to the successor; behind our
    /// range to the predecessor. The sender's view may be stale: a leaver whose
    /// successor was not us yet, a node that handed its range over just before we
    /// adopted a newer predecessor. Never back to the sender.
    pub(super) fn on_entries(&mut self, now: Instant, from: Peer, entries: Vec<Entry>, hops: u8) {
        // While joining, only from the successor being confirmed (it adopted us on
        // our notify and hands over our range).
        let confirming = || self.requests.any_to(from.addr, |w| matches!(w, Waiting::SuccessorList { .. }));
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
            if self.pred.is_some() && self.owns(key) {
                self.registry.replicas_changed();
            }
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
    pub(super) fn on_pull(&mut self, now: Instant, from: Peer, after: Id) {
        if !self.joined() || self.pred.is_some_and(|p| p.addr != from.addr) {
            return self.drop_input();
        }
        let entries = self.registry.entries(now, |k| k.in_half_open(after, from.id));
        if !entries.is_empty() {
            self.send(from.addr, 0, ChordMsg::KeyTransfer { entries }, Traffic::Maintenance);
        }
    }

    pub(super) fn expire_tick(&mut self, now: Instant) {
        match self.registry.sweep(now) {
            Some(t) => self.timers.set(Timer::Expire, t),
            None => self.timers.clear(Timer::Expire),
        }
    }

    // ---- queries -------------------------------------------------------------------

    /// `Query` command.
    pub(super) fn query(&mut self, now: Instant, token: Token, name: String) -> Result<(), CommandError> {
        self.cfg.limits.check_sizes(&name, "")?;
        if !self.joined() {
            self.event(OverlayEvent::QueryDone { token, name, result: Err(OverlayError::NotConnected) });
            return Ok(());
        }
        let deadline = now + self.cfg.lookup_timeout;
        self.start_lookup(now, Id::hash(&name), Purpose::Query { token, name, attempt: 0, deadline });
        Ok(())
    }

    /// The owner of a queried name is known: ask it (or answer from here).
    pub(super) fn query_at(
        &mut self,
        now: Instant,
        owner: Peer,
        token: Token,
        name: String,
        attempt: u8,
        deadline: Instant,
    ) {
        if owner.addr == self.me.addr {
            let values = self.registry.values(&name, now);
            self.event(OverlayEvent::QueryDone { token, name, result: Ok(values) });
            return;
        }
        let body = ChordMsg::Query { name: name.clone() };
        let state = QueryState { token, name, attempt, deadline };
        self.request(now, owner.addr, body, Waiting::Query(Box::new(state)), Traffic::User);
    }

    pub(super) fn on_query_result(&mut self, from: Peer, rid: u64, values: Vec<String>) {
        let Some(p) = self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Query(_))) else { return };
        if let Waiting::Query(q) = p.what {
            let QueryState { token, name, .. } = *q;
            self.event(OverlayEvent::QueryDone { token, name, result: Ok(values) });
        }
    }

    /// The owner did not answer: look the name up again, or give up.
    pub(super) fn query_failed(&mut self, now: Instant, q: QueryState) {
        let QueryState { token, name, attempt, deadline } = q;
        if attempt + 1 < QUERY_ATTEMPTS && now < deadline && self.joined() {
            let key = Id::hash(&name);
            self.start_lookup(now, key, Purpose::Query { token, name, attempt: attempt + 1, deadline });
        } else {
            self.event(OverlayEvent::QueryDone { token, name, result: Err(OverlayError::Timeout) });
        }
    }
}
