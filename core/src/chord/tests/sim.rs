//! Chord under `core::sim`: every message through the codec, jittered latencies,
//! message loss, crashes and a leave.

use std::time::{Duration, Instant};

use super::*;
use crate::sim::{NetConfig, Sim, SimConfig};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Live nodes in id order.
fn ring(sim: &Sim<ChordNode>) -> Vec<(usize, Peer)> {
    let mut v: Vec<(usize, Peer)> = sim.alive().map(|i| (i, sim.node(i).me())).collect();
    v.sort_by_key(|(_, p)| *p);
    v
}

/// Successors, predecessors and successor lists that differ from the true ring.
fn ring_errors(sim: &Sim<ChordNode>) -> usize {
    let ring = ring(sim);
    let n = ring.len();
    let mut bad = 0;
    for (k, (i, _)) in ring.iter().enumerate() {
        let node = sim.node(*i);
        let r = node.config().successors.min(n - 1);
        let want: Vec<Peer> = (1..=r).map(|d| ring[(k + d) % n].1).collect();
        let pred = ring[(k + n - 1) % n].1;
        bad += usize::from(!node.is_joined() || node.successor_list() != want.as_slice())
            + usize::from(node.predecessor() != Some(pred));
    }
    bad
}

fn owner(sim: &Sim<ChordNode>, key: Id) -> NodeAddr {
    let ring = ring(sim);
    let at = ring.partition_point(|(_, p)| p.id < key);
    ring[at % ring.len()].1.addr
}

fn build(n: usize, loss: f64) -> Sim<ChordNode> {
    let net = NetConfig { loss, ..NetConfig::default() };
    let mut sim = Sim::new(SimConfig { seed: 7, net, codec_roundtrip: true }, Instant::now());
    let first = addr(0);
    sim.add_node(ChordNode::new(ChordConfig::default(), first, vec![], sim.now(), 0));
    for i in 1..n {
        let node = ChordNode::new(ChordConfig::default(), addr(i), vec![first, addr(i / 2)], sim.now(), i as u64);
        sim.add_node(node);
        sim.run_for(Duration::from_millis(50));
    }
    sim
}

fn converge(sim: &mut Sim<ChordNode>, limit: Duration) {
    let end = sim.now() + limit;
    while sim.now() < end && ring_errors(sim) > 0 {
        sim.run_for(secs(1));
    }
    assert_eq!(ring_errors(sim), 0, "no convergence within {limit:?}");
}

/// Issues one lookup per live node and returns (answers matching the true owner, answers).
fn lookups(sim: &mut Sim<ChordNode>, salt: &str) -> (usize, usize) {
    sim.clear_events();
    let live: Vec<usize> = sim.alive().collect();
    for (t, &i) in live.iter().enumerate() {
        let key = Id::hash(format!("{salt}{t}"));
        sim.command(i, OverlayCommand::Lookup { token: t as u64, key }).unwrap();
    }
    sim.run_for(secs(8));
    let (mut right, mut answered) = (0, 0);
    while let Some(e) = sim.poll_event() {
        if let OverlayEvent::LookupDone { key, result: Ok(r), .. } = e.event {
            answered += 1;
            right += usize::from(r.owner == owner(sim, key));
        }
    }
    (right, answered)
}

#[test]
fn a_lossy_jittery_network_with_codec_round_trips_converges_and_heals() {
    let mut sim = build(48, 0.01);
    converge(&mut sim, secs(120));
    let (right, answered) = lookups(&mut sim, "a");
    assert!(answered >= 46 && right == answered, "{right} right of {answered} answered");

    // Registrations survive a crash of their owner.
    sim.command(3, OverlayCommand::Register { name: "svc".into(), value: "v".into(), ttl: secs(600) }).unwrap();
    sim.run_for(secs(2));
    let owner_idx = sim.lookup_addr(owner(&sim, Id::hash("svc"))).unwrap();
    for i in [owner_idx, 10, 11, 12].into_iter().filter(|&i| i != 3) {
        sim.crash(i);
    }
    converge(&mut sim, secs(60));
    let (right, answered) = lookups(&mut sim, "b");
    assert!(answered >= 40 && right == answered, "{right} right of {answered} answered");
    sim.clear_events();
    sim.command(5, OverlayCommand::Query { token: 9, name: "svc".into() }).unwrap();
    sim.run_for(secs(6));
    let got: Vec<_> = std::iter::from_fn(|| sim.poll_event())
        .filter_map(|e| match e.event {
            OverlayEvent::QueryDone { token: 9, result, .. } => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(got, vec![Ok(vec!["v".to_string()])]);

    // A graceful leave, then the node is taken off the network.
    sim.command(20, OverlayCommand::Leave).unwrap();
    sim.retire(20);
    converge(&mut sim, secs(30));
    assert!(sim.stats().delivered > 10_000, "{:?}", sim.stats());
}

#[test]
fn without_failure_reports_crashes_are_found_by_timeouts() {
    let net = NetConfig { report_failures: false, ..NetConfig::default() };
    let mut sim = Sim::new(SimConfig { seed: 3, net, codec_roundtrip: true }, Instant::now());
    sim.add_node(ChordNode::new(ChordConfig::default(), addr(0), vec![], sim.now(), 0));
    for i in 1..24 {
        sim.add_node(ChordNode::new(ChordConfig::default(), addr(i), vec![addr(0)], sim.now(), i as u64));
        sim.run_for(Duration::from_millis(100));
    }
    converge(&mut sim, secs(60));
    for i in [4, 5, 6, 7] {
        sim.crash(i);
    }
    converge(&mut sim, secs(60));
    let (right, answered) = lookups(&mut sim, "c");
    assert_eq!((right, answered), (20, 20));
}

/// A node whose only contact leaves before answering cannot join (it must not make
/// a ring of its own): it reports `Disconnected` and keeps retrying.
#[test]
fn a_joiner_whose_only_contact_leaves_first_stays_disconnected() {
    let net = NetConfig { report_failures: false, ..NetConfig::default() };
    let mut sim = Sim::new(SimConfig { seed: 0, net, codec_roundtrip: true }, Instant::now());
    sim.add_node(ChordNode::new(ChordConfig::default(), addr(0), vec![], sim.now(), 0));
    for i in 1..3 {
        sim.run_for(Duration::from_millis(300));
        sim.add_node(ChordNode::new(ChordConfig::default(), addr(i), vec![addr(0)], sim.now(), i as u64));
    }
    sim.run_for(Duration::from_millis(58));
    let joiner = sim.add_node(ChordNode::new(ChordConfig::default(), addr(3), vec![addr(1)], sim.now(), 3));
    sim.command(1, OverlayCommand::Leave).unwrap();
    sim.retire(1);
    sim.run_for(secs(60));
    assert!(!sim.node(joiner).is_joined());
    let evs: Vec<_> = std::iter::from_fn(|| sim.poll_event()).filter(|e| e.node == joiner).map(|e| e.event).collect();
    assert_eq!(evs, vec![OverlayEvent::Disconnected]);
}
