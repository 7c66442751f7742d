//! The Driver without sockets: an in-memory network moves bytes between drivers
//! the way a shell would, on a clock the test advances.

use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::wire::{self, Envelope, Hello};

use crate::testing::{PingCmd, PingEvent, PingMsg, PingPong};
use crate::{ConnId, Driver, DriverConfig, IoRequest};
use p2pmp_core::guard::GuardConfig;

type D = Driver<PingPong>;

/// Drivers joined by in-memory links; `use_take` writes through take_tx/on_tx_done.
struct Net {
    now: Instant,
    nodes: Vec<D>,
    links: BTreeMap<(usize, ConnId), (usize, ConnId)>,
    events: Vec<Vec<PingEvent>>,
    closes: Vec<Vec<ConnId>>,
    dials: Vec<usize>,
    use_take: bool,
    /// Deliver at most this many bytes per on_bytes call.
    chunk: usize,
    /// Strangers connected so far (see `raw_conn`).
    strangers: u8,
    /// Every byte moved between nodes, as a wiretap would see it.
    tap: Vec<u8>,
}

fn addr(i: usize) -> NodeAddr {
    NodeAddr::loopback(i as u32, 7000)
}

fn cfg() -> DriverConfig {
    DriverConfig { network_id: 42, ..DriverConfig::default() }
}

impl Net {
    fn new(n: usize) -> Self {
        Self::with(n, cfg())
    }

    fn with(n: usize, cfg: DriverConfig) -> Self {
        Self::with_each(vec![cfg; n])
    }

    fn with_each(cfgs: Vec<DriverConfig>) -> Self {
        let now = Instant::now();
        let n = cfgs.len();
        Net {
            now,
            nodes: cfgs.into_iter().enumerate().map(|(i, c)| Driver::new(PingPong::new(addr(i)), c, now)).collect(),
            links: BTreeMap::new(),
            events: vec![Vec::new(); n],
            closes: vec![Vec::new(); n],
            dials: vec![0; n],
            use_take: false,
            chunk: usize::MAX,
            strangers: 0,
            tap: Vec::new(),
        }
    }

    fn index(&self, a: std::net::SocketAddr) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| addr(i).0 == a)
    }

    /// Moves everything until nothing moves.
    fn run(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                while let Some(req) = self.nodes[i].poll_io() {
                    moved = true;
                    match req {
                        IoRequest::Connect { conn, addr } => {
                            self.dials[i] += 1;
                            match self.index(addr) {
                                Some(j) => {
                                    let rc = self.nodes[j].on_accepted(self.now, addr).expect("room");
                                    self.links.insert((i, conn), (j, rc));
                                    self.links.insert((j, rc), (i, conn));
                                    self.nodes[i].on_connected(self.now, conn);
                                }
                                None => {
                                    let e = io::Error::from(io::ErrorKind::ConnectionRefused);
                                    self.nodes[i].on_connect_failed(self.now, conn, &e);
                                }
                            }
                        }
                        IoRequest::Close { conn } => {
                            self.closes[i].push(conn);
                            if let Some((j, rc)) = self.links.remove(&(i, conn)) {
                                self.links.remove(&(j, rc));
                                self.nodes[j].on_closed(self.now, rc, "reset by peer");
                            }
                        }
                    }
                }
                while let Some(conn) = self.nodes[i].poll_writable() {
                    moved = true;
                    let bytes = if self.use_take {
                        let chunks = self.nodes[i].take_tx(conn);
                        let n = chunks.iter().map(Bytes::len).sum();
                        self.nodes[i].on_tx_done(conn, n);
                        chunks.concat()
                    } else {
                        let mut out = Vec::new();
                        assert!(self.nodes[i].write_tx(conn, &mut out).unwrap());
                        out
                    };
                    assert_eq!(self.nodes[i].tx_pending(conn), 0);
                    if let Some(&(j, rc)) = self.links.get(&(i, conn)) {
                        self.tap.extend_from_slice(&bytes);
                        for piece in bytes.chunks(self.chunk.max(1)) {
                            self.nodes[j].on_bytes(self.now, rc, piece);
                        }
                    }
                }
                while let Some(e) = self.nodes[i].poll_event() {
                    self.events[i].push(e);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("network never went quiet");
    }

    fn ping(&mut self, from: usize, to: NodeAddr, seq: u64, payload: Bytes) {
        self.nodes[from].on_command(self.now, PingCmd::Ping { to, seq, payload }).unwrap();
        self.run();
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        for n in &mut self.nodes {
            n.on_timeout(self.now);
        }
        self.run();
    }

    /// Opens a raw inbound connection to node `j`, as a stranger would.
    /// A connection from a stranger, each from its own address (a stranger cut
    /// off for misbehaving is refused for a while).
    fn raw_conn(&mut self, j: usize) -> ConnId {
        self.strangers += 1;
        let from = std::net::SocketAddr::from(([127, 9, 9, self.strangers], 1));
        let c = self.nodes[j].on_accepted(self.now, from).unwrap();
        self.run();
        c
    }
}

fn hello_frame(network_id: u64, listen: NodeAddr) -> BytesMut {
    let mut b = BytesMut::new();
    let env = Envelope::new(listen.id(), listen, 0, Hello { network_id, listen, overlay: None });
    wire::encode_frame(&env, &mut b, 1024).unwrap();
    b
}

fn pong(from: usize, seq: u64, payload: &Bytes) -> PingEvent {
    PingEvent::Pong { from: addr(from), seq, payload: payload.clone() }
}

#[test]
fn ping_dials_lazily_and_the_reply_rides_the_same_connection() {
    let mut net = Net::new(2);
    net.run();
    assert_eq!(net.dials, [0, 0], "nothing dialed before the first message");
    let p = Bytes::from_static(b"hi");
    net.ping(0, addr(1), 1, p.clone());
    net.ping(0, addr(1), 2, p.clone());
    assert_eq!(net.events[0], [pong(1, 1, &p), pong(1, 2, &p)]);
    // Node 1 dials node 0 once, only to check the key at the address node 0's
    // hello claimed (a probe, closed once answered); its answers ride the
    // inbound connection.
    assert_eq!(net.dials, [1, 1], "the inbound side answers over the inbound connection");
    assert_eq!((net.nodes[0].conn_count(), net.nodes[1].conn_count()), (1, 1));
    // And back the other way, with no new connection.
    net.ping(1, addr(0), 3, p.clone());
    assert_eq!(net.events[1], [pong(0, 3, &p)]);
    assert_eq!(net.dials, [1, 1]);
    assert_eq!(net.nodes[1].stats().frames_in, 3);
}

#[test]
fn large_payloads_cross_byte_by_byte_and_through_take_tx() {
    for use_take in [false, true] {
        let mut net = Net::new(2);
        net.use_take = use_take;
        net.chunk = if use_take { 1 } else { 1000 };
        let p = Bytes::from((0..100_000u32).map(|i| i as u8).collect::<Vec<_>>());
        net.ping(0, addr(1), 9, p.clone());
        assert_eq!(net.events[0], [pong(1, 9, &p)]);
    }
}

#[test]
fn messages_to_itself_loop_back_without_a_connection() {
    let mut net = Net::new(1);
    let p = Bytes::from_static(b"me");
    net.ping(0, addr(0), 5, p.clone());
    assert_eq!(net.events[0], [pong(0, 5, &p)]);
    assert_eq!(net.dials, [0]);
}

#[test]
fn refused_connects_fail_sends_and_back_off() {
    let mut net = Net::new(1);
    let dead = addr(9);
    net.ping(0, dead, 1, Bytes::new());
    assert_eq!(net.events[0], [PingEvent::SendFailed(dead)]);
    assert_eq!(net.dials[0], 1);
    // Inside the back-off: fails at once, no dial.
    net.ping(0, dead, 2, Bytes::new());
    assert_eq!(net.dials[0], 1);
    assert_eq!(net.events[0].len(), 2);
    // After it: dials again, and the back-off doubles.
    net.advance(Duration::from_millis(150));
    net.ping(0, dead, 3, Bytes::new());
    assert_eq!(net.dials[0], 2);
    net.advance(Duration::from_millis(150));
    net.ping(0, dead, 4, Bytes::new());
    assert_eq!(net.dials[0], 2, "second back-off is 200 ms");
    assert_eq!(net.nodes[0].stats().send_failures, 4);
}

#[test]
fn a_dropped_connection_is_a_send_failure_and_the_next_send_redials() {
    let mut net = Net::new(2);
    net.ping(0, addr(1), 1, Bytes::new());
    let (&(_, c0), _) = net.links.iter().find(|((i, _), _)| *i == 0).unwrap();
    net.nodes[0].on_closed(net.now, c0, "connection reset");
    net.run();
    assert_eq!(net.events[0].last(), Some(&PingEvent::SendFailed(addr(1))));
    assert_eq!(net.events[1].last(), Some(&PingEvent::SendFailed(addr(0))), "the peer learns it too");
    net.ping(0, addr(1), 2, Bytes::new());
    assert_eq!(net.events[0].last(), Some(&pong(1, 2, &Bytes::new())));
    assert_eq!(net.dials[0], 2);
}

#[test]
fn garbage_and_huge_prefixes_drop_only_that_peer() {
    // Frames as they are without encryption (secure_peers below for the channel).
    let mut net = Net::with(3, DriverConfig { noise: None, ..cfg() });
    net.ping(2, addr(0), 1, Bytes::new());
    let cases: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),  // not a frame at all
        (1u32 << 30).to_be_bytes().to_vec(), // 1 GiB before the hello
        [hello_frame(42, addr(1)).to_vec(), (1u32 << 30).to_be_bytes().to_vec()].concat(), // ...and after it
        [hello_frame(42, addr(1)).to_vec(), vec![0, 0, 0, 3, 1, 2, 3]].concat(), // malformed envelope
        hello_frame(7, addr(1)).to_vec(),    // another network
    ];
    for (k, bytes) in cases.iter().enumerate() {
        let c = net.raw_conn(0);
        net.nodes[0].on_bytes(net.now, c, bytes);
        net.run();
        assert!(!net.nodes[0].is_open(c), "case {k} dropped");
        assert!(net.closes[0].contains(&c));
        assert_eq!(net.nodes[0].stats().peers_dropped, k as u64 + 1);
    }
    // The healthy peer is still served on its connection.
    net.ping(2, addr(0), 2, Bytes::new());
    assert_eq!(net.events[2], [pong(0, 1, &Bytes::new()), pong(0, 2, &Bytes::new())]);
    assert_eq!(net.dials[2], 1);
    assert!(net.events[0].is_empty(), "dropped strangers were never peers: {:?}", net.events[0]);
}

#[test]
fn a_silent_connection_is_dropped_at_the_hello_deadline() {
    let mut net = Net::new(1);
    let c = net.raw_conn(0);
    let deadline = net.nodes[0].next_deadline().unwrap();
    assert_eq!(deadline, net.now + cfg().hello_timeout);
    net.advance(Duration::from_secs(4));
    assert!(net.nodes[0].is_open(c));
    net.advance(Duration::from_secs(1));
    assert!(!net.nodes[0].is_open(c));
    assert_eq!(net.nodes[0].next_deadline(), None);
}

#[test]
fn a_full_send_queue_fails_the_message() {
    let mut net = Net::with(2, DriverConfig { max_tx_bytes: 1000, ..cfg() });
    // Queued while the connection is still being opened (run not called).
    let big = Bytes::from(vec![1u8; 2000]);
    net.nodes[0].on_command(net.now, PingCmd::Ping { to: addr(1), seq: 1, payload: big }).unwrap();
    let small = Bytes::from_static(b"ok");
    net.nodes[0].on_command(net.now, PingCmd::Ping { to: addr(1), seq: 2, payload: small.clone() }).unwrap();
    net.run();
    assert_eq!(net.events[0], [PingEvent::SendFailed(addr(1)), pong(1, 2, &small)]);
}

#[test]
fn timers_fire_through_next_deadline() {
    let mut net = Net::new(1);
    let at = net.now + Duration::from_millis(30);
    net.nodes[0].on_command(net.now, PingCmd::WakeAt(at)).unwrap();
    assert_eq!(net.nodes[0].next_deadline(), Some(at));
    net.advance(Duration::from_millis(10));
    assert!(net.events[0].is_empty(), "an early on_timeout is a no-op");
    net.advance(Duration::from_millis(20));
    assert_eq!(net.events[0], [PingEvent::Woke(at)]);
}

#[test]
fn simultaneous_dials_keep_both_connections_usable() {
    let mut net = Net::new(2);
    let p = Bytes::new();
    net.nodes[0].on_command(net.now, PingCmd::Ping { to: addr(1), seq: 1, payload: p.clone() }).unwrap();
    net.nodes[1].on_command(net.now, PingCmd::Ping { to: addr(0), seq: 2, payload: p.clone() }).unwrap();
    net.run();
    assert_eq!(net.dials, [1, 1]);
    assert_eq!(net.events[0], [pong(1, 1, &p)]);
    assert_eq!(net.events[1], [pong(0, 2, &p)]);
    // Losing one of the two connections is no failure: the other takes over.
    let (&(_, c0), _) = net.links.iter().find(|((i, _), _)| *i == 0).unwrap();
    net.nodes[0].on_closed(net.now, c0, "reset");
    net.run();
    net.ping(0, addr(1), 3, p.clone());
    assert_eq!(net.events[0].last(), Some(&pong(1, 3, &p)));
    let _ = PingMsg::Ping { seq: 0 };
}

#[test]
fn nodes_of_another_overlay_are_refused() {
    use p2pmp_core::overlay::OverlayKind;
    let chord = DriverConfig { overlay: Some(OverlayKind::Chord), ..cfg() };
    let can = DriverConfig { overlay: Some(OverlayKind::Can { dims: 2 }), ..cfg() };
    let mut net = Net::with_each(vec![chord.clone(), can.clone()]);
    net.ping(0, addr(1), 1, Bytes::new());
    assert_eq!(net.events[0], [PingEvent::SendFailed(addr(1))]);
    assert!(net.events[1].is_empty(), "the ping was never delivered");
    // Another CAN shape is another overlay too; the same kind is welcome.
    let can3 = DriverConfig { overlay: Some(OverlayKind::Can { dims: 3 }), ..cfg() };
    let mut net = Net::with_each(vec![can.clone(), can3]);
    net.ping(0, addr(1), 1, Bytes::new());
    assert_eq!(net.events[0], [PingEvent::SendFailed(addr(1))]);
    let mut net = Net::with_each(vec![can.clone(), can]);
    net.ping(0, addr(1), 1, Bytes::new());
    assert_eq!(net.events[0].len(), 1);
    assert_ne!(net.events[0][0], PingEvent::SendFailed(addr(1)));
}

#[test]
fn nodes_of_another_network_cannot_be_reached() {
    let other = DriverConfig { network_id: 43, ..cfg() };
    let mut net = Net::with_each(vec![cfg(), other]);
    net.ping(0, addr(1), 1, Bytes::new());
    assert_eq!(net.events[0], [PingEvent::SendFailed(addr(1))]);
    assert!(net.events[1].is_empty(), "the ping was never delivered");
    assert_eq!(net.nodes[0].conn_count() + net.nodes[1].conn_count(), 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// However the stream is cut and whichever write path is used, every ping is
    /// answered once, in order, with its payload intact.
    #[test]
    fn any_chunking_delivers_every_pong_in_order(
        chunk in 1usize..5000,
        use_take in proptest::bool::ANY,
        sizes in proptest::collection::vec(0usize..40_000, 1..12),
    ) {
        let mut net = Net::new(2);
        net.chunk = chunk;
        net.use_take = use_take;
        let payloads: Vec<Bytes> = sizes.iter().enumerate().map(|(i, &n)| Bytes::from(vec![i as u8; n])).collect();
        for (seq, p) in payloads.iter().enumerate() {
            net.nodes[0].on_command(net.now, PingCmd::Ping { to: addr(1), seq: seq as u64, payload: p.clone() }).unwrap();
        }
        net.run();
        let want: Vec<PingEvent> = payloads.iter().enumerate().map(|(s, p)| pong(1, s as u64, p)).collect();
        proptest::prop_assert_eq!(&net.events[0], &want);
    }
}

/// A stranger at `ip` that says hello as `listen`, then sends `pings` valid pings.
fn hello_and_pings(listen: NodeAddr, pings: u64) -> Vec<u8> {
    let mut b = hello_frame(42, listen);
    for seq in 0..pings {
        let env = Envelope::new(listen.id(), listen, 0, PingMsg::Ping { seq });
        wire::encode_frame(&env, &mut b, 1024).unwrap();
    }
    b.to_vec()
}

/// A node with `guard`, on plain links: the strangers of these tests write
/// frames by hand (the guard counts frames and bytes the same after decryption).
fn guarded(guard: GuardConfig) -> DriverConfig {
    DriverConfig { guard, noise: None, ..cfg() }
}

#[test]
fn a_flood_of_valid_frames_is_cut_off_and_its_source_refused_for_a_while() {
    let guard =
        GuardConfig { frames_per_s: 100, frame_burst: 50, ban_min: Duration::from_secs(1), ..Default::default() };
    let mut net = Net::with(2, guarded(guard));
    let calm = net.raw_conn(0);
    net.nodes[0].on_bytes(net.now, calm, &hello_and_pings(addr(5), 49));
    net.run();
    assert!(net.nodes[0].is_open(calm), "49 frames and a hello are within the burst");
    let flood = net.raw_conn(0);
    let flooder: std::net::SocketAddr = "127.9.9.2:2".parse().unwrap();
    net.nodes[0].on_bytes(net.now, flood, &hello_and_pings(addr(6), 60));
    net.run();
    assert!(!net.nodes[0].is_open(flood), "60 frames at once are a flood");
    let s = net.nodes[0].stats();
    assert_eq!((s.peers_dropped, s.guard.cut_off, s.guard.accepted), (1, 1, 2));
    assert_eq!(net.nodes[0].on_accepted(net.now, flooder), None, "its source is refused during the ban");
    assert_eq!(net.nodes[0].stats().guard.refused, 1);
    // Everyone else is served as before: the calm stranger, and a real peer.
    assert!(net.nodes[0].is_open(calm));
    net.ping(1, addr(0), 1, Bytes::new());
    assert_eq!(net.events[1], [pong(0, 1, &Bytes::new())]);
    net.advance(Duration::from_secs(1));
    assert!(net.nodes[0].on_accepted(net.now, flooder).is_some(), "the ban is over");
}

#[test]
fn inbound_connections_are_capped_per_source_and_in_total() {
    let guard = GuardConfig { max_conns: 3, max_conns_per_ip: 2, ..Default::default() };
    let mut net = Net::with(1, guarded(guard));
    let a: std::net::SocketAddr = "198.18.0.1:1".parse().unwrap();
    let b: std::net::SocketAddr = "198.18.0.2:1".parse().unwrap();
    let c: std::net::SocketAddr = "198.18.0.3:1".parse().unwrap();
    let first = net.nodes[0].on_accepted(net.now, a).unwrap();
    assert!(net.nodes[0].on_accepted(net.now, a).is_some());
    assert_eq!(net.nodes[0].on_accepted(net.now, a), None, "two per source");
    assert!(net.nodes[0].on_accepted(net.now, b).is_some());
    assert_eq!(net.nodes[0].on_accepted(net.now, c), None, "three in all");
    net.nodes[0].on_closed(net.now, first, "closed by peer");
    assert!(net.nodes[0].on_accepted(net.now, c).is_some(), "a closed connection frees its place");
    // A silent connection is cut at its hello deadline, and that is misbehaving.
    net.advance(cfg().hello_timeout);
    assert_eq!(net.nodes[0].conn_count(), 0);
    assert_eq!(net.nodes[0].on_accepted(net.now, c), None, "silent sources are banned");
}

#[test]
fn unfinished_frames_over_the_budget_cut_off_the_biggest_holder() {
    let guard = GuardConfig { max_buffered: 10_000, ..Default::default() };
    let mut net = Net::with(2, guarded(guard));
    net.ping(1, addr(0), 1, Bytes::new());
    let start = |net: &mut Net, listen: NodeAddr, body: usize| {
        let c = net.raw_conn(0);
        let mut b = hello_and_pings(listen, 0);
        b.extend((9000u32).to_be_bytes());
        b.extend(vec![0u8; body]);
        net.nodes[0].on_bytes(net.now, c, &b);
        net.run();
        c
    };
    let big = start(&mut net, addr(5), 7000);
    assert_eq!(net.nodes[0].buffered(), 7004);
    let small = start(&mut net, addr(6), 4000);
    assert!(!net.nodes[0].is_open(big), "the biggest holder is cut");
    assert!(net.nodes[0].is_open(small));
    assert_eq!(net.nodes[0].buffered(), 4004);
    net.ping(1, addr(0), 2, Bytes::new());
    assert_eq!(net.events[1].len(), 2, "a real peer is served throughout");
}

#[test]
fn a_peer_that_asks_and_never_reads_is_cut_off_when_queues_grow_too_long() {
    let guard = GuardConfig { max_queued: 3 << 20, ..Default::default() };
    let mut net = Net::with(2, guarded(guard));
    net.ping(1, addr(0), 1, Bytes::new());
    // A stranger pings with 512 KiB payloads (each answered with as much) and never reads.
    let greedy = net.raw_conn(0);
    let me = addr(7);
    let mut b = hello_frame(42, me);
    for seq in 0..8 {
        let env = Envelope::new(me.id(), me, 0, PingMsg::Ping { seq }).with_payload(Bytes::from(vec![1u8; 512 << 10]));
        wire::encode_frame(&env, &mut b, DriverConfig::default().max_frame).unwrap();
    }
    net.nodes[0].on_bytes(net.now, greedy, &b);
    assert!(!net.nodes[0].is_open(greedy), "cut off once its replies pass 3 MiB");
    assert_eq!(net.nodes[0].stats().guard.cut_off, 1);
    net.run();
    net.ping(1, addr(0), 2, Bytes::new());
    assert_eq!(net.events[1].len(), 2, "a real peer is served throughout");
}

#[test]
fn an_address_shared_with_a_peer_in_good_standing_is_not_banned() {
    let mut net = Net::new(2);
    net.ping(1, addr(0), 1, Bytes::new());
    // Node 1's connection reached node 0 from node 0's own address in this
    // in-memory network (see `run`); a stranger there sends junk.
    let shared = addr(0).0;
    let bad = net.nodes[0].on_accepted(net.now, shared).unwrap();
    net.nodes[0].on_bytes(net.now, bad, b"GET / HTTP/1.1\r\n\r\n");
    net.run();
    assert!(!net.nodes[0].is_open(bad), "the offender is cut off");
    assert_eq!(net.nodes[0].stats().guard.cut_off, 1);
    assert!(net.nodes[0].on_accepted(net.now, shared).is_some(), "but its address is not banned");
    let alone = "127.9.9.200:1".parse().unwrap();
    let bad = net.nodes[0].on_accepted(net.now, alone).unwrap();
    net.nodes[0].on_bytes(net.now, bad, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(net.nodes[0].on_accepted(net.now, alone), None, "an address of its own is");
}

/// Tests of encrypted links and of the binding of a peer's address to its key.
mod secure_peers {
    use p2pmp_core::secure::SecureChannel;

    use super::*;
    use crate::random_key;

    const MARKER: &[u8] = b"MARKER-0123456789-the-wiretap-must-not-see-this";

    #[test]
    fn no_plaintext_crosses_the_wire_and_pings_still_answer() {
        for noise in [true, false] {
            let c = if noise { cfg() } else { DriverConfig { noise: None, ..cfg() } };
            let mut net = Net::with(2, c);
            let big = Bytes::from(MARKER.repeat(5000));
            net.ping(0, addr(1), 1, Bytes::from_static(MARKER));
            net.ping(0, addr(1), 2, big.clone());
            assert_eq!(net.events[0], [pong(1, 1, &Bytes::from_static(MARKER)), pong(1, 2, &big)]);
            let seen = net.tap.windows(MARKER.len()).any(|w| w == MARKER);
            assert_eq!(seen, !noise, "marker on the wire with encryption {noise}");
        }
    }

    /// A stranger with a key of its own completes the handshake with node `j`
    /// from `remote` and says hello as `listen`; returns its open channel.
    fn stranger(net: &mut Net, j: usize, remote: &str, listen: NodeAddr) -> (ConnId, SecureChannel) {
        let c = net.nodes[j].on_accepted(net.now, remote.parse().unwrap()).unwrap();
        let mut out = BytesMut::new();
        let mut ch = SecureChannel::initiator(&random_key(), [9; 32], &mut out);
        net.nodes[j].on_bytes(net.now, c, &out);
        let mut reply = Vec::new();
        net.nodes[j].write_tx(c, &mut reply).unwrap();
        let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
        ch.on_bytes(&reply, &mut plain, &mut out).unwrap();
        assert!(ch.is_open(), "handshake done after the responder's message");
        ch.seal(&hello_frame(42, listen), &mut out).unwrap();
        net.nodes[j].on_bytes(net.now, c, &out);
        (c, ch)
    }

    fn ping_as(ch: &mut SecureChannel, sender: NodeAddr) -> BytesMut {
        let mut frame = BytesMut::new();
        let env = Envelope::new(sender.id(), sender, 0, PingMsg::Ping { seq: 9 });
        wire::encode_frame(&env, &mut frame, 1 << 20).unwrap();
        let mut out = BytesMut::new();
        ch.seal(&frame, &mut out).unwrap();
        out
    }

    #[test]
    fn a_peer_sending_as_another_node_is_cut_off_and_the_network_unharmed() {
        let mut net = Net::new(3);
        net.ping(2, addr(0), 1, Bytes::new());
        // Its hello claims a free address; its messages claim node 1's.
        let (c, mut ch) = stranger(&mut net, 0, "127.0.0.1:5000", addr(9));
        assert!(net.nodes[0].is_open(c), "an honest hello is accepted");
        let forged = ping_as(&mut ch, addr(1));
        net.nodes[0].on_bytes(net.now, c, &forged);
        net.run();
        assert!(!net.nodes[0].is_open(c), "cut off");
        assert_eq!(net.nodes[0].machine().pings_served, 1, "the forged ping never reached the machine");
        assert_eq!(net.nodes[0].stats().peers_dropped, 1);
        // The same with a consistent but forged id: claiming node 1's id at its own address.
        let (c, mut ch) = stranger(&mut net, 0, "127.0.0.1:5001", addr(9));
        let mut frame = BytesMut::new();
        let env = Envelope::new(addr(1).id(), addr(9), 0, PingMsg::Ping { seq: 9 });
        wire::encode_frame(&env, &mut frame, 1 << 20).unwrap();
        let mut out = BytesMut::new();
        ch.seal(&frame, &mut out).unwrap();
        net.nodes[0].on_bytes(net.now, c, &out);
        net.run();
        assert!(!net.nodes[0].is_open(c));
        assert_eq!(net.nodes[0].machine().pings_served, 1);
        net.ping(2, addr(0), 2, Bytes::new());
        assert_eq!(net.events[2], [pong(0, 1, &Bytes::new()), pong(0, 2, &Bytes::new())]);
    }

    #[test]
    fn a_hello_claiming_a_dialed_nodes_address_with_another_key_is_refused() {
        let mut net = Net::new(2);
        net.ping(0, addr(1), 1, Bytes::new());
        let dials = net.dials[0];
        let (c, _) = stranger(&mut net, 0, "127.0.0.1:5000", addr(1));
        net.run();
        assert!(!net.nodes[0].is_open(c), "refused: node 1's address answers with another key");
        assert_eq!(net.dials[0], dials, "no probe: the connection to node 1 is open and proves its key");
        net.ping(0, addr(1), 2, Bytes::new());
        assert_eq!(net.events[0], [pong(1, 1, &Bytes::new()), pong(1, 2, &Bytes::new())]);
        assert_eq!(net.nodes[1].machine().pings_served, 2);
    }

    #[test]
    fn a_hello_from_another_host_than_its_address_is_refused() {
        let mut net = Net::new(1);
        let (c, _) = stranger(&mut net, 0, "198.18.0.9:5000", addr(3));
        net.run();
        assert!(!net.nodes[0].is_open(c));
        assert_eq!(net.nodes[0].stats().peers_dropped, 1);
    }

    #[test]
    fn a_plaintext_peer_cannot_talk_to_an_encrypting_one() {
        let plain = DriverConfig { noise: None, ..cfg() };
        let mut net = Net::with_each(vec![plain, cfg()]);
        net.ping(0, addr(1), 1, Bytes::new());
        assert_eq!(net.events[0], [PingEvent::SendFailed(addr(1))]);
        assert_eq!(net.nodes[1].machine().pings_served, 0);
    }
}
