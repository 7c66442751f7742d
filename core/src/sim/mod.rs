//! A deterministic discrete-event network simulator that drives any [`Machine`].
//!
//! One thread, one virtual clock, one heap of timed events ordered by (time,
//! sequence number). Nodes learn only from the messages they are handed; the
//! simulator knows every node, but only so that checkers can judge the result.
//! The same seed and the same calls replay bit for bit.
//!
//! ```text
//! pop earliest event -> now = max(now, at) -> call the node -> drain poll_action:
//!     Send  -> the seeded net model -> Deliver at now + link latency (or lost, or failed)
//!     Event -> the event log the caller drains
//! -> re-arm the node's single Wake if poll_timeout changed
//! ```

mod net;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

pub use net::NetConfig;
use net::{Fate, Net};

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
}

struct Slot<M> {
    machine: M,
    addr: NodeAddr,
    state: Liveness,
    /// The wake-up currently queued for this node, and its generation: a popped
    /// `Wake` whose generation is stale was superseded and is skipped.
    wake: Option<Instant>,
    generation: u32,
}

enum Ev<B> {
    Deliver { from: NodeIdx, to: NodeIdx, msg: Envelope<B> },
    SendFailed { node: NodeIdx, to: NodeAddr },
    Wake { node: NodeIdx, generation: u32 },
}

struct Queued<B> {
    at: Instant,
    seq: u64,
    ev: Ev<B>,
}

impl<B> PartialEq for Queued<B> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<B> Eq for Queued<B> {}
impl<B> PartialOrd for Queued<B> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<B> Ord for Queued<B> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// The simulator. See the module docs.
pub struct Sim<M: Machine> {
    start: Instant,
    now: Instant,
    nodes: Vec<Slot<M>>,
    by_addr: BTreeMap<NodeAddr, NodeIdx>,
    queue: BinaryHeap<Reverse<Queued<M::Body>>>,
    seq: u64,
    net: Net,
    codec_roundtrip: bool,
    events: VecDeque<SimEvent<M::Event>>,
    stats: SimStats,
}

impl<M: Machine> std::fmt::Debug for Sim<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("elapsed", &self.elapsed())
            .field("nodes", &self.nodes.len())
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
            nodes: Vec::new(),
            by_addr: BTreeMap::new(),
            queue: BinaryHeap::new(),
            seq: 0,
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
        self.nodes.len()
    }

    /// Whether no node was ever added.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Adds a running node (built by the caller at [`Sim::now`]) and drains what
    /// its constructor queued.
    ///
    /// # Panics
    /// If a live node already listens at the same address: a scenario bug.
    pub fn add_node(&mut self, machine: M) -> NodeIdx {
        let addr = machine.addr();
        let idx = self.nodes.len();
        let prev = self.by_addr.insert(addr, idx);
        assert!(prev.is_none(), "two live nodes at {addr}");
        self.nodes.push(Slot { machine, addr, state: Liveness::Alive, wake: None, generation: 0 });
        self.drain(idx);
        idx
    }

    /// The node at `idx`, for checkers.
    pub fn node(&self, idx: NodeIdx) -> &M {
        &self.nodes[idx].machine
    }

    /// The address of node `idx`.
    pub fn addr(&self, idx: NodeIdx) -> NodeAddr {
        self.nodes[idx].addr
    }

    /// The node listening at `addr`, if alive.
    pub fn lookup_addr(&self, addr: NodeAddr) -> Option<NodeIdx> {
        self.by_addr.get(&addr).copied()
    }

    /// Whether node `idx` runs.
    pub fn liveness(&self, idx: NodeIdx) -> Liveness {
        self.nodes[idx].state
    }

    /// Indices of the running nodes, in index order.
    pub fn alive(&self) -> impl Iterator<Item = NodeIdx> + '_ {
        self.nodes.iter().enumerate().filter(|(_, s)| s.state == Liveness::Alive).map(|(i, _)| i)
    }

    /// Hands a command to a running node and drains its actions.
    pub fn command(&mut self, idx: NodeIdx, cmd: M::Command) -> Result<(), M::CmdError> {
        assert_eq!(self.nodes[idx].state, Liveness::Alive, "command to a dead node");
        let now = self.now;
        let res = self.nodes[idx].machine.handle_command(now, cmd);
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
        let slot = &mut self.nodes[idx];
        if slot.state == Liveness::Alive {
            slot.state = state;
            slot.generation = slot.generation.wrapping_add(1);
            slot.wake = None;
            self.by_addr.remove(&slot.addr);
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
        self.queue.peek().map(|Reverse(q)| q.at)
    }

    /// Processes one event; false when nothing is queued.
    pub fn step(&mut self) -> bool {
        let Some(Reverse(Queued { at, ev, .. })) = self.queue.pop() else {
            return false;
        };
        self.now = self.now.max(at);
        self.stats.events += 1;
        let now = self.now;
        match ev {
            Ev::Deliver { from, to, msg } => {
                if self.nodes[to].state != Liveness::Alive {
                    // The target died while the message was in flight.
                    self.undeliverable(from, self.nodes[to].addr);
                    return true;
                }
                self.stats.delivered += 1;
                self.nodes[to].machine.handle_message(now, msg);
                self.drain(to);
            }
            Ev::SendFailed { node, to } => {
                if self.nodes[node].state == Liveness::Alive {
                    self.stats.failed += 1;
                    self.nodes[node].machine.handle_send_failed(now, to);
                    self.drain(node);
                }
            }
            Ev::Wake { node, generation } => {
                let slot = &mut self.nodes[node];
                if slot.state == Liveness::Alive && slot.generation == generation {
                    slot.wake = None;
                    slot.machine.handle_timeout(now);
                    self.drain(node);
                }
            }
        }
        true
    }

    /// Runs every event up to and including `deadline`, then sets the clock to it.
    pub fn run_until(&mut self, deadline: Instant) {
        while self.next_event_at().is_some_and(|t| t <= deadline) {
            self.step();
        }
        self.now = self.now.max(deadline);
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Runs until `done(self)` holds, checking after every event, for at most
    /// `limit` of virtual time. Returns whether it held.
    pub fn run_while_not(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let deadline = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            match self.next_event_at() {
                Some(t) if t <= deadline => {
                    self.step();
                }
                _ => {
                    self.now = self.now.max(deadline);
                    return done(self);
                }
            }
        }
    }

    fn push(&mut self, at: Instant, ev: Ev<M::Body>) {
        self.seq += 1;
        self.queue.push(Reverse(Queued { at, seq: self.seq, ev }));
    }

    /// Drains node `idx`'s actions, then re-arms its single wake-up if it moved.
    fn drain(&mut self, idx: NodeIdx) {
        while let Some(action) = self.nodes[idx].machine.poll_action() {
            match action {
                Action::Send { to, msg } => self.send(idx, to, msg),
                Action::Event(event) => self.events.push_back(SimEvent { at: self.now, node: idx, event }),
            }
        }
        let slot = &mut self.nodes[idx];
        let next = slot.machine.poll_timeout();
        if next != slot.wake {
            slot.wake = next;
            slot.generation = slot.generation.wrapping_add(1);
            if let Some(t) = next {
                let ev = Ev::Wake { node: idx, generation: slot.generation };
                self.push(t.max(self.now), ev);
            }
        }
    }

    fn send(&mut self, from: NodeIdx, to: NodeAddr, msg: Envelope<M::Body>) {
        self.stats.sent += 1;
        let msg = if self.codec_roundtrip { roundtrip(&msg) } else { msg };
        let Some(&target) = self.by_addr.get(&to) else {
            self.undeliverable(from, to);
            return;
        };
        match self.net.fate(from, target) {
            Fate::Arrive(latency) => self.push(self.now + latency, Ev::Deliver { from, to: target, msg }),
            Fate::Lost => self.stats.lost += 1,
        }
    }

    /// A message to a dead or unknown address: a refused connection comes back to
    /// the sender after a round trip, or the message vanishes.
    fn undeliverable(&mut self, from: NodeIdx, to: NodeAddr) {
        if self.net.config().report_failures {
            let rtt = 2 * self.net.latency(from, self.by_addr.get(&to).copied().unwrap_or(from));
            self.push(self.now + rtt, Ev::SendFailed { node: from, to });
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
