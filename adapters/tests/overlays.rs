//! One conformance test per overlay, three runtimes each: three nodes in one
//! process join, register and query over loopback TCP, once per shell; and a node
//! of the other overlay is refused at the hello.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use p2pmp_adapters::{DriverConfig, NodeHandle, RuntimeKind, spawn_node};
use p2pmp_core::can::{CanConfig, CanNode};
use p2pmp_core::chord::{ChordConfig, ChordNode};
use p2pmp_core::machine::{Machine, NodeAddr};
use p2pmp_core::overlay::{CommandError, OverlayCommand, OverlayEvent, OverlayKind};

const WAIT: Duration = Duration::from_secs(20);

fn chord(rt: RuntimeKind, bootstrap: Vec<NodeAddr>) -> NodeHandle<ChordNode> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = NodeAddr(l.local_addr().unwrap());
    let cfg = ChordConfig {
        stabilize_period: Duration::from_millis(50),
        fix_fingers_period: Duration::from_millis(50),
        check_predecessor_period: Duration::from_millis(100),
        request_timeout: Duration::from_millis(300),
        join_backoff_min: Duration::from_millis(50),
        ..ChordConfig::default()
    };
    let dcfg = DriverConfig { network_id: 3, overlay: Some(OverlayKind::Chord), ..DriverConfig::default() };
    spawn_node(rt, l, dcfg, move |now| ChordNode::new(cfg, addr, bootstrap, now, 7)).unwrap()
}

fn driver(kind: OverlayKind) -> DriverConfig {
    DriverConfig { network_id: 4, overlay: Some(kind), ..DriverConfig::default() }
}

fn can(rt: RuntimeKind, bootstrap: Vec<NodeAddr>) -> NodeHandle<CanNode> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = NodeAddr(l.local_addr().unwrap());
    let cfg = CanConfig {
        heartbeat_period: Duration::from_millis(100),
        dead_after: Duration::from_millis(350),
        takeover_delay: Duration::from_millis(30),
        request_timeout: Duration::from_millis(300),
        join_backoff_min: Duration::from_millis(50),
        ..CanConfig::default()
    };
    spawn_node(rt, l, driver(OverlayKind::Can { dims: 2 }), move |now| CanNode::new(cfg, addr, bootstrap, now, 7))
        .unwrap()
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Queries `svc` from `n` until it answers exactly `[want]`.
fn expect_svc<M>(n: &NodeHandle<M>, token: u64, want: &str, what: &str)
where
    M: Machine<Command = OverlayCommand, Event = OverlayEvent, CmdError = CommandError> + Send + 'static,
{
    wait_for(what, || {
        n.command(OverlayCommand::Query { token, name: "svc".into() }).unwrap().unwrap();
        loop {
            match n.events().recv_blocking().unwrap() {
                OverlayEvent::QueryDone { token: t, result, .. } if t == token => {
                    return result.ok().filter(|v| v == &[want.to_string()]).map(|_| ());
                }
                _ => continue,
            }
        }
    });
}

#[test]
fn three_chord_nodes_join_register_and_query_on_every_runtime() {
    for rt in RuntimeKind::available() {
        let a = chord(rt, Vec::new());
        let boot = vec![NodeAddr(a.local_addr())];
        let b = chord(rt, boot.clone());
        let c = chord(rt, boot);
        let nodes = [&a, &b, &c];
        wait_for(&format!("{rt}: a ring of three"), || {
            let succs: Vec<NodeAddr> =
                nodes.iter().map(|n| n.inspect(|d| d.machine().successor().addr).unwrap()).collect();
            let mut seen = succs.clone();
            seen.sort();
            seen.dedup();
            (seen.len() == 3).then_some(())
        });
        let ttl = Duration::from_secs(30);
        a.command(OverlayCommand::Register { name: "svc".into(), value: format!("on-{rt}"), ttl }).unwrap().unwrap();
        for (i, n) in nodes.iter().enumerate() {
            expect_svc(n, i as u64 + 1, &format!("on-{rt}"), &format!("{rt}: query from node {i}"));
        }
    }
}

#[test]
fn three_can_nodes_join_register_and_query_on_every_runtime() {
    for rt in RuntimeKind::available() {
        let a = can(rt, Vec::new());
        let boot = vec![NodeAddr(a.local_addr())];
        let b = can(rt, boot.clone());
        let c = can(rt, boot);
        let nodes = [&a, &b, &c];
        wait_for(&format!("{rt}: three zones, each node knowing the other two"), || {
            let ok = nodes
                .iter()
                .all(|n| n.inspect(|d| d.machine().is_joined() && d.machine().neighbours().len() == 2).unwrap());
            ok.then_some(())
        });
        let ttl = Duration::from_secs(30);
        a.command(OverlayCommand::Register { name: "svc".into(), value: format!("on-{rt}"), ttl }).unwrap().unwrap();
        for (i, n) in nodes.iter().enumerate() {
            expect_svc(n, i as u64 + 1, &format!("on-{rt}"), &format!("{rt}: query from node {i}"));
        }
    }
}

#[test]
fn a_node_of_the_other_overlay_is_refused() {
    let rt = RuntimeKind::available()[0];
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let chord_addr = NodeAddr(l.local_addr().unwrap());
    let chord = spawn_node(rt, l, driver(OverlayKind::Chord), move |now| {
        ChordNode::new(ChordConfig::default(), chord_addr, Vec::new(), now, 1)
    })
    .unwrap();
    let joiner = can(rt, vec![chord_addr]);
    // The joiner's driver drops the connection at the hello (and so does the Chord
    // node's): the joiner never joins, and reports that its contacts failed.
    wait_for("the hello refused", || {
        let dropped = joiner.inspect(|d| d.stats().peers_dropped).unwrap();
        (dropped > 0).then_some(())
    });
    wait_for("the joiner giving up a round", || {
        loop {
            match joiner.events().recv_blocking().unwrap() {
                OverlayEvent::Disconnected => return Some(()),
                OverlayEvent::Joined => panic!("joined a network of the other overlay"),
                _ => continue,
            }
        }
    });
    assert!(!joiner.inspect(|d| d.machine().is_joined()).unwrap());
    assert!(chord.inspect(|d| d.machine().successor_list().is_empty()).unwrap(), "the Chord node stays alone");
}

/// A stranger that completes the Noise handshake with `to` under a key of its
/// own and says hello as `listen`; returns its socket and open channel.
fn stranger(to: NodeAddr, listen: Option<NodeAddr>) -> (std::net::TcpStream, p2pmp_core::secure::SecureChannel) {
    use std::io::{Read, Write};

    use bytes::BytesMut;
    use p2pmp_core::secure::SecureChannel;
    use p2pmp_core::wire::{Envelope, Hello, encode_frame};
    let mut s = std::net::TcpStream::connect(to.0).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let listen = listen.unwrap_or(NodeAddr(s.local_addr().unwrap()));
    let mut out = BytesMut::new();
    let mut ch = SecureChannel::initiator(&p2pmp_adapters::random_key(), [5; 32], &mut out);
    s.write_all(&out).unwrap();
    let (mut plain, mut buf) = (BytesMut::new(), [0u8; 4096]);
    while !ch.is_open() {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the node closed during the handshake");
        out.clear();
        ch.on_bytes(&buf[..n], &mut plain, &mut out).unwrap();
        s.write_all(&out).unwrap();
    }
    let hello =
        Envelope::new(listen.id(), listen, 0, Hello { network_id: 3, listen, overlay: Some(OverlayKind::Chord) });
    let mut frame = BytesMut::new();
    encode_frame(&hello, &mut frame, 1024).unwrap();
    out.clear();
    ch.seal(&frame, &mut out).unwrap();
    s.write_all(&out).unwrap();
    (s, ch)
}

/// Whether the node at the other end of `s` closes it within the read timeout.
fn closed_by_node(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn a_peer_speaking_for_another_node_is_cut_off_and_the_ring_unharmed_on_every_runtime() {
    use std::io::Write;

    use bytes::BytesMut;
    use p2pmp_core::chord::ChordMsg;
    use p2pmp_core::wire::{Envelope, encode_frame};
    for rt in RuntimeKind::available() {
        let a = chord(rt, Vec::new());
        let a_addr = NodeAddr(a.local_addr());
        let b = chord(rt, vec![a_addr]);
        let b_addr = NodeAddr(b.local_addr());
        wait_for(&format!("{rt}: a ring of two"), || {
            let ok = a.inspect(move |d| d.machine().successor().addr == b_addr).unwrap()
                && b.inspect(move |d| d.machine().successor().addr == a_addr).unwrap();
            ok.then_some(())
        });
        // 1. An honest hello, then a notify in b's name (b's address and id).
        let (mut s, mut ch) = stranger(a_addr, None);
        let mut frame = BytesMut::new();
        encode_frame(&Envelope::new(b_addr.id(), b_addr, 0, ChordMsg::Notify), &mut frame, 1 << 20).unwrap();
        let mut out = BytesMut::new();
        ch.seal(&frame, &mut out).unwrap();
        s.write_all(&out).unwrap();
        assert!(closed_by_node(&mut s), "{rt}: a forged sender is cut off");
        // 2. A hello claiming b's address: a dialed b and knows its key.
        let (mut s, _) = stranger(a_addr, Some(b_addr));
        assert!(closed_by_node(&mut s), "{rt}: a hello in b's name is refused");
        let dropped = a.inspect(|d| d.stats().peers_dropped).unwrap();
        assert_eq!(dropped, 2, "{rt}: each stranger dropped once");
        // The ring is unharmed: b is still a's successor and predecessor, and it answers.
        assert!(a.inspect(move |d| d.machine().successor().addr == b_addr).unwrap());
        let ttl = Duration::from_secs(30);
        a.command(OverlayCommand::Register { name: "svc".into(), value: format!("on-{rt}"), ttl }).unwrap().unwrap();
        expect_svc(&b, 1, &format!("on-{rt}"), &format!("{rt}: query from b"));
    }
}
