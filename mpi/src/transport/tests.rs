//! The transport against real sockets: a fake local node and a peer played
//! by the test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::time::{Duration, Instant};

use p2pmp_core::local::{LocalReply, LocalRequest, RankHello};
use p2pmp_core::mpi::{MpiConfig, MpiEngine};
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};

use super::Transport;
use crate::env::{Encrypt, RankEnv};

/// A local node that grants every registration and answers nothing else.
fn fake_node() -> SocketAddr {
    let l = StdListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let mut dec = FrameDecoder::new(DEFAULT_MAX_FRAME);
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut buf) {
            dec.push(&buf[..n]);
            while let Ok(Some(frame)) = dec.decode() {
                let env: Envelope<LocalRequest> = decode_envelope(frame).unwrap();
                let key = match env.body {
                    LocalRequest::Register { key, .. } | LocalRequest::RegisterKeyed { key, .. } => key,
                    _ => continue,
                };
                let mut out = bytes::BytesMut::new();
                let reply = Envelope::new(env.sender, env.sender_addr, env.request_id, LocalReply::Registered { key });
                encode_frame(&reply, &mut out, DEFAULT_MAX_FRAME).unwrap();
                s.write_all(&out).unwrap();
            }
        }
    });
    at
}

/// Rank 0 of a two-rank job, its transport and engine.
fn rank0() -> (Transport, MpiEngine) {
    let env = RankEnv {
        job: b"transport-test".to_vec(),
        rank: 0,
        size: 2,
        node: fake_node(),
        host: "127.0.0.1".parse().unwrap(),
        failure_timeout: Duration::from_secs(10),
        encrypt: Encrypt::Never,
    };
    let net = Transport::start(&env).unwrap();
    (net, MpiEngine::new(MpiConfig::default(), 0, 2).unwrap())
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
    let mut peer = StdStream::connect(net.addr.0).unwrap();
    let hello = RankHello { job: b"transport-test".to_vec(), from_rank: 1, to_rank: 0 };
    let mut out = bytes::BytesMut::new();
    encode_frame(&Envelope::new(net.key, net.addr, 0, hello), &mut out, DEFAULT_MAX_FRAME).unwrap();
    peer.write_all(&out).unwrap();
    drop(peer);
    // Both are in the rank's socket before it looks.
    std::thread::sleep(Duration::from_millis(50));
    let heard = poll_until(&mut net, &mut engine, |n| n.heard_on[1].is_some() || n.conns.iter().all(Option::is_none));
    assert!(heard, "the connection was neither heard nor closed");
    let gone = poll_until(&mut net, &mut engine, |n| n.heard_on[1].is_none() && n.conns.iter().all(Option::is_none));
    assert!(gone, "the peer hung up but its connection stays: {:?}", net.conns);
}
