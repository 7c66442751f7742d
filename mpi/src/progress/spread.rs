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
//! Spread against `P2PMP_SPREAD=0`, 8 ranks on the 2 cores, 20 runs each
//! taking turns (medians; the bench's quick semiprime): factoring K=500
//! 0.165 s against 0.203, K=10,000 0.0575 against 0.0698 (its quartiles
//! 0.0569-0.0598 against 0.0593-0.0731), ring 8 x 2,000 0.0468 against
//! 0.0553. Pinned by hand 4 and 4 (`taskset`), the same.
//!
//! While this host's ranks of the job outnumber its cores, each rank has a
//! home: the core at its place among them (`Transport::place_here`), counted
//! round the cores it may run on. A wait looks where the rank runs at most
//! every [`LOOK_EVERY`], and a rank found elsewhere moves home: its cores
//! narrowed to that one for an instant, then every core again, so the kernel
//! may still move it (beside other work, say) until the next look. A rank
//! pinned by the user or a launcher stays where it is (see `cores.rs`), and
//! `P2PMP_SPREAD=0` turns spreading off.

use std::time::{Duration, Instant};

use super::cores;
use crate::world::World;

/// How often a waiting rank looks whether it runs on its home core: a look
/// is one `sched_getcpu`, a move two `sched_setaffinity` calls, and a rank
/// the kernel keeps moving away moves back at most this often.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// Whether and when this rank looks where it runs.
#[derive(Debug)]
pub(super) struct Spread {
    /// Spreading is on (`P2PMP_SPREAD=0`: off).
    on: bool,
    /// When the next look is due.
    next: Option<Instant>,
}

impl Spread {
    /// On unless `P2PMP_SPREAD` is `0`.
    pub(super) fn from_env() -> Self {
        let on = std::env::var("P2PMP_SPREAD").map_or(true, |v| v.trim() != "0");
        Spread { on, next: None }
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
    /// At a wait at `now` while this host's ranks outnumber its cores: moves
    /// this rank home if a look is due and finds it elsewhere.
    pub(super) fn keep_home(&mut self, now: Instant) {
        if !self.waits.spread.due(now) {
            return;
        }
        let Some(home) = self.net.place_here().and_then(|p| self.waits.mover.core_at(p)) else { return };
        if cores::current_core() != Some(home) && self.waits.mover.move_to(home) {
            self.waits.stats.moved_home += 1;
            self.net.say_core(Some(home));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_is_due_every_so_often_and_never_when_off() {
        let t0 = Instant::now();
        let mut s = Spread { on: true, next: None };
        assert!(s.due(t0), "the first wait looks");
        assert!(!s.due(t0 + LOOK_EVERY / 2));
        assert!(s.due(t0 + LOOK_EVERY));
        let mut off = Spread { on: false, next: None };
        assert!(!off.due(t0));
    }
}
