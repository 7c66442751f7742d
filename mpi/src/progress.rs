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
//!   (`Transport::local_ranks`), not by a load average. Such ranks also
//!   spread over the cores evenly while no other work is seen, each moving
//!   to the core of its place among them (see `progress/spread.rs`). A wait
//!   on a shared-memory peer that may need this rank's core yields too: once
//!   after waking that peer (the kernel often queues a task woken on the
//!   waker's core, even with another core idle), and until the wait sleeps
//!   while the peer says it runs on this core (each rank says so in its
//!   rings as it waits, and says none as it sleeps). Of two ranks found on
//!   one core, the higher moves itself to another core (at most every
//!   [`STEP_OFF_EVERY`], and only if it may run on every core: see
//!   `progress/cores.rs`).
//! - **Sleep** in the kernel (a blocking `recv` on the one peer awaited, or
//!   `epoll` with shared-memory peers asked to ring the doorbell) when the wait
//!   is long: past the poll budget. While other work competes for the cores,
//!   a wait on a peer over a ring polls by a budget of its own instead, which
//!   grows up to [`CONTENDED_SPIN`] (milliseconds: a peer that lost its core
//!   to the other work gets it back within a few of the scheduler's slices,
//!   and an answer polled for is caught as it comes, where a sleeper is woken
//!   behind the other work) and halves when the answer came once this rank
//!   was off its core (see `Waits::learn_contended`); a wait on a socket or
//!   on several peers polls [`CONTENDED_SOCKET_SPIN`] at most, then sleeps. Other
//!   work is seen when the machine has more tasks ready to run than CPUs
//!   online (the scheduler's count, looked at every few milliseconds of
//!   waiting), or when a polling rank is preempted (a gap in its polling a
//!   good part of the scheduler's least slice, [`PREEMPTED_GAP`]): that wait
//!   goes on as a contended one, and so do the waits of the next
//!   [`CONTENDED_MIN`], doubling up to [`CONTENDED_MAX`] while this comes
//!   again within that. Shorter gaps are
//!   the machine's own housekeeping (kernel threads, interrupts), not
//!   competing work: on the 2-core test machine two ranks spinning side by
//!   side see about a hundred gaps of 40 us to 1 ms a second; beside a CPU
//!   hog on each core, over a hundred a second of 3 ms and more, half the
//!   time lost.
//!
//! `P2PMP_SPIN_US` / `P2PMP_YIELDS` (or [`crate::World::set_spin_policy`])
//! replace all this with a fixed policy.

use std::time::{Duration, Instant};

use p2pmp_core::mpi::Completion;

use crate::error::Result;
use crate::sock::Wait;
use crate::transport::{DIRECT_MAX, LazyNow, NeedsCore};
use crate::world::World;

mod cores;
mod runnable;
mod spread;

pub(crate) use cores::usable as usable_cores;

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
/// How long a rank that saw other work take its core waits as contended
/// waits do ([`CONTENDED_SPIN`]) after a preemption seen alone: a short
/// burst of other work (a daemon's tick, a compiler starting) should not
/// make the long waits after it poll for long.
const CONTENDED_MIN: Duration = Duration::from_millis(2);
/// At most this long, after preemptions seen one right after the other
/// (a CPU hog beside the rank).
const CONTENDED_MAX: Duration = Duration::from_millis(50);

/// Longest busy-poll of a wait on a ring while other work competes for the
/// cores (its budget starts at [`CONTENDED_START`]): longer than the scheduler takes
/// to give a peer that lost its core to the other work its turn again (a few
/// of its slices), so that the answer is caught as it comes; a wait that
/// sleeps instead is woken behind the other work, and the two ranks then take
/// turns at being late. Beside a CPU hog on each core, 2 ranks, fixed
/// policies, 4 runs each (8 B ping-pong of 20,000; ring 2 x 2,000): polling
/// 200 us before sleeping gave 0.8-52.7 us and 0.005-0.35 s, 5 ms 1.2-63.6
/// us, 10 ms 1.2-2.5 us and 0.006-0.015 s, 30 ms 1.2-4.3 us and 0.002-0.009
/// s, 100 ms 1.1-4.5 us; 20 us and a sleep at once after a preemption (the
/// policy before) 1.5-24.3 us and 0.0015-0.06 s; MPICH, which never sleeps,
/// 1.5 us.
const CONTENDED_SPIN: Duration = Duration::from_millis(20);
/// Busy-poll of a wait on a socket while other work competes for the cores,
/// at most (the peer's budget if less): long enough to catch the answer of
/// a peer that is running; past it the rank sleeps in `recv`, and the kernel
/// wakes it with the packet. Polling a socket longer costs a system call a
/// look, and the CPU it takes may be the one the awaited rank needs (ranks of
/// other network namespaces of one machine, as in the tests): the two-host
/// tests took 300-370 s with the rings' long polls on sockets too, 160 s
/// without.
const CONTENDED_SOCKET_SPIN: Duration = Duration::from_micros(20);
/// Where the budget of waits on a ring beside other work starts. Below a
/// preemption gap: a wait that saw one sleeps at once, until waits that
/// caught their answers by polling raised the budget. Beside two CPU hogs,
/// 10 runs each of an 8 B ping-pong, starting at 1 ms gave 4 runs over 10
/// us (up to 144), starting here 2 (up to 78).
const CONTENDED_START: Duration = MAX_SPIN;
const _: () = assert!(CONTENDED_SPIN.as_nanos() > 10 * MAX_SPIN.as_nanos());
/// A polling wait looks whether the rank awaited may need this rank's core
/// once it has gone this long without progress: a rank that runs answers a
/// small message within a microsecond here, and a look at every wait made
/// an 8 B ping-pong about 2% slower in a first measurement.
const SHARED_CORE_LOOK: Duration = Duration::from_micros(2);
/// A rank moves off a core it shares with the peer it awaits at most this
/// often: where every core is busy, moving does not help, and the scheduler
/// may put it back.
const STEP_OFF_EVERY: Duration = Duration::from_millis(2);
/// An answer that comes this soon after a sleep began was let run by it.
const FREED_CORE: Duration = Duration::from_micros(100);

/// The budget a wait polls by, which learns from how it went: the peer's
/// own, the one for waits on a ring beside other work, or none (a fixed
/// policy, yielding to this job's other ranks, or a contended wait on a
/// socket or on several peers, which polls briefly and sleeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Learns {
    Budget,
    Contended,
    Nothing,
}

/// What a wait does for a rank awaited that may need this rank's core (see
/// [`Waits::give_core`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveCore {
    Not,
    YieldOnce,
    /// Yield until the wait sleeps, moving off the core first if `step_off`.
    Yield {
        step_off: bool,
    },
}

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
    /// Times a wait gave its core to the rank it awaited, which may have
    /// needed it: woken by this rank and not heard from since (one yield),
    /// or last seen on this core (yielding until the wait sleeps).
    pub shared_core: u64,
    /// Times this rank moved to another core because the rank it awaited
    /// was last seen on this rank's.
    pub stepped_off: u64,
    /// Times this rank moved to its home core while this host's ranks of
    /// the job outnumbered its cores (see `progress/spread.rs`).
    pub moved_home: u64,
    /// 1 once this rank stopped spreading over the cores because other work
    /// ran on the machine.
    pub spread_stopped: u64,
    /// The cores this rank spread over, as of its last look home (kept once
    /// it stopped); 0 if it never looked: the ranks fit the cores, it may
    /// not move, spreading is off, or the job is too large for a place
    /// among this host's ranks.
    pub spread_cores: u64,
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
    /// Yield between looks for a while, then sleep.
    const YIELD: Plan = Plan { spin: Duration::ZERO, yields: u32::MAX, yield_for: MAX_YIELD };

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
    /// The same for waits on a ring while other work competes for the cores
    /// (see [`Waits::learn_contended`]; the last entry is unused: a wait on
    /// several peers polls as one on a socket does).
    contended_budget: Vec<Duration>,
    /// Until when other work is taken to compete for this rank's core.
    contended_until: Option<Instant>,
    /// How long the next preemption keeps this rank's waits contended.
    penalty: Duration,
    /// The machine's runnable tasks, looked at now and then.
    runnable: Runnable,
    /// Whether they outnumbered the CPUs online at the last look.
    crowded: bool,
    /// When this rank last moved off a core it shared with a peer.
    stepped_off_at: Option<Instant>,
    /// Moves this rank off a core, or home.
    mover: cores::Mover,
    /// Whether and when this rank looks whether it runs on its home core.
    spread: spread::Spread,
    pub(crate) stats: WaitStats,
}

impl Waits {
    pub(crate) fn new(size: u32) -> Self {
        let cores = usable_cores();
        let mover = cores::Mover::new();
        Waits {
            fixed: SpinPolicy::from_env(),
            cores,
            budget: vec![MAX_SPIN / 4; size as usize + 1],
            contended_budget: vec![CONTENDED_START; size as usize + 1],
            contended_until: None,
            penalty: CONTENDED_MIN,
            runnable: Runnable::open(),
            crowded: false,
            stepped_off_at: None,
            spread: spread::Spread::from_env(mover.may_move()),
            mover,
            stats: WaitStats::default(),
        }
    }

    pub(crate) fn set_fixed(&mut self, p: SpinPolicy) {
        self.fixed = Some(p);
    }

    fn slot(&self, peer: Option<u32>) -> usize {
        peer.map_or(self.budget.len() - 1, |p| (p as usize).min(self.budget.len() - 1))
    }

    /// How a wait on `peer` (through a shared-memory ring: `ring`) goes.
    fn plan(&self, now: Instant, peer: Option<u32>, local_ranks: u32, ring: bool) -> Plan {
        if let Some(f) = self.fixed {
            return Plan { spin: f.spin, yields: f.yields, yield_for: Duration::MAX };
        }
        if local_ranks > self.cores {
            return Plan::YIELD;
        }
        let budget = self.budget[self.slot(peer)];
        match self.contended_at(now) {
            true if ring => Plan::spin(self.contended_budget[self.slot(peer)]),
            true => Plan::spin(budget.min(CONTENDED_SOCKET_SPIN)),
            false => Plan::spin(budget),
        }
    }

    /// A wait on `peer` took `waited` in all: a short one says polling
    /// longer would have paid (the budget grows to twice it), a long one that
    /// it did not (the budget halves).
    fn learn(&mut self, peer: Option<u32>, waited: Duration) {
        let i = self.slot(peer);
        let b = &mut self.budget[i];
        *b = if waited <= MAX_SPIN { (*b).max(waited * 2) } else { *b / 2 }.clamp(MIN_SPIN, MAX_SPIN);
    }

    /// A stretch of `waited` of a wait on `peer` (`freed`: see
    /// [`Waits::learn_contended`]) teaches the budget the wait polled by.
    fn learn_as(&mut self, learns: Learns, peer: Option<u32>, waited: Duration, freed: bool) {
        match learns {
            Learns::Budget => self.learn(peer, waited),
            Learns::Contended => self.learn_contended(peer, waited, freed),
            Learns::Nothing => {}
        }
    }

    /// A wait on `peer` while other work competes for the cores ended after
    /// `waited`. An answer that came while polling on undisturbed, or long
    /// into a sleep, came from a peer that ran on a core of its own: polling
    /// that long would have caught it (the budget grows to twice the wait, up
    /// to [`CONTENDED_SPIN`]). One that came while this rank was off its core
    /// (`freed`: preempted while polling, or right after a sleep began, see
    /// [`FREED_CORE`]) may have come because it was: the peer awaited needed
    /// that core (a rank of this job in another network namespace of this
    /// machine, or on the same CPU), and polling only kept it waiting (the
    /// budget halves). So does a wait longer than any budget: the peer was
    /// busy, not off its core.
    fn learn_contended(&mut self, peer: Option<u32>, waited: Duration, freed: bool) {
        let i = self.slot(peer);
        let b = &mut self.contended_budget[i];
        let paid = !freed && waited <= CONTENDED_SPIN;
        *b = if paid { (*b).max(waited * 2) } else { *b / 2 }.clamp(MIN_SPIN, CONTENDED_SPIN);
    }

    /// Looks at the machine's runnable tasks if due: more than CPUs at two
    /// looks in a row (a task that stays ready, not a kernel thread's blip)
    /// means other work competes for the cores, as a preemption does.
    /// The count, if one was taken.
    fn look_at_runnable(&mut self, now: Instant) -> Option<u32> {
        let n = self.runnable.sample(now)?;
        let crowded = self.runnable.crowded(n);
        let before = std::mem::replace(&mut self.crowded, crowded);
        if crowded && before {
            self.stats.crowded += 1;
            self.contended(now);
        }
        Some(n)
    }

    /// What a wait does at `now` about the rank it awaits, which may need
    /// this rank's core (`needs`; `higher`: this rank is the higher of the
    /// two): yield once to a rank it woke, which then runs its course if the
    /// kernel queued it here; yield until the wait sleeps to one that said it
    /// runs on this core, and move off the core if this rank is the higher
    /// (so that the two do not trade cores) and has not moved lately.
    fn give_core(&mut self, needs: NeedsCore, higher: bool, now: Instant) -> GiveCore {
        match needs {
            NeedsCore::No => GiveCore::Not,
            NeedsCore::Woken => GiveCore::YieldOnce,
            NeedsCore::SameCore => GiveCore::Yield { step_off: higher && self.may_step_off(now) },
        }
    }

    /// Whether this rank may move off its core at `now` (see
    /// [`STEP_OFF_EVERY`]); if so, it is taken to have moved.
    fn may_step_off(&mut self, now: Instant) -> bool {
        if self.stepped_off_at.is_some_and(|t| now < t + STEP_OFF_EVERY) {
            return false;
        }
        self.stepped_off_at = Some(now);
        true
    }

    /// Whether waits at `now` are contended: other work was seen taking
    /// this rank's core within the last penalty (see [`Waits::contended`]).
    fn contended_at(&self, now: Instant) -> bool {
        self.contended_until.is_some_and(|t| now < t)
    }

    /// Other work took this rank's core (seen at `now`): waits are contended
    /// for a while (see [`Waits::plan`]).
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
    pub(crate) fn progress_until(&mut self, from: Option<u32>, done: impl FnMut(&World) -> bool) -> Result<()> {
        self.progress_until_since(from, None, done)
    }

    /// [`World::progress_until`] for a wait that began at `began`, if known:
    /// a clock read just before, and the count of bytes written then (then
    /// the wait reads no clock to start, and what was written since counts as
    /// progress, not as time idle).
    pub(crate) fn progress_until_since(
        &mut self,
        from: Option<u32>,
        began: Option<(Instant, u64)>,
        mut done: impl FnMut(&World) -> bool,
    ) -> Result<()> {
        if done(self) {
            return Ok(());
        }
        self.waits.stats.waits += 1;
        // The last progress, and the count of bytes written then.
        let (mut idle_from, mut written) = began.unwrap_or_else(|| (Instant::now(), self.net.written()));
        // Each round starts by the clock read last (the first, and after a sleep).
        let mut start = idle_from;
        loop {
            // Reading one peer's connection alone is right only while nothing
            // else is under way: a rendezvous with another peer needs its
            // clear-to-send or data seen (else that peer, perhaps waiting on us,
            // stalls until a read times out).
            let from = from.filter(|&f| !self.engine.rendezvous_with_others(f));
            let local = self.net.local_ranks(start);
            let runnable = self.waits.look_at_runnable(start);
            if local > self.waits.cores {
                self.waits.stats.oversubscribed += 1;
                self.keep_home(start, local, runnable);
            }
            let ring = from.is_some_and(|f| self.net.is_ring(f));
            let mut plan = self.waits.plan(start, from, local, ring);
            let (mut last, mut rounds, mut fresh) = (start, 0u32, false);
            // Whether this stretch of polling lost the core (see Waits::learn_contended).
            let mut preempted = false;
            // Only a wait that polls by a budget learns from how it went.
            let contended = self.waits.contended_at(start);
            let mut learns = match plan.yields == 0 && plan.polls() && self.waits.fixed.is_none() {
                false => Learns::Nothing,
                true if contended && ring => Learns::Contended,
                true if contended => Learns::Nothing,
                true => Learns::Budget,
            };
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
                        self.progressed(learns, preempted, from, now, &mut idle_from, &mut written);
                        preempted = false;
                        // Handling input, or copying output into a ring or
                        // socket, takes time of its own: no gap to judge.
                        fresh = true;
                        (now, stale) = (Instant::now(), false);
                        continue;
                    }
                    let gap = now.duration_since(last);
                    last = now;
                    let judged = !std::mem::take(&mut fresh);
                    if learns != Learns::Nothing && judged && gap > PREEMPTED_GAP {
                        // Something else ran on this core meanwhile: poll on
                        // as a wait beside other work does (on a socket,
                        // sleep: the kernel wakes the rank with the packet).
                        self.waits.stats.preempted_gaps += 1;
                        // Once a wait: later gaps of the same stretch are
                        // the same other work, not more of it.
                        if !preempted {
                            self.waits.contended(now);
                        }
                        if !ring {
                            break false;
                        }
                        plan = self.waits.plan(now, from, local, ring);
                        (learns, preempted) = (Learns::Contended, true);
                    }
                    let idle = now.duration_since(idle_from);
                    let may_share = ring || from.is_none();
                    if may_share && !plan.spin.is_zero() && idle >= SHARED_CORE_LOOK && self.waits.fixed.is_none() {
                        // Yielding or moving takes time of its own: no gap to judge.
                        fresh = self.give_core_if_awaited_needs_it(from, now, &mut plan, &mut learns);
                    }
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
                self.waits.learn_as(learns, from, last.duration_since(idle_from), preempted);
                return Ok(());
            }
            let sleeps = self.waits.stats.sleeps;
            let got = self.sleep_once(from)?;
            start = Instant::now();
            // The sleep (if bytes already there did not spare it) began at
            // the last clock read, as old as one round.
            let slept = self.waits.stats.sleeps != sleeps;
            let freed = preempted || (slept && start.saturating_duration_since(now) < FREED_CORE);
            if done(self) {
                self.waits.learn_as(learns, from, start.saturating_duration_since(idle_from), freed);
                return Ok(());
            }
            if got || self.net.written() != written {
                self.progressed(learns, freed, from, start, &mut idle_from, &mut written);
            }
        }
    }

    /// Gives the core to the rank awaited (`from`, else any shared-memory
    /// peer) if it may need it (see `Transport::shares_core` and
    /// [`Waits::give_core`]): whether this rank yielded or moved (or is to
    /// yield from now on).
    ///
    /// On the 2-core test machine the kernel queues a task woken through a
    /// doorbell on the waker's core, even with the other core idle. The waker
    /// then polled for the answer, the woken rank waited until that poll gave
    /// up and slept, and the two ranks took turns at it: after both paused
    /// 30 ms, the next 1,000 round trips of an 8 B ping-pong took over 3 ms
    /// in 9, 11 and 12 runs of three sets of 20 (up to 35 ms, against 0.5-1
    /// ms). Once a rank sees its peer on its own core and yields, the two run
    /// by turns on that core, a round trip taking 3.7 us against 0.5, until
    /// the kernel moves one of them (7-35 ms): hence the move.
    #[cold]
    #[inline(never)]
    fn give_core_if_awaited_needs_it(
        &mut self,
        from: Option<u32>,
        now: Instant,
        plan: &mut Plan,
        learns: &mut Learns,
    ) -> bool {
        let Some(core) = cores::current_core() else { return false };
        let needs = self.net.shares_core(from, core);
        let higher = from.is_some_and(|f| f < self.rank());
        match self.waits.give_core(needs, higher, now) {
            GiveCore::Not => return false,
            GiveCore::YieldOnce => {
                self.waits.stats.yields += 1;
                std::thread::yield_now();
            }
            GiveCore::Yield { step_off } => {
                (*plan, *learns) = (Plan::YIELD, Learns::Nothing);
                let moved = step_off.then(|| self.waits.mover.step_off(core)).flatten();
                if moved.is_some() {
                    self.waits.stats.stepped_off += 1;
                    self.net.say_core(moved);
                }
            }
        }
        self.waits.stats.shared_core += 1;
        true
    }

    /// The wait on `from` made progress at `now` after being idle since
    /// `idle_from` (`freed`: see [`Waits::learn_contended`]): a polling wait
    /// learns from that stretch (see [`Waits::learn_as`]), and the next
    /// stretch starts.
    fn progressed(
        &mut self,
        learns: Learns,
        freed: bool,
        from: Option<u32>,
        now: Instant,
        idle_from: &mut Instant,
        written: &mut u64,
    ) {
        self.waits.learn_as(learns, from, now.saturating_duration_since(*idle_from), freed);
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

    /// A world of 4 ranks' waits on `cores` cores, whatever the environment's
    /// fixed policy.
    fn waits(cores: u32) -> Waits {
        Waits { fixed: None, cores, ..Waits::new(4) }
    }

    #[test]
    fn a_peer_that_needs_the_core_gets_it_and_the_higher_rank_moves_now_and_then() {
        let now = Instant::now();
        let mut w = waits(2);
        assert_eq!(w.give_core(NeedsCore::No, true, now), GiveCore::Not);
        assert_eq!(w.give_core(NeedsCore::Woken, true, now), GiveCore::YieldOnce, "woken: once");
        let lower = w.give_core(NeedsCore::SameCore, false, now);
        assert_eq!(lower, GiveCore::Yield { step_off: false }, "the lower rank stays");
        let higher = w.give_core(NeedsCore::SameCore, true, now);
        assert_eq!(higher, GiveCore::Yield { step_off: true }, "the higher moves");
        let soon = w.give_core(NeedsCore::SameCore, true, now + STEP_OFF_EVERY / 2);
        assert_eq!(soon, GiveCore::Yield { step_off: false }, "not again so soon");
        let later = w.give_core(NeedsCore::SameCore, true, now + STEP_OFF_EVERY);
        assert_eq!(later, GiveCore::Yield { step_off: true });
    }

    #[test]
    fn ranks_outnumbering_cores_yield_and_others_poll() {
        let now = Instant::now();
        let w = waits(2);
        assert_eq!(w.plan(now, Some(1), 2, true), Plan::spin(MAX_SPIN / 4));
        let p = w.plan(now, Some(1), 3, true);
        assert!(p.spin.is_zero() && p.yields > 0, "{p:?}");
    }

    #[test]
    fn the_poll_budget_follows_each_peers_waits() {
        let now = Instant::now();
        let mut w = waits(2);
        w.learn(Some(1), Duration::from_micros(80));
        assert_eq!(w.plan(now, Some(1), 2, true), Plan::spin(Duration::from_micros(160)), "twice a short wait");
        assert_eq!(w.plan(now, Some(2), 2, true), Plan::spin(MAX_SPIN / 4), "another peer keeps its own");
        for _ in 0..10 {
            w.learn(Some(2), Duration::from_millis(5));
        }
        assert_eq!(w.plan(now, Some(2), 2, true), Plan::spin(MIN_SPIN), "long waits: polling does not pay");
        w.learn(Some(2), Duration::from_micros(3));
        assert_eq!(w.plan(now, Some(2), 2, true), Plan::spin(Duration::from_micros(6)), "a short one brings it back");
        w.learn(Some(1), MAX_SPIN);
        assert_eq!(w.plan(now, Some(1), 2, true), Plan::spin(MAX_SPIN), "capped");
        w.learn(None, Duration::from_secs(1));
        assert_eq!(w.plan(now, None, 2, true), Plan::spin(MAX_SPIN / 8), "waits on several peers learn apart");
    }

    #[test]
    fn a_preempted_rank_polls_by_its_contended_budget_for_a_while() {
        let now = Instant::now();
        let mut w = waits(2);
        w.contended(now);
        let long = Plan::spin(CONTENDED_START);
        assert_eq!(w.plan(now + CONTENDED_MIN / 2, Some(1), 2, true), long, "long");
        let brief = Plan::spin(CONTENDED_SOCKET_SPIN);
        assert_eq!(w.plan(now + CONTENDED_MIN / 2, Some(1), 2, false), brief, "on a socket: briefly");
        for _ in 0..10 {
            w.learn(Some(2), Duration::from_millis(5));
        }
        assert_eq!(w.plan(now, Some(2), 2, true), long, "whatever the peer's own budget");
        assert_eq!(w.plan(now + CONTENDED_MIN, Some(2), 2, true), Plan::spin(MIN_SPIN), "its budget once over");
        assert_eq!(w.plan(now + CONTENDED_MIN, Some(1), 2, true), Plan::spin(MAX_SPIN / 4), "a lone one: over soon");
        // Preempted again right after each window: long polls for longer and longer.
        let mut t = now + CONTENDED_MIN;
        for want in [4, 8, 16, 32, 50, 50] {
            w.contended(t);
            let d = Duration::from_millis(want);
            assert_eq!(w.plan(t + d - Duration::from_micros(1), Some(1), 2, true), long, "{want} ms");
            assert_eq!(w.plan(t + d, Some(1), 2, true), Plan::spin(MAX_SPIN / 4));
            t += d;
        }
        // Long after, a lone one is short again.
        w.contended(t + Duration::from_secs(1));
        assert_eq!(w.plan(t + Duration::from_secs(1) + CONTENDED_MIN, Some(1), 2, true), Plan::spin(MAX_SPIN / 4));
    }

    #[test]
    fn polling_beside_other_work_grows_to_catch_answers_and_halves_when_its_core_was_needed() {
        let now = Instant::now();
        let mut w = waits(2);
        w.contended(now);
        let ms = Duration::from_millis;
        w.learn_as(Learns::Contended, Some(1), ms(3), false);
        assert_eq!(
            w.plan(now, Some(1), 2, true),
            Plan::spin(ms(6)),
            "answered while this rank kept its core: poll that long"
        );
        w.learn_as(Learns::Contended, Some(1), CONTENDED_SPIN / 2, false);
        assert_eq!(w.plan(now, Some(1), 2, true), Plan::spin(CONTENDED_SPIN), "caught while polling: up to the cap");
        w.learn_as(Learns::Contended, Some(1), Duration::from_micros(3), false);
        assert_eq!(w.plan(now, Some(1), 2, true), Plan::spin(CONTENDED_SPIN), "a quick one takes nothing away");
        for _ in 0..20 {
            w.learn_as(Learns::Contended, Some(1), ms(1), true);
        }
        assert_eq!(w.plan(now, Some(1), 2, true), Plan::spin(MIN_SPIN), "answered once it left its core: the least");
        assert_eq!(w.plan(now, Some(2), 2, true), Plan::spin(CONTENDED_START), "each peer apart");
        assert_eq!(w.plan(now + CONTENDED_MIN, Some(1), 2, true), Plan::spin(MAX_SPIN / 4), "its own budget untouched");
        w.learn_as(Learns::Nothing, Some(2), Duration::from_secs(1), false);
        assert_eq!(w.plan(now, Some(2), 2, true), Plan::spin(CONTENDED_START), "a wait by no budget teaches none");
        w.learn_as(Learns::Contended, Some(2), CONTENDED_SPIN * 2, false);
        assert_eq!(w.plan(now, Some(2), 2, true), Plan::spin(CONTENDED_START / 2), "longer than any budget: less");
    }

    #[test]
    fn a_fixed_policy_overrides_everything() {
        let now = Instant::now();
        let mut w = waits(2);
        w.set_fixed(SpinPolicy { spin: Duration::ZERO, yields: 0 });
        assert!(!w.plan(now, Some(1), 8, true).polls(), "sleep at once");
        w.set_fixed(SpinPolicy { spin: Duration::from_micros(5), yields: 3 });
        let p = w.plan(now, Some(1), 1, true);
        assert_eq!((p.spin, p.yields), (Duration::from_micros(5), 3));
    }
}
