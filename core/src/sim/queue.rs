//! The simulator's event queue: a radix heap of small keys over a slab of events.
//!
//! Virtual time never goes back, so no event is ever queued before the last one
//! popped: the queue is *monotone*, and a radix heap serves it with appends and
//! sequential scans instead of a binary heap's log-depth sifts. Bucket `b` holds
//! the keys whose highest bit differing from the last popped time is bit `b - 1`
//! (bucket 0: equal to it). Popping from an empty bucket 0 finds the first
//! non-empty bucket, takes its minimum as the new last time and redistributes the
//! bucket below; each key moves down a few times in all.
//!
//! Events (deliveries carry whole messages, ~200 bytes) are written once into a
//! slab and read once when popped; the buckets move 16-byte keys. A *token* (two
//! `u32`s, such as a node's wake-up and its generation) rides in the key itself
//! and never touches the slab.
//! Events at the same time pop in the order they were pushed: appends keep that
//! order within every bucket, and a bucket is redistributed only into empty ones.

use std::cell::Cell;
use std::collections::VecDeque;

/// Virtual time in nanoseconds since the simulation started.
pub(crate) type Nanos = u64;

#[derive(Debug, Clone, Copy)]
struct Key {
    at: Nanos,
    /// A slab slot with [`SLAB`] set, or the first half of a token.
    a: u32,
    /// The second half of a token.
    b: u32,
}

const SLAB: u32 = 1 << 31;

/// What a pop returns.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Item<E> {
    /// A token pushed with [`EventQueue::push_token`].
    Token(u32, u32),
    /// An event pushed with [`EventQueue::push`].
    Event(E),
}

const BUCKETS: usize = 65;

/// A monotone priority queue of events ordered by (time, order of push).
#[derive(Debug)]
pub(crate) struct EventQueue<E> {
    /// Bucket 0, popped in push order.
    due: VecDeque<Key>,
    /// Buckets 1..=64 (index 0 unused).
    buckets: Vec<Vec<Key>>,
    /// The time of the last pop: no key is ever below it.
    last: Nanos,
    /// The earliest time in buckets 1..=64, once looked for (so that peeking
    /// again and again between pops costs nothing).
    earliest: Cell<Option<Nanos>>,
    len: usize,
    slots: Vec<Option<E>>,
    free: Vec<u32>,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            due: VecDeque::new(),
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            last: 0,
            earliest: Cell::new(None),
            len: 0,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

fn bucket(last: Nanos, at: Nanos) -> usize {
    (u64::BITS - (at ^ last).leading_zeros()) as usize
}

impl<E> EventQueue<E> {
    /// Queues `ev` at time `at`, after everything already queued at `at`.
    ///
    /// # Panics
    /// If `at` is before the last popped time: the simulator never goes back.
    pub(crate) fn push(&mut self, at: Nanos, ev: E) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(ev);
                s
            }
            None => {
                let s = u32::try_from(self.slots.len()).ok().filter(|s| *s < SLAB);
                self.slots.push(Some(ev));
                s.expect("fewer than 2^31 events in flight")
            }
        };
        self.insert(Key { at, a: slot | SLAB, b: 0 });
    }

    /// Queues the token `(a, b)` at time `at` (`a` below 2^31), after everything
    /// already queued at `at`.
    pub(crate) fn push_token(&mut self, at: Nanos, a: u32, b: u32) {
        assert!(a < SLAB, "a token's first half is below 2^31");
        self.insert(Key { at, a, b });
    }

    /// # Panics
    /// If `key.at` is before the last popped time: the simulator never goes back.
    fn insert(&mut self, key: Key) {
        let at = key.at;
        assert!(at >= self.last, "event queued in the past: {at} < {}", self.last);
        self.len += 1;
        match bucket(self.last, at) {
            0 => self.due.push_back(key),
            b => {
                self.buckets[b].push(key);
                if let Some(e) = self.earliest.get() {
                    self.earliest.set(Some(e.min(at)));
                }
            }
        }
    }

    /// Takes the earliest event or token and its time.
    pub(crate) fn pop(&mut self) -> Option<(Nanos, Item<E>)> {
        if self.due.is_empty() && !self.refill() {
            return None;
        }
        let k = self.due.pop_front()?;
        self.len -= 1;
        if k.a & SLAB == 0 {
            return Some((k.at, Item::Token(k.a, k.b)));
        }
        let slot = k.a & !SLAB;
        let ev = self.slots[slot as usize].take().expect("a queued key names a filled slot");
        self.free.push(slot);
        Some((k.at, Item::Event(ev)))
    }

    /// Moves the earliest keys into bucket 0; false when the queue is empty.
    fn refill(&mut self) -> bool {
        let Some(b) = (1..BUCKETS).find(|&b| !self.buckets[b].is_empty()) else {
            return false;
        };
        let keys = std::mem::take(&mut self.buckets[b]);
        self.earliest.set(None);
        self.last = keys.iter().map(|k| k.at).min().expect("a non-empty bucket");
        for &k in &keys {
            match bucket(self.last, k.at) {
                0 => self.due.push_back(k),
                nb => self.buckets[nb].push(k),
            }
        }
        // Give the emptied bucket its allocation back.
        let mut keys = keys;
        keys.clear();
        self.buckets[b] = keys;
        true
    }

    /// When the earliest event happens.
    pub(crate) fn peek_time(&self) -> Option<Nanos> {
        if let Some(k) = self.due.front() {
            return Some(k.at);
        }
        if let Some(e) = self.earliest.get() {
            return Some(e);
        }
        let b = (1..BUCKETS).find(|&b| !self.buckets[b].is_empty())?;
        let e = self.buckets[b].iter().map(|k| k.at).min();
        self.earliest.set(e);
        e
    }

    /// Number of queued events.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pops_by_time_then_push_order_and_reuses_slots() {
        let mut q = EventQueue::default();
        for (at, name) in [(30, "c"), (10, "a1"), (20, "b"), (10, "a2"), (10, "a3")] {
            q.push(at, name);
        }
        assert_eq!(q.len(), 5);
        assert_eq!(q.peek_time(), Some(10));
        q.push_token(10, 7, 8);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let ev = Item::Event;
        let want =
            [(10, ev("a1")), (10, ev("a2")), (10, ev("a3")), (10, Item::Token(7, 8)), (20, ev("b")), (30, ev("c"))];
        assert_eq!(order, want);
        assert_eq!(q.pop(), None);
        assert_eq!(q.peek_time(), None);
        for i in 0..5 {
            q.push(100 - i, "again");
        }
        assert_eq!(q.slots.len(), 5, "freed slots are reused");
        assert_eq!(q.pop(), Some((96, Item::Event("again"))));
    }

    proptest! {
        /// Against a sorted list: interleaved pushes (never before the last pop)
        /// and pops come out by time, ties in push order.
        #[test]
        fn matches_a_sorted_reference(ops in proptest::collection::vec((0u8..3, 0u64..3, 0u32..40), 1..400)) {
            let mut q = EventQueue::default();
            let mut reference: Vec<(u64, usize)> = Vec::new();
            let mut now = 0u64;
            for (n, (op, scale, delta)) in ops.into_iter().enumerate() {
                let want = reference.first().copied();
                prop_assert_eq!(q.peek_time(), want.map(|w| w.0));
                if op == 0 {
                    let got = q.pop().map(|(t, item)| match item {
                        Item::Event(n) => (t, n),
                        Item::Token(a, b) => (t, (a + b) as usize),
                    });
                    prop_assert_eq!(got, want);
                    if let Some((t, _)) = got {
                        reference.remove(0);
                        now = t;
                    }
                } else {
                    // Deltas from 0 to ~40 s in ns, with many exact ties.
                    let at = now + u64::from(delta) * 10u64.pow(4 * scale as u32);
                    if op == 1 {
                        q.push(at, n);
                    } else {
                        q.push_token(at, n as u32, 0);
                    }
                    let i = reference.partition_point(|(t, _)| *t <= at);
                    reference.insert(i, (at, n));
                }
                prop_assert_eq!(q.len(), reference.len());
            }
        }
    }
}
