//! Chord tests over a minimal in-test network: nodes in a Vec, an event heap of
//! deliveries and wake-ups, a clock that jumps to the next event.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use super::{ChordConfig, ChordMsg, ChordNode, Peer};
use crate::id::Id;
use crate::machine::{Action, Machine, NodeAddr};
use crate::overlay::{OverlayCommand, OverlayEvent};
use crate::wire::Envelope;

mod registry;
mod ring;
mod scenario;
mod sim;
mod wire;

/// How a node is (not) there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Up,
    /// Crashed, connections refused: sends to it fail at once.
    Refusing,
    /// Crashed silently: messages to it vanish, requests time out.
    Silent,
}

enum Ev {
    Deliver { to: usize, msg: Envelope<ChordMsg> },
    Wake { node: usize },
}

struct Net {
    now: Instant,
    cfg: ChordConfig,
    nodes: Vec<ChordNode>,
    health: Vec<Health>,
    armed: Vec<Option<Instant>>,
    by_addr: BTreeMap<NodeAddr, usize>,
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    evs: HashMap<u64, Ev>,
    seq: u64,
    latency: Duration,
    events: Vec<(usize, OverlayEvent)>,
    delivered: u64,
    trace: Option<usize>,
    /// Fraction of messages lost in flight, drawn from `lcg`.
    loss: f64,
    lcg: u64,
}

fn addr(i: usize) -> NodeAddr {
    NodeAddr::loopback(i as u32, 4000)
}

/// The successor of `key` in a sorted ring.
fn owner_in(ring: &[Peer], key: Id) -> Peer {
    let at = ring.partition_point(|p| p.id < key);
    ring[at % ring.len()]
}

impl Net {
    fn new(cfg: ChordConfig) -> Self {
        Net {
            now: Instant::now(),
            cfg,
            nodes: Vec::new(),
            health: Vec::new(),
            armed: Vec::new(),
            by_addr: BTreeMap::new(),
            heap: BinaryHeap::new(),
            evs: HashMap::new(),
            seq: 0,
            latency: Duration::from_millis(5),
            events: Vec::new(),
            delivered: 0,
            trace: None,
            loss: 0.0,
            lcg: 1,
        }
    }

    /// Adds node `nodes.len()` joining through `bootstrap`.
    fn add(&mut self, bootstrap: Vec<NodeAddr>) -> usize {
        let i = self.nodes.len();
        let a = addr(i);
        let node = ChordNode::new(self.cfg.clone(), a, bootstrap, self.now, i as u64);
        self.nodes.push(node);
        self.health.push(Health::Up);
        self.armed.push(None);
        self.by_addr.insert(a, i);
        self.after(i);
        i
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq)));
        self.evs.insert(self.seq, ev);
    }

    /// Drains node `i` and re-arms its wake-up, as the drain contract says.
    fn after(&mut self, i: usize) {
        self.nodes[i].check_invariants();
        let mut failed = Vec::new();
        while let Some(a) = self.nodes[i].poll_action() {
            match a {
                Action::Send { to, msg } if self.trace == Some(i) || self.by_addr.get(&to) == self.trace.as_ref() => {
                    eprintln!("{:?} {i} -> {:?}: {} {:?}", self.now, self.by_addr.get(&to), msg.request_id, msg.body);
                    match self.by_addr.get(&to).map(|&j| (j, self.health[j])) {
                        Some((j, Health::Up)) => self.push(self.now + self.latency, Ev::Deliver { to: j, msg }),
                        Some((_, Health::Silent)) => {}
                        Some((_, Health::Refusing)) | None => failed.push(to),
                    }
                }
                Action::Send { to, msg } => match self.by_addr.get(&to).map(|&j| (j, self.health[j])) {
                    Some((j, Health::Up)) => self.push(self.now + self.latency, Ev::Deliver { to: j, msg }),
                    Some((_, Health::Silent)) => {}
                    Some((_, Health::Refusing)) | None => failed.push(to),
                },
                Action::Event(e) => self.events.push((i, e)),
            }
        }
        for to in failed {
            self.nodes[i].handle_send_failed(self.now, to);
            self.after(i);
        }
        let t = self.nodes[i].poll_timeout();
        let t = t.map(|t| t.max(self.now));
        if t != self.armed[i] {
            self.armed[i] = t;
            if let Some(t) = t {
                self.push(t, Ev::Wake { node: i });
            }
        }
    }

    /// Runs the next event; false when there is none before `until`.
    fn step(&mut self, until: Instant) -> bool {
        let Some(&Reverse((at, seq))) = self.heap.peek() else { return false };
        if at > until {
            return false;
        }
        self.heap.pop();
        self.now = self.now.max(at);
        let ev = self.evs.remove(&seq).expect("every heap entry has its event");
        match ev {
            Ev::Deliver { to, msg } => {
                if self.health[to] != Health::Up || self.lost() {
                    return true;
                }
                self.delivered += 1;
                self.nodes[to].handle_message(self.now, msg);
                self.after(to);
            }
            Ev::Wake { node } => {
                if self.health[node] != Health::Up || self.armed[node] != Some(at) {
                    return true;
                }
                self.armed[node] = None;
                self.nodes[node].handle_timeout(self.now);
                self.after(node);
            }
        }
        true
    }

    fn lost(&mut self) -> bool {
        if self.loss == 0.0 {
            return false;
        }
        self.lcg = self.lcg.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.lcg >> 11) as f64 / (1u64 << 53) as f64) < self.loss
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        while self.step(until) {}
        self.now = until;
    }

    fn command(&mut self, i: usize, cmd: OverlayCommand) {
        self.nodes[i].handle_command(self.now, cmd).unwrap();
        self.after(i);
    }

    fn crash(&mut self, i: usize, how: Health) {
        self.health[i] = how;
    }

    /// A crashed node comes back with the state it had.
    fn revive(&mut self, i: usize) {
        self.health[i] = Health::Up;
        self.armed[i] = None;
        self.after(i);
    }

    fn up(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.health[i] == Health::Up && !self.nodes[i].has_left())
    }

    /// Live nodes sorted by id: those joined, and those that can join (a contact is up).
    fn ring(&self) -> Vec<Peer> {
        let can_join = |i: usize| {
            let n = &self.nodes[i];
            n.is_joined()
                || n.bootstrap.iter().any(|a| {
                    self.by_addr.get(a).is_some_and(|&j| self.health[j] == Health::Up && self.nodes[j].is_joined())
                })
        };
        let mut v: Vec<Peer> = self.up().filter(|&i| can_join(i)).map(|i| self.nodes[i].me()).collect();
        v.sort();
        v
    }

    /// The true owner of `key` among live nodes.
    fn owner(&self, key: Id) -> Peer {
        owner_in(&self.ring(), key)
    }

    /// Checks successors, predecessors and successor lists against the true ring.
    fn ring_errors(&self) -> Vec<String> {
        let ring = self.ring();
        let n = ring.len();
        let mut errs = Vec::new();
        for (k, p) in ring.iter().enumerate() {
            let node = &self.nodes[self.by_addr[&p.addr]];
            if !node.is_joined() {
                errs.push(format!("{p:?} not joined"));
                continue;
            }
            let succ = ring[(k + 1) % n];
            if node.successor() != succ {
                errs.push(format!("{p:?} successor {:?} want {succ:?}", node.successor()));
            }
            let pred = ring[(k + n - 1) % n];
            let want_pred = if n == 1 { None } else { Some(pred) };
            if node.predecessor() != want_pred {
                errs.push(format!("{p:?} predecessor {:?} want {want_pred:?}", node.predecessor()));
            }
            let r = self.cfg.successors.min(n - 1);
            let want: Vec<Peer> = (1..=r).map(|d| ring[(k + d) % n]).collect();
            if node.successor_list() != want.as_slice() {
                errs.push(format!("{p:?} successor list {:?} want {want:?}", node.successor_list()));
            }
        }
        errs
    }

    /// Checks every finger run against the true ring.
    fn finger_errors(&self) -> usize {
        let ring = self.ring();
        let mut bad = 0;
        for i in self.up() {
            let node = &self.nodes[i];
            let runs = node.fingers();
            for (k, (from, peer)) in runs.iter().enumerate() {
                let to = runs.get(k + 1).map_or(160, |r| u32::from(r.0));
                for f in u32::from(*from)..to {
                    let want = owner_in(&ring, node.id().add_pow2(f));
                    if want.id == node.id() {
                        break; // past the last real finger: the run may extend, harmlessly
                    }
                    if want != *peer {
                        bad += 1;
                    }
                }
            }
        }
        bad
    }

    fn converge(&mut self, limit: Duration) {
        let end = self.now + limit;
        while self.now < end {
            self.run_for(Duration::from_millis(500));
            if self.ring_errors().is_empty() {
                return;
            }
        }
        let errs = self.ring_errors();
        panic!("no convergence after {limit:?}: {} errors, first {:?}", errs.len(), &errs[..errs.len().min(5)]);
    }

    fn take_events(&mut self, i: usize) -> Vec<OverlayEvent> {
        let (mine, rest): (Vec<_>, Vec<_>) = self.events.drain(..).partition(|(j, _)| *j == i);
        self.events = rest;
        mine.into_iter().map(|(_, e)| e).collect()
    }

    /// Builds a ring of `n` nodes, each joining through node 0, `gap` apart.
    fn build(cfg: ChordConfig, n: usize, gap: Duration) -> Net {
        let mut net = Net::new(cfg);
        net.add(vec![]);
        for _ in 1..n {
            net.add(vec![addr(0)]);
            net.run_for(gap);
        }
        net
    }
}
