//! What crosses the wire between ranks: with rank-to-rank encryption on, no
//! byte of a message appears in any packet; with it off, the same capture
//! sees them (so the check can fail). On loopback, with shared memory off and
//! `P2PMP_ENCRYPT=always` (between hosts, `auto` encrypts by default: the
//! namespace tests in `hosts.rs` run that way). A file of its own, so no other
//! test's traffic crosses loopback during the capture.
//!
//! Needs `CAP_NET_RAW` for the capture: without it the test says so and skips.

use std::time::Duration;

use p2pmp_tests::sniff::{Sniffer, mpi_sizes_bytes};

#[test]
fn encrypted_rank_links_carry_no_message_byte_in_the_clear() {
    let dir = p2pmp_tests::cargo_build(&[]);
    // 64 bytes from the middle of the 1000-byte message (the fourth size).
    let needle = mpi_sizes_bytes(1000, 3)[400..464].to_vec();
    for (mode, in_clear) in [("never", true), ("always", false)] {
        let sniffer = match Sniffer::start("lo", needle.clone()) {
            Ok(s) => s,
            Err(why) => {
                eprintln!("SKIPPED encrypted_rank_links_carry_no_message_byte_in_the_clear: {why} (needs root)");
                return;
            }
        };
        let mut cmd = std::process::Command::new(dir.join("p2pmp-launch"));
        cmd.args(["-n", "2", "--timeout", "60", "--"])
            .arg(dir.join("examples").join("mpi_sizes"))
            .arg("70000")
            .envs([("P2PMP_SHM", "0"), ("P2PMP_ENCRYPT", mode)]);
        let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(70));
        let seen = sniffer.stop().expect("capture");
        assert!(r.ok && r.stdout.contains("sizes ok 8"), "P2PMP_ENCRYPT={mode}:\n{}\n{}", r.stdout, r.stderr);
        assert!(seen.packets > 0, "P2PMP_ENCRYPT={mode}: nothing captured on lo");
        assert_eq!(seen.matches > 0, in_clear, "P2PMP_ENCRYPT={mode}: {seen:?}");
    }
}

/// A process that reaches a rank's port cannot speak as another rank: one
/// that completes a Noise handshake with a key of its own and claims rank 0
/// is dropped by rank 1 (whose key, the one registered with its address,
/// answers the handshake), one that sends a plain hello is dropped at once,
/// and the job goes on undisturbed.
#[test]
fn a_connection_claiming_a_rank_with_another_key_is_dropped() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;

    use bytes::BytesMut;
    use p2pmp_core::id::Id;
    use p2pmp_core::local::{LocalReply, LocalRequest, RankHello, process_key};
    use p2pmp_core::machine::NodeAddr;
    use p2pmp_core::secure::{SecureChannel, SecureRng, StaticKey};
    use p2pmp_core::wire::{Calls, DEFAULT_MAX_FRAME, Envelope, encode_frame};

    let dir = p2pmp_tests::cargo_build(&[]);
    let mut launch = std::process::Command::new(dir.join("p2pmp-launch"))
        .args(["--verbose", "-n", "2", "--timeout", "120", "--"])
        .arg(dir.join("examples").join("mpi_ring"))
        .arg("150000")
        .envs([("P2PMP_SHM", "0"), ("P2PMP_ENCRYPT", "always")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("p2pmp-launch");
    let mut err = BufReader::new(launch.stderr.take().expect("piped"));
    let mut line = String::new();
    err.read_line(&mut line).expect("the launcher's first line");
    // "p2pmp-launch: job <hex>, node <addr>, overlay <addr>, 2 ranks"
    let field = |name: &str| line.split(name).nth(1).and_then(|s| s.split(',').next()).map(str::trim);
    let job = p2pmp_mpi::parse_hex(field("job ").expect("job id")).expect("a hex job id");
    let node: std::net::SocketAddr = field("node ").expect("node address").parse().expect("node address");

    // Rank 1's endpoint, as its peers resolve it.
    let me = NodeAddr("127.0.0.1:1".parse().unwrap());
    let mut calls = Calls::<LocalRequest, LocalReply>::new(Id::hash(b"impostor"), me);
    let mut ctl = TcpStream::connect(node).expect("the launcher's node");
    let endpoint = p2pmp_tests::wait_until("rank 1's keyed endpoint", Duration::from_secs(20), || {
        let (_, frame) = calls.request(LocalRequest::ResolveKeyed { key: process_key(&job, 1) }).unwrap();
        ctl.write_all(&frame).unwrap();
        loop {
            if let Some((_, reply, _)) = calls.next_reply().unwrap() {
                return match reply {
                    LocalReply::ResolvedKeyed { endpoints, .. } => {
                        endpoints.into_iter().find(|e| e.key.is_some()).ok_or_else(|| "not registered yet".into())
                    }
                    other => Err(format!("{other:?}")),
                };
            }
            let mut buf = [0u8; 4096];
            let n = ctl.read(&mut buf).unwrap();
            calls.decoder().push(&buf[..n]);
        }
    });

    let hello = |from_rank| {
        let mut out = BytesMut::new();
        let h = RankHello { job: job.clone(), from_rank, to_rank: 1 };
        encode_frame(&Envelope::new(Id::hash(b"impostor"), me, 0, h), &mut out, DEFAULT_MAX_FRAME).unwrap();
        out
    };
    // Dropped within 3 s: the check is one lookup through the local node.
    let dropped = |mut s: TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false, // still open after the timeout
            }
        }
    };

    // A plain hello where encryption is required.
    let mut plain = TcpStream::connect(endpoint.addr.0).unwrap();
    plain.write_all(&hello(0)).unwrap();
    assert!(dropped(plain), "a plain hello was not dropped");
    assert!(
        launch.try_wait().unwrap().is_none(),
        "the job ended before the check (the ranks' exit closes every socket)"
    );

    // A Noise handshake with a key of our own, claiming rank 0.
    let key = StaticKey::generate(&mut SecureRng::from_seed([7; 32]));
    let mut s = TcpStream::connect(endpoint.addr.0).unwrap();
    let mut out = BytesMut::new();
    let mut ch = SecureChannel::initiator(&key, [8; 32], &mut out);
    ch.seal(&hello(0), &mut out).unwrap();
    s.write_all(&out).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (mut plain_in, mut answer) = (BytesMut::new(), BytesMut::new());
    while !ch.is_open() {
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).expect("the rank answers the handshake");
        assert!(n > 0, "the rank closed before answering the handshake");
        ch.on_bytes(&buf[..n], &mut plain_in, &mut answer).expect("a valid handshake");
    }
    assert_eq!(ch.remote_key(), endpoint.key, "the key registered with the address answers");
    s.write_all(&answer).unwrap(); // our last handshake message, with the hello
    assert!(dropped(s), "a hello claiming rank 0 under another key was not dropped");
    assert!(
        launch.try_wait().unwrap().is_none(),
        "the job ended before the check (the ranks' exit closes every socket)"
    );

    let mut out = String::new();
    launch.stdout.take().expect("piped").read_to_string(&mut out).unwrap();
    let status = launch.wait().unwrap();
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    assert!(status.success() && out.contains("[0] ring ok 150000"), "the job was disturbed:\n{out}\n{rest}");
}
