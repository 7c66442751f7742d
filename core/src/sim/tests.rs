use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::*;
use crate::id::Id;

/// A tiny machine: pings its peers every period, answers pings with pongs, and
/// reports everything it sees.
struct Pinger {
    addr: NodeAddr,
    peers: Vec<NodeAddr>,
    period: Duration,
    next: Instant,
    sent: u64,
    /// Calls of `handle_timeout` before `next`: the simulator must make none.
    early_timeouts: u64,
    out: VecDeque<Action<Msg, Seen>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Msg {
    Ping(u64),
    Pong(u64),
}

#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Ping { from: NodeAddr, n: u64 },
    Pong { from: NodeAddr, n: u64 },
    Failed(NodeAddr),
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl Pinger {
    fn new(n: u32, peers: &[u32], period_ms: u64, now: Instant) -> Self {
        Pinger {
            addr: NodeAddr::loopback(n, 4000),
            peers: peers.iter().map(|p| NodeAddr::loopback(*p, 4000)).collect(),
            period: Duration::from_millis(period_ms),
            next: now + Duration::from_millis(period_ms),
            sent: 0,
            early_timeouts: 0,
            out: VecDeque::new(),
        }
    }

    fn send(&mut self, to: NodeAddr, m: Msg) {
        let msg = Envelope::new(Id::hash(self.addr.to_string()), self.addr, 0, m);
        self.out.push_back(Action::Send { to, msg });
    }
}

impl Machine for Pinger {
    type Body = Msg;
    type Command = ();
    type Event = Seen;
    type CmdError = Never;

    fn addr(&self) -> NodeAddr {
        self.addr
    }
    fn handle_message(&mut self, _now: Instant, msg: Envelope<Msg>) {
        match msg.body {
            Msg::Ping(n) => {
                self.out.push_back(Action::Event(Seen::Ping { from: msg.sender_addr, n }));
                self.send(msg.sender_addr, Msg::Pong(n));
            }
            Msg::Pong(n) => self.out.push_back(Action::Event(Seen::Pong { from: msg.sender_addr, n })),
        }
    }
    fn handle_send_failed(&mut self, _now: Instant, to: NodeAddr) {
        self.out.push_back(Action::Event(Seen::Failed(to)));
    }
    /// Postpones the next round of pings by a whole period from `now`.
    fn handle_command(&mut self, now: Instant, _cmd: ()) -> Result<(), Never> {
        self.next = now + self.period;
        Ok(())
    }
    fn handle_timeout(&mut self, now: Instant) {
        if now < self.next {
            self.early_timeouts += 1;
            return; // spurious
        }
        self.next += self.period;
        for p in self.peers.clone() {
            self.sent += 1;
            self.send(p, Msg::Ping(self.sent));
        }
    }
    fn poll_action(&mut self) -> Option<Action<Msg, Seen>> {
        self.out.pop_front()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next)
    }
}

fn trace(seed: u64, loss: f64) -> (Vec<(Duration, NodeIdx, Seen)>, SimStats) {
    let t0 = Instant::now();
    let net = NetConfig { loss, ..NetConfig::default() };
    let mut sim = Sim::new(SimConfig { seed, net, codec_roundtrip: true }, t0);
    for i in 0..5u32 {
        let peers: Vec<u32> = (0..5).filter(|p| *p != i).collect();
        sim.add_node(Pinger::new(i, &peers, 100 + u64::from(i) * 7, t0));
    }
    sim.run_for(Duration::from_secs(5));
    let mut out = Vec::new();
    while let Some(e) = sim.poll_event() {
        out.push((e.at - t0, e.node, e.event));
    }
    (out, sim.stats())
}

#[test]
fn same_seed_replays_bit_for_bit() {
    let a = trace(42, 0.1);
    let b = trace(42, 0.1);
    assert!(!a.0.is_empty());
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    let c = trace(43, 0.1);
    assert_ne!(a.0, c.0, "another seed gives other latencies and losses");
}

#[test]
fn every_ping_is_answered_without_loss() {
    let (events, stats) = trace(1, 0.0);
    let pings = events.iter().filter(|e| matches!(e.2, Seen::Ping { .. })).count() as u64;
    let pongs = events.iter().filter(|e| matches!(e.2, Seen::Pong { .. })).count() as u64;
    assert!(pings > 100);
    // Pongs still in flight at the end make up the difference.
    assert!(pongs <= pings && pings - pongs <= 20, "pings {pings} pongs {pongs}");
    assert_eq!(stats.lost, 0);
    assert_eq!(stats.delivered, pings + pongs, "every delivery reached the machine");
}

#[test]
fn links_deliver_in_order_and_within_latency_bounds() {
    let t0 = Instant::now();
    let mut sim = Sim::new(SimConfig::default(), t0);
    sim.add_node(Pinger::new(0, &[1], 1, t0)); // pings every millisecond
    sim.add_node(Pinger::new(1, &[], 1_000_000, t0));
    sim.run_for(Duration::from_millis(500));
    let mut last = 0;
    let mut n = 0;
    while let Some(e) = sim.poll_event() {
        if let Seen::Ping { n: k, .. } = e.event {
            assert!(k > last, "ping {k} overtook {last}");
            let sent_at = Duration::from_millis(k);
            let lat = e.at - t0 - sent_at;
            let cfg = NetConfig::default();
            assert!(lat >= cfg.latency_min && lat <= cfg.latency_max, "latency {lat:?}");
            last = k;
            n += 1;
        }
    }
    assert!(n > 400);
}

#[test]
fn crashed_nodes_are_reported_or_silent_as_configured() {
    for report in [true, false] {
        let t0 = Instant::now();
        let net = NetConfig { report_failures: report, ..NetConfig::default() };
        let mut sim = Sim::new(SimConfig { net, ..SimConfig::default() }, t0);
        let a = sim.add_node(Pinger::new(0, &[1], 100, t0));
        let b = sim.add_node(Pinger::new(1, &[], 1_000_000, t0));
        sim.run_for(Duration::from_millis(250));
        sim.crash(b);
        assert_eq!(sim.liveness(b), Liveness::Crashed);
        sim.clear_events();
        sim.run_for(Duration::from_secs(1));
        let mut failed = 0;
        while let Some(e) = sim.poll_event() {
            assert_eq!(e.node, a, "a crashed node reports nothing");
            if let Seen::Failed(to) = e.event {
                assert_eq!(to, sim.addr(b));
                failed += 1;
            }
        }
        if report {
            assert!(failed >= 9, "each ping to the dead node fails, got {failed}");
        } else {
            assert_eq!(failed, 0);
            assert!(sim.stats().lost >= 9);
        }
    }
}

#[test]
fn partitions_drop_messages_until_healed() {
    let t0 = Instant::now();
    let mut sim = Sim::new(SimConfig::default(), t0);
    let a = sim.add_node(Pinger::new(0, &[1], 100, t0));
    let b = sim.add_node(Pinger::new(1, &[], 1_000_000, t0));
    sim.partition(a, b);
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.stats().delivered, 0);
    sim.heal();
    sim.run_for(Duration::from_secs(1));
    assert!(sim.stats().delivered >= 18);
}

#[test]
fn run_while_not_stops_as_soon_as_the_condition_holds() {
    let t0 = Instant::now();
    let mut sim = Sim::new(SimConfig::default(), t0);
    sim.add_node(Pinger::new(0, &[1], 100, t0));
    sim.add_node(Pinger::new(1, &[], 1_000_000, t0));
    let ok = sim.run_while_not(Duration::from_secs(10), |s| s.stats().delivered >= 3);
    assert!(ok);
    assert_eq!(sim.stats().delivered, 3);
    assert!(sim.elapsed() < Duration::from_secs(1));
    let never = sim.run_while_not(Duration::from_secs(1), |s| s.stats().delivered > 1_000);
    assert!(!never);
}

#[test]
fn a_postponed_deadline_fires_once_and_never_early() {
    let t0 = Instant::now();
    let mut sim = Sim::new(SimConfig::default(), t0);
    let a = sim.add_node(Pinger::new(0, &[1], 1_000, t0));
    sim.add_node(Pinger::new(1, &[], 1_000_000, t0));
    // The first round is due at 1 s; postpone it twice, to 1.5 s then 2.2 s.
    sim.run_for(Duration::from_millis(500));
    sim.command(a, ()).unwrap();
    sim.run_for(Duration::from_millis(700));
    sim.command(a, ()).unwrap();
    sim.run_until(t0 + Duration::from_millis(2_199));
    assert_eq!(sim.stats().timeouts, 0, "nothing was due yet");
    assert_eq!(sim.stats().sent, 0);
    sim.run_until(t0 + Duration::from_millis(2_200));
    assert_eq!(sim.stats().timeouts, 1, "fired exactly at the last deadline");
    assert_eq!(sim.stats().sent, 1);
    sim.run_for(Duration::from_secs(3));
    assert_eq!(sim.node(a).early_timeouts, 0, "handle_timeout is never called before poll_timeout");
    assert_eq!(sim.node(a).sent, 4, "rounds at 2.2, 3.2, 4.2 and 5.2 s");
}

#[test]
fn a_message_to_itself_arrives_at_once_and_is_never_lost() {
    let t0 = Instant::now();
    let net = NetConfig { loss: 1.0, ..NetConfig::default() };
    let mut sim = Sim::new(SimConfig { seed: 7, net, codec_roundtrip: true }, t0);
    let me = sim.add_node(Pinger::new(0, &[0], 100, t0));
    sim.run_for(Duration::from_millis(100));
    let seen: Vec<_> = std::iter::from_fn(|| sim.poll_event()).map(|e| (e.at - t0, e.event)).collect();
    let addr = sim.addr(me);
    let at = Duration::from_millis(100);
    assert_eq!(seen, [(at, Seen::Ping { from: addr, n: 1 }), (at, Seen::Pong { from: addr, n: 1 })]);
    assert_eq!(sim.stats().lost, 0);
}
