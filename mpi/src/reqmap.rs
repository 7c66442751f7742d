//! Maps and sets keyed by request id, for the tables a rank keeps beside its
//! requests: the finished ones not yet waited for, the cancels under way, the
//! requests freed before they finished.
//!
//! Each is looked at several times a message and almost always empty. A
//! lookup in an empty table hashes the id and probes all the same, so these
//! look at the length first: the check lives here once, not at every call.
//! The hash is one multiplication (request ids are consecutive numbers): the
//! default SipHash cost more than the rest of a lookup.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use p2pmp_core::mpi::RequestId;

#[derive(Debug, Default)]
struct ReqHasher(u64);

impl Hasher for ReqHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by request id (see the module docs).
#[derive(Debug)]
pub(crate) struct ReqMap<V>(HashMap<RequestId, V, BuildHasherDefault<ReqHasher>>);

impl<V> Default for ReqMap<V> {
    fn default() -> Self {
        ReqMap(HashMap::default())
    }
}

impl<V> ReqMap<V> {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[inline]
    pub(crate) fn get(&self, id: &RequestId) -> Option<&V> {
        if self.is_empty() { None } else { self.0.get(id) }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: &RequestId) -> Option<&mut V> {
        if self.is_empty() { None } else { self.0.get_mut(id) }
    }

    #[inline]
    pub(crate) fn contains_key(&self, id: &RequestId) -> bool {
        self.get(id).is_some()
    }

    #[inline]
    pub(crate) fn remove(&mut self, id: &RequestId) -> Option<V> {
        if self.is_empty() { None } else { self.0.remove(id) }
    }

    pub(crate) fn insert(&mut self, id: RequestId, v: V) -> Option<V> {
        self.0.insert(id, v)
    }
}

/// A set of request ids (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ReqSet(ReqMap<()>);

impl ReqSet {
    #[inline]
    pub(crate) fn contains(&self, id: &RequestId) -> bool {
        self.0.contains_key(id)
    }

    /// Whether `id` was there.
    #[inline]
    pub(crate) fn remove(&mut self, id: &RequestId) -> bool {
        self.0.remove(id).is_some()
    }

    /// Whether `id` was not there yet.
    pub(crate) fn insert(&mut self, id: RequestId) -> bool {
        self.0.insert(id, ()).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_as_a_map_empty_or_not() {
        let mut m = ReqMap::default();
        let (a, b) = (RequestId(1), RequestId(2));
        assert!(m.is_empty() && m.get(&a).is_none() && m.remove(&a).is_none());
        assert_eq!(m.insert(a, 10), None);
        assert_eq!(m.insert(a, 11), Some(10));
        *m.get_mut(&a).unwrap() += 1;
        assert!(m.contains_key(&a) && !m.contains_key(&b));
        assert_eq!((m.remove(&b), m.remove(&a), m.remove(&a)), (None, Some(12), None));
        assert!(m.is_empty());

        let mut s = ReqSet::default();
        assert!(!s.contains(&a) && !s.remove(&a));
        assert!(s.insert(a) && !s.insert(a) && s.contains(&a));
        assert!(s.remove(&a) && !s.contains(&a));
    }
}
