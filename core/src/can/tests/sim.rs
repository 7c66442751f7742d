//! Whole CAN networks under `core::sim`: every message through the codec.

use std::time::{Duration, Instant};

use super::super::check::CanTruth;
use super::super::{CanConfig, CanNode};
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::overlay::{OverlayCommand, OverlayEvent};
use crate::sim::{NetConfig, NodeIdx, Sim, SimConfig};

fn addr(i: usize) -> NodeAddr {
    NodeAddr::loopback(i as u32, 5000)
}

fn cfg(dims: usize) -> CanConfig {
    CanConfig { dims, ..CanConfig::default() }
}

fn sim(report_failures: bool) -> Sim<CanNode> {
    let net = NetConfig { report_failures, ..NetConfig::default() };
    Sim::new(SimConfig { seed: 11, net, codec_roundtrip: true }, Instant::now())
}

/// `n` nodes joining one after another through random earlier ones.
fn build(n: usize, dims: usize, report_failures: bool) -> Sim<CanNode> {
    let mut s = sim(report_failures);
    s.add_node(CanNode::new(cfg(dims), addr(0), vec![], s.now(), 0));
    for i in 1..n {
        let contact = addr((i * 7919) % i);
        s.add_node(CanNode::new(cfg(dims), addr(i), vec![contact], s.now(), i as u64));
        s.run_for(Duration::from_millis(100));
    }
    s
}

fn converge(s: &mut Sim<CanNode>, limit: Duration) {
    let ok = s.run_while_not(limit, |s| {
        for i in s.alive() {
            s.node(i).check_invariants();
        }
        let t = CanTruth::of(s);
        t.len() == s.alive().count() && t.converged(s)
    });
    let t = CanTruth::of(s);
    assert!(ok, "not converged within {limit:?}: {:?}", t.check(s));
}

/// Looks up `keys` from every live node; returns the wrong or failed ones.
fn wrong_lookups(s: &mut Sim<CanNode>, keys: &[Id]) -> Vec<String> {
    let truth = CanTruth::of(s);
    let mut want = std::collections::BTreeMap::new();
    let nodes: Vec<NodeIdx> = s.alive().collect();
    let mut token = 0;
    for &n in &nodes {
        for &key in keys {
            token += 1;
            want.insert(token, (n, key));
            s.command(n, OverlayCommand::Lookup { token, key }).unwrap();
        }
    }
    s.run_for(Duration::from_secs(15));
    let mut wrong = Vec::new();
    while let Some(e) = s.poll_event() {
        if let OverlayEvent::LookupDone { token, result, .. } = e.event {
            let (n, key) = want.remove(&token).unwrap();
            let owner = truth.owner_of_key(key).unwrap();
            match result {
                Ok(r) if r.owner_id == owner.0 => {}
                other => wrong.push(format!("node {n} key {key}: {other:?}, owner {:?}", owner.1)),
            }
        }
    }
    wrong.extend(want.values().map(|(n, k)| format!("node {n} key {k}: no answer")));
    wrong
}

fn keys(n: usize) -> Vec<Id> {
    (0..n).map(|i| Id::hash(format!("key-{i}"))).collect()
}

#[test]
fn a_lone_node_owns_everything() {
    let mut s = build(1, 2, true);
    s.run_for(Duration::from_secs(2));
    assert_eq!(s.node(0).zones().len(), 1);
    assert_eq!(s.node(0).zones()[0].depth(), 0);
    assert!(wrong_lookups(&mut s, &keys(5)).is_empty());
    let hops: Vec<u32> = std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e.event {
            OverlayEvent::LookupDone { result: Ok(r), .. } => Some(r.hops),
            _ => None,
        })
        .collect();
    assert!(hops.iter().all(|h| *h == 0));
}

#[test]
fn joins_tile_the_space_and_routes_find_owners() {
    for dims in [1, 2, 3, 5, 8] {
        let mut s = build(24, dims, true);
        converge(&mut s, Duration::from_secs(30));
        let wrong = wrong_lookups(&mut s, &keys(8));
        assert!(wrong.is_empty(), "d={dims}: {wrong:#?}");
    }
}

#[test]
fn graceful_leaves_keep_the_tiling_and_registrations() {
    let mut s = build(16, 2, true);
    converge(&mut s, Duration::from_secs(30));
    for i in 0..16 {
        let cmd = OverlayCommand::Register {
            name: format!("svc-{}", i % 5),
            value: format!("n{i}"),
            ttl: Duration::from_secs(3600),
        };
        s.command(i, cmd).unwrap();
    }
    s.run_for(Duration::from_secs(3));
    // Registrant 3 leaves too: its entry must survive its graceful leave.
    for victim in [3, 8, 11, 12, 0] {
        s.command(victim, OverlayCommand::Leave).unwrap();
    }
    let left = s.run_while_not(Duration::from_secs(30), |s| [3, 8, 11, 12, 0].iter().all(|&v| s.node(v).has_left()));
    assert!(left, "leaves did not finish");
    for v in [3, 8, 11, 12, 0] {
        s.retire(v);
    }
    converge(&mut s, Duration::from_secs(30));
    assert!(wrong_lookups(&mut s, &keys(8)).is_empty());
    let from = s.alive().next().unwrap();
    for name in 0..5 {
        s.command(from, OverlayCommand::Query { token: name, name: format!("svc-{name}") }).unwrap();
    }
    s.run_for(Duration::from_secs(5));
    let mut answered = 0;
    while let Some(e) = s.poll_event() {
        if let OverlayEvent::QueryDone { token, result, .. } = e.event {
            let got = result.unwrap();
            let mut want: Vec<String> = (0..16).filter(|i| i % 5 == token as usize).map(|i| format!("n{i}")).collect();
            want.sort();
            assert_eq!(got, want, "svc-{token}");
            answered += 1;
        }
    }
    assert_eq!(answered, 5);
}

#[test]
fn crashes_are_taken_over_by_exactly_one_neighbour() {
    for report_failures in [true, false] {
        let mut s = build(20, 2, report_failures);
        converge(&mut s, Duration::from_secs(30));
        for i in 0..20 {
            let cmd = OverlayCommand::Register {
                name: format!("svc-{i}"),
                value: format!("n{i}"),
                ttl: Duration::from_secs(3600),
            };
            s.command(i, cmd).unwrap();
        }
        s.run_for(Duration::from_secs(3));
        for victim in [4, 9, 15] {
            s.crash(victim);
        }
        converge(&mut s, Duration::from_secs(60));
        assert!(wrong_lookups(&mut s, &keys(8)).is_empty());
        let takeovers: u64 = s.alive().map(|i| s.node(i).stats().takeovers).sum();
        assert!(takeovers >= 3, "report_failures={report_failures}: {takeovers} takeovers");
        // Registrations of live registrants are all there at once (replicas), not
        // after a refresh (TTL/3 = 20 minutes).
        let from = s.alive().next().unwrap();
        for i in (0..20).filter(|i| ![4, 9, 15].contains(i)) {
            s.command(from, OverlayCommand::Query { token: i as u64, name: format!("svc-{i}") }).unwrap();
        }
        s.run_for(Duration::from_secs(5));
        while let Some(e) = s.poll_event() {
            if let OverlayEvent::QueryDone { token, result, .. } = e.event {
                assert_eq!(result.unwrap(), vec![format!("n{token}")], "svc-{token}");
            }
        }
    }
}

#[test]
fn a_joiner_of_other_dimensions_is_refused() {
    let mut s = build(3, 2, true);
    converge(&mut s, Duration::from_secs(10));
    let odd = s.add_node(CanNode::new(cfg(3), addr(50), vec![addr(0)], s.now(), 50));
    s.run_for(Duration::from_secs(3));
    assert!(!s.node(odd).is_joined());
    let reasons: Vec<String> = std::iter::from_fn(|| s.poll_event())
        .filter(|e| e.node == odd)
        .filter_map(|e| match e.event {
            OverlayEvent::Refused { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert!(reasons.iter().any(|r| r.contains("2 dimensions")), "{reasons:?}");
}
