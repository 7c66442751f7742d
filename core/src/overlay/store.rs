//! What both overlays keep of registrations: the store of entries with their
//! expiry (as owner or replica), and a node's own registrations with their refresh
//! schedule.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{CommandError, Entry, Token};
use crate::id::Id;

/// Shortest interval between refreshes of one registration.
const MIN_REFRESH: Duration = Duration::from_millis(100);

/// Limits on what an overlay node registers and stores, the same for both overlays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest registration name, in bytes.
    pub max_name_len: usize,
    /// Longest registration value, in bytes.
    pub max_value_len: usize,
    /// Longest TTL honoured; longer ones (from commands or peers) are cut to this.
    pub max_ttl: Duration,
    /// Most values stored under one name.
    pub per_name: usize,
    /// Most values a node stores in all; more are dropped and counted.
    pub total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_name_len: 256,
            max_value_len: 1024,
            max_ttl: Duration::from_secs(24 * 3600),
            per_name: 1024,
            total: 100_000,
        }
    }
}

impl Limits {
    /// A name and value within the size limits, or the error for the caller.
    pub(crate) fn check_sizes(&self, name: &str, value: &str) -> Result<(), CommandError> {
        if name.len() > self.max_name_len {
            return Err(CommandError::TooLarge { what: "name", len: name.len(), max: self.max_name_len });
        }
        if value.len() > self.max_value_len {
            return Err(CommandError::TooLarge { what: "value", len: value.len(), max: self.max_value_len });
        }
        Ok(())
    }
}

/// `now + d`, saturating far in the future instead of overflowing.
pub(crate) fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or(now + Duration::from_secs(365 * 24 * 3600))
}

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

/// What became of an entry offered to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// Stored (or refreshed) until then.
    Stored(Instant),
    /// Its TTL was 0: the value was withdrawn.
    Withdrawn,
    /// Too large, or a limit is reached.
    Refused,
}

/// Registrations stored at this node (as owner or replica), each with its expiry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Store {
    names: BTreeMap<String, Slot>,
    len: usize,
}

impl Store {
    /// Stores (or refreshes) `entry` received at `now`, within `limits`; an entry
    /// with a TTL of 0 withdraws its value.
    pub(crate) fn store(&mut self, now: Instant, entry: Entry, limits: &Limits) -> Put {
        if entry.name.len() > limits.max_name_len || entry.value.len() > limits.max_value_len {
            return Put::Refused;
        }
        if entry.ttl_ms == 0 {
            self.remove(&entry.name, &entry.value);
            return Put::Withdrawn;
        }
        let expires = later(now, Duration::from_millis(entry.ttl_ms).min(limits.max_ttl));
        match self.put(entry.name, entry.value, expires, limits.per_name, limits.total) {
            true => Put::Stored(expires),
            false => Put::Refused,
        }
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
    pub(crate) fn sweep(&mut self, now: Instant) -> Option<Instant> {
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
                    // At least 1 ms: a TTL of 0 withdraws a value.
                    let ttl_ms = u64::try_from(e.duration_since(now).as_millis()).unwrap_or(u64::MAX).max(1);
                    out.push(Entry { name: name.clone(), value: value.clone(), ttl_ms });
                }
            }
        }
        out
    }
}

/// This node's own registrations, refreshed at their owner until unregistered.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnRegs(Vec<OwnReg>);

impl OwnRegs {
    /// Adds (or replaces) a registration, due for its first store at `now`.
    pub(crate) fn add(&mut self, now: Instant, name: String, value: String, ttl: Duration) {
        let _ = self.remove(&name, &value);
        self.0.push(OwnReg { name, value, ttl, next_refresh: now });
    }

    /// Stops refreshing one registration; true if it was registered.
    pub(crate) fn remove(&mut self, name: &str, value: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|r| r.name != name || r.value != value);
        self.0.len() < before
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// The registrations due at `now` as `(name, value, ttl in ms)`, each
    /// rescheduled a third of its TTL later.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<(String, String, u64)> {
        let mut due = Vec::new();
        for r in &mut self.0 {
            if r.next_refresh <= now {
                r.next_refresh = now + (r.ttl / 3).max(MIN_REFRESH);
                let ttl_ms = u64::try_from(r.ttl.as_millis()).unwrap_or(u64::MAX);
                due.push((r.name.clone(), r.value.clone(), ttl_ms));
            }
        }
        due
    }

    /// When the next registration is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.0.iter().map(|r| r.next_refresh).min()
    }

    /// Brings the refresh of one registration forward to `at` (it missed its
    /// owner); false if it is no longer registered.
    pub(crate) fn retry_at(&mut self, name: &str, value: &str, at: Instant) -> bool {
        let Some(reg) = self.0.iter_mut().find(|r| r.name == name && r.value == value) else {
            return false;
        };
        reg.next_refresh = reg.next_refresh.min(at);
        true
    }
}
