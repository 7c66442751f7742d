//! Membership, ring maintenance, fingers and lookups.

use std::time::Duration;

use super::*;
use crate::overlay::{LookupResult, OverlayError};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn lookup(net: &mut Net, from: usize, key: Id, token: u64) -> Result<LookupResult, OverlayError> {
    net.take_events(from);
    net.command(from, OverlayCommand::Lookup { token, key });
    net.run_for(Duration::from_secs(6));
    let evs = net.take_events(from);
    let done: Vec<_> = evs
        .into_iter()
        .filter_map(|e| match e {
            OverlayEvent::LookupDone { token: t, key: k, result } if t == token && k == key => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(done.len(), 1, "exactly one answer per lookup");
    done.into_iter().next().unwrap()
}

#[test]
fn a_node_alone_creates_a_ring_and_owns_everything() {
    let mut net = Net::new(ChordConfig::default());
    let a = net.add(vec![addr(0)]); // only itself: alone
    assert!(net.nodes[a].is_joined());
    assert_eq!(net.take_events(a), vec![OverlayEvent::Joined]);
    net.run_for(secs(5));
    assert_eq!(net.nodes[a].successor(), net.nodes[a].me());
    assert_eq!(net.nodes[a].predecessor(), None);
    let r = lookup(&mut net, a, Id::hash("k"), 1).unwrap();
    assert_eq!((r.owner, r.hops), (addr(a), 0));
    assert_eq!(net.nodes[a].stats().sent, 0, "a node alone sends nothing");
}

#[test]
fn two_nodes_point_at_each_other() {
    let mut net = Net::new(ChordConfig::default());
    let a = net.add(vec![]);
    let b = net.add(vec![addr(a)]);
    net.converge(secs(10));
    assert_eq!(net.nodes[a].successor(), net.nodes[b].me());
    assert_eq!(net.nodes[b].successor(), net.nodes[a].me());
    assert_eq!(net.nodes[a].predecessor(), Some(net.nodes[b].me()));
    assert!(net.take_events(b).contains(&OverlayEvent::Joined));
}

#[test]
fn ten_nodes_converge_to_the_true_ring_with_true_fingers() {
    let mut net = Net::build(ChordConfig::default(), 10, Duration::from_millis(100));
    net.converge(secs(30));
    net.run_for(secs(20));
    assert!(net.ring_errors().is_empty(), "{:?}", net.ring_errors());
    assert_eq!(net.finger_errors(), 0);
    for i in 0..10 {
        assert_eq!(net.take_events(i).iter().filter(|e| **e == OverlayEvent::Joined).count(), 1);
    }
}

#[test]
fn simultaneous_joins_converge() {
    let mut net = Net::new(ChordConfig::default());
    net.add(vec![]);
    for _ in 1..20 {
        net.add(vec![addr(0)]);
    }
    net.converge(secs(60));
}

#[test]
fn lookups_return_the_true_owner() {
    let mut net = Net::build(ChordConfig::default(), 40, Duration::from_millis(50));
    net.converge(secs(60));
    net.run_for(secs(30));
    for t in 0..60u64 {
        let key = Id::hash(t.to_le_bytes());
        let from = (t as usize * 7) % 40;
        let r = lookup(&mut net, from, key, t).unwrap();
        assert_eq!(r.owner, net.owner(key).addr, "lookup {t}");
        assert_eq!(r.owner_id, net.owner(key).id);
        assert!(r.hops <= 8, "hops {}", r.hops);
    }
    // The node owning a key answers with 0 hops; so does its predecessor.
    let key = Id::hash("own");
    let owner = net.by_addr[&net.owner(key).addr];
    assert_eq!(lookup(&mut net, owner, key, 999).unwrap().hops, 0);
}

/// Builds a converged ring of `n` and returns the mean hops of `lookups` random lookups.
fn mean_hops(n: usize, lookups: u64) -> f64 {
    let mut net = Net::build(ChordConfig::default(), n, Duration::from_millis(20));
    net.converge(secs(300));
    net.run_for(secs(40));
    assert_eq!(net.finger_errors(), 0);
    for t in 0..lookups {
        let key = Id::hash(format!("key{t}"));
        net.command((t as usize * 31) % n, OverlayCommand::Lookup { token: t, key });
    }
    net.run_for(secs(6));
    let mut hops = Vec::new();
    for (i, e) in std::mem::take(&mut net.events) {
        if let OverlayEvent::LookupDone { key, result, .. } = e {
            let r = result.unwrap();
            assert_eq!(r.owner, net.owner(key).addr, "lookup from {i}");
            hops.push(f64::from(r.hops));
        }
    }
    assert_eq!(hops.len(), lookups as usize);
    let mean = hops.iter().sum::<f64>() / hops.len() as f64;
    eprintln!("n {n}: mean hops {mean}, 0.5 log2 n = {}", 0.5 * (n as f64).log2());
    mean
}

#[test]
fn mean_hops_is_half_log2_n() {
    let n = 256;
    let mean = mean_hops(n, 500);
    let want = 0.5 * (n as f64).log2();
    assert!((mean - want).abs() / want < 0.15, "mean hops {mean}, want ~{want}");
}

/// The benchmark's target at scale; slow in a debug build, so run on demand.
#[test]
#[ignore]
fn mean_hops_at_2048_is_within_10_percent() {
    let n = 2048;
    let mean = mean_hops(n, 2000);
    let want = 0.5 * (n as f64).log2();
    assert!((mean - want).abs() / want < 0.10, "mean hops {mean}, want ~{want}");
}

#[test]
fn crashed_successor_is_replaced_and_the_ring_repaired() {
    for how in [Health::Refusing, Health::Silent] {
        let mut net = Net::build(ChordConfig::default(), 12, Duration::from_millis(50));
        net.converge(secs(30));
        net.crash(3, how);
        net.crash(4, how);
        net.converge(secs(30));
        net.run_for(secs(30));
        assert_eq!(net.finger_errors(), 0, "{how:?}");
        let key = net.nodes[3].id();
        assert_eq!(lookup(&mut net, 0, key, 1).unwrap().owner, net.owner(key).addr);
    }
}

#[test]
fn lookups_route_around_silent_hops() {
    let mut net = Net::build(ChordConfig::default(), 60, Duration::from_millis(50));
    net.converge(secs(60));
    net.run_for(secs(30));
    // Crash a third of the nodes silently and look up at once, before any repair.
    for i in (1..60).step_by(3) {
        net.crash(i, Health::Silent);
    }
    let mut ok = 0;
    for t in 0..30u64 {
        let key = Id::hash(format!("x{t}"));
        let from = (t as usize * 3) % 60; // a live node
        if let Ok(r) = lookup(&mut net, from, key, t) {
            assert!(net.health[net.by_addr[&r.owner]] == Health::Up || r.owner != net.owner(key).addr);
            ok += 1;
        }
    }
    assert!(ok >= 25, "only {ok} of 30 lookups answered");
    net.converge(secs(60));
}

#[test]
fn graceful_leave_links_the_neighbours() {
    let mut net = Net::build(ChordConfig::default(), 8, Duration::from_millis(50));
    net.converge(secs(30));
    let sent_before: u64 = (0..8).map(|i| net.nodes[i].stats().sent).sum();
    net.command(5, OverlayCommand::Leave);
    assert!(net.take_events(5).contains(&OverlayEvent::Left));
    assert!(net.nodes[5].has_left());
    assert_eq!(net.nodes[5].poll_timeout(), None, "a node that left is quiet");
    // The neighbours know each other straight from the notices, before any stabilize.
    net.run_for(Duration::from_millis(50));
    let ring = net.ring();
    for (k, p) in ring.iter().enumerate() {
        let node = &net.nodes[net.by_addr[&p.addr]];
        assert_eq!(node.successor(), ring[(k + 1) % ring.len()]);
        assert_eq!(node.predecessor(), Some(ring[(k + ring.len() - 1) % ring.len()]));
    }
    // Longer successor lists heal by stabilization.
    net.converge(secs(20));
    assert!(net.nodes[5].handle_command(net.now, OverlayCommand::Lookup { token: 0, key: Id::ZERO }).is_err());
    net.run_for(secs(5));
    assert!((0..8).map(|i| net.nodes[i].stats().sent).sum::<u64>() > sent_before);
}

#[test]
fn leave_of_a_two_node_ring_leaves_one_alone() {
    let mut net = Net::new(ChordConfig::default());
    net.add(vec![]);
    net.add(vec![addr(0)]);
    net.converge(secs(10));
    net.command(0, OverlayCommand::Leave);
    net.run_for(secs(5));
    assert!(net.nodes[1].is_joined());
    assert!(net.ring_errors().is_empty(), "{:?}", net.ring_errors());
    assert!(net.nodes[1].successor_list().is_empty());
}

#[test]
fn unreachable_bootstrap_never_makes_a_second_ring() {
    let mut net = Net::new(ChordConfig::default());
    let a = net.add(vec![addr(50), addr(51)]); // nobody there
    net.run_for(secs(60));
    assert!(!net.nodes[a].is_joined());
    let evs = net.take_events(a);
    assert_eq!(evs, vec![OverlayEvent::Disconnected], "reported once, never joined");
    net.command(a, OverlayCommand::Lookup { token: 1, key: Id::ZERO });
    let evs = net.take_events(a);
    assert!(matches!(evs.as_slice(), [OverlayEvent::LookupDone { result: Err(OverlayError::NotConnected), .. }]));
    // Back-off (doubling up to 8 s): a minute of retries to two contacts is a
    // dozen rounds, not a flood.
    assert!(net.nodes[a].stats().sent < 30, "sent {}", net.nodes[a].stats().sent);

    // A silent contact: the same, through timeouts.
    let mut net = Net::new(ChordConfig::default());
    net.add(vec![]);
    net.crash(0, Health::Silent);
    let b = net.add(vec![addr(0)]);
    net.run_for(secs(20));
    assert!(!net.nodes[b].is_joined());
    assert_eq!(net.take_events(b), vec![OverlayEvent::Disconnected]);
}

#[test]
fn a_node_that_loses_every_contact_rejoins_through_bootstrap() {
    let mut net = Net::new(ChordConfig::default());
    net.add(vec![]);
    net.add(vec![addr(0)]);
    net.add(vec![addr(0)]);
    net.converge(secs(20));
    // Node 2 is cut off from everyone but node 0, which then comes back.
    net.crash(0, Health::Refusing);
    net.crash(1, Health::Refusing);
    net.run_for(secs(10));
    assert!(!net.nodes[2].is_joined());
    assert!(net.take_events(2).contains(&OverlayEvent::Disconnected));
    net.revive(0);
    net.run_for(secs(70));
    assert!(net.nodes[2].is_joined());
    assert!(net.take_events(2).contains(&OverlayEvent::Joined));
}

#[test]
fn bad_peer_input_is_dropped_and_counted() {
    let mut net = Net::build(ChordConfig::default(), 3, Duration::from_millis(50));
    net.converge(secs(20));
    let stranger = Peer::from_addr(addr(77));
    let bodies = vec![
        ChordMsg::Pong,
        ChordMsg::FindSuccessorReply(super::super::Step::Done { owner: stranger }),
        ChordMsg::Predecessor { predecessor: Some(stranger), successors: vec![stranger; 100] },
        ChordMsg::QueryResult { values: vec!["x".into()] },
        ChordMsg::SuccessorList { successors: vec![] },
        ChordMsg::Ping, // request id 0
    ];
    let before = net.nodes[0].stats().dropped;
    for (k, body) in bodies.into_iter().enumerate() {
        let env = Envelope::new(stranger.id, stranger.addr, if k == 5 { 0 } else { 12345 }, body);
        net.nodes[0].handle_message(net.now, env);
        net.after(0);
    }
    // A notify with a forged id, one that would be adopted as predecessor.
    let forged = net.nodes[0].id().wrapping_sub(Id::pow2(0));
    net.nodes[0].handle_message(net.now, Envelope::new(forged, stranger.addr, 0, ChordMsg::Notify));
    net.after(0);
    assert_eq!(net.nodes[0].stats().dropped - before, 7);
    assert_ne!(net.nodes[0].predecessor().map(|p| p.addr), Some(stranger.addr));
    net.run_for(secs(5));
    assert!(net.ring_errors().is_empty());
}

#[test]
fn a_leave_notice_whose_sender_id_is_not_its_address_is_dropped() {
    let mut net = Net::build(ChordConfig::default(), 3, Duration::from_millis(50));
    net.converge(secs(20));
    let b = net.nodes[1].me();
    let forged = b.id.wrapping_add(Id::pow2(0));
    assert_eq!(Peer::checked(b.id, b.addr), Ok(b));
    assert_eq!(Peer::checked(forged, b.addr), Err(crate::overlay::IdMismatch { claimed: forged, addr: b.addr }));
    let before = net.nodes[0].stats().dropped;
    for body in
        [ChordMsg::LeavingToSuccessor { predecessor: None }, ChordMsg::LeavingToPredecessor { successors: vec![] }]
    {
        net.nodes[0].handle_message(net.now, Envelope::new(forged, b.addr, 0, body));
        net.after(0);
    }
    assert_eq!(net.nodes[0].stats().dropped - before, 2);
    assert!(net.nodes[0].successor_list().iter().any(|p| p.addr == b.addr), "a forged leave notice was taken");
}

#[test]
fn maintenance_traffic_is_counted_and_bounded() {
    let n = 32;
    let mut net = Net::build(ChordConfig::default(), n, Duration::from_millis(50));
    net.converge(secs(60));
    net.run_for(secs(30));
    let before: u64 = (0..n).map(|i| net.nodes[i].stats().maintenance_sent).sum();
    net.run_for(secs(60));
    let after: u64 = (0..n).map(|i| net.nodes[i].stats().maintenance_sent).sum();
    let per_node_s = (after - before) as f64 / n as f64 / 60.0;
    eprintln!("{per_node_s:.2} maintenance messages per node per second (n = {n})");
    // stabilize and notify (2), a ping every 2 s (0.5), one finger check (1)
    assert!(per_node_s > 2.0 && per_node_s < 5.0, "{per_node_s} maintenance messages per node per second");
}

/// A scale smoke test: many nodes joining through a few contacts, then lookups.
/// Slow in a debug build; run with `--ignored --nocapture` to see the numbers.
#[test]
#[ignore]
fn ten_thousand_nodes_join_converge_and_answer() {
    let n = 10_000;
    let started = std::time::Instant::now();
    let mut net = Net::new(ChordConfig::default());
    net.add(vec![]);
    for i in 1..n {
        // Through one of the first 16 nodes (a node's own address alone would
        // make it create a ring of its own).
        net.add(vec![addr(if i < 16 { 0 } else { i % 16 })]);
        if i % 100 == 0 {
            net.run_for(Duration::from_millis(100));
        }
    }
    net.converge(secs(300));
    let joined_at = net.now;
    net.run_for(secs(30));
    eprintln!("{n} nodes converged, {} deliveries, {:?} wall", net.delivered, started.elapsed());
    let before: u64 = (0..n).map(|i| net.nodes[i].stats().maintenance_sent + net.nodes[i].stats().replies_sent).sum();
    let t0 = net.now;
    net.run_for(secs(10));
    let after: u64 = (0..n).map(|i| net.nodes[i].stats().maintenance_sent + net.nodes[i].stats().replies_sent).sum();
    eprintln!(
        "steady state: {:.2} messages per node per second",
        (after - before) as f64 / n as f64 / (net.now - t0).as_secs_f64()
    );
    for t in 0..n as u64 {
        net.command(t as usize, OverlayCommand::Lookup { token: t, key: Id::hash(t.to_be_bytes()) });
    }
    net.run_for(secs(6));
    let mut hops = 0u64;
    let mut ok = 0u64;
    for (_, e) in std::mem::take(&mut net.events) {
        if let OverlayEvent::LookupDone { key, result: Ok(r), .. } = e {
            assert_eq!(r.owner, net.owner(key).addr);
            hops += u64::from(r.hops);
            ok += 1;
        }
    }
    assert_eq!(ok, n as u64);
    eprintln!(
        "mean hops {:.3} (0.5 log2 n = {:.3}); {:?} sim to converge; {:?} wall",
        hops as f64 / ok as f64,
        0.5 * (n as f64).log2(),
        joined_at - t0.min(joined_at),
        started.elapsed()
    );
    eprintln!("size_of ChordNode = {}", std::mem::size_of::<ChordNode>());
}

#[test]
#[ignore]
fn diag_fast_joins() {
    let n: usize = std::env::var("DIAG_N").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let seed_n: usize = std::env::var("DIAG_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
    let gap: u64 = std::env::var("DIAG_GAP_US").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let mut net = Net::new(ChordConfig::default());
    net.add(vec![]);
    for i in 1..n {
        if i < seed_n {
            net.add(vec![addr(0)]);
            net.run_for(Duration::from_millis(100));
            if i == seed_n - 1 {
                net.converge(secs(60));
            }
        } else {
            net.add(vec![addr(i % seed_n)]);
            net.run_for(Duration::from_micros(gap));
        }
    }
    for round in 0..30 {
        net.run_for(secs(10));
        let ring = net.ring();
        let joined = (0..n).filter(|&i| net.nodes[i].is_joined()).count();
        let rank: std::collections::BTreeMap<NodeAddr, usize> =
            ring.iter().enumerate().map(|(k, p)| (p.addr, k)).collect();
        let good_succ = ring
            .iter()
            .enumerate()
            .filter(|(k, p)| net.nodes[net.by_addr[&p.addr]].successor() == ring[(k + 1) % n])
            .count();
        // cycle from node 0
        let mut seen = std::collections::BTreeSet::new();
        let mut cur = net.nodes[0].me();
        while seen.insert(cur.addr) {
            cur = net.nodes[net.by_addr[&cur.addr]].successor();
        }
        let dist: Vec<usize> = ring
            .iter()
            .enumerate()
            .filter_map(|(k, p)| {
                let s = net.nodes[net.by_addr[&p.addr]].successor();
                let d = (rank[&s.addr] + n - k) % n;
                (d != 1).then_some(d)
            })
            .take(10)
            .collect();
        eprintln!(
            "t+{}s joined {joined} good succ {good_succ} cycle from 0: {} first skips {:?} failures {}",
            (round + 1) * 10,
            seen.len(),
            dist,
            (0..n).map(|i| net.nodes[i].stats().request_failures).sum::<u64>()
        );
        if good_succ == n {
            break;
        }
    }
}

#[test]
fn per_node_state_is_small() {
    use std::mem::size_of;
    let net = Net::build(ChordConfig::default(), 64, Duration::from_millis(20));
    let node = &net.nodes[5];
    // Rough heap estimate: the successor list, the finger runs, the queues.
    let heap = node.succs.capacity() * size_of::<Peer>()
        + std::mem::size_of_val(node.fingers())
        + node.actions.capacity() * size_of::<Action<ChordMsg, OverlayEvent>>()
        + node.bootstrap.capacity() * size_of::<NodeAddr>();
    eprintln!(
        "ChordNode {} B inline, ~{heap} B heap; Action {} B; Peer {} B",
        size_of::<ChordNode>(),
        size_of::<Action<ChordMsg, OverlayEvent>>(),
        size_of::<Peer>()
    );
    assert!(size_of::<ChordNode>() + heap < 4096);
}
