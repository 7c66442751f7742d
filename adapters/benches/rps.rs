//! Requests per second one node serves over loopback, on each runtime, in one run.
//!
//! A node (ping/pong machine, or a lone Chord node answering lookup steps) runs on
//! tokio, smol or mio; client threads with plain blocking sockets speak the wire
//! protocol to it, each keeping a window of requests in flight, for a fixed time.
//!
//! `cargo bench -p p2pmp-adapters --bench rps [-- --secs S --clients C --window W --json PATH]`
//! prints a table and, as its last line, one JSON object.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use p2pmp_adapters::{DriverConfig, RuntimeKind, spawn_node};
use p2pmp_core::chord::{ChordConfig, ChordMsg, ChordNode};
use p2pmp_core::id::Id;
use p2pmp_core::machine::{Machine, NodeAddr};
use p2pmp_core::wire::{self, DEFAULT_MAX_FRAME, Envelope, FrameDecoder, Hello};
use serde::Serialize;
use serde::de::DeserializeOwned;

// The adapters' ping/pong test machine, compiled into the bench so a plain
// `cargo bench` needs no extra feature.
#[path = "../src/testing.rs"]
#[allow(dead_code, unreachable_pub)]
mod testing;

use testing::{PingMsg, PingPong};

const NETWORK: u64 = 9;

struct Opts {
    secs: f64,
    clients: usize,
    window: usize,
    json: String,
}

fn opts() -> Opts {
    let mut o = Opts {
        secs: 2.0,
        clients: 2,
        window: 32,
        json: concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-rps.json").into(),
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--secs" => o.secs = v.parse().expect("--secs S"),
            "--clients" => o.clients = v.parse().expect("--clients N"),
            "--window" => o.window = v.parse().expect("--window N"),
            "--json" => o.json = v,
            _ => {
                i += 1; // `--bench` and other harness flags
                continue;
            }
        }
        i += 2;
    }
    o
}

fn frame<B: Serialize>(env: &Envelope<B>, out: &mut BytesMut) {
    wire::encode_frame(env, out, DEFAULT_MAX_FRAME).expect("small frame");
}

/// One client: hello, then rounds of `window` pipelined requests until `stop`.
fn client<B: Serialize + DeserializeOwned>(
    server: SocketAddr,
    window: usize,
    make: impl Fn(u64) -> B,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
) {
    let mut s = TcpStream::connect(server).expect("connect");
    s.set_nodelay(true).unwrap();
    let me = NodeAddr(s.local_addr().unwrap());
    let mut out = BytesMut::new();
    frame(&Envelope::new(me.id(), me, 0, Hello { network_id: NETWORK, listen: me, overlay: None }), &mut out);
    s.write_all(&out).unwrap();
    let mut dec = FrameDecoder::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut hello_seen = false;
    let mut rid = 1u64;
    while !stop.load(Ordering::Relaxed) {
        out.clear();
        for _ in 0..window {
            frame(&Envelope::new(me.id(), me, rid, make(rid)), &mut out);
            rid += 1;
        }
        s.write_all(&out).unwrap();
        let mut got = 0;
        while got < window {
            let n = s.read(&mut buf).expect("read");
            assert!(n > 0, "server closed the connection");
            dec.push(&buf[..n]);
            while let Some(f) = dec.decode().expect("well-formed frames") {
                if !hello_seen {
                    hello_seen = true;
                    continue;
                }
                let _: Envelope<B> = wire::decode_envelope(f).expect("a reply");
                got += 1;
            }
        }
        served.fetch_add(window as u64, Ordering::Relaxed);
    }
}

/// Serves a fresh node built by `make` on `rt` and loads it for `o.secs`.
fn measure<M, B>(
    rt: RuntimeKind,
    o: &Opts,
    (clients, window): (usize, usize),
    make_node: fn(NodeAddr, Instant) -> M,
    req: fn(u64) -> B,
) -> f64
where
    M: Machine + 'static,
    M::Command: Send,
    M::Event: Send,
    M::CmdError: Send,
    B: Serialize + DeserializeOwned + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = NodeAddr(l.local_addr().unwrap());
    let cfg = DriverConfig { network_id: NETWORK, ..DriverConfig::default() };
    let node = spawn_node(rt, l, cfg, move |now| make_node(addr, now)).expect("node");
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (stop, served, w) = (stop.clone(), served.clone(), window);
            std::thread::spawn(move || client(addr.0, w, req, stop, served))
        })
        .collect();
    // Warm up, then count over the measured interval only.
    std::thread::sleep(Duration::from_millis(300));
    let (t0, n0) = (Instant::now(), served.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_secs_f64(o.secs));
    let (t1, n1) = (Instant::now(), served.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("client thread");
    }
    node.shutdown().expect("node stops");
    (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
}

fn ping_node(addr: NodeAddr, _now: Instant) -> PingPong {
    PingPong::new(addr)
}

fn ping_req(seq: u64) -> PingMsg {
    PingMsg::Ping { seq }
}

fn chord_node(addr: NodeAddr, now: Instant) -> ChordNode {
    ChordNode::new(ChordConfig::default(), addr, Vec::new(), now, 1)
}

fn lookup_req(seq: u64) -> ChordMsg {
    ChordMsg::FindSuccessor { key: Id::hash(seq.to_le_bytes()) }
}

fn main() {
    let o = opts();
    let mut rows = Vec::new();
    for rt in RuntimeKind::available() {
        let load = (o.clients, o.window);
        let ping = measure(rt, &o, load, ping_node, ping_req);
        let lookup = measure(rt, &o, load, chord_node, lookup_req);
        // One client, one request at a time: the round trip through the shell.
        let rtt_us = 1e6 / measure(rt, &o, (1, 1), ping_node, ping_req);
        rows.push((rt, ping, lookup, rtt_us));
    }
    println!();
    println!(
        "requests/s one node serves over loopback ({} clients x window {}, {:.1} s each)",
        o.clients, o.window, o.secs
    );
    println!("| runtime | ping/pong req/s | chord lookup-step req/s | ping round trip, 1 in flight (µs) |");
    println!("|---|---:|---:|---:|");
    for (rt, p, l, rtt) in &rows {
        println!("| {rt} | {p:.0} | {l:.0} | {rtt:.1} |");
    }
    let fields: Vec<String> = rows
        .iter()
        .flat_map(|(rt, p, l, rtt)| {
            [
                format!("\"p2pmp_{rt}_ping_rps\":{p:.0}"),
                format!("\"p2pmp_{rt}_lookup_rps\":{l:.0}"),
                format!("\"p2pmp_{rt}_ping_rtt_us\":{rtt:.1}"),
            ]
        })
        .collect();
    let json = format!("{{{}}}", fields.join(","));
    if let Err(e) = std::fs::write(&o.json, format!("{json}\n")) {
        eprintln!("could not write {}: {e}", o.json);
    }
    println!("{json}");
}
