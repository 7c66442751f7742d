//! A deterministic discrete-event network simulator that drives any [`Machine`].
//!
//! One thread, one virtual clock, one heap of timed events ordered by (time,
//! sequence number). Nodes learn only from the messages they are handed; the
//! simulator knows every node, but only so that checkers can judge the result.
//! The same seed and the same calls replay bit for bit.
//!
//! ```text
//! pop earliest event -> now = max(now, at) -> call the node -> drain poll_action:
//!     Send  -> the seeded net model -> Deliver at now + link latency (or lost, or failed);
//!              to the node itself: Deliver at now, never lost
//!     Event -> the event log the caller drains
//! -> queue a Wake if poll_timeout moved earlier than the node's queued one
//! ```
//!
//! Each node has at most one live `Wake` queued. When its `poll_timeout` moves
//! earlier, a new one is queued and the old one goes stale (skipped when popped);
//! when it moves later, nothing is queued: the earlier `Wake` pops, finds the
//! deadline not yet due, and re-queues itself for it. So a request sent and
//! answered before its timeout costs no extra queue traffic, and a node's
//! `handle_timeout` is still never called before its `poll_timeout`.
//!
//! Cost per event is small and nearly constant: the queue is a radix heap of
//! small keys (see `queue`), machines live in a `Vec` beside a small record per
//! node (so a stale or early wake-up never touches the machine), addresses resolve
//! through a hash map, and messages are moved, not encoded, unless
//! `codec_roundtrip` is on.

mod addrs;
mod net;
mod queue;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use addrs::AddrMap;
pub use net::NetConfig;
use net::{Fate, Net};
use queue::{EventQueue, Item, Nanos};

use crate::machine::{Action, Machine, NodeAddr};
use crate::wire::{self, Envelope};

/// Index of a node in the simulator, stable for the whole run.
pub type NodeIdx = usize;

/// How a simulation runs.
#[derive(Debug, Clone, Default)]
pub struct SimConfig {
    /// Seed of the network model (latencies, loss).
    pub seed: u64,
    /// The network's behaviour.
    pub net: NetConfig,
    /// Encode and decode every message through `core::wire`, as real drivers do.
    /// On in property tests; off in large benchmarks, where it only costs time.
    pub codec_roundtrip: bool,
}

/// Whether a node takes part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Running: receives messages and timeouts.
    Alive,
    /// Crashed: silent from now on; sends to it fail (or vanish, per [`NetConfig`]).
    Crashed,
    /// Retired after a graceful leave: silent like a crashed node.
    Retired,
}

/// Something a node reported, with when and who.
#[derive(Debug, Clone)]
pub struct SimEvent<E> {
    /// Virtual time of the report.
    pub at: Instant,
    /// The reporting node.
    pub node: NodeIdx,
    /// What it reported.
    pub event: E,
}

/// Counters of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events popped from the queue (deliveries, wake-ups, failures).
    pub events: u64,
    /// Messages handed to the network.
    pub sent: u64,
    /// Messages delivered to a live node.
    pub delivered: u64,
    /// Messages lost (loss, partition, or a dead target without failure reports).
    pub lost: u64,
    /// Sends reported back as failed.
    pub failed: u64,
    /// Calls of `handle_timeout` (popped wake-ups that were due).
    pub timeouts: u64,
}

/// What the simulator itself keeps per node, apart from the machine: small, so a
/// stale or early wake-up is dealt with without touching the machine's memory.
struct Meta {
    state: Liveness,
    /// The generation of this node's live wake-up: a popped one whose generation
    /// is stale was superseded and is skipped.
    generation: u32,
    /// When this node's live wake-up is queued.
    wake: Option<Nanos>,
    /// The machine's `poll_timeout` as of its last drain (no earlier than then).
    due: Option<Nanos>,
}

/// A queued event; a node's wake-up is a queue token `(node, generation)` instead.
enum Ev<B> {
    Deliver { from: NodeIdx, to: NodeIdx, msg: Envelope<B> },
    SendFailed { node: NodeIdx, to: NodeAddr },
}

/// The simulator. See the module docs.
pub struct Sim<M: Machine> {
    start: Instant,
    /// The clock, as an instant for the machines and as nanoseconds since `start`.
    now: Instant,
    now_ns: Nanos,
    /// The machines, their addresses and the simulator's notes on them, by index.
    machines: Vec<M>,
    addrs: Vec<NodeAddr>,
    meta: Vec<Meta>,
    by_addr: AddrMap,
    queue: EventQueue<Ev<M::Body>>,
    net: Net,
    codec_roundtrip: bool,
    events: VecDeque<SimEvent<M::Event>>,
    stats: SimStats,
}

impl<M: Machine> std::fmt::Debug for Sim<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("elapsed", &self.elapsed())
            .field("nodes", &self.machines.len())
            .field("queued", &self.queue.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl<M: Machine> Sim<M> {
    /// An empty network whose clock starts at `start`.
    pub fn new(config: SimConfig, start: Instant) -> Self {
        Sim {
            start,
            now: start,
            now_ns: 0,
            machines: Vec::new(),
            addrs: Vec::new(),
            meta: Vec::new(),
            by_addr: AddrMap::default(),
            queue: EventQueue::default(),
            net: Net::new(config.net, config.seed),
            codec_roundtrip: config.codec_roundtrip,
            events: VecDeque::new(),
            stats: SimStats::default(),
        }
    }

    /// The virtual clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Counters so far.
    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// Number of nodes ever added (alive or not).
    pub fn len(&self) -> usize {
        self.machines.len()
    }

    /// Whether no node was ever added.
    pub fn is_empty(&self) -> bool {
        self.machines.is_empty()
    }

    /// Adds a running node (built by the caller at [`Sim::now`]) and drains what
    /// its constructor queued.
    ///
    /// # Panics
    /// If a live node already listens at the same address (a scenario bug), or on
    /// the 2^31st node.
    pub fn add_node(&mut self, machine: M) -> NodeIdx {
        let addr = machine.addr();
        let idx = self.machines.len();
        assert!(idx < 1 << 31, "at most 2^31 nodes");
        let prev = self.by_addr.insert(addr, idx);
        assert!(prev.is_none(), "two live nodes at {addr}");
        self.machines.push(machine);
        self.addrs.push(addr);
        self.meta.push(Meta { state: Liveness::Alive, generation: 0, wake: None, due: None });
        self.drain(idx);
        idx
    }

    /// The node at `idx`, for checkers.
    pub fn node(&self, idx: NodeIdx) -> &M {
        &self.machines[idx]
    }

    /// The address of node `idx`.
    pub fn addr(&self, idx: NodeIdx) -> NodeAddr {
        self.addrs[idx]
    }

    /// The node listening at `addr`, if alive.
    pub fn lookup_addr(&self, addr: NodeAddr) -> Option<NodeIdx> {
        self.by_addr.get(&addr).copied()
    }

    /// Whether node `idx` runs.
    pub fn liveness(&self, idx: NodeIdx) -> Liveness {
        self.meta[idx].state
    }

    /// Indices of the running nodes, in index order.
    pub fn alive(&self) -> impl Iterator<Item = NodeIdx> + '_ {
        self.meta.iter().enumerate().filter(|(_, m)| m.state == Liveness::Alive).map(|(i, _)| i)
    }

    /// Hands a command to a running node and drains its actions.
    pub fn command(&mut self, idx: NodeIdx, cmd: M::Command) -> Result<(), M::CmdError> {
        assert_eq!(self.meta[idx].state, Liveness::Alive, "command to a dead node");
        let now = self.now;
        let res = self.machines[idx].handle_command(now, cmd);
        self.drain(idx);
        res
    }

    /// Stops node `idx` at once: it handles nothing more.
    pub fn crash(&mut self, idx: NodeIdx) {
        self.stop(idx, Liveness::Crashed);
    }

    /// Takes a node that has finished a graceful leave off the network.
    pub fn retire(&mut self, idx: NodeIdx) {
        self.stop(idx, Liveness::Retired);
    }

    fn stop(&mut self, idx: NodeIdx, state: Liveness) {
        let m = &mut self.meta[idx];
        if m.state == Liveness::Alive {
            m.state = state;
            m.generation = m.generation.wrapping_add(1);
            m.wake = None;
            m.due = None;
            self.by_addr.remove(&self.addrs[idx]);
        }
    }

    /// Messages between `a` and `b` are lost, both ways, until [`Sim::heal`].
    pub fn partition(&mut self, a: NodeIdx, b: NodeIdx) {
        self.net.partition(a, b);
    }

    /// Removes every partition.
    pub fn heal(&mut self) {
        self.net.heal();
    }

    /// The next reported event, oldest first.
    pub fn poll_event(&mut self) -> Option<SimEvent<M::Event>> {
        self.events.pop_front()
    }

    /// Drops every reported event not yet polled.
    pub fn clear_events(&mut self) {
        self.events.clear();
    }

    /// When the next queued event happens.
    pub fn next_event_at(&self) -> Option<Instant> {
        self.queue.peek_time().map(|t| self.instant(t))
    }

    /// Number of events queued (deliveries in flight, wake-ups, failure reports).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    fn instant(&self, t: Nanos) -> Instant {
        self.start + Duration::from_nanos(t)
    }

    /// `t` as nanoseconds since the start (0 before it, saturating far ahead).
    fn nanos(&self, t: Instant) -> Nanos {
        u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Processes one event; false when nothing is queued.
    pub fn step(&mut self) -> bool {
        let Some((at, item)) = self.queue.pop() else {
            return false;
        };
        if at > self.now_ns {
            self.now_ns = at;
            self.now = self.instant(at);
        }
        self.stats.events += 1;
        let now = self.now;
        let ev = match item {
            Item::Token(node, generation) => {
                self.wake(node as NodeIdx, generation);
                return true;
            }
            Item::Event(ev) => ev,
        };
        match ev {
            Ev::Deliver { from, to, msg } => {
                if self.meta[to].state != Liveness::Alive {
                    // The target died while the message was in flight.
                    self.undeliverable(from, self.addrs[to]);
                    return true;
                }
                self.stats.delivered += 1;
                self.machines[to].handle_message(now, msg);
                self.drain(to);
            }
            Ev::SendFailed { node, to } => {
                if self.meta[node].state == Liveness::Alive {
                    self.stats.failed += 1;
                    self.machines[node].handle_send_failed(now, to);
                    self.drain(node);
                }
            }
        }
        true
    }

    /// A node's queued wake-up popped: time out if its deadline is due, or queue
    /// the wake-up again for a deadline that moved later.
    fn wake(&mut self, node: NodeIdx, generation: u32) {
        let m = &mut self.meta[node];
        if m.state != Liveness::Alive || m.generation != generation {
            return;
        }
        m.wake = None;
        match m.due {
            None => {}
            Some(due) if due <= self.now_ns => {
                self.stats.timeouts += 1;
                self.machines[node].handle_timeout(self.now);
                self.drain(node);
            }
            Some(due) => {
                m.wake = Some(due);
                self.queue.push_token(due, node as u32, generation);
            }
        }
    }

    /// Runs every event up to and including `deadline`, then sets the clock to it.
    pub fn run_until(&mut self, deadline: Instant) {
        let end = self.nanos(deadline);
        while self.queue.peek_time().is_some_and(|t| t <= end) {
            self.step();
        }
        self.advance_to(deadline);
    }

    fn advance_to(&mut self, t: Instant) {
        if t > self.now {
            self.now = t;
            self.now_ns = self.nanos(t);
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Runs until `done(self)` holds, checking after every event, for at most
    /// `limit` of virtual time. Returns whether it held.
    pub fn run_while_not(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let deadline = self.now + limit;
        let end = self.nanos(deadline);
        loop {
            if done(self) {
                return true;
            }
            match self.queue.peek_time() {
                Some(t) if t <= end => {
                    self.step();
                }
                _ => {
                    self.advance_to(deadline);
                    return done(self);
                }
            }
        }
    }

    /// Drains node `idx`'s actions, then queues a wake-up if its deadline moved
    /// earlier than the one queued (see the module docs).
    fn drain(&mut self, idx: NodeIdx) {
        while let Some(action) = self.machines[idx].poll_action() {
            match action {
                Action::Send { to, msg } => self.send(idx, to, msg),
                Action::Event(event) => self.events.push_back(SimEvent { at: self.now, node: idx, event }),
            }
        }
        let due = self.machines[idx].poll_timeout().map(|t| self.nanos(t).max(self.now_ns));
        let m = &mut self.meta[idx];
        m.due = due;
        let Some(at) = due else { return };
        if m.wake.is_none_or(|queued| at < queued) {
            m.wake = Some(at);
            m.generation = m.generation.wrapping_add(1);
            self.queue.push_token(at, idx as u32, m.generation);
        }
    }

    fn send(&mut self, from: NodeIdx, to: NodeAddr, msg: Envelope<M::Body>) {
        self.stats.sent += 1;
        let msg = if self.codec_roundtrip { roundtrip(&msg) } else { msg };
        let Some(&target) = self.by_addr.get(&to) else {
            self.undeliverable(from, to);
            return;
        };
        if target == from {
            // To itself: delivered at once and never lost, as a driver does
            // (`adapters::Driver` feeds such messages straight back).
            self.push_after(Duration::ZERO, Ev::Deliver { from, to: target, msg });
            return;
        }
        match self.net.fate(from, target) {
            Fate::Arrive(latency) => self.push_after(latency, Ev::Deliver { from, to: target, msg }),
            Fate::Lost => self.stats.lost += 1,
        }
    }

    fn push_after(&mut self, d: Duration, ev: Ev<M::Body>) {
        let at = self.now_ns.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.queue.push(at, ev);
    }

    /// A message to a dead or unknown address: a refused connection comes back to
    /// the sender after a round trip, or the message vanishes.
    fn undeliverable(&mut self, from: NodeIdx, to: NodeAddr) {
        if self.net.config().report_failures {
            let rtt = 2 * self.net.latency(from, self.by_addr.get(&to).copied().unwrap_or(from));
            self.push_after(rtt, Ev::SendFailed { node: from, to });
        } else {
            self.stats.lost += 1;
        }
    }
}

/// Encodes and decodes one message through the real codec, as a driver would.
///
/// # Panics
/// If a machine emits a message the codec cannot carry: a bug in that machine.
fn roundtrip<B: serde::Serialize + serde::de::DeserializeOwned>(msg: &Envelope<B>) -> Envelope<B> {
    wire::round_trip(msg, wire::DEFAULT_MAX_FRAME).expect("a machine emitted a message the codec cannot carry")
}

#[cfg(test)]
mod tests;
