//! An executor's index of verified staged files, kept by digest so that a program
//! staged once need not travel again (see [`super::JobMsg::Manifest`]). Only the
//! index lives here; the bytes are the driver's (`ExecEvent::CacheStore`). Bounded
//! by total size: the oldest entries go first.

use std::collections::{BTreeMap, VecDeque};

use crate::id::Id;

#[derive(Debug, Clone, Default)]
pub(crate) struct FileCache {
    budget: u64,
    sizes: BTreeMap<Id, u64>,
    order: VecDeque<Id>,
    used: u64,
}

impl FileCache {
    /// An empty cache of at most `budget` bytes (0 keeps nothing).
    pub(crate) fn new(budget: u64) -> Self {
        FileCache { budget, ..FileCache::default() }
    }

    /// Whether a file with this digest and length is kept.
    pub(crate) fn has(&self, digest: Id, len: u64) -> bool {
        self.sizes.get(&digest) == Some(&len)
    }

    /// Whether a verified file should be stored: it fits and is not kept yet.
    pub(crate) fn wants(&self, digest: Id, len: u64) -> bool {
        len <= self.budget && !self.sizes.contains_key(&digest)
    }

    /// Records a stored file; returns the digests evicted to make room, oldest first.
    pub(crate) fn insert(&mut self, digest: Id, len: u64) -> Vec<Id> {
        if !self.wants(digest, len) {
            return Vec::new();
        }
        let mut evicted = Vec::new();
        while self.used + len > self.budget {
            let Some(old) = self.order.pop_front() else { break };
            self.used -= self.sizes.remove(&old).unwrap_or(0);
            evicted.push(old);
        }
        self.sizes.insert(digest, len);
        self.order.push_back(digest);
        self.used += len;
        evicted
    }

    /// Bytes kept.
    #[cfg(test)]
    pub(crate) fn used(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn keeps_what_fits_and_evicts_the_oldest() {
        let (a, b, c) = (Id::hash("a"), Id::hash("b"), Id::hash("c"));
        let mut cache = FileCache::new(10);
        assert!(cache.insert(a, 4).is_empty() && cache.insert(b, 4).is_empty());
        assert!(cache.has(a, 4) && !cache.has(a, 5), "a different length is a different file");
        assert_eq!(cache.insert(c, 4), vec![a]);
        assert!(!cache.has(a, 4) && cache.has(b, 4) && cache.has(c, 4));
        assert!(cache.insert(Id::hash("big"), 11).is_empty(), "too big: not kept, nothing evicted");
        assert!(!cache.wants(b, 4), "kept once");
        assert!(FileCache::new(0).insert(a, 0).is_empty() && !FileCache::new(0).wants(a, 1));
    }

    proptest! {
        #[test]
        fn never_over_budget_and_the_index_adds_up(budget in 0u64..100, files in proptest::collection::vec((0u8..20, 0u64..40), 0..50)) {
            let mut cache = FileCache::new(budget);
            for (name, len) in files {
                let d = Id::hash([name]);
                let kept_before = cache.has(d, len);
                let evicted = cache.insert(d, len);
                prop_assert!(!evicted.contains(&d));
                prop_assert!(cache.used() <= budget);
                prop_assert_eq!(cache.used(), cache.sizes.values().sum::<u64>());
                prop_assert_eq!(cache.order.len(), cache.sizes.len());
                prop_assert!(kept_before || len > budget || cache.sizes.contains_key(&d));
            }
        }
    }
}
