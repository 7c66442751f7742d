//! How a blocking call waits: poll, yield or sleep, decided at each wait from
//! what the rank sees of the machine right then.
//!
//! - **Poll** (busy, no system call on shared memory) while the answer is
//!   likely near and a core is free: for as long as waits on that peer have
//!   recently gone without progress (a budget per peer, at least twice a
//!   stretch that ended while polling, halved when polling did not pay), at
//!   most [`MAX_SPIN`]. Progress is bytes read, or bytes written after
//!   waiting for room: a long transfer polls as long as it keeps moving.
//! - **Yield** between checks (`sched_yield`) when this job's ranks on this
//!   host outnumber its cores: the rank that holds the answer needs the core.
//!   The ranks of this host are counted by their shared-memory sockets
//!   (`Transport::local_ranks`), not by a load average.
//! - **Sleep** in the kernel (a blocking `recv` on the one peer awaited, or
//!   `epoll` with shared-memory peers asked to ring the doorbell) when the wait
//!   is long, or soon when other work competes for the core: when the
//!   machine has more tasks ready to run than CPUs online (the scheduler's
//!   count, looked at every few milliseconds of waiting), or a spinning rank is
//!   preempted (a gap in its polling a good part of the scheduler's least
//!   slice, [`PREEMPTED_GAP`]), the rank polls only briefly for a while
//!   ([`CONTENDED_SPIN`] at most, for [`CONTENDED_MIN`], doubling up to
//!   [`CONTENDED_MAX`] while this comes again within that): long enough to
//!   catch the answer of a peer that is running, and a woken sleeper gets the
//!   core back sooner than a yielder or a preempted poller would. Shorter
//!   gaps are the machine's own housekeeping (kernel threads, interrupts),
//!   not competing work: on the 2-core test machine two
//!   ranks spinning side by side see about a hundred gaps of 40 us to 1 ms a
//!   second; beside a CPU hog on each core, over a hundred a second of 3 ms
//!   and more, half the time lost.
//!
//! `P2PMP_SPIN_US` / `P2PMP_YIELDS` (or [`crate::World::set_spin_policy`])
//! replace all this with a fixed policy.

use std::time::{Duration, Instant};

use p2pmp_core::mpi::Completion;

use crate::error::Result;
use crate::sock::Wait;
use crate::transport::{DIRECT_MAX, LazyNow};
use crate::world::World;

mod runnable;

use runnable::Runnable;

/// Cheap looks at the rings (a load each) between two full looks of a busy-poll.
const PEEKS: u32 = 32;
/// Yields between two full looks while no ring moves.
const YIELDS_PER_LOOK: u32 = 4;
/// Longest busy-poll of one wait.
const MAX_SPIN: Duration = Duration::from_micros(200);
/// Least poll budget a peer keeps (a wait always looks twice before sleeping).
const MIN_SPIN: Duration = Duration::from_micros(2);
/// Longest yielding of one wait before it sleeps.
const MAX_YIELD: Duration = Duration::from_millis(2);
/// A gap this long between two polls means the rank was preempted by
/// competing work (the kernel's least slice is 0.75 ms).
const PREEMPTED_GAP: Duration = Duration::from_micros(250);
/// How long a rank that saw other work take its core polls only briefly
/// ([`CONTENDED_SPIN`]) after a preemption seen alone: a short burst
/// of other work (a daemon's tick, a compiler starting) must not cost the
/// fast path for long.
const CONTENDED_MIN: Duration = Duration::from_millis(2);
/// At most this long, after preemptions seen one right after the other
/// (a CPU hog beside the rank).
const CONTENDED_MAX: Duration = Duration::from_millis(50);

/// Longest busy-poll of a wait while other work competes for the core: long
/// enough to catch an answer from a peer that is running (a round trip of
/// a few microseconds), short enough to give the core up soon when it is
/// not. Beside a CPU hog on each core, 2 x 200,000 ring, fixed policies:
/// 2 us of polling before sleeping took 3.1-4.9 s, 5-20 us 0.7-0.8 s (MPICH
/// 0.64-0.70); this default against the 2 us one before it, builds taken in
/// turns: 1.16-2.3 s (median 1.27) against 2.7-7.0 (3.6).
const CONTENDED_SPIN: Duration = Duration::from_micros(20);

/// A fixed wait policy: busy-polling, then rounds of yielding, then sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinPolicy {
    /// Busy-polling (non-blocking checks) before anything else.
    pub spin: Duration,
    /// Then this many rounds of yielding the CPU between checks.
    pub yields: u32,
}

impl SpinPolicy {
    /// The policy `P2PMP_SPIN_US` and `P2PMP_YIELDS` ask for, if either is set
    /// (the other then defaults to zero).
    pub fn from_env() -> Option<Self> {
        let spin = std::env::var("P2PMP_SPIN_US").ok().and_then(|v| v.trim().parse().ok());
        let yields = std::env::var("P2PMP_YIELDS").ok().and_then(|v| v.trim().parse().ok());
        if spin.is_none() && yields.is_none() {
            return None;
        }
        Some(SpinPolicy { spin: Duration::from_micros(spin.unwrap_or(0)), yields: yields.unwrap_or(0) })
    }
}

/// What this rank's waits came to so far (see [`crate::World::wait_stats`]):
/// counters for tuning the wait policy and the data path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Waits that were not over at once.
    pub waits: u64,
    /// Of them, those that ended while polling (busy or yielding).
    pub polled: u64,
    /// Rounds of yielding the CPU.
    pub yields: u64,
    /// Sleeps in the kernel (in `epoll`, or in `recv` on the one peer awaited).
    pub sleeps: u64,
    /// Times a gap in polling said the rank was preempted.
    pub preempted_gaps: u64,
    /// Times the machine had more tasks ready to run than CPUs online (at two
    /// looks in a row).
    pub crowded: u64,
    /// Doorbells this rank rang for its shared-memory peers.
    pub bells_rung: u64,
    /// Waits that found this job's ranks on this host outnumbering its cores.
    pub oversubscribed: u64,
    /// Connections to peers open now (TCP or shared memory, set up and not):
    /// one per peer in touch once both ranks of a pair that opened one at
    /// once have moved to the lower rank's.
    pub links_open: u64,
}

/// How one wait goes on: busy-poll for `spin`, then poll and yield (at most
/// `yields` rounds, until `spin + yield_for`), then sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    spin: Duration,
    yields: u32,
    yield_for: Duration,
}

impl Plan {
    const SLEEP: Plan = Plan { spin: Duration::ZERO, yields: 0, yield_for: Duration::ZERO };

    fn spin(d: Duration) -> Plan {
        Plan { spin: d, ..Plan::SLEEP }
    }

    fn polls(&self) -> bool {
        !self.spin.is_zero() || self.yields > 0
    }
}

/// What this rank learned about its waits.
#[derive(Debug)]
pub(crate) struct Waits {
    fixed: Option<SpinPolicy>,
    cores: u32,
    /// Poll budget per peer; the last entry is for waits on several peers.
    budget: Vec<Duration>,
    /// Until when other work is taken to compete for this rank's core.
    contended_until: Option<Instant>,
    /// How long the next preemption keeps this rank polling only briefly.
    penalty: Duration,
    /// The machine's runnable tasks, looked at now and then.
    runnable: Runnable,
    /// Whether they outnumbered the CPUs online at the last look.
    crowded: bool,
    pub(crate) stats: WaitStats,
}

impl Waits {
    pub(crate) fn new(size: u32) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        Waits {
            fixed: SpinPolicy::from_env(),
            cores,
            budget: vec![MAX_SPIN / 4; size as usize + 1],
            contended_until: None,
            penalty: CONTENDED_MIN,
            runnable: Runnable::open(),
            crowded: false,
            stats: WaitStats::default(),
        }
    }

    pub(crate) fn set_fixed(&mut self, p: SpinPolicy) {
        self.fixed = Some(p);
    }

    fn slot(&self, peer: Option<u32>) -> usize {
        peer.map_or(self.budget.len() - 1, |p| (p as usize).min(self.budget.len() - 1))
    }

    fn plan(&self, now: Instant, peer: Option<u32>, local_ranks: u32) -> Plan {
        if let Some(f) = self.fixed {
            return Plan { spin: f.spin, yields: f.yields, yield_for: Duration::MAX };
        }
        if local_ranks > self.cores {
            return Plan { spin: Duration::ZERO, yields: u32::MAX, yield_for: MAX_YIELD };
        }
        let budget = self.budget[self.slot(peer)];
        if self.contended_until.is_some_and(|t| now < t) {
            return Plan::spin(budget.min(CONTENDED_SPIN));
        }
        Plan::spin(budget)
    }

    /// A wait on `peer` took `waited` in all: a short one says polling
    /// longer would have paid (the budget grows to twice it), a long one that
    /// it did not (the budget halves).
    fn learn(&mut self, peer: Option<u32>, waited: Duration) {
        let i = self.slot(peer);
        let b = &mut self.budget[i];
        *b = if waited <= MAX_SPIN { (*b).max(waited * 2) } else { *b / 2 }.clamp(MIN_SPIN, MAX_SPIN);
    }

    /// Looks at the machine's runnable tasks if due: more than CPUs at two
    /// looks in a row (a task that stays ready, not a kernel thread's blip)
    /// means other work competes for the cores, as a preemption does.
    fn look_at_runnable(&mut self, now: Instant) {
        let Some(n) = self.runnable.sample(now) else { return };
        let crowded = self.runnable.crowded(n);
        let before = std::mem::replace(&mut self.crowded, crowded);
        if crowded && before {
            self.stats.crowded += 1;
            self.contended(now);
        }
    }

    /// Other work took this rank's core (seen at `now`): poll only briefly for a while.
    /// A preemption within [`CONTENDED_MAX`] of the last window's end
    /// doubles the penalty; one on its own sets it back to the least.
    fn contended(&mut self, now: Instant) {
        let again = self.contended_until.is_some_and(|t| now < t + CONTENDED_MAX);
        self.penalty = if again { (self.penalty * 2).min(CONTENDED_MAX) } else { CONTENDED_MIN };
        self.contended_until = Some(now + self.penalty);
    }
}

impl World {
    /// Drains the engine into the sockets and its completions into `done`.
    pub(crate) fn after_call(&mut self) -> Result<()> {
        self.after_call_at(LazyNow::UNREAD)
    }

    /// [`World::after_call`] at `now` (a call that just read the clock; the
    /// clock is read only if needed otherwise).
    pub(crate) fn after_call_at(&mut self, now: impl Into<LazyNow>) -> Result<()> {
        self.net.pump(&mut self.engine, now)?;
        while let Some(c) = self.engine.poll_completion() {
            match c {
                Completion::CancelAnswer { req, cancelled } => {
                    if let Some(a) = self.cancels.get_mut(&req) {
                        *a = Some(cancelled);
                    }
                }
                c if self.forgotten.remove(&c.req()) => {}
                c => {
                    self.done.insert(c.req(), c);
                }
            }
        }
        Ok(())
    }

    /// One round: wait up to `timeout` for sockets, fire timers, reconnect, drain.
    pub(crate) fn progress_once(&mut self, timeout: Option<Duration>) -> Result<bool> {
        self.progress_once_at(timeout, Instant::now())
    }

    /// [`World::progress_once`] called at `now` (the clock is read once per
    /// round: on a virtual machine a read costs as much as the rest of a look).
    fn progress_once_at(&mut self, timeout: Option<Duration>, now: Instant) -> Result<bool> {
        let got = self.net.poll_io(&mut self.engine, timeout, now)?;
        let now = if timeout == Some(Duration::ZERO) { now } else { Instant::now() };
        self.after_io(now)?;
        Ok(got)
    }

    /// After input: fires due timers, reconnects, drains the engine.
    fn after_io(&mut self, now: Instant) -> Result<()> {
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        self.net.retry_due(&mut self.engine, now)?;
        self.after_call_at(now)
    }

    /// One round reading only rank `from`'s connection (see
    /// `Transport::read_direct`); `None` when that cannot be done now.
    fn progress_direct(&mut self, from: u32, wait: Wait, now: Instant) -> Result<Option<bool>> {
        let got = self.net.read_direct(&mut self.engine, from, wait, now)?;
        if got.is_some() {
            let now = if wait == Wait::Block { Instant::now() } else { now };
            self.after_io(now)?;
        }
        Ok(got)
    }

    /// One look without waiting: at `from`'s connection if known, else at all.
    fn look(&mut self, from: Option<u32>, now: Instant) -> Result<bool> {
        if let Some(f) = from {
            if let Some(got) = self.progress_direct(f, Wait::No, now)? {
                return Ok(got);
            }
        }
        self.progress_once_at(Some(Duration::ZERO), now)
    }

    /// Makes progress until `done(self)`, polling, yielding and sleeping as
    /// the module docs say. `from`: the one rank whose bytes can finish the
    /// wait, if known; its connection is then read directly.
    ///
    /// The poll budget is for the time without progress: bytes read, or
    /// bytes written after waiting for room. A long wait that keeps moving
    /// (a large message, a window of sends) goes on polling, and each stretch
    /// without progress teaches the budget as a whole short wait would.
    pub(crate) fn progress_until(&mut self, from: Option<u32>, mut done: impl FnMut(&World) -> bool) -> Result<()> {
        if done(self) {
            return Ok(());
        }
        self.waits.stats.waits += 1;
        // The last progress, and the count of bytes written then.
        let (mut idle_from, mut written) = (Instant::now(), self.net.written());
        // Each round starts by the clock read last (the first, and after a sleep).
        let mut start = idle_from;
        loop {
            // Reading one peer's connection alone is right only while nothing
            // else is under way: a rendezvous with another peer needs its
            // clear-to-send or data seen (else that peer, perhaps waiting on us,
            // stalls until a read times out).
            let from = from.filter(|&f| !self.engine.rendezvous_with_others(f));
            let local = self.net.local_ranks(start);
            if local > self.waits.cores {
                self.waits.stats.oversubscribed += 1;
            }
            self.waits.look_at_runnable(start);
            let plan = self.waits.plan(start, from, local);
            let (mut last, mut rounds, mut fresh) = (start, 0u32, false);
            // Only a wait that polls by its own budget learns from how it went.
            let contended = self.waits.contended_until.is_some_and(|t| start < t);
            let spinning = plan.yields == 0 && plan.polls() && self.waits.fixed.is_none() && !contended;
            // The first look goes by the clock read at the start.
            let (mut now, mut stale) = (start, false);
            let won = plan.polls()
                && loop {
                    let got = self.look(from, now)?;
                    if done(self) {
                        last = now;
                        break true;
                    }
                    if got || self.net.written() != written {
                        self.progressed(spinning, from, now, &mut idle_from, &mut written);
                        // Handling input, or copying output into a ring or
                        // socket, takes time of its own: no gap to judge.
                        fresh = true;
                        (now, stale) = (Instant::now(), false);
                        continue;
                    }
                    let gap = now.duration_since(last);
                    last = now;
                    let judged = !std::mem::take(&mut fresh);
                    if spinning && judged && gap > PREEMPTED_GAP {
                        // Something else ran on this core meanwhile.
                        self.waits.stats.preempted_gaps += 1;
                        self.waits.contended(now);
                        break false;
                    }
                    let idle = now.duration_since(idle_from);
                    if idle < plan.spin {
                        // Until a ring moves, look at the rings alone (a load
                        // each), a while between full looks and clock reads.
                        let mut moved = false;
                        for _ in 0..PEEKS {
                            if self.net.peek(from) {
                                moved = true;
                                break;
                            }
                            std::hint::spin_loop();
                        }
                        // Bytes came: look at once, by the clock read last (a
                        // microsecond old): the read would delay every
                        // message. Once in a row at most, so time moves on.
                        if moved && !std::mem::replace(&mut stale, true) {
                            continue;
                        }
                    } else if rounds < plan.yields && idle < plan.spin.saturating_add(plan.yield_for) {
                        // Yield until a ring moves, a few times between full
                        // looks (which also see sockets, timers and room).
                        for _ in 0..YIELDS_PER_LOOK {
                            rounds += 1;
                            self.waits.stats.yields += 1;
                            std::thread::yield_now();
                            if rounds >= plan.yields || self.net.peek(from) {
                                break;
                            }
                        }
                    } else {
                        break false;
                    }
                    (now, stale) = (Instant::now(), false);
                };
            if won {
                self.waits.stats.polled += 1;
                if spinning {
                    self.waits.learn(from, last.duration_since(idle_from));
                }
                return Ok(());
            }
            let got = self.sleep_once(from)?;
            start = Instant::now();
            if done(self) {
                if spinning {
                    self.waits.learn(from, start.saturating_duration_since(idle_from));
                }
                return Ok(());
            }
            if got || self.net.written() != written {
                self.progressed(spinning, from, start, &mut idle_from, &mut written);
            }
        }
    }

    /// The wait on `from` made progress at `now` after being idle since
    /// `idle_from`: a polling wait learns from that stretch (see
    /// [`Waits::learn`]), and the next stretch starts.
    fn progressed(
        &mut self,
        spinning: bool,
        from: Option<u32>,
        now: Instant,
        idle_from: &mut Instant,
        written: &mut u64,
    ) {
        if spinning {
            self.waits.learn(from, now.saturating_duration_since(*idle_from));
        }
        *idle_from = now;
        *written = self.net.written();
    }

    /// Sleeps in the kernel until a socket event, a doorbell or the next
    /// deadline, then handles what happened. With `from` known over TCP, no
    /// deadline within [`DIRECT_MAX`] and nothing left to write, it sleeps in
    /// `recv` on that rank's socket (one system call) rather than in `epoll`.
    /// Whether anything came (bytes, or events of the poll loop).
    fn sleep_once(&mut self, from: Option<u32>) -> Result<bool> {
        let now = Instant::now();
        let deadline = [self.engine.poll_timeout(), self.net.next_retry(&self.engine)].into_iter().flatten().min();
        if let Some(f) = from.filter(|_| deadline.is_none_or(|d| d >= now + DIRECT_MAX)) {
            if let Some(got) = self.progress_direct(f, Wait::Block, now)? {
                self.waits.stats.sleeps += 1;
                return Ok(got);
            }
        }
        let timeout = deadline.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
        let timeout = timeout.min(Duration::from_secs(1));
        if self.net.before_sleep() {
            self.waits.stats.sleeps += 1;
            let r = self.progress_once(Some(timeout));
            self.net.after_sleep();
            r
        } else {
            self.progress_once(Some(Duration::ZERO))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(cores: u32) -> Waits {
        Waits {
            fixed: None,
            cores,
            budget: vec![MAX_SPIN / 4; 5],
            contended_until: None,
            penalty: CONTENDED_MIN,
            runnable: Runnable::open(),
            crowded: false,
            stats: WaitStats::default(),
        }
    }

    #[test]
    fn ranks_outnumbering_cores_yield_and_others_poll() {
        let now = Instant::now();
        let w = waits(2);
        assert_eq!(w.plan(now, Some(1), 2), Plan::spin(MAX_SPIN / 4));
        let p = w.plan(now, Some(1), 3);
        assert!(p.spin.is_zero() && p.yields > 0, "{p:?}");
    }

    #[test]
    fn the_poll_budget_follows_each_peers_waits() {
        let now = Instant::now();
        let mut w = waits(2);
        w.learn(Some(1), Duration::from_micros(80));
        assert_eq!(w.plan(now, Some(1), 2), Plan::spin(Duration::from_micros(160)), "twice a short wait");
        assert_eq!(w.plan(now, Some(2), 2), Plan::spin(MAX_SPIN / 4), "another peer keeps its own");
        for _ in 0..10 {
            w.learn(Some(2), Duration::from_millis(5));
        }
        assert_eq!(w.plan(now, Some(2), 2), Plan::spin(MIN_SPIN), "long waits: polling does not pay");
        w.learn(Some(2), Duration::from_micros(3));
        assert_eq!(w.plan(now, Some(2), 2), Plan::spin(Duration::from_micros(6)), "a short one brings it back");
        w.learn(Some(1), MAX_SPIN);
        assert_eq!(w.plan(now, Some(1), 2), Plan::spin(MAX_SPIN), "capped");
        w.learn(None, Duration::from_secs(1));
        assert_eq!(w.plan(now, None, 2), Plan::spin(MAX_SPIN / 8), "waits on several peers learn apart");
    }

    #[test]
    fn a_preempted_rank_polls_only_briefly_for_a_while() {
        let now = Instant::now();
        let mut w = waits(2);
        w.contended(now);
        assert_eq!(w.plan(now + CONTENDED_MIN / 2, Some(1), 2), Plan::spin(CONTENDED_SPIN), "briefly");
        for _ in 0..10 {
            w.learn(Some(2), Duration::from_millis(5));
        }
        assert_eq!(w.plan(now, Some(2), 2), Plan::spin(MIN_SPIN), "a peer whose answers take long: less");
        assert_eq!(w.plan(now + CONTENDED_MIN, Some(1), 2), Plan::spin(MAX_SPIN / 4), "a lone one: over soon");
        // Preempted again right after each window: brief polls for longer and longer.
        let mut t = now + CONTENDED_MIN;
        for want in [4, 8, 16, 32, 50, 50] {
            w.contended(t);
            let d = Duration::from_millis(want);
            assert_eq!(w.plan(t + d - Duration::from_micros(1), Some(1), 2), Plan::spin(CONTENDED_SPIN), "{want} ms");
            assert_eq!(w.plan(t + d, Some(1), 2), Plan::spin(MAX_SPIN / 4));
            t += d;
        }
        // Long after, a lone one is brief again.
        w.contended(t + Duration::from_secs(1));
        assert_eq!(w.plan(t + Duration::from_secs(1) + CONTENDED_MIN, Some(1), 2), Plan::spin(MAX_SPIN / 4));
    }

    #[test]
    fn a_fixed_policy_overrides_everything() {
        let now = Instant::now();
        let mut w = waits(2);
        w.set_fixed(SpinPolicy { spin: Duration::ZERO, yields: 0 });
        assert!(!w.plan(now, Some(1), 8).polls(), "sleep at once");
        w.set_fixed(SpinPolicy { spin: Duration::from_micros(5), yields: 3 });
        let p = w.plan(now, Some(1), 1);
        assert_eq!((p.spin, p.yields), (Duration::from_micros(5), 3));
    }
}
