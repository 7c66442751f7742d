//! When this host's ranks of the job are counted again.
//!
//! A rank counts the job's ranks on its host by their shared-memory sockets
//! (`Transport::local_ranks`), and waits by that count: poll while they fit
//! the cores, yield when they outnumber them. Ranks start one after another,
//! so a count taken at the first wait may miss some. Trusted for 200 ms, it
//! told ranks that talk to rank 0 alone (the factoring job's workers, every
//! rank of a collective through rank 0) that they had a core to themselves:
//! they busy-polled, were preempted and slept through the first 200 ms of
//! the job, a third of a short run. A count that found fewer than all ranks
//! is redone after 1 ms, then twice as late each time up to [`RECOUNT`];
//! one that found them all, every ten times that (ranks may leave).

use std::time::{Duration, Instant};

/// The first recount after one that found some ranks missing.
const FIRST: Duration = Duration::from_millis(1);
/// The latest recount while some ranks are missing.
const RECOUNT: Duration = Duration::from_millis(200);
/// How often a count that found every rank is taken again.
const COMPLETE: Duration = Duration::from_millis(2000);

/// The last count of this job's ranks on this host and when the next is due.
#[derive(Debug)]
pub(super) struct Census {
    /// Ranks found here, this one included.
    pub(super) here: u32,
    /// Of them, those below this rank, if the count looked at them all.
    pub(super) below: Option<u32>,
    counted: Option<Instant>,
    /// The wait before the next count while ranks are missing.
    every: Duration,
}

impl Census {
    pub(super) fn new() -> Self {
        Census { here: 1, below: None, counted: None, every: FIRST }
    }

    /// Whether to count again at `now`, in a job of `size` ranks.
    pub(super) fn due(&self, now: Instant, size: u32) -> bool {
        let every = if self.here >= size { COMPLETE } else { self.every };
        self.counted.is_none_or(|t| now.duration_since(t) >= every)
    }

    /// A count at `now` found `here` ranks, `below` of them below this one
    /// (if it looked at them all).
    pub(super) fn counted(&mut self, now: Instant, here: u32, below: Option<u32>) {
        if self.counted.is_some() {
            self.every = (self.every * 2).min(RECOUNT);
        }
        (self.here, self.below) = (here, below);
        self.counted = Some(now);
    }

    /// `linked` ranks are known to be here (linked over shared memory) without a count.
    pub(super) fn at_least(&mut self, linked: u32) {
        self.here = self.here.max(linked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_missing_ranks_is_redone_soon_then_less_often() {
        let t0 = Instant::now();
        let mut c = Census::new();
        assert!(c.due(t0, 8), "the first wait counts");
        c.counted(t0, 3, Some(1));
        let mut t = t0;
        for want_ms in [1, 2, 4, 8, 16, 32, 64, 128, 200, 200] {
            let d = Duration::from_millis(want_ms);
            assert!(!c.due(t + d - Duration::from_micros(1), 8), "not before {want_ms} ms");
            assert!(c.due(t + d, 8), "after {want_ms} ms");
            t += d;
            c.counted(t, 3, Some(1));
        }
    }

    #[test]
    fn a_complete_count_holds_long_and_links_raise_it() {
        let t0 = Instant::now();
        let mut c = Census::new();
        c.counted(t0, 2, None);
        c.at_least(8);
        assert_eq!(c.here, 8);
        assert!(!c.due(t0 + RECOUNT, 8), "all ranks known: no recount soon");
        assert!(c.due(t0 + COMPLETE, 8));
        c.at_least(5);
        assert_eq!(c.here, 8, "never lowered by a link count");
    }
}
