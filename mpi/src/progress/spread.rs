//! Spreading this host's ranks of the job over its cores while they
//! outnumber them.
//!
//! Ranks that outnumber the cores yield to each other at every wait, so each
//! is always ready to run, and the kernel's balancer takes each for one that
//! ran within the last half millisecond ("cache hot"): it moves one only
//! after failing to balance the cores otherwise, again and again. So the
//! split the ranks got as they started mostly stays. 8 ranks on the 2-core
//! test machine often ran 5 on one core and 3 on the other (`perf sched`),
//! and a job whose every round waits for all its ranks went at the pace of
//! the core with 5.
//!
//! Spread against `P2PMP_SPREAD=0`, 8 ranks on the 2 cores, 15 runs each
//! taking turns (medians, quartiles; the bench's quick semiprime; load
//! 2.4-4): factoring K=500 0.189 s (0.184-0.197) against 0.222
//! (0.211-0.237), K=10,000 0.0614 (0.0593-0.0622) against 0.0743
//! (0.0675-0.0892), ring 8 x 2,000 0.0592 against 0.0701; Barrier 13.0 us
//! against 16.2 (10 runs). Pinned by hand 4 and 4 (`taskset`), the same.
//!
//! While this host's ranks of the job outnumber its cores, each rank has a
//! home: the core at its place among them (`Transport::place_here`), counted
//! round the cores it may run on. A wait looks where the rank runs at most
//! every [`LOOK_EVERY`], and a rank found elsewhere moves home: its cores
//! narrowed to that one for an instant, then every core again (the kernel
//! moves ranks now and then, a rank woken from a sleep say, and they move
//! back). A rank pinned by the user or a launcher stays where it is (see
//! `cores.rs`), and `P2PMP_SPREAD=0` turns spreading off. A job too large
//! for its ranks here to be counted gives them no place (see
//! `transport/census.rs`): they are the kernel's to balance.
//!
//! Only while the job has the machine to itself: more tasks ready to run
//! than this host's ranks of the job (the scheduler's count, see
//! `progress/runnable.rs`), twice in a row, is other work, and from then on
//! where the ranks run is the kernel's to balance. Spreading beside a CPU
//! hog kept to one core put 4 ranks behind the hog, each waiting out its
//! slices: the ring of 8 x 2,000 took 15.3 s against 0.84 (8 runs each),
//! factoring K=10,000 0.83 s against 0.155. Only a count taken while the
//! ranks are ready to run sees the hog (ranks asleep are not counted), so
//! once seen it stops spreading for good.
//!
//! Two counts in a row stop it quickly, at times too quickly: 6 ranks on
//! the 2-core test machine saw one to three more tasks ready to run for
//! some 15 ms now and then (a daemon's or a kernel thread's turn), and
//! stopped in 3 runs of 8. Other work in most recent counts (a moving
//! average) kept them spreading, but beside the hog stopped only the ranks
//! that slept least; the others kept to the hog's core, and factoring
//! K=10,000 took 0.50 s against 0.125 without spreading (medians of 8,
//! bimodal). With two in a row, beside the same hog: factoring 0.133 s
//! spreading against 0.26 not, the ring 0.286 against 0.249. Spreading
//! stopped costs no more than the kernel's balancing; spreading beside
//! other work costs more.
//!
//! Counts are judged only once the count of this host's ranks has settled:
//! while ranks are starting, those not yet counted (and their launcher) are
//! ready to run too.

use std::time::{Duration, Instant};

use super::cores;
use crate::world::World;

/// How often a waiting rank looks whether it runs on its home core: a look
/// is one `sched_getcpu`, a move two `sched_setaffinity` calls, and a rank
/// the kernel keeps moving away moves back at most this often.
const LOOK_EVERY: Duration = Duration::from_millis(10);
/// Counts of the machine's tasks ready to run, in a row, above this host's
/// ranks of the job that stop spreading for good: other work (one such count
/// may be a kernel thread's blip).
const OTHER_WORK_SEEN: u32 = 2;

/// Whether and when this rank looks where it runs.
#[derive(Debug)]
pub(super) struct Spread {
    /// Spreading is on (`P2PMP_SPREAD=0`: off; off for good once other
    /// work was seen).
    on: bool,
    /// When the next look is due.
    next: Option<Instant>,
    /// Counts in a row that saw other work.
    other_work_streak: u32,
}

impl Spread {
    /// On for a rank that `may_move` (see `cores.rs`), unless
    /// `P2PMP_SPREAD` is `0`.
    pub(super) fn from_env(may_move: bool) -> Self {
        let on = may_move && std::env::var("P2PMP_SPREAD").map_or(true, |v| v.trim() != "0");
        Spread::new(on)
    }

    fn new(on: bool) -> Self {
        Spread { on, next: None, other_work_streak: 0 }
    }

    /// A count of the machine's tasks ready to run, taken while this host's
    /// `local` ranks of the job outnumber its cores: more of them than the
    /// ranks, [`OTHER_WORK_SEEN`] times in a row, turns spreading off.
    /// Counts taken before the count of the ranks `settled` are not judged
    /// (ranks still starting, and their launcher, are ready to run too), and
    /// break a run of sights.
    /// Whether it turned spreading off now.
    fn note_runnable(&mut self, runnable: u32, local: u32, settled: bool) -> bool {
        if !settled {
            self.other_work_streak = 0;
            return false;
        }
        self.other_work_streak = if runnable > local { self.other_work_streak + 1 } else { 0 };
        let stop = self.on && self.other_work_streak >= OTHER_WORK_SEEN;
        if stop {
            self.on = false;
        }
        stop
    }

    /// Whether a look is due at `now` (then the next is [`LOOK_EVERY`] later).
    fn due(&mut self, now: Instant) -> bool {
        if !self.on || self.next.is_some_and(|t| now < t) {
            return false;
        }
        self.next = Some(now + LOOK_EVERY);
        true
    }
}

impl World {
    /// At a wait at `now` while this host's `local` ranks outnumber its
    /// cores (`runnable`: the machine's count of tasks ready to run, if one
    /// was taken just now): moves this rank home if a look is due and finds
    /// it elsewhere.
    pub(super) fn keep_home(&mut self, now: Instant, local: u32, runnable: Option<u32>) {
        // Without a place (a job too large to count) `local` is short of the
        // job's ranks here: they would look like other work.
        let Some(place) = self.net.place_here() else { return };
        if let Some(n) = runnable {
            if self.waits.spread.note_runnable(n, local, self.net.census_settled()) {
                self.waits.stats.spread_stopped = 1;
            }
        }
        if !self.waits.spread.due(now) {
            return;
        }
        let Some(home) = self.waits.mover.home(place) else { return };
        self.waits.stats.spread_cores = u64::from(home.among);
        if cores::current_core() != Some(home.core) && self.waits.mover.move_to(home.core) {
            self.waits.stats.moved_home += 1;
            self.net.say_core(Some(home.core));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_is_due_every_so_often_and_never_when_off() {
        let t0 = Instant::now();
        let mut s = Spread::new(true);
        assert!(s.due(t0), "the first wait looks");
        assert!(!s.due(t0 + LOOK_EVERY / 2));
        assert!(s.due(t0 + LOOK_EVERY));
        let mut off = Spread::new(false);
        assert!(!off.due(t0));
    }

    #[test]
    fn other_work_seen_twice_in_a_row_stops_spreading_for_good() {
        let t0 = Instant::now();
        let mut s = Spread::new(true);
        assert!(!s.note_runnable(9, 8, true) && !s.note_runnable(8, 8, true) && !s.note_runnable(9, 8, true));
        assert!(s.due(t0), "a blip at a time is not other work");
        assert!(s.note_runnable(10, 8, true), "two in a row are");
        assert!(!s.due(t0 + LOOK_EVERY));
        assert!(!s.note_runnable(3, 8, true) && !s.note_runnable(10, 8, true), "stopped once");
        assert!(!s.due(t0 + 2 * LOOK_EVERY), "for good");
    }

    #[test]
    fn counts_taken_while_ranks_are_starting_are_not_judged() {
        let t0 = Instant::now();
        let mut s = Spread::new(true);
        for _ in 0..20 {
            assert!(!s.note_runnable(12, 8, false), "ranks not yet counted are ready to run too");
        }
        assert!(s.due(t0), "still spreading");
        assert!(!s.note_runnable(12, 8, true), "once settled, the first sight ...");
        assert!(!s.note_runnable(12, 8, false), "(unsettled again: not in a row)");
        assert!(!s.note_runnable(12, 8, true));
        assert!(s.note_runnable(12, 8, true), "... and the second in a row stop it");
    }
}
