//! CAN with real node processes (`p2pmp-node --overlay can`) on the three
//! runtimes: the network forms, a crash (kill -9) is taken over and registrations
//! stay, a graceful leave hands its zone over, and a Chord node cannot join.

use std::net::SocketAddr;
use std::time::Duration;

use p2pmp_tests::{FAST, NodeProc, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_p2pmp-node");
const SETTLE: Duration = Duration::from_secs(40);
const CAN: &[&str] = &["--overlay", "can", "--dims", "2"];

fn flags() -> Vec<&'static str> {
    FAST.iter().chain(CAN).copied().collect()
}

fn start(n: usize) -> Vec<NodeProc> {
    let runtimes = ["tokio", "smol", "mio"];
    let mut nodes: Vec<NodeProc> = Vec::with_capacity(n);
    for i in 0..n {
        let boot: Vec<SocketAddr> = if i == 0 { Vec::new() } else { vec![nodes[0].addr, nodes[(i - 1) / 2].addr] };
        nodes.push(NodeProc::spawn(BIN.as_ref(), runtimes[i % 3], &boot, &flags()));
    }
    nodes
}

/// Waits until every node has joined and all of them name the same owner for
/// each of `keys` (the tiling and routes agree).
fn wait_for_agreement(nodes: &mut [NodeProc], keys: &[&str]) {
    wait_until("every node joined and agreeing on owners", SETTLE, || {
        for n in nodes.iter_mut() {
            let st = n.state();
            if st.get("joined").map(String::as_str) != Some("true") {
                return Err(format!("{} not joined", n.addr));
            }
        }
        for k in keys {
            let owners: Vec<Result<SocketAddr, String>> = nodes.iter_mut().map(|n| n.lookup(k)).collect();
            let first = owners[0].clone()?;
            if owners.iter().any(|o| o.as_ref() != Ok(&first)) {
                return Err(format!("owners of {k} differ: {owners:?}"));
            }
        }
        Ok(())
    });
}

fn expect_values(n: &mut NodeProc, name: &str, want: &[&str]) {
    wait_until(&format!("query {name} from {}", n.addr), Duration::from_secs(15), || match n.query(name) {
        Ok(v) if v == want => Ok(()),
        other => Err(format!("{other:?}")),
    });
}

#[test]
fn crashes_are_taken_over_and_leaves_hand_zones_over() {
    let mut nodes = start(8);
    let keys = ["a", "b", "c", "d", "e", "f"];
    wait_for_agreement(&mut nodes, &keys);
    for k in &keys {
        assert!(nodes[0].cmd(&format!("register svc-{k} v-{k} 3600")).starts_with("register ok"));
    }
    for k in &keys {
        expect_values(&mut nodes[1], &format!("svc-{k}"), &[&format!("v-{k}")]);
    }
    // Crash the owner of the first name (unless it is node 0, the registrant).
    let owner = nodes[2].lookup("svc-a").unwrap();
    let victim = nodes.iter().position(|n| n.addr == owner).filter(|&i| i != 0).unwrap_or(5);
    nodes.remove(victim).kill();
    wait_for_agreement(&mut nodes, &keys);
    // A long TTL: no refresh during the test, so the replicas brought them back.
    for k in &keys {
        for n in nodes.iter_mut() {
            expect_values(n, &format!("svc-{k}"), &[&format!("v-{k}")]);
        }
    }
    // Two graceful leaves (never node 0).
    for _ in 0..2 {
        let mut leaving = nodes.remove(nodes.len() - 1);
        assert_eq!(leaving.cmd("leave"), "leave ok");
        assert!(leaving.wait_exit(Duration::from_secs(10)).is_some_and(|s| s.success()), "exits after leave");
    }
    wait_for_agreement(&mut nodes, &keys);
    for k in &keys {
        expect_values(&mut nodes[1], &format!("svc-{k}"), &[&format!("v-{k}")]);
    }
}

#[test]
fn a_chord_node_cannot_join_a_can_network() {
    let mut nodes = start(2);
    wait_for_agreement(&mut nodes, &["x"]);
    let mut chord = NodeProc::spawn(BIN.as_ref(), "tokio", &[nodes[0].addr], FAST);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(chord.state().get("joined").map(String::as_str), Some("false"), "refused at the hello");
    // The CAN network is untouched.
    wait_for_agreement(&mut nodes, &["x"]);
    chord.kill();
}
