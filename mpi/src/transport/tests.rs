//! The transport against real sockets: a fake local node and a peer played
//! by the test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::time::{Duration, Instant};

use p2pmp_core::id::Id;
use p2pmp_core::local::{LocalReply, LocalRequest, RankHello};
use p2pmp_core::mpi::{MpiConfig, MpiEngine};
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};

use super::Transport;
use crate::env::{Encrypt, RankEnv};

/// A local node that grants every registration and answers nothing else.
fn fake_node() -> SocketAddr {
    fake_node_until(std::sync::mpsc::channel().1)
}

/// [`fake_node`], closing its connection once `die` says so (or its sender
/// is gone and the rank writes again).
fn fake_node_until(die: std::sync::mpsc::Receiver<()>) -> SocketAddr {
    fake_node_with(die, |_| ())
}

/// [`fake_node_until`], calling `on_register` with each key registered
/// before it answers (the rank waits for that answer).
fn fake_node_with(die: std::sync::mpsc::Receiver<()>, on_register: impl Fn(Id) + Send + 'static) -> SocketAddr {
    let l = StdListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        let mut dec = FrameDecoder::new(DEFAULT_MAX_FRAME);
        let mut buf = [0u8; 4096];
        loop {
            if die.try_recv().is_ok() {
                return;
            }
            let n = match s.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return,
            };
            dec.push(&buf[..n]);
            while let Ok(Some(frame)) = dec.decode() {
                let env: Envelope<LocalRequest> = decode_envelope(frame).unwrap();
                let key = match env.body {
                    LocalRequest::Register { key, .. } | LocalRequest::RegisterKeyed { key, .. } => key,
                    _ => continue,
                };
                on_register(key);
                let mut out = bytes::BytesMut::new();
                let reply = Envelope::new(env.sender, env.sender_addr, env.request_id, LocalReply::Registered { key });
                encode_frame(&reply, &mut out, DEFAULT_MAX_FRAME).unwrap();
                s.write_all(&out).unwrap();
            }
        }
    });
    at
}

/// Rank 0 of job `job` of `size` ranks whose node is at `node`.
fn env_of(job: &[u8], size: u32, node: SocketAddr) -> RankEnv {
    RankEnv {
        job: job.to_vec(),
        rank: 0,
        size,
        node,
        host: "127.0.0.1".parse().unwrap(),
        failure_timeout: Duration::from_secs(10),
        encrypt: Encrypt::Never,
    }
}

/// Rank 0 of a job of `size` ranks whose node is at `node`, its transport and engine.
fn rank0_of(size: u32, node: SocketAddr) -> (Transport, MpiEngine) {
    let net = Transport::start(&env_of(b"transport-test", size, node)).unwrap();
    (net, MpiEngine::new(MpiConfig::default(), 0, size).unwrap())
}

/// Rank 0 of a two-rank job, its transport and engine.
fn rank0() -> (Transport, MpiEngine) {
    rank0_of(2, fake_node())
}

/// Rank 1 played by the test: dials `net`'s listener and writes its hello.
fn peer_says_hello(net: &Transport) -> StdStream {
    let mut peer = StdStream::connect(net.addr.0).unwrap();
    let hello = RankHello { job: b"transport-test".to_vec(), from_rank: 1, to_rank: 0 };
    let mut out = bytes::BytesMut::new();
    encode_frame(&Envelope::new(net.key, net.addr, 0, hello), &mut out, DEFAULT_MAX_FRAME).unwrap();
    peer.write_all(&out).unwrap();
    peer
}

/// Polls until `done` or a deadline.
fn poll_until(net: &mut Transport, engine: &mut MpiEngine, mut done: impl FnMut(&Transport) -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        net.poll_io(engine, Some(Duration::from_millis(50)), Instant::now()).unwrap();
        if done(net) {
            return true;
        }
    }
    false
}

/// A peer that writes and hangs up before the rank reads (a rank moving
/// away closes its connections so): its bytes and its end of stream come
/// in one readiness event, and the rank must see both. Before, a short read
/// was taken to drain the socket and the end of stream raising no event of
/// its own went unseen: frames sent there afterwards were lost without a
/// resend, and the job hung.
#[test]
fn a_peer_that_hangs_up_right_after_its_bytes_is_seen_gone() {
    let (mut net, mut engine) = rank0();
    drop(peer_says_hello(&net));
    // Both are in the rank's socket before it looks.
    std::thread::sleep(Duration::from_millis(50));
    let heard = poll_until(&mut net, &mut engine, |n| n.heard_on[1].is_some() || n.conns.iter().all(Option::is_none));
    assert!(heard, "the connection was neither heard nor closed");
    let gone = poll_until(&mut net, &mut engine, |n| n.heard_on[1].is_none() && n.conns.iter().all(Option::is_none));
    assert!(gone, "the peer hung up but its connection stays: {:?}", net.conns);
}

/// A rank listens for shared-memory links before its address is
/// registered, so a peer of its host that resolves the address at once finds
/// the socket. Before, it registered first, and a peer that came in between
/// fell back to TCP for the whole job (one 2-rank run in about fifteen: 8 B
/// took 4-5 us instead of 0.7).
#[test]
fn a_rank_listens_for_shared_memory_links_before_it_registers() {
    let (seen, saw) = std::sync::mpsc::channel();
    let node = fake_node_with(std::sync::mpsc::channel().1, move |key| {
        let _ = seen.send(super::shm::present(key));
    });
    let _net = Transport::start(&env_of(b"transport-test-shm-first", 2, node)).unwrap();
    let present = saw.recv_timeout(Duration::from_secs(5)).expect("the rank registered");
    assert!(present, "the rank's address was registered before its shared-memory socket listened");
}

/// The node connection found broken by a request (not by reading it) fails
/// the resolves already waiting for the node's answer too: before, they
/// waited forever (the node's poll events were ignored once it had failed),
/// and so did every message to those ranks.
#[test]
fn a_node_found_gone_by_a_request_fails_every_resolve_waiting() {
    let (die, dies) = std::sync::mpsc::channel();
    let (mut net, mut engine) = rank0_of(4, fake_node_until(dies));
    let send_to = |net: &mut Transport, engine: &mut MpiEngine, peer: u32| {
        let now = Instant::now();
        engine.isend(0, peer, 0, bytes::Bytes::from_static(b"hi")).unwrap();
        net.pump(engine, now).unwrap();
    };
    send_to(&mut net, &mut engine, 1);
    assert_eq!(net.resolves.len(), 1, "rank 1 resolved through the node");
    die.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // The first request after the close is still taken by the kernel (the
    // node's reset comes back), the next one fails: the node is found gone.
    send_to(&mut net, &mut engine, 2);
    std::thread::sleep(Duration::from_millis(50));
    send_to(&mut net, &mut engine, 3);
    assert!(net.node_failed.is_some(), "a request to a closed node failed");
    assert!(net.resolves.is_empty(), "resolves still waiting for a node that is gone: {:?}", net.resolves);
}

/// Runs the test `name` of this binary alone in a child process with
/// `CHILD_VAR` set (for a test that changes what is process-wide, such as
/// its limits); panics if it fails there.
fn in_child(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} failed in its child process:\n{said}");
    assert!(said.contains("1 passed"), "{name} did not run in its child process:\n{said}");
}

const CHILD_VAR: &str = "P2PMP_TRANSPORT_TEST_CHILD";

/// A peer's connection that waits in the backlog while the rank has no
/// descriptor left (its `open_files` limit) is taken once one is free, with
/// no other connection arriving to raise a new event: the listener is
/// edge-triggered, and before, such a connection waited for the next one.
#[test]
fn a_connection_refused_for_want_of_descriptors_is_taken_once_one_is_free() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return in_child("transport::tests::a_connection_refused_for_want_of_descriptors_is_taken_once_one_is_free");
    }
    let (mut net, mut engine) = rank0();
    // The peer dials and says hello: the kernel queues the connection.
    let peer = peer_says_hello(&net);
    // Every descriptor left is taken.
    let mut held = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
            Err(e) => panic!("opening /dev/null: {e}"),
        }
        if held.len() == 1 {
            // SAFETY: a plain getrlimit/setrlimit on a local struct; this
            // process is the test's own child.
            unsafe {
                let mut lim = std::mem::zeroed::<libc::rlimit>();
                assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
                lim.rlim_cur = 64;
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
            }
        }
    }
    poll_until(&mut net, &mut engine, |n| n.heard_on[1].is_some() || n.accept_again.is_some());
    let refused = net.accept_again.is_some() && net.heard_on[1].is_none();
    assert!(refused, "the accept did not fail for want of a descriptor (the limit did not bite)");
    drop(held);
    let heard = poll_until(&mut net, &mut engine, |n| n.heard_on[1].is_some());
    assert!(heard, "the connection left waiting was never taken");
    drop(peer);
}

#[test]
fn rings_shrink_with_the_world_to_64_mib_a_rank() {
    use super::shm::ring_capacity;
    assert_eq!(ring_capacity(2), 512 << 10);
    assert_eq!(ring_capacity(128), 512 << 10);
    assert_eq!(ring_capacity(129), 256 << 10, "rounded down, not up");
    assert_eq!(ring_capacity(256), 256 << 10);
    assert_eq!(ring_capacity(u32::MAX), 64 << 10, "never below 64 KiB");
    for size in 1..=4096u32 {
        let cap = ring_capacity(size);
        assert!(cap.is_power_of_two(), "{size}: {cap}");
        // A rank's share of its links: one ring each way per peer, each
        // link's two rings shared by its two ranks.
        assert!(cap == 64 << 10 || (size as usize - 1) * cap <= 64 << 20, "{size}: {cap}");
    }
}

/// Both ends of a shared-memory link made in this process: rank 0's (which
/// connected) and rank 1's, and their doorbells.
fn shm_link(job: &[u8]) -> (Box<super::shm::ShmIo>, Box<super::shm::ShmIo>, [std::os::fd::OwnedFd; 2]) {
    use std::os::fd::AsRawFd;

    use super::shm::{Me, Setup, ShmSetup, listen, ring_capacity};
    use crate::shm::segment::doorbell;

    let keys = [0u8, 1].map(|r| Id::hash([job, &[r][..], &std::process::id().to_le_bytes()].concat()));
    let bells = [doorbell().unwrap(), doorbell().unwrap()];
    let addr = p2pmp_core::machine::NodeAddr("127.0.0.1:1".parse().unwrap());
    let me = |rank: usize| Me { job, rank: rank as u32, size: 2, key: keys[rank], addr, bell: bells[rank].as_raw_fd() };
    let listener = listen(keys[1]).unwrap();
    let connecting = Box::new(ShmSetup::connect(&me(0), 1, keys[1], ring_capacity(2)).unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    let sock = loop {
        match listener.accept() {
            Ok((sock, _)) => break sock,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    let (Setup::Done(one, 0), None) = Box::new(ShmSetup::accepted(sock)).advance(&me(1)).unwrap() else {
        panic!("rank 1's end is not up")
    };
    let (Setup::Done(zero, 1), None) = connecting.advance(&me(0)).unwrap() else { panic!("rank 0's end is not up") };
    (zero, one, bells)
}

#[test]
fn a_peer_woken_or_on_this_core_is_seen_to_need_it() {
    use std::io::IoSlice;

    use super::shm::NeedsCore;

    let (mut zero, mut one, _bells) = shm_link(b"transport-test-shm-core");
    assert_eq!(zero.shares_core(0), NeedsCore::No, "nothing known of the peer");
    assert_eq!(one.shares_core(1), NeedsCore::No, "rank 0 said core 0");
    assert_eq!(one.shares_core(0), NeedsCore::SameCore, "rank 0's core");
    assert_eq!(zero.shares_core(0), NeedsCore::SameCore, "rank 1 moved to core 0");

    // Rank 1 sleeps (saying no core, as `Transport::before_sleep` has it
    // do); rank 0's bytes ring its doorbell.
    assert_eq!(zero.shares_core(2), NeedsCore::No, "rank 0 moved on");
    assert!(one.begin_sleep(false));
    assert_eq!(zero.shares_core(0), NeedsCore::SameCore, "said before it slept");
    one.say_core(None);
    assert_eq!(zero.shares_core(0), NeedsCore::No, "asleep: no core said (it wakes where the kernel puts it)");
    zero.send(&[IoSlice::new(b"ping")]).unwrap();
    assert_eq!(zero.shares_core(2), NeedsCore::Woken, "woken by us");
    assert_eq!(zero.shares_core(2), NeedsCore::No, "said once a wake-up");
    one.end_sleep();
    let mut buf = bytes::BytesMut::new();
    one.recv(&mut buf, 64).unwrap();
    // Asleep again; woken again, then heard from before the look.
    assert!(one.begin_sleep(false));
    zero.send(&[IoSlice::new(b"ping")]).unwrap();
    one.end_sleep();
    one.recv(&mut buf, 64).unwrap();
    one.send(&[IoSlice::new(b"pong")]).unwrap();
    zero.recv(&mut buf, 64).unwrap();
    assert_eq!(zero.shares_core(2), NeedsCore::No, "heard from since");
    assert_eq!(&buf[..], b"pingpingpong");
    // A peer on this core is said every time, woken or not.
    assert_eq!(one.shares_core(2), NeedsCore::SameCore);
    assert_eq!(one.shares_core(2), NeedsCore::SameCore);
}

/// A pass over the rings reads every ring that has bytes, also the one
/// after a link that closes during the pass. Before, the pass went forwards:
/// the closed link left `shm_slots`, the next one moved into its place, and
/// it was skipped until the next look.
#[test]
fn a_link_closing_during_a_pass_over_the_rings_skips_none_after_it() {
    use std::io::IoSlice;

    use super::conn::Io;

    let (mut net, mut engine) = rank0_of(3, fake_node());
    // Rank 1's link: its end closed, nothing left in the ring.
    let (mut gone, _one, _bells_a) = shm_link(b"transport-test-shm-pass-a");
    gone.eof = true;
    // Rank 2's link, accepted: its hello waits in the ring.
    let (waiting, mut two, _bells_b) = shm_link(b"transport-test-shm-pass-b");
    let hello = RankHello { job: b"transport-test".to_vec(), from_rank: 2, to_rank: 0 };
    let mut frame = bytes::BytesMut::new();
    encode_frame(&Envelope::new(net.key, net.addr, 0, hello), &mut frame, DEFAULT_MAX_FRAME).unwrap();
    two.send(&[IoSlice::new(&frame)]).unwrap();
    let closing = net.add_conn(Io::Shm(gone), Some(1), true).unwrap();
    let read = net.add_conn(Io::Shm(waiting), None, true).unwrap();
    net.shm_slots.extend([closing, read]);

    assert!(net.service_shm(&mut engine, Instant::now()), "a ring had bytes");
    assert!(net.conns[closing].is_none(), "rank 1's link closed");
    assert_eq!(net.heard_on[2], Some(read), "rank 2's hello read in the same pass");
}
