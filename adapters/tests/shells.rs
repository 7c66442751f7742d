//! Every shell over real loopback TCP, with the ping/pong machine: each pair of
//! runtimes talks, large payloads cross, and a peer sending garbage or a huge
//! length prefix is dropped while the node keeps serving others.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use p2pmp_adapters::testing::{PingCmd, PingEvent, PingPong};
use p2pmp_adapters::{DriverConfig, NodeHandle, RuntimeKind, spawn_node};
use p2pmp_core::machine::NodeAddr;

const WAIT: Duration = Duration::from_secs(10);

fn node(rt: RuntimeKind) -> NodeHandle<PingPong> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = NodeAddr(l.local_addr().unwrap());
    spawn_node(rt, l, DriverConfig { network_id: 7, ..DriverConfig::default() }, move |_| PingPong::new(addr)).unwrap()
}

fn ping(from: &NodeHandle<PingPong>, to: SocketAddr, seq: u64, payload: Bytes) {
    from.command(PingCmd::Ping { to: NodeAddr(to), seq, payload }).unwrap().unwrap();
}

fn next_event(n: &NodeHandle<PingPong>) -> PingEvent {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(e) = n.events().try_recv() {
            return e;
        }
        assert!(Instant::now() < deadline, "no event within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn expect_pong(n: &NodeHandle<PingPong>, from: SocketAddr, seq: u64, payload: &Bytes) {
    match next_event(n) {
        PingEvent::Pong { from: f, seq: s, payload: p } => {
            assert_eq!((f.0, s), (from, seq));
            assert_eq!(p, *payload);
        }
        other => panic!("expected a pong, got {other:?}"),
    }
}

#[test]
fn every_pair_of_runtimes_exchanges_pings() {
    let kinds = RuntimeKind::available();
    let nodes: Vec<_> = kinds.iter().map(|&k| node(k)).collect();
    let big = Bytes::from((0..300_000u32).map(|i| (i * 7) as u8).collect::<Vec<_>>());
    for (i, a) in nodes.iter().enumerate() {
        for (j, b) in nodes.iter().enumerate() {
            let seq = (i * 10 + j) as u64;
            ping(a, b.local_addr(), seq, Bytes::from_static(b"x"));
            expect_pong(a, b.local_addr(), seq, &Bytes::from_static(b"x"));
            ping(a, b.local_addr(), seq + 100, big.clone());
            expect_pong(a, b.local_addr(), seq + 100, &big);
        }
    }
    for n in nodes {
        n.shutdown().unwrap();
    }
}

#[test]
fn unreachable_peers_are_reported() {
    let dead = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // closed at once
    for k in RuntimeKind::available() {
        let n = node(k);
        ping(&n, dead, 1, Bytes::new());
        assert_eq!(next_event(&n), PingEvent::SendFailed(NodeAddr(dead)), "{k}");
    }
}

/// Waits until the node closes `s`: a read returns 0 or an error.
fn closed_by_node(mut s: TcpStream) -> bool {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => {} // the node's hello
        }
    }
}

#[test]
fn garbage_and_huge_prefixes_drop_only_that_peer() {
    for k in RuntimeKind::available() {
        let server = node(k);
        let client = node(RuntimeKind::Tokio);
        ping(&client, server.local_addr(), 1, Bytes::new());
        expect_pong(&client, server.local_addr(), 1, &Bytes::new());
        for bad in [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), (1u32 << 30).to_be_bytes().to_vec()] {
            let mut s = TcpStream::connect(server.local_addr()).unwrap();
            s.write_all(&bad).unwrap();
            let started = Instant::now();
            assert!(closed_by_node(s), "{k}");
            assert!(started.elapsed() < WAIT, "{k}: dropped promptly");
            ping(&client, server.local_addr(), 2, Bytes::new());
            expect_pong(&client, server.local_addr(), 2, &Bytes::new());
        }
        let dropped = server.inspect(|d| d.stats().peers_dropped).unwrap();
        assert_eq!(dropped, 2, "{k}");
    }
}

#[test]
fn floods_and_multi_megabyte_frames_get_through() {
    for k in RuntimeKind::available() {
        let server = node(k);
        let client = node(RuntimeKind::Mio);
        let huge = Bytes::from(vec![5u8; 3 << 20]);
        ping(&client, server.local_addr(), 0, huge.clone());
        for seq in 1..=2000 {
            ping(&client, server.local_addr(), seq, Bytes::from_static(b"f"));
        }
        expect_pong(&client, server.local_addr(), 0, &huge);
        for seq in 1..=2000 {
            expect_pong(&client, server.local_addr(), seq, &Bytes::from_static(b"f"));
        }
        assert_eq!(server.inspect(|d| d.machine().pings_served).unwrap(), 2001, "{k}");
    }
}
