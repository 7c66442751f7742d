//! Registrations: storing, replication, queries, expiry, handover on leave, key transfer.

use std::time::Duration;

use super::*;
use crate::overlay::{CommandError, OverlayError};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn register(net: &mut Net, i: usize, name: &str, value: &str, ttl: Duration) {
    let cmd = OverlayCommand::Register { name: name.into(), value: value.into(), ttl };
    net.command(i, cmd);
}

fn query(net: &mut Net, from: usize, name: &str) -> Result<Vec<String>, OverlayError> {
    net.take_events(from);
    net.command(from, OverlayCommand::Query { token: 42, name: name.into() });
    net.run_for(secs(6));
    let mut got: Vec<_> = net
        .take_events(from)
        .into_iter()
        .filter_map(|e| match e {
            OverlayEvent::QueryDone { token: 42, name: n, result } if n == name => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(got.len(), 1, "one answer per query");
    got.pop().unwrap()
}

fn holders(net: &Net, name: &str) -> Vec<usize> {
    net.up().filter(|&i| !net.nodes[i].stored_values(name).is_empty()).collect()
}

fn ring(n: usize, cfg: ChordConfig) -> Net {
    let mut net = Net::build(cfg, n, Duration::from_millis(50));
    net.converge(secs(60));
    net.run_for(secs(10));
    net
}

#[test]
fn registrations_are_found_from_anywhere_and_replicated() {
    let mut net = ring(10, ChordConfig::default());
    register(&mut net, 2, "svc", "a", secs(60));
    register(&mut net, 5, "svc", "b", secs(60));
    net.run_for(secs(1));
    for from in [0, 2, 7] {
        assert_eq!(query(&mut net, from, "svc").unwrap(), vec!["a".to_string(), "b".to_string()]);
    }
    assert_eq!(query(&mut net, 3, "nothing").unwrap(), Vec::<String>::new());
    // The owner and its next two successors hold copies.
    let owner = net.owner(Id::hash("svc"));
    let k = net.ring().iter().position(|p| *p == owner).unwrap();
    let ring = net.ring();
    let mut want: Vec<usize> = (0..3).map(|d| net.by_addr[&ring[(k + d) % ring.len()].addr]).collect();
    want.sort();
    assert_eq!(holders(&net, "svc"), want);
}

#[test]
fn a_crashed_owner_loses_nothing() {
    let mut net = ring(10, ChordConfig::default());
    register(&mut net, 1, "job", "v", secs(600)); // no refresh during the test
    net.run_for(secs(1));
    let owner = net.by_addr[&net.owner(Id::hash("job")).addr];
    let asker = if owner == 4 { 6 } else { 4 };
    net.crash(owner, Health::Silent);
    net.run_for(secs(3));
    assert_eq!(query(&mut net, asker, "job").unwrap(), vec!["v".to_string()]);
}

#[test]
fn leave_hands_registrations_to_the_successor() {
    let cfg = ChordConfig { replicas: 1, ..ChordConfig::default() };
    let mut net = ring(8, cfg);
    register(&mut net, 0, "file", "x", secs(600));
    net.run_for(secs(1));
    let owner = net.by_addr[&net.owner(Id::hash("file")).addr];
    assert_eq!(holders(&net, "file"), vec![owner], "one copy only");
    net.command(owner, OverlayCommand::Leave);
    net.run_for(Duration::from_millis(100));
    let new_owner = net.by_addr[&net.owner(Id::hash("file")).addr];
    assert_eq!(holders(&net, "file"), vec![new_owner]);
    let asker = if owner == 3 { 4 } else { 3 };
    assert_eq!(query(&mut net, asker, "file").unwrap(), vec!["x".to_string()]);
}

#[test]
fn keys_move_to_a_node_that_joins_before_them() {
    let cfg = ChordConfig { replicas: 1, ..ChordConfig::default() };
    let mut net = ring(4, cfg);
    let names: Vec<String> = (0..40).map(|k| format!("n{k}")).collect();
    for name in &names {
        register(&mut net, 0, name, "v", secs(600));
    }
    net.run_for(secs(2));
    for _ in 0..8 {
        net.add(vec![addr(1)]);
        net.run_for(Duration::from_millis(200));
    }
    net.converge(secs(60));
    let mut moved = 0;
    for name in &names {
        let owner = net.by_addr[&net.owner(Id::hash(name)).addr];
        assert_eq!(net.nodes[owner].stored_values(name), vec!["v".to_string()], "{name} at its owner");
        moved += usize::from(owner >= 4);
    }
    assert!(moved > 0, "some keys changed owner");
}

#[test]
fn registrations_expire_without_refresh_and_live_with_it() {
    let mut net = ring(6, ChordConfig::default());
    register(&mut net, 1, "alive", "1", secs(3));
    register(&mut net, 2, "dying", "2", secs(3));
    net.run_for(secs(1));
    assert_eq!(query(&mut net, 0, "dying").unwrap(), vec!["2".to_string()]);
    net.crash(2, Health::Silent); // its registration is never refreshed again
    net.run_for(secs(20));
    assert_eq!(query(&mut net, 0, "dying").unwrap(), Vec::<String>::new());
    assert!(holders(&net, "dying").is_empty(), "expired copies are swept");
    assert_eq!(query(&mut net, 0, "alive").unwrap(), vec!["1".to_string()]);

    // Unregister withdraws the value at once (from the owner and its replicas)
    // and stops the refresh.
    register(&mut net, 1, "alive", "other", secs(3));
    net.run_for(secs(1));
    net.command(1, OverlayCommand::Unregister { name: "alive".into(), value: "1".into() });
    net.run_for(Duration::from_millis(200));
    assert_eq!(query(&mut net, 0, "alive").unwrap(), vec!["other".to_string()]);
    assert_eq!(holders(&net, "alive").len(), 3, "the owner and its replicas keep the other value");
    assert!(holders(&net, "alive").iter().all(|&i| net.nodes[i].stored_values("alive") == ["other"]));
    net.run_for(secs(10));
    assert_eq!(query(&mut net, 0, "alive").unwrap(), vec!["other".to_string()]);
}

#[test]
fn oversized_names_and_values_are_refused_and_a_left_node_takes_no_commands() {
    let mut net = ring(2, ChordConfig::default());
    let long = "x".repeat(5000);
    let now = net.now;
    let r = net.nodes[0]
        .handle_command(now, OverlayCommand::Register { name: long.clone(), value: "v".into(), ttl: secs(1) });
    assert!(matches!(r, Err(CommandError::TooLarge { what: "name", .. })));
    let r = net.nodes[0]
        .handle_command(now, OverlayCommand::Register { name: "n".into(), value: long.clone(), ttl: secs(1) });
    assert!(matches!(r, Err(CommandError::TooLarge { what: "value", .. })));
    let r = net.nodes[0].handle_command(now, OverlayCommand::Query { token: 1, name: long });
    assert!(matches!(r, Err(CommandError::TooLarge { .. })));
    net.command(0, OverlayCommand::Leave);
    let r = net.nodes[0].handle_command(net.now, OverlayCommand::Query { token: 1, name: "n".into() });
    assert_eq!(r, Err(CommandError::Left));
}

#[test]
fn registering_before_joining_stores_once_joined() {
    let mut net = Net::new(ChordConfig::default());
    net.add(vec![]);
    net.crash(0, Health::Silent);
    let b = net.add(vec![addr(0)]);
    register(&mut net, b, "early", "e", secs(30));
    net.command(b, OverlayCommand::Query { token: 7, name: "early".into() });
    assert!(
        net.take_events(b)
            .iter()
            .any(|e| matches!(e, OverlayEvent::QueryDone { result: Err(OverlayError::NotConnected), .. }))
    );
    net.run_for(secs(3));
    net.revive(0);
    net.run_for(secs(40));
    assert!(net.nodes[b].is_joined());
    assert_eq!(query(&mut net, 0, "early").unwrap(), vec!["e".to_string()]);
}

/// A quiet ring sends only its maintenance. In a ring of at most `replicas`
/// nodes every node holds every registration (as owner or replica): entries
/// registered before the others joined must not bounce between the nodes.
#[test]
fn a_quiet_small_ring_with_registrations_only_maintains() {
    for n in [2, 3, 4] {
        let mut net = Net::new(ChordConfig::default());
        let first = net.add(vec![]);
        net.run_for(secs(1));
        for k in 0..5 {
            register(&mut net, first, &format!("res:{k}"), "v", secs(600));
        }
        for _ in 1..n {
            net.add(vec![addr(first)]);
            net.run_for(secs(2));
        }
        net.converge(secs(60));
        net.run_for(secs(10));
        let sent = |net: &Net| net.up().map(|i| net.nodes[i].stats().sent).sum::<u64>();
        let before = sent(&net);
        net.run_for(secs(20));
        let per_node_s = (sent(&net) - before) as f64 / (n as f64 * 20.0);
        assert!(per_node_s < 20.0, "{n} nodes: {per_node_s:.1} messages per node per second");
        for k in 0..5 {
            assert_eq!(query(&mut net, n - 1, &format!("res:{k}")).unwrap(), vec!["v".to_string()]);
        }
    }
}
