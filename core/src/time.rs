//! Timers as a table indexed by an enum, not as tasks, and the retry back-off.
//!
//! A machine keeps one [`TimerTable`] whose keys are its own `enum Timer`;
//! `poll_timeout` is the table's minimum and `handle_timeout` asks which entries
//! have expired. [`Backoff`] is how long to wait before the next try after
//! failures in a row: the drivers' reconnects (`p2pmp_adapters::Driver`) and the
//! MPI link machine ([`crate::mpi::Links`]) both keep one per peer.

use std::time::{Duration, Instant};

/// A timer enum usable as a [`TimerTable`] key.
pub trait TimerKey: Copy + Eq + std::fmt::Debug + 'static {
    /// Number of variants.
    const COUNT: usize;
    /// Every variant, in index order.
    const ALL: &'static [Self];
    /// This variant's index, below [`TimerKey::COUNT`].
    fn index(self) -> usize;
}

/// Most keys a [`TimerTable`] holds (checked when a table is built).
pub const MAX_TIMERS: usize = 8;

/// One optional deadline per timer key, stored inline: the table is read on every
/// input a machine handles, so it sits beside the machine's other fields rather
/// than behind a pointer.
#[derive(Debug, Clone)]
pub struct TimerTable<K: TimerKey> {
    deadlines: [Option<Instant>; MAX_TIMERS],
    _key: std::marker::PhantomData<K>,
}

impl<K: TimerKey> Default for TimerTable<K> {
    fn default() -> Self {
        const { assert!(K::COUNT <= MAX_TIMERS, "a TimerTable holds at most MAX_TIMERS keys") };
        TimerTable { deadlines: [None; MAX_TIMERS], _key: std::marker::PhantomData }
    }
}

impl<K: TimerKey> TimerTable<K> {
    /// Arms (or re-arms) `key` to fire at `at`.
    pub fn set(&mut self, key: K, at: Instant) {
        self.deadlines[key.index()] = Some(at);
    }

    /// Disarms `key`.
    pub fn clear(&mut self, key: K) {
        self.deadlines[key.index()] = None;
    }

    /// When `key` fires, if armed.
    pub fn get(&self, key: K) -> Option<Instant> {
        self.deadlines[key.index()]
    }

    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Instant> {
        self.deadlines[..K::COUNT].iter().flatten().min().copied()
    }

    /// Disarms and returns every key whose deadline is at or before `now`, in index order.
    pub fn take_expired(&mut self, now: Instant) -> impl Iterator<Item = K> + use<K> {
        let mut fired = 0u32;
        for &k in K::ALL {
            if self.deadlines[k.index()].is_some_and(|t| t <= now) {
                self.deadlines[k.index()] = None;
                fired |= 1 << k.index();
            }
        }
        K::ALL.iter().copied().filter(move |k| fired & (1 << k.index()) != 0)
    }
}

/// A doubling retry back-off: the first failure in a row waits `min`, each
/// further one twice the wait before, never more than `max`; a success resets
/// it. The bounds come with each failure (they live in the owner's config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    wait: Duration,
}

impl Backoff {
    /// Records one more failure: how long to wait before the next try.
    pub fn fail(&mut self, min: Duration, max: Duration) -> Duration {
        let next = if self.wait.is_zero() { min } else { self.wait.saturating_mul(2) };
        self.wait = next.min(max);
        self.wait
    }

    /// The wait after the latest failure (zero after none, or after a reset).
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// A try succeeded: the next failure waits `min` again.
    pub fn reset(&mut self) {
        self.wait = Duration::ZERO;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum T {
        A,
        B,
    }
    impl TimerKey for T {
        const COUNT: usize = 2;
        const ALL: &'static [T] = &[T::A, T::B];
        fn index(self) -> usize {
            self as usize
        }
    }

    #[test]
    fn next_is_minimum_and_expired_fire_once() {
        let t0 = Instant::now();
        let mut t = TimerTable::<T>::default();
        assert_eq!(t.next(), None);
        t.set(T::A, t0 + Duration::from_secs(2));
        t.set(T::B, t0 + Duration::from_secs(1));
        assert_eq!(t.next(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(t.take_expired(t0).count(), 0);
        let fired: Vec<_> = t.take_expired(t0 + Duration::from_secs(1)).collect();
        assert_eq!(fired, vec![T::B]);
        assert_eq!(t.take_expired(t0 + Duration::from_secs(1)).count(), 0, "fires once");
        assert_eq!(t.next(), Some(t0 + Duration::from_secs(2)));
        t.clear(T::A);
        assert_eq!(t.next(), None);
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(1));
        let mut b = Backoff::default();
        assert_eq!(b.fail(min, max), min);
        assert_eq!(b.fail(min, max), 2 * min);
        let b9 = (0..8).map(|_| b.fail(min, max)).last();
        assert_eq!(b9, Some(max));
        b.reset();
        assert_eq!((b.wait(), b.fail(min, max)), (Duration::ZERO, min));
    }
}
