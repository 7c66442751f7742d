//! Faults with real node processes: crashes (kill -9) heal and registrations come
//! back; a graceful leave hands registrations over; a peer sending garbage or a
//! 1 GiB length prefix is dropped while the node keeps serving the others.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use p2pmp_core::id::Id;
use p2pmp_tests::{NodeProc, check_lookups, owner_of, start_network, wait_for_ring, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_p2pmp-node");
const SETTLE: Duration = Duration::from_secs(40);

fn addrs(nodes: &[NodeProc]) -> Vec<SocketAddr> {
    nodes.iter().map(|n| n.addr).collect()
}

fn expect_values(n: &mut NodeProc, name: &str, want: &[&str], timeout: Duration) {
    wait_until(&format!("query {name} from {}", n.addr), timeout, || match n.query(name) {
        Ok(v) if v == want => Ok(()),
        other => Err(format!("{other:?}")),
    });
}

#[test]
fn crashes_heal_and_registrations_come_back() {
    let mut nodes = start_network(BIN.as_ref(), &["tokio", "smol", "mio"], 10);
    wait_for_ring(&mut nodes, SETTLE);
    // Node 0 registers names; short TTLs so refreshes run during the test.
    let names: Vec<String> = (0..6).map(|i| format!("svc-{i}")).collect();
    for n in &names {
        assert!(nodes[0].cmd(&format!("register {n} v-{n} 3")).starts_with("register ok"));
    }
    for n in &names {
        expect_values(&mut nodes[1], n, &[&format!("v-{n}")], Duration::from_secs(10));
    }
    // Crash the owner of the first name and two more nodes (never node 0).
    let owner = owner_of(Id::hash(&names[0]), &addrs(&nodes));
    let mut victims: Vec<usize> = vec![nodes.iter().position(|n| n.addr == owner).unwrap()];
    victims.retain(|&v| v != 0);
    for v in [3, 6, 8] {
        if victims.len() < 3 && !victims.contains(&v) {
            victims.push(v);
        }
    }
    victims.sort_unstable_by(|a, b| b.cmp(a));
    for &v in &victims {
        nodes.remove(v).kill();
    }
    let started = Instant::now();
    wait_for_ring(&mut nodes, SETTLE);
    eprintln!("ring healed {:?} after three crashes", started.elapsed());
    check_lookups(&mut nodes, &names, Duration::from_secs(10));
    for n in &names {
        let want = format!("v-{n}");
        for node in nodes.iter_mut() {
            expect_values(node, n, &[&want], Duration::from_secs(15));
        }
    }
}

#[test]
fn a_graceful_leave_hands_registrations_over() {
    let mut nodes = start_network(BIN.as_ref(), &["mio", "tokio", "smol"], 8);
    wait_for_ring(&mut nodes, SETTLE);
    // A long TTL: no refresh during the test, so only the hand-over can keep it.
    let name =
        (0..).map(|i| format!("file-{i}")).find(|n| owner_of(Id::hash(n), &addrs(&nodes)) != nodes[0].addr).unwrap();
    assert!(nodes[0].cmd(&format!("register {name} precious 3600")).starts_with("register ok"));
    expect_values(&mut nodes[1], &name, &["precious"], Duration::from_secs(10));
    // The owner and then each new owner leave in turn: three in all, more than the
    // replicas, so the value survives only if every leave hands it over.
    for _ in 0..3 {
        let owner = owner_of(Id::hash(&name), &addrs(&nodes));
        if owner == nodes[0].addr {
            break;
        }
        let i = nodes.iter().position(|n| n.addr == owner).unwrap();
        let mut leaving = nodes.remove(i);
        assert_eq!(leaving.cmd("leave"), "leave ok");
        assert!(leaving.wait_exit(Duration::from_secs(10)).is_some_and(|s| s.success()), "exits after leave");
        let last = nodes.len() - 1;
        expect_values(&mut nodes[last], &name, &["precious"], Duration::from_secs(10));
    }
    wait_for_ring(&mut nodes, SETTLE);
    for node in nodes.iter_mut() {
        expect_values(node, &name, &["precious"], Duration::from_secs(10));
    }
}

/// Reads until the node closes the connection; true if it did within `wait`.
fn closed_by_node(mut s: TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
            Ok(_) => {} // the node's hello
        }
    }
    false
}

#[test]
fn garbage_and_huge_length_prefixes_are_dropped() {
    for rt in ["tokio", "smol", "mio"] {
        let a = NodeProc::spawn(BIN.as_ref(), rt, &[], p2pmp_tests::FAST);
        let b = NodeProc::spawn(BIN.as_ref(), "tokio", &[a.addr], p2pmp_tests::FAST);
        let mut pair = [a, b];
        wait_for_ring(&mut pair, SETTLE);
        let [mut a, mut b] = pair;
        // Garbage, then a 1 GiB length prefix, each on its own connection; a
        // slow garbage sender stays connected meanwhile.
        let mut slow = TcpStream::connect(a.addr).unwrap();
        slow.write_all(b"\x00\x00").unwrap();
        for bad in [b"GET / HTTP/1.1\r\n\r\nxxxxxxxxxxxxxxxxxx".to_vec(), (1u32 << 30).to_be_bytes().to_vec()] {
            let mut s = TcpStream::connect(a.addr).unwrap();
            s.write_all(&bad).unwrap();
            assert!(closed_by_node(s, Duration::from_secs(5)), "{rt}: the bad peer is dropped");
            // Both nodes keep serving each other.
            for key in ["k1", "k2", "k3"] {
                let want = owner_of(Id::hash(key), &[a.addr, b.addr]);
                assert_eq!(b.lookup(key), Ok(want), "{rt}");
                assert_eq!(a.lookup(key), Ok(want), "{rt}");
            }
        }
        assert!(b.cmd(&format!("register after-garbage-{rt} ok 60")).starts_with("register ok"));
        expect_values(&mut a, &format!("after-garbage-{rt}"), &["ok"], Duration::from_secs(10));
        drop(slow);
    }
}
