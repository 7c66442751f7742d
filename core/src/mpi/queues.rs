//! The posted-receive queue and the unexpected-message queue.
//!
//! Both answer "the earliest entry matching this", in post order and in arrival
//! order respectively. Entries without wildcards sit in per-(comm, source, tag)
//! buckets, so the common exact match is a hash lookup plus a deque pop.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::{Payload, RequestId, Status};

/// Exact match key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) comm: u32,
    pub(crate) src: u32,
    pub(crate) tag: i32,
}

/// What a receive or probe accepts (`None` = wildcard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pattern {
    pub(crate) comm: u32,
    pub(crate) src: Option<u32>,
    pub(crate) tag: Option<i32>,
}

impl Pattern {
    pub(crate) fn matches(&self, k: &Key) -> bool {
        self.comm == k.comm && self.src.is_none_or(|s| s == k.src) && self.tag.is_none_or(|t| t == k.tag)
    }

    fn exact(&self) -> Option<Key> {
        Some(Key { comm: self.comm, src: self.src?, tag: self.tag? })
    }
}

/// A fast multiplicative hasher for small integer keys (ranks of one job choose the
/// keys, so hash flooding is not a concern).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl KeyHasher {
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// Empty buckets kept (with their allocation) for reuse before they are freed.
const IDLE_BUCKETS: usize = 1024;

fn pop_bucket<T>(map: &mut FastMap<Key, VecDeque<T>>, key: &Key) -> Option<T> {
    let q = map.get_mut(key)?;
    let v = q.pop_front();
    if q.is_empty() && map.len() > IDLE_BUCKETS {
        map.remove(key);
    }
    v
}

#[derive(Debug, Clone, Copy)]
struct Wild {
    order: u64,
    req: RequestId,
    pat: Pattern,
}

/// Receives posted and not yet matched, in post order.
#[derive(Debug, Default)]
pub(crate) struct PostedQueue {
    exact: FastMap<Key, VecDeque<(u64, RequestId)>>,
    wild: VecDeque<Wild>,
    next_order: u64,
    len: usize,
}

impl PostedQueue {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn post(&mut self, pat: Pattern, req: RequestId) {
        let order = self.next_order;
        self.next_order += 1;
        self.len += 1;
        match pat.exact() {
            Some(k) => self.exact.entry(k).or_default().push_back((order, req)),
            None => self.wild.push_back(Wild { order, req, pat }),
        }
    }

    /// Removes and returns the earliest-posted receive matching `k`.
    pub(crate) fn take_match(&mut self, k: &Key) -> Option<RequestId> {
        if self.wild.is_empty() {
            // Only exact receives: the bucket's first, one lookup.
            let req = pop_bucket(&mut self.exact, k).map(|(_, r)| r);
            self.len -= usize::from(req.is_some());
            return req;
        }
        let exact = self.exact.get(k).and_then(|q| q.front()).map(|&(o, _)| o);
        let limit = exact.unwrap_or(u64::MAX);
        let wild = self.wild.iter().take_while(|w| w.order < limit).position(|w| w.pat.matches(k));
        let req = match (wild, exact) {
            (Some(i), _) => self.wild.remove(i).map(|w| w.req),
            (None, Some(_)) => pop_bucket(&mut self.exact, k).map(|(_, r)| r),
            (None, None) => None,
        };
        if req.is_some() {
            self.len -= 1;
        }
        req
    }

    /// Removes a posted receive; false if it is not posted (matched or unknown).
    pub(crate) fn cancel(&mut self, req: RequestId) -> bool {
        if let Some(i) = self.wild.iter().position(|w| w.req == req) {
            self.wild.remove(i);
            self.len -= 1;
            return true;
        }
        for q in self.exact.values_mut() {
            if let Some(i) = q.iter().position(|&(_, r)| r == req) {
                q.remove(i);
                self.len -= 1;
                return true;
            }
        }
        false
    }
}

/// What waits in the unexpected queue.
#[derive(Debug, Clone)]
pub(crate) enum Held {
    /// An eager message, with the credit it was charged.
    Eager { data: Payload, charge: u64 },
    /// A request to send, waiting for its receive.
    Rts { rts_seq: u64, len: u64 },
    /// A synchronous send of this rank to itself: its request completes when a
    /// receive takes the message.
    SelfSync { data: Payload, send: RequestId },
}

/// Where an unexpected message came from, so its sender can cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A peer's message: the sequence number of its Eager or Rts frame.
    Peer { seq: u64 },
    /// This rank's own send request.
    Local { send: RequestId },
}

/// One unexpected message.
#[derive(Debug, Clone)]
pub(crate) struct Unexpected {
    pub(crate) key: Key,
    pub(crate) held: Held,
    pub(crate) origin: Origin,
}

impl Unexpected {
    pub(crate) fn status(&self) -> Status {
        let count = match &self.held {
            Held::Eager { data, .. } | Held::SelfSync { data, .. } => data.len(),
            Held::Rts { len, .. } => *len as usize,
        };
        Status { source: self.key.src, tag: self.key.tag, count }
    }
}

/// Messages that arrived before their receive, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct UnexpectedQueue {
    by_arrival: BTreeMap<u64, Unexpected>,
    by_key: FastMap<Key, VecDeque<u64>>,
    next_arrival: u64,
    charged: u64,
}

impl UnexpectedQueue {
    pub(crate) fn len(&self) -> usize {
        self.by_arrival.len()
    }

    /// Every message held, earliest arrival first.
    pub(crate) fn in_arrival_order(&self) -> impl Iterator<Item = &Unexpected> {
        self.by_arrival.values()
    }

    /// Messages held of communicators other than `comm`.
    pub(crate) fn len_besides(&self, comm: u32) -> usize {
        self.by_arrival.values().filter(|u| u.key.comm != comm).count()
    }

    /// Credit charged by the eager messages held.
    pub(crate) fn charged(&self) -> u64 {
        self.charged
    }

    pub(crate) fn push(&mut self, u: Unexpected) {
        let n = self.next_arrival;
        self.next_arrival += 1;
        if let Held::Eager { charge, .. } = u.held {
            self.charged += charge;
        }
        self.by_key.entry(u.key).or_default().push_back(n);
        self.by_arrival.insert(n, u);
    }

    fn find(&self, pat: &Pattern) -> Option<u64> {
        match pat.exact() {
            Some(k) => self.by_key.get(&k).and_then(|q| q.front()).copied(),
            None => self.by_arrival.iter().find(|(_, u)| pat.matches(&u.key)).map(|(&n, _)| n),
        }
    }

    /// The earliest-arrived message matching `pat`, left in place.
    pub(crate) fn peek(&self, pat: &Pattern) -> Option<&Unexpected> {
        self.find(pat).and_then(|n| self.by_arrival.get(&n))
    }

    /// Removes and returns the message from `src` that `origin` names, if it
    /// is here (a linear scan: cancelling is rare).
    pub(crate) fn remove_origin(&mut self, src: u32, origin: Origin) -> Option<Unexpected> {
        let n = self.by_arrival.iter().find(|(_, u)| u.key.src == src && u.origin == origin).map(|(&n, _)| n)?;
        // Invariant: `n` was just found in by_arrival.
        let u = self.by_arrival.remove(&n).expect("found above");
        if let Some(q) = self.by_key.get_mut(&u.key) {
            q.retain(|&x| x != n);
            if q.is_empty() && self.by_key.len() > IDLE_BUCKETS {
                self.by_key.remove(&u.key);
            }
        }
        if let Held::Eager { charge, .. } = u.held {
            self.charged -= charge;
        }
        Some(u)
    }

    /// Removes and returns the earliest-arrived message matching `pat`.
    pub(crate) fn take(&mut self, pat: &Pattern) -> Option<Unexpected> {
        let n = self.find(pat)?;
        // Invariant: `find` returned an index both maps hold.
        let u = self.by_arrival.remove(&n).expect("indexed arrival is held");
        // Every entry of u's bucket matches `pat` too and the bucket is in arrival
        // order, so the earliest match is the bucket's front.
        let front = pop_bucket(&mut self.by_key, &u.key);
        debug_assert_eq!(front, Some(n));
        if let Held::Eager { charge, .. } = u.held {
            self.charged -= charge;
        }
        Some(u)
    }
}
