//! What one encrypted link costs in CPU, without sockets: a frame (a 32-byte
//! header and a payload of 8 B, 64 KiB or 1 MiB) sealed by one channel and
//! opened by the other, as the MPI transport does it (the sealed bytes read in
//! 64 KiB pieces straight into the channel's buffer, the plaintext appended to
//! a decoder's buffer that is emptied after each frame). Reports µs per frame for sealing and for opening, and the
//! MB/s of both together; then the AEAD alone, in place, over the same
//! payloads (the floor: what is left is copying and framing). A table, then one
//! JSON line.
//!
//! Run: `cargo bench -p p2pmp-core --bench secure [-- --iters 200]`.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use p2pmp_core::secure::{SecureChannel, SecureRng, StaticKey};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Two open channels.
fn pair() -> (SecureChannel, SecureChannel) {
    let mut rng = SecureRng::from_seed([7; 32]);
    let (ka, kb) = (StaticKey::generate(&mut rng), StaticKey::generate(&mut rng));
    let (mut to_b, mut to_a, mut plain) = (BytesMut::new(), BytesMut::new(), BytesMut::new());
    let mut a = SecureChannel::initiator(&ka, rng.seed(), &mut to_b);
    let mut b = SecureChannel::responder(&kb, rng.seed());
    b.on_bytes(&to_b.split(), &mut plain, &mut to_a).expect("message 1");
    a.on_bytes(&to_a.split(), &mut plain, &mut to_b).expect("message 2");
    b.on_bytes(&to_b.split(), &mut plain, &mut to_a).expect("message 3");
    assert!(a.is_open() && b.is_open());
    (a, b)
}

struct Row {
    size: usize,
    seal: Duration,
    open: Duration,
}

fn run(size: usize, iters: u32) -> Row {
    let (mut a, mut b) = pair();
    let head = [0x5a_u8; 32];
    let payload = vec![0xa5_u8; size];
    let (mut wire, mut plain, mut out) = (BytesMut::new(), BytesMut::new(), BytesMut::new());
    let (mut seal, mut open) = (Duration::ZERO, Duration::ZERO);
    for i in 0..iters + iters / 10 {
        let t0 = Instant::now();
        a.seal_frame(&head, &payload, &mut wire).expect("seal");
        let t1 = Instant::now();
        for piece in wire.chunks(64 << 10) {
            b.read_buffer().extend_from_slice(piece);
            b.on_read(&mut plain, &mut out).expect("open");
        }
        let t2 = Instant::now();
        assert_eq!(plain.len(), head.len() + size);
        wire.clear();
        plain.clear();
        // The first tenth warms up.
        if i >= iters / 10 {
            seal += t1 - t0;
            open += t2 - t1;
        }
    }
    Row { size, seal: seal / iters, open: open / iters }
}

fn main() {
    let iters = arg("--iters", 200) as u32;
    let rows: Vec<Row> = [8, 64 << 10, 1 << 20]
        .into_iter()
        .map(|size| run(size, if size < 1024 { iters * 100 } else { iters }))
        .collect();
    println!("{:>10} {:>10} {:>10} {:>12}", "payload B", "seal µs", "open µs", "both MB/s");
    let mut json = Vec::new();
    for r in &rows {
        let (s, o) = (r.seal.as_secs_f64() * 1e6, r.open.as_secs_f64() * 1e6);
        let mbs = r.size as f64 / (s + o);
        println!("{:>10} {:>10.2} {:>10.2} {:>12.0}", r.size, s, o, mbs);
        json.push(format!(r#"{{"payload":{},"seal_us":{s:.3},"open_us":{o:.3},"mb_s":{mbs:.1}}}"#, r.size));
    }
    for size in [64 << 10, 1 << 20] {
        println!("AEAD alone, in place, {size} B: {:.2} µs", aead_only(size, iters));
    }
    println!(r#"{{"bench":"secure","iters":{iters},"rows":[{}]}}"#, json.join(","));
}

/// The floor: the AEAD alone, in place over `size` bytes (µs).
fn aead_only(size: usize, iters: u32) -> f64 {
    use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
    let aead = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &[3u8; 32]).expect("a 32-byte key"));
    let mut buf = vec![0u8; size];
    let t0 = Instant::now();
    for i in 0..iters {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&u64::from(i).to_le_bytes());
        let tag = aead.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut buf);
        let _ = std::hint::black_box(tag.expect("seal"));
    }
    t0.elapsed().as_secs_f64() * 1e6 / f64::from(iters)
}
