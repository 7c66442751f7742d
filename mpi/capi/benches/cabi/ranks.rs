//! The Rust-API twins of `mpi/benches/c/pingpong.c` and `ring.c`, with the same
//! buffer semantics as C (`send` copies from a slice, `recv_into` copies into
//! one), so the only difference from the C programs is the C ABI layer. This
//! bench binary runs them when started as a rank (`P2PMP_RANK` set).

use std::time::Instant;

/// The message sizes and round trips of `pingpong.c`.
const SIZES: [usize; 7] = [1, 8, 1024, 64 << 10, 256 << 10, 1 << 20, 4 << 20];

fn iters(size: usize, quick: bool) -> usize {
    let base = if size <= 1024 {
        20_000
    } else if size <= 256 << 10 {
        2_000
    } else {
        200
    };
    if quick { base / 10 } else { base }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `pp <size> <median half round trip µs>` per size, from rank 0.
fn pingpong(quick: bool) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let r = w.rank();
    let mut buf = vec![7u8; 4 << 20];
    for size in SIZES {
        let n = iters(size, quick);
        let mut samples = Vec::new();
        for _ in 0..5 {
            w.barrier()?;
            let t = Instant::now();
            for _ in 0..n {
                if r == 0 {
                    w.send(&buf[..size], 1, 0)?;
                    w.recv_into(&mut buf[..size], Some(1), Some(0))?;
                } else if r == 1 {
                    w.recv_into(&mut buf[..size], Some(0), Some(0))?;
                    w.send(&buf[..size], 0, 0)?;
                }
            }
            samples.push(t.elapsed().as_secs_f64() * 1e6 / (2 * n) as f64);
        }
        if r == 0 {
            println!("pp {size} {:.4}", median(samples));
        }
    }
    w.finalize()
}

/// `ring <median seconds>` of 3 rounds of `loops` laps of a 10-byte token, from rank 0.
fn ring(loops: u64) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    let mut tok = [0u8; 10];
    let mut samples = Vec::new();
    for _ in 0..3 {
        w.barrier()?;
        let t = Instant::now();
        for _ in 0..loops {
            if r == 0 {
                w.send(&tok, next, 1)?;
                w.recv_into(&mut tok, Some(prev), Some(1))?;
            } else {
                w.recv_into(&mut tok, Some(prev), Some(1))?;
                w.send(&tok, next, 1)?;
            }
        }
        samples.push(t.elapsed().as_secs_f64());
    }
    if r == 0 {
        println!("ring {:.6}", median(samples));
    }
    w.finalize()
}

/// Thread CPU time in ns (preemption by other load on the host does not count).
fn cpu_ns() -> f64 {
    // SAFETY: clock_gettime writes into the zeroed timespec we own.
    let t = unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
        t
    };
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// The twin of `benches/selfloop.c`: `self <bytes> <median CPU ns per pair>`.
fn selfloop(iters: u64) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let r = w.rank();
    let mut buf = [0u8; 1024];
    for size in [8, 1024] {
        let mut samples = Vec::new();
        for _ in 0..15 {
            let t = cpu_ns();
            for _ in 0..iters {
                w.send(&buf[..size], r, 1)?;
                w.recv_into(&mut buf[..size], Some(r), Some(1))?;
            }
            samples.push((cpu_ns() - t) / iters as f64);
        }
        if r == 0 {
            println!("self {size} {:.2}", median(samples));
        }
    }
    w.finalize()
}

/// Runs the rank mode named by `args[0]`.
pub(crate) fn run(args: &[String]) -> Result<(), p2pmp_mpi::Error> {
    match args.first().map(String::as_str) {
        Some("pingpong") => pingpong(args.iter().any(|a| a == "quick")),
        Some("ring") => ring(args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000)),
        Some("selfloop") => selfloop(args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000)),
        other => Err(p2pmp_mpi::Error::Invalid(format!("unknown rank mode {other:?}"))),
    }
}
