//! The finished requests nobody has waited for yet.
//!
//! A blocking call finishes one request and waits for it at once: the
//! newest completion sits in a slot of its own, looked at before the map.
//! (An 8 B ping-pong put every message's completion through the map: an
//! insert, lookups and a removal, each a hash and a probe. With the slot,
//! callgrind counted 348-351 instructions a message in `after_io` against
//! 411-440.) Only a second completion before the first is waited for (a
//! window of non-blocking sends, a collective) moves the first into the map.

use p2pmp_core::mpi::{Completion, RequestId};

use crate::reqmap::ReqMap;

/// Finished requests, by id. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Done {
    /// The newest one.
    last: Option<(RequestId, Completion)>,
    /// The others.
    rest: ReqMap<Completion>,
}

impl Done {
    /// Records that `id` finished as `c` (replacing what was there for it).
    pub(crate) fn insert(&mut self, id: RequestId, c: Completion) {
        match &mut self.last {
            Some((last, held)) if *last == id => *held = c,
            _ => {
                // Ids are not reused, so this finds none; it keeps the
                // answers a map's all the same.
                self.rest.remove(&id);
                if let Some((older, held)) = self.last.replace((id, c)) {
                    self.rest.insert(older, held);
                }
            }
        }
    }

    /// Whether `id` finished and was not taken yet.
    pub(crate) fn contains_key(&self, id: &RequestId) -> bool {
        self.get(id).is_some()
    }

    /// How `id` finished, if it did and was not taken yet.
    pub(crate) fn get(&self, id: &RequestId) -> Option<&Completion> {
        match &self.last {
            Some((last, c)) if last == id => Some(c),
            _ => self.rest.get(id),
        }
    }

    /// Takes how `id` finished, if it did.
    pub(crate) fn remove(&mut self, id: &RequestId) -> Option<Completion> {
        if self.last.as_ref().is_some_and(|(last, _)| last == id) {
            return self.last.take().map(|(_, c)| c);
        }
        self.rest.remove(id)
    }

    /// Whether no finished request waits to be taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.last.is_none() && self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use p2pmp_core::mpi::Completion;
    use proptest::prelude::*;

    use super::*;

    fn sent(id: u64) -> (RequestId, Completion) {
        (RequestId(id), Completion::Send { req: RequestId(id) })
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![(0u64..6).prop_map(Op::Insert), (0u64..6).prop_map(Op::Remove)]
    }

    proptest! {
        /// Whatever the order of inserts and removals, `Done` answers as a
        /// plain map does.
        #[test]
        fn answers_as_a_map(ops in prop::collection::vec(op(), 0..40)) {
            let mut done = Done::default();
            let mut map = std::collections::HashMap::new();
            for o in ops {
                match o {
                    Op::Insert(i) => {
                        let (id, c) = sent(i);
                        done.insert(id, c.clone());
                        map.insert(id, c);
                    }
                    Op::Remove(i) => prop_assert_eq!(done.remove(&RequestId(i)), map.remove(&RequestId(i))),
                }
                for i in 0..6 {
                    let id = RequestId(i);
                    prop_assert_eq!(done.get(&id), map.get(&id));
                    prop_assert_eq!(done.contains_key(&id), map.contains_key(&id));
                }
                prop_assert_eq!(done.is_empty(), map.is_empty());
            }
        }
    }

    #[test]
    fn a_newer_completion_keeps_the_older_one() {
        let mut done = Done::default();
        let (a, ca) = sent(1);
        let (b, cb) = sent(2);
        done.insert(a, ca.clone());
        done.insert(b, cb.clone());
        assert_eq!(done.remove(&a), Some(ca));
        assert_eq!(done.remove(&a), None);
        assert_eq!(done.remove(&b), Some(cb));
        assert!(done.is_empty());
    }
}
