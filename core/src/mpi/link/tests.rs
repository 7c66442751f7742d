//! The link machine against a scripted driver: unit tests of each rule, and a
//! property test that random answers, breaks and ticks never leave a wanted
//! link without a way forward, never run two attempts to one peer, and keep the
//! engine's view of each link in step with the machine's.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::mpi::{MpiConfig, MpiMsg};

fn addr(n: u32) -> NodeAddr {
    NodeAddr::loopback(n, 4000 + n as u16)
}

fn tcp(peer: u32, addr: NodeAddr) -> LinkAction {
    LinkAction::Connect { peer, addr, path: Path::Tcp }
}

fn shm(peer: u32, addr: NodeAddr) -> LinkAction {
    LinkAction::Connect { peer, addr, path: Path::Shm }
}

/// Links that take addresses on `addr(0)`'s host for this host's.
fn on_host_of_addr0() -> LinkConfig {
    LinkConfig { same_host: Some(addr(0).0.ip()), ..LinkConfig::default() }
}

/// The `n`th port on the host of `addr(0)`.
fn here(n: u16) -> NodeAddr {
    NodeAddr(std::net::SocketAddr::new(addr(0).0.ip(), 5000 + n))
}

/// One rank (0 unless said) of a world of `size`, its links, and what the
/// driver holds.
struct Rig {
    now: Instant,
    engine: MpiEngine,
    links: Links,
    /// Frames written, per peer.
    sent: Vec<Vec<MpiMsg>>,
    /// Frames held while a first attempt runs, per peer.
    held: Vec<Vec<MpiMsg>>,
    /// What the driver was asked and has not answered: per peer.
    resolving: Vec<bool>,
    connecting: Vec<Option<NodeAddr>>,
    /// The latest connect asked for, per peer, and whether it failed.
    last_connect: Vec<Option<(NodeAddr, Path)>>,
    failed_last: Vec<bool>,
    actions: Vec<LinkAction>,
}

impl Rig {
    fn new(size: u32) -> Self {
        Rig::with(size, LinkConfig::default())
    }

    fn with(size: u32, config: LinkConfig) -> Self {
        Rig::of_rank(0, size, config)
    }

    fn of_rank(rank: u32, size: u32, config: LinkConfig) -> Self {
        let n = size as usize;
        Rig {
            now: Instant::now(),
            engine: MpiEngine::new(MpiConfig::default(), rank, size).unwrap(),
            links: Links::new(config, rank, size),
            sent: vec![Vec::new(); n],
            held: vec![Vec::new(); n],
            resolving: vec![false; n],
            connecting: vec![None; n],
            last_connect: vec![None; n],
            failed_last: vec![false; n],
            actions: Vec::new(),
        }
    }

    /// Drains the engine through the links, then the links' actions.
    fn pump(&mut self) {
        while let Some(t) = self.engine.poll_transmit() {
            match self.links.on_transmit(self.now, t.to, &mut self.engine) {
                Route::Send => self.sent[t.to as usize].push(t.msg),
                Route::Hold => self.held[t.to as usize].push(t.msg),
                Route::Drop => {}
            }
        }
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(a) = self.links.poll_action() {
            match &a {
                LinkAction::Resolve { peer } => {
                    assert!(!self.resolving[*peer as usize], "two resolves of {peer} at once");
                    assert!(self.connecting[*peer as usize].is_none(), "resolve while connecting to {peer}");
                    self.resolving[*peer as usize] = true;
                }
                LinkAction::Connect { peer, addr, path } => {
                    assert!(self.connecting[*peer as usize].is_none(), "two connects to {peer} at once");
                    let here = self.links.config.same_host == Some(addr.0.ip());
                    assert!(*path == Path::Tcp || here, "shared memory to another host");
                    if let Some((a, Path::Shm)) = self.last_connect[*peer as usize] {
                        if self.failed_last[*peer as usize] {
                            assert_eq!((*addr, *path), (a, Path::Tcp), "shared memory failed: TCP next");
                        }
                    }
                    self.last_connect[*peer as usize] = Some((*addr, *path));
                    self.connecting[*peer as usize] = Some(*addr);
                }
                LinkAction::Abort { peer } => {
                    let i = *peer as usize;
                    // The attempt ends: what follows a failed connect no longer applies.
                    self.failed_last[i] = false;
                    let connecting = self.connecting[i].take().is_some();
                    let resolving = std::mem::take(&mut self.resolving[i]);
                    assert!(connecting != resolving, "abort with no attempt (or two) to {peer}");
                }
                LinkAction::UseInbound { peer } => self.flush(*peer),
                LinkAction::Failed { peer } => self.held[*peer as usize].clear(),
                LinkAction::GiveUp { .. } => assert!(!self.links.is_closing(), "a closing rank never gives up"),
            }
            self.actions.push(a);
        }
    }

    fn flush(&mut self, peer: u32) {
        let held = std::mem::take(&mut self.held[peer as usize]);
        self.sent[peer as usize].extend(held);
    }

    fn send(&mut self, peer: u32, len: usize) {
        let _ = self.engine.isend(0, peer, 0, Bytes::from(vec![1u8; len])).unwrap();
        self.pump();
    }

    fn resolved(&mut self, peer: u32, answer: Result<Vec<NodeAddr>, String>) {
        self.resolving[peer as usize] = false;
        self.links.handle_resolved(self.now, peer, answer, &mut self.engine);
        self.pump();
    }

    fn connected(&mut self, peer: u32) -> bool {
        self.connecting[peer as usize] = None;
        self.failed_last[peer as usize] = false;
        let ok = self.links.handle_connected(self.now, peer, &mut self.engine);
        if ok {
            self.flush(peer);
        }
        self.pump();
        ok
    }

    fn connect_failed(&mut self, peer: u32) {
        self.connecting[peer as usize] = None;
        self.failed_last[peer as usize] = true;
        self.links.handle_connect_failed(self.now, peer, "refused".into(), &mut self.engine);
        self.pump();
    }

    fn closed(&mut self, peer: u32) {
        self.links.handle_closed(self.now, peer, &mut self.engine);
        self.pump();
    }

    /// The peer sent us frames: on the link we opened (the driver hears it
    /// there), or on its own connection (`theirs`).
    fn heard(&mut self, peer: u32, theirs: bool) {
        self.links.handle_heard(self.now, peer, theirs, &mut self.engine);
        self.pump();
    }

    /// The connection we opened and heard the peer on broke (the driver
    /// tells both, as it closes it).
    fn broke(&mut self, peer: u32) {
        self.links.handle_inbound_closed(peer);
        self.closed(peer);
    }

    fn tick(&mut self, d: Duration) {
        self.now += d;
        self.engine.handle_timeout(self.now);
        self.links.handle_timeout(self.now, &mut self.engine);
        self.pump();
    }

    /// The peer acknowledged everything we sent it.
    fn acked_by(&mut self, peer: u32) {
        let ack = self.engine.peers[peer as usize].next_seq - 1;
        let credit = self.engine.peers[peer as usize].credit_limit;
        self.engine.handle_message(self.now, peer, MpiMsg::Ack { ack, credit }, Bytes::new());
        self.pump();
    }

    fn took(&mut self) -> Vec<LinkAction> {
        std::mem::take(&mut self.actions)
    }

    /// The invariants that hold after every step.
    fn check(&self) {
        for p in (0..self.engine.size()).filter(|&p| p != self.links.rank()) {
            let i = p as usize;
            assert_eq!(self.engine.peers[i].up, !self.links.is_down(p), "engine and links disagree on {p}");
            assert!(!(self.links.is_open(p) && self.links.is_attempting(p)), "{p} open while attempting");
            assert_eq!(
                self.links.is_attempting(p),
                self.resolving[i] || self.connecting[i].is_some(),
                "the machine's attempt to {p} and the driver's disagree"
            );
            assert!(self.held[i].is_empty() || self.links.is_attempting(p), "frames held for {p} with no attempt");
            let b = self.links.backoff(p);
            assert!(b.is_zero() || (b >= Duration::from_millis(1) && b <= Duration::from_millis(200)), "{b:?}");
            // A link the engine wants and may retry has a deadline to retry at.
            let wanted = self.links.is_down(p) && self.engine.wants_link(p);
            if self.links.is_attempting(p) || wanted && self.engine.unacked_len(p) > 0 {
                assert!(self.links.poll_timeout(&self.engine).is_some(), "{p} waits with no deadline");
            }
        }
    }
}

#[test]
fn the_first_frame_resolves_connects_and_flushes_in_order() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    r.send(1, 20);
    assert_eq!(r.took(), vec![LinkAction::Resolve { peer: 1 }]);
    assert_eq!(r.held[1].len(), 2, "frames wait for the link");
    r.resolved(1, Ok(vec![addr(1), addr(2)]));
    assert_eq!(r.took(), vec![tcp(1, addr(2))], "the newest registration first");
    assert!(r.connected(1));
    assert!(r.links.is_open(1));
    assert_eq!(r.sent[1].len(), 2);
    assert_eq!(r.engine.stats().resent, 0, "a first connection resends nothing");
    r.send(1, 5);
    assert_eq!(r.sent[1].len(), 3, "an open link writes at once");
    r.check();
}

#[test]
fn addresses_are_tried_newest_first_then_the_attempt_fails_and_backs_off() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    r.resolved(1, Ok(vec![addr(1), addr(2)]));
    r.connect_failed(1);
    r.connect_failed(1);
    let a = r.took();
    assert_eq!(a[1], tcp(1, addr(2)));
    assert_eq!(a[2], tcp(1, addr(1)));
    assert_eq!(a[3], LinkAction::Failed { peer: 1 });
    assert!(r.held[1].is_empty(), "held frames dropped: the engine resends them");
    assert!(r.links.is_down(1));
    assert_eq!(r.links.poll_timeout(&r.engine), Some(r.now + Duration::from_millis(1)));
    r.tick(Duration::from_micros(500));
    assert!(r.took().is_empty(), "no retry before the back-off ends");
    r.tick(Duration::from_micros(500));
    assert_eq!(r.took(), vec![LinkAction::Resolve { peer: 1 }]);
    r.resolved(1, Ok(vec![]));
    assert_eq!(r.links.backoff(1), Duration::from_millis(2), "back-off doubles");
    r.tick(Duration::from_millis(2));
    r.resolved(1, Ok(vec![addr(3)]));
    assert!(r.connected(1));
    assert_eq!(r.engine.stats().resent, 1, "the reconnect resends the unacknowledged frame");
    assert_eq!(r.sent[1].len(), 1);
    assert_eq!(r.links.backoff(1), Duration::from_millis(2), "open, the peer not heard yet");
    r.heard(1, false);
    assert_eq!(r.links.backoff(1), Duration::ZERO, "heard: the link works");
    r.check();
}

#[test]
fn back_off_is_capped() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    for _ in 0..20 {
        r.tick(r.links.backoff(1));
        r.resolved(1, Err("node says no".into()));
    }
    assert_eq!(r.links.backoff(1), Duration::from_millis(200));
    r.check();
}

#[test]
fn a_peer_that_sends_to_us_is_answered_on_its_connection() {
    let mut r = Rig::new(3);
    r.heard(2, true);
    r.send(2, 10);
    assert_eq!(r.took(), vec![LinkAction::UseInbound { peer: 2 }]);
    assert_eq!(r.sent[2].len(), 1);
    assert!(r.links.is_open(2));
    r.check();
}

/// A first attempt found the peer not registered yet and waits out its
/// back-off; then the peer opens a connection to us and talks on it: the
/// link takes that connection at once, not at the retry, and the engine
/// resends what the failed attempt dropped.
#[test]
fn a_peer_heard_during_a_back_off_is_answered_at_once_on_its_connection() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    r.resolved(1, Ok(vec![]));
    r.took();
    assert!(!r.links.is_open(1) && r.sent[1].is_empty(), "down, waiting out the back-off");
    r.heard(1, true);
    assert_eq!(r.took(), vec![LinkAction::UseInbound { peer: 1 }], "at once");
    assert!(r.links.is_open(1));
    assert_eq!((r.sent[1].len(), r.engine.stats().resent), (1, 1), "the frame went out, resent");
    r.check();
}

/// A peer heard on its own connection while our first attempt still
/// resolves, or still connects: the attempt gives way, and the frames held
/// for it go out on the peer's connection, in order, resent by nobody.
#[test]
fn a_peer_heard_during_an_attempt_takes_the_link_at_once() {
    for connecting in [false, true] {
        let mut r = Rig::new(2);
        r.send(1, 10);
        r.send(1, 20);
        if connecting {
            r.resolved(1, Ok(vec![addr(1)]));
        }
        r.took();
        assert_eq!(r.held[1].len(), 2, "held while the attempt runs");
        r.heard(1, true);
        assert_eq!(r.took(), vec![LinkAction::Abort { peer: 1 }, LinkAction::UseInbound { peer: 1 }]);
        assert!(r.links.is_open(1) && !r.links.is_attempting(1));
        assert_eq!((r.sent[1].len(), r.engine.stats().resent), (2, 0), "connecting: {connecting}");
        r.check();
    }
}

/// Both ranks of a pair opened a connection at once, and each hears the
/// other on the other's: the higher rank moves its frames to the lower
/// rank's connection, once all it sent there is acknowledged; the lower rank
/// keeps its own.
#[test]
fn when_both_sides_open_a_connection_the_higher_rank_moves_to_the_lowers() {
    for (rank, peer) in [(0, 1), (1, 0)] {
        let mut r = Rig::of_rank(rank, 2, LinkConfig::default());
        r.send(peer, 10);
        r.resolved(peer, Ok(vec![addr(peer)]));
        assert!(r.connected(peer));
        r.heard(peer, false);
        assert!(!r.links.move_to_inbound(peer, &r.engine), "rank {rank}: its frame is unacknowledged");
        r.acked_by(peer);
        assert_eq!(r.links.move_to_inbound(peer, &r.engine), rank > peer, "rank {rank}");
        r.check();
    }
}

#[test]
fn a_broken_link_reconnects_at_once_and_the_engine_resends() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    r.resolved(1, Ok(vec![addr(1)]));
    r.connected(1);
    r.heard(1, false);
    r.broke(1);
    assert!(r.links.is_down(1));
    r.tick(Duration::ZERO);
    assert_eq!(r.took().last(), Some(&LinkAction::Resolve { peer: 1 }), "a break is retried at once");
    r.resolved(1, Ok(vec![addr(1)]));
    r.connected(1);
    assert_eq!(r.sent[1].len(), 2, "sent, then resent after the break");
    r.check();
}

/// A peer that takes every connection and then closes it without a word
/// (it refuses the link: a key it will not vouch for, encryption it
/// requires) is redialled after a growing back-off, not at once forever, and
/// frames waiting for it give up after `unreachable_after`.
#[test]
fn a_peer_that_takes_connections_and_refuses_the_link_backs_off_and_gives_up() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    let start = r.now;
    let mut dials = 0;
    while r.now < start + Duration::from_secs(61) {
        if r.resolving[1] {
            r.resolved(1, Ok(vec![addr(1)]));
        }
        if r.connecting[1].is_some() {
            assert!(r.connected(1));
            dials += 1;
            r.closed(1);
            r.check();
        }
        r.tick(Duration::from_millis(1));
    }
    // At most one dial per 200 ms once the back-off is up (and a few on the way).
    assert!(dials < 61 * 5 + 10, "redialled {dials} times in a minute");
    let gave_up = r.took().iter().any(|a| matches!(a, LinkAction::GiveUp { peer: 1, .. }));
    assert!(gave_up, "frames waited a minute for a link that never worked");
}

#[test]
fn a_slow_connect_is_aborted_and_the_next_address_tried() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    r.resolved(1, Ok(vec![addr(1), addr(2)]));
    r.took();
    r.tick(Duration::from_secs(2));
    assert_eq!(r.took(), vec![LinkAction::Abort { peer: 1 }, tcp(1, addr(1))]);
    r.check();
}

#[test]
fn a_silent_node_fails_the_resolve() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    r.tick(Duration::from_secs(30));
    r.resolving[1] = false; // the driver forgets the question too
    assert!(r.took().contains(&LinkAction::Failed { peer: 1 }));
    assert!(r.links.is_down(1));
    r.resolved(1, Ok(vec![addr(1)]));
    assert!(!r.links.is_attempting(1), "a stale answer starts nothing");
}

#[test]
fn a_connection_nobody_asked_for_is_refused() {
    let mut r = Rig::new(2);
    assert!(!r.connected(1));
    assert!(!r.links.is_open(1));
}

#[test]
fn ack_only_links_give_up_until_heard_or_closing() {
    let mut r = Rig::new(2);
    r.send(1, 10);
    r.resolved(1, Ok(vec![addr(1)]));
    r.connected(1);
    r.acked_by(1);
    r.heard(1, false);
    // The peer sends us a frame we owe an acknowledgement for, then the link breaks.
    let hdr = crate::mpi::SeqHdr { seq: 1, ack: 1, credit: 1 << 20 };
    r.engine.handle_message(r.now, 1, MpiMsg::Eager { hdr, comm: 0, tag: 0 }, Bytes::from_static(b"x"));
    r.engine.handle_disconnected(1).unwrap();
    r.engine.handle_reconnected(1).unwrap();
    r.broke(1);
    assert!(r.engine.wants_link(1) && r.engine.unacked_len(1) == 0, "only an ack owed");
    r.tick(Duration::ZERO);
    r.resolved(1, Ok(vec![]));
    r.took();
    r.tick(Duration::from_secs(1));
    assert!(r.took().is_empty(), "no retries for acknowledgements alone");
    assert_eq!(r.links.poll_timeout(&r.engine), None, "and no deadline");
    r.heard(1, true);
    assert_eq!(r.took(), vec![LinkAction::UseInbound { peer: 1 }], "heard from: answered on its connection");
    r.broke(1);
    r.tick(Duration::ZERO);
    assert_eq!(r.took(), vec![LinkAction::Resolve { peer: 1 }], "that broke: worth trying again");
    r.resolved(1, Ok(vec![]));
    r.took();
    r.links.start_closing(r.now);
    r.tick(Duration::ZERO);
    assert_eq!(r.took(), vec![LinkAction::Resolve { peer: 1 }], "closing: one more attempt at once");
    r.check();
}

#[test]
fn frames_unreachable_for_a_minute_give_up_but_not_while_closing() {
    for closing in [false, true] {
        let mut r = Rig::new(2);
        if closing {
            r.links.start_closing(r.now);
            r.engine.start_closing(r.now);
        }
        r.send(1, 10);
        let start = r.now;
        while r.now < start + Duration::from_secs(61) {
            r.tick(Duration::from_millis(200));
            if r.resolving[1] {
                r.resolved(1, Ok(vec![]));
            }
        }
        let gave_up = r.took().iter().any(|a| matches!(a, LinkAction::GiveUp { peer: 1, .. }));
        assert_eq!(gave_up, !closing, "closing {closing}");
    }
}

#[test]
fn a_peer_on_this_host_is_tried_over_shared_memory_then_tcp() {
    let mut r = Rig::with(3, on_host_of_addr0());
    r.send(1, 10);
    r.resolved(1, Ok(vec![here(1)]));
    assert_eq!(r.took()[1], shm(1, here(1)));
    r.connect_failed(1);
    assert_eq!(r.took(), vec![tcp(1, here(1))], "the same address over TCP");
    assert!(r.connected(1));
    assert_eq!(r.links.path(1), Some(Path::Tcp));
    r.send(2, 10);
    r.resolved(2, Ok(vec![addr(2)]));
    assert_eq!(r.took()[1], tcp(2, addr(2)), "another host: TCP at once");
    r.check();
}

#[test]
fn a_peer_that_moves_between_hosts_switches_paths() {
    let mut r = Rig::with(2, on_host_of_addr0());
    r.send(1, 10);
    r.resolved(1, Ok(vec![here(1)]));
    assert!(r.connected(1));
    r.heard(1, false);
    assert_eq!(r.links.path(1), Some(Path::Shm));
    // It moves away: the link breaks, the resolve names another host.
    r.broke(1);
    r.tick(Duration::ZERO);
    r.resolved(1, Ok(vec![here(1), addr(7)]));
    assert_eq!(r.took().last(), Some(&tcp(1, addr(7))), "the newest registration, over TCP");
    assert!(r.connected(1));
    assert_eq!(r.links.path(1), Some(Path::Tcp));
    r.heard(1, false);
    // And back.
    r.broke(1);
    r.tick(Duration::ZERO);
    r.resolved(1, Ok(vec![here(2)]));
    assert_eq!(r.took().last(), Some(&shm(1, here(2))));
    assert!(r.connected(1));
    assert_eq!(r.links.path(1), Some(Path::Shm));
    assert_eq!(r.sent[1].len(), 3, "sent once and resent after each move");
    r.check();
}

#[derive(Debug, Clone)]
enum Op {
    Send { peer: u32, len: usize },
    Resolve { peer: u32, n: usize, err: bool },
    Connect { peer: u32, ok: bool },
    Close { peer: u32 },
    Heard { peer: u32, theirs: bool },
    InboundClosed { peer: u32 },
    Acked { peer: u32 },
    Tick { ms: u64 },
    Closing,
}

fn arb_op(size: u32) -> impl Strategy<Value = Op> {
    let p = 1..size;
    prop_oneof![
        4 => (p.clone(), 0..200usize).prop_map(|(peer, len)| Op::Send { peer, len }),
        3 => (p.clone(), 0..3usize, prop::bool::weighted(0.2)).prop_map(|(peer, n, err)| Op::Resolve { peer, n, err }),
        4 => (p.clone(), prop::bool::weighted(0.6)).prop_map(|(peer, ok)| Op::Connect { peer, ok }),
        2 => p.clone().prop_map(|peer| Op::Close { peer }),
        1 => (p.clone(), prop::bool::ANY).prop_map(|(peer, theirs)| Op::Heard { peer, theirs }),
        1 => p.clone().prop_map(|peer| Op::InboundClosed { peer }),
        2 => p.prop_map(|peer| Op::Acked { peer }),
        4 => prop_oneof![0..3u64, 100..3000u64].prop_map(|ms| Op::Tick { ms }),
        1 => Just(Op::Closing),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the driver answers and whenever links break: one attempt per
    /// peer at a time, the engine's view agrees with the machine's, held frames
    /// exist only during a first attempt, back-off stays within its bounds, a
    /// link with frames waiting always has a deadline, no deadline is left in the
    /// past after a timeout, and a closing rank never gives up. Once every
    /// attempt succeeds, every frame reaches the peer.
    #[test]
    fn links_always_have_a_way_forward(
        size in 2..5u32,
        shm_here in any::<bool>(),
        ops in prop::collection::vec(arb_op(4), 1..120),
    ) {
        let mut r = if shm_here { Rig::with(size, on_host_of_addr0()) } else { Rig::new(size) };
        for op in ops {
            match op {
                Op::Send { peer, len } if peer < size => r.send(peer, len),
                Op::Resolve { peer, n, err } if peer < size && r.resolving[peer as usize] => {
                    // Some addresses on this host, some elsewhere.
                    let pick = |i: u32| if i % 2 == 0 { here(i as u16) } else { addr(i) };
                    let answer = if err { Err("no".into()) } else { Ok((0..n as u32).map(pick).collect()) };
                    r.resolved(peer, answer);
                }
                Op::Connect { peer, ok } if peer < size && r.connecting[peer as usize].is_some() => {
                    if ok { assert!(r.connected(peer)); } else { r.connect_failed(peer); }
                }
                Op::Close { peer } if peer < size => r.closed(peer),
                Op::Heard { peer, theirs } if peer < size => r.heard(peer, theirs),
                Op::InboundClosed { peer } if peer < size => r.links.handle_inbound_closed(peer),
                Op::Acked { peer } if peer < size && r.links.is_open(peer) => r.acked_by(peer),
                Op::Tick { ms } => {
                    r.tick(Duration::from_millis(ms));
                    if let Some(t) = r.links.poll_timeout(&r.engine) {
                        prop_assert!(t > r.now, "a deadline left in the past");
                    }
                }
                Op::Closing => {
                    r.links.start_closing(r.now);
                    r.engine.start_closing(r.now);
                    r.pump();
                }
                _ => {}
            }
            r.check();
        }
        // From now on every attempt succeeds: every link the engine wants opens
        // and every frame gets out.
        let mut queue: VecDeque<u32> = VecDeque::new();
        for _ in 0..200 {
            for p in 1..size {
                if r.resolving[p as usize] {
                    r.resolved(p, Ok(vec![addr(p)]));
                }
                if r.connecting[p as usize].is_some() {
                    assert!(r.connected(p));
                }
                if r.links.is_open(p) {
                    queue.push_back(p);
                }
            }
            while let Some(p) = queue.pop_front() {
                r.acked_by(p);
            }
            r.tick(Duration::from_millis(50));
            r.check();
        }
        for p in 1..size {
            prop_assert_eq!(r.engine.unacked_len(p), 0, "frames to {} never got out", p);
        }
    }
}
