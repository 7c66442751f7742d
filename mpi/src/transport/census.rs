//! Counting this job's ranks on this host, and when to count them again.
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
//!
//! A large job's count stops at one more rank than the cores (enough to
//! know they are outnumbered); such a count gives no rank a place among
//! them (see [`count_here`]).

use std::time::{Duration, Instant};

use p2pmp_core::id::Id;

/// The first recount after one that found some ranks missing.
const FIRST: Duration = Duration::from_millis(1);
/// The latest recount while some ranks are missing.
const RECOUNT: Duration = Duration::from_millis(200);
/// How often a count that found every rank is taken again.
const COMPLETE: Duration = Duration::from_millis(2000);

/// The last count of this job's ranks on this host and when the next is due.
#[derive(Debug)]
pub(super) struct Census {
    /// Ranks known here, this one included: found by the last count, or
    /// more if more are linked over shared memory since.
    pub(super) here: u32,
    /// Of those the last count found, those below this rank, if it looked
    /// at them all.
    pub(super) below: Option<u32>,
    /// Ranks the last count found, and the one before.
    found: u32,
    found_before: u32,
    counted: Option<Instant>,
    /// The wait before the next count while ranks are missing.
    every: Duration,
}

impl Census {
    pub(super) fn new() -> Self {
        Census { here: 1, below: None, found: 0, found_before: 0, counted: None, every: FIRST }
    }

    /// Whether to count again at `now`, in a job of `size` ranks: rarely
    /// once a count found them all, or as many as a count of a large job
    /// looks for (ranks known by their links alone are counted soon, to
    /// learn this rank's place among them).
    pub(super) fn due(&self, now: Instant, size: u32) -> bool {
        let stopped_short = self.counted.is_some() && self.below.is_none();
        let every = if self.found >= size || stopped_short { COMPLETE } else { self.every };
        self.counted.is_none_or(|t| now.duration_since(t) >= every)
    }

    /// A count at `now` found `here` ranks, `below` of them below this one
    /// (if it looked at them all).
    pub(super) fn counted(&mut self, now: Instant, here: u32, below: Option<u32>) {
        if self.counted.is_some() {
            self.every = (self.every * 2).min(RECOUNT);
        }
        (self.here, self.below) = (here, below);
        (self.found_before, self.found) = (self.found, here);
        self.counted = Some(now);
    }

    /// Whether the count has settled, in a job of `size` ranks: every rank
    /// is known here, or the count has been taken again and again (for some
    /// 250 ms) and the last two found as many (a job over many hosts).
    /// Until then, ranks still starting may be missing from it.
    pub(super) fn settled(&self, size: u32) -> bool {
        self.here >= size || (self.every >= RECOUNT && self.found == self.found_before)
    }

    /// `linked` ranks are known to be here (linked over shared memory) without a count.
    pub(super) fn at_least(&mut self, linked: u32) {
        self.here = self.here.max(linked);
    }
}

/// A job's turn round the cores, from its id: where its first rank on a
/// host has its home, so that two jobs on one host do not both start at the
/// first core.
pub(super) fn job_turn(job: &[u8]) -> u32 {
    let h = Id::hash(job);
    u32::from(u16::from_be_bytes([h.as_bytes()[0], h.as_bytes()[1]]))
}

/// Counts this job's ranks on this host, this one (`rank`, of `size`)
/// included, by whether each other rank is `present`: the count, and how
/// many of them are below this rank. A job of more than 64 ranks stops
/// counting at `enough`, and then gives no place (`None`): its ranks here
/// are left to the kernel to spread, since the count cannot tell them from
/// other work.
pub(super) fn count_here(
    size: u32,
    rank: u32,
    enough: u32,
    mut present: impl FnMut(u32) -> bool,
) -> (u32, Option<u32>) {
    let (mut here, mut below) = (1, 0);
    for r in (0..size).filter(|&r| r != rank) {
        if size > 64 && here >= enough {
            return (here, None);
        }
        if present(r) {
            here += 1;
            below += u32::from(r < rank);
        }
    }
    (here, Some(below))
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
        c.counted(t0, 2, Some(1));
        c.at_least(8);
        assert_eq!(c.here, 8);
        c.at_least(5);
        assert_eq!(c.here, 8, "never lowered by a link count");
        assert!(c.settled(8), "all ranks known");
        assert!(c.due(t0 + FIRST, 8), "known by links alone: counted soon, for the places");
        let t1 = t0 + FIRST;
        c.counted(t1, 8, Some(3));
        assert!(!c.due(t1 + RECOUNT, 8), "all ranks found: no recount soon");
        assert!(c.due(t1 + COMPLETE, 8));
    }

    #[test]
    fn a_count_is_settled_once_complete_or_after_a_while() {
        let t0 = Instant::now();
        let mut c = Census::new();
        c.counted(t0, 8, Some(3));
        assert!(c.settled(8), "every rank found");
        let mut c = Census::new();
        let mut t = t0;
        for _ in 0..9 {
            assert!(!c.settled(8), "ranks may still be starting");
            c.counted(t, 4, Some(1));
            t += RECOUNT;
        }
        assert!(c.settled(8), "four of eight here, counted again and again");
        c.counted(t, 5, Some(1));
        assert!(!c.settled(8), "one more started: not settled ...");
        c.counted(t + RECOUNT, 5, Some(1));
        assert!(c.settled(8), "... until a count finds as many again");
    }

    #[test]
    fn a_count_of_a_large_job_that_stopped_short_holds_long() {
        let t0 = Instant::now();
        let mut c = Census::new();
        c.counted(t0, 3, None);
        assert!(!c.due(t0 + RECOUNT, 100), "as many as it looks for");
        assert!(c.due(t0 + COMPLETE, 100));
    }

    #[test]
    fn ranks_here_and_below_are_counted() {
        let even = |r: u32| r % 2 == 0;
        assert_eq!(count_here(8, 4, 3, even), (4, Some(2)), "0, 2 below; 4 itself, 6");
        assert_eq!(count_here(8, 5, 3, even), (5, Some(3)));
        assert_eq!(count_here(1, 0, 3, even), (1, Some(0)));
        // A large job stops at `enough`, and then gives no place.
        assert_eq!(count_here(100, 1, 3, |_| true), (3, None));
        assert_eq!(count_here(100, 50, 3, |r| r >= 49), (3, None), "49 and 51 found: stopped at 52");
        assert_eq!(count_here(100, 50, 3, |r| r == 0 || r == 99), (3, Some(1)), "0 and 99: the end reached");
        assert_eq!(count_here(64, 50, 3, |_| true), (64, Some(50)), "64 ranks: all counted");
    }
}
