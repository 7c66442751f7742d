//! The p2pmp rank programs (run under `p2pmp-launch` by the bench binary itself):
//! the same workloads as the C programs in `benches/c/`, printing the same lines.

use std::time::Instant;

use bytes::Bytes;

use crate::window_floor::{self, WINDOW};
use crate::{SIZES, iters, median};

/// `pp <size> <median half round trip µs>` per size, from rank 0. `plain`:
/// with rank-to-rank encryption off (`P2PMP_ENCRYPT=never`, which a job's
/// environment cannot carry), for the figure beside the encrypted one.
pub(crate) fn pingpong(quick: bool, plain: bool) -> Result<(), p2pmp_mpi::Error> {
    let mut env = p2pmp_mpi::RankEnv::from_env()?;
    if plain {
        env.encrypt = p2pmp_mpi::Encrypt::Never;
    }
    let mut w = p2pmp_mpi::World::start(env, p2pmp_core::mpi::MpiConfig::default())?;
    let r = w.rank();
    for size in SIZES {
        let data = Bytes::from(vec![7u8; size]);
        let mut samples = Vec::new();
        for _ in 0..5 {
            let n = iters(size, quick);
            w.barrier()?;
            let t = Instant::now();
            round_trips(&mut w, &data, n as u64)?;
            samples.push(t.elapsed().as_secs_f64() * 1e6 / (2 * n) as f64);
        }
        if r == 0 {
            println!("pp {size} {}", median(samples));
        }
    }
    // How the waits went, from both ranks: the two-host rows echo it.
    println!("stats rank {r} {:?}", w.wait_stats());
    window(&mut w, quick)?;
    w.finalize()
}

/// `pp1 SIZE COUNT`: one ping-pong of `COUNT` messages of `SIZE` bytes,
/// `pp <size> <half round trip µs>` from rank 0 (for profiling one size).
pub(crate) fn pingpong_one(size: u64, count: u64) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let data = Bytes::from(vec![7u8; usize::try_from(size).unwrap_or(8)]);
    w.barrier()?;
    let t = Instant::now();
    round_trips(&mut w, &data, count)?;
    if w.rank() == 0 {
        println!("pp {size} {}", t.elapsed().as_secs_f64() * 1e6 / (2 * count) as f64);
    }
    print_wait_stats(&w);
    w.finalize()
}

/// `n` round trips of `data` from rank 0 to rank 1 and back (other ranks
/// stand by).
fn round_trips(w: &mut p2pmp_mpi::World, data: &Bytes, n: u64) -> Result<(), p2pmp_mpi::Error> {
    let r = w.rank();
    for _ in 0..n {
        if r == 0 {
            w.send_bytes(data.clone(), 1, 0)?;
            w.recv_bytes(Some(1), Some(0))?;
        } else if r == 1 {
            let m = w.recv_bytes(Some(0), Some(0))?;
            w.send_bytes(m.data, 0, 0)?;
        }
    }
    Ok(())
}

/// `pause ROUNDS MS COUNT`: `ROUNDS` times, both ranks pause `MS` ms after a
/// barrier (as a program that computes between exchanges does), then rank 0
/// times `COUNT` round trips of 8 bytes with rank 1; `pause <median µs a
/// hop> <worst µs a hop>` from rank 0 (as `benches/c/pause.c`, with its
/// defaults: 10 rounds, 20 ms, 1,000 round trips).
pub(crate) fn pause(rounds: Option<u64>, ms: Option<u64>, count: Option<u64>) -> Result<(), p2pmp_mpi::Error> {
    // The defaults, and what out of range becomes, as in pause.c.
    let rounds = rounds.filter(|r| (1..=1000).contains(r)).unwrap_or(10);
    let ms = ms.filter(|&m| m <= 60_000).unwrap_or(20);
    let count = count.filter(|&c| c >= 1).unwrap_or(1000);
    let mut w = p2pmp_mpi::init()?;
    let data = Bytes::from(vec![7u8; 8]);
    let mut hops = Vec::new();
    for _ in 0..rounds {
        w.barrier()?;
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let t = Instant::now();
        round_trips(&mut w, &data, count)?;
        hops.push(t.elapsed().as_secs_f64() * 1e6 / (2 * count) as f64);
    }
    if w.rank() == 0 {
        let worst = hops.iter().copied().fold(0.0, f64::max);
        println!("pause {} {worst}", median(hops));
    }
    print_wait_stats(&w);
    w.finalize()
}

/// With `P2PMP_WAIT_STATS` set, how the rank's waits went (on stderr).
fn print_wait_stats(w: &p2pmp_mpi::World) {
    if std::env::var_os("P2PMP_WAIT_STATS").is_some() {
        eprintln!("rank {} {:?}", w.rank(), w.wait_stats());
    }
}

/// `win1 ROUNDS`: the window of [`window`] alone, `ROUNDS` rounds a
/// repetition (for profiling it).
pub(crate) fn window_one(rounds: u64) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    window_rounds(&mut w, usize::try_from(rounds).unwrap_or(1))?;
    print_wait_stats(&w);
    w.finalize()
}

/// A window of 64 non-blocking 1 MiB sends from rank 0 to rank 1, answered
/// by an empty message, 5 repetitions: `win <size> <median MB/s>` from rank 0.
fn window(w: &mut p2pmp_mpi::World, quick: bool) -> Result<(), p2pmp_mpi::Error> {
    window_rounds(w, window_floor::rounds(quick) as usize)
}

/// [`window`] with `rounds` windows a repetition.
fn window_rounds(w: &mut p2pmp_mpi::World, rounds: usize) -> Result<(), p2pmp_mpi::Error> {
    let size = window_floor::MESSAGE;
    let data = Bytes::from(vec![7u8; size]);
    let mut samples = Vec::new();
    for _ in 0..5 {
        w.barrier()?;
        let t = Instant::now();
        for _ in 0..rounds {
            if w.rank() == 0 {
                let reqs = (0..WINDOW).map(|_| w.isend_bytes(data.clone(), 1, 1)).collect::<Result<Vec<_>, _>>()?;
                w.waitall(reqs)?;
                w.recv_bytes(Some(1), Some(2))?;
            } else if w.rank() == 1 {
                let reqs = (0..WINDOW).map(|_| w.irecv(Some(0), Some(1))).collect::<Result<Vec<_>, _>>()?;
                w.waitall(reqs)?;
                w.send_bytes(Bytes::new(), 0, 2)?;
            }
        }
        samples.push((size * WINDOW * rounds) as f64 / (t.elapsed().as_secs_f64() * 1e6));
    }
    if w.rank() == 0 {
        println!("win {size} {}", median(samples));
    }
    Ok(())
}

/// `ring <median seconds>` of 3 repetitions, from rank 0.
/// The ring; with `snapshot`, every rank calls `World::snapshot` once a loop
/// (the checkpoint API's safe point: its cost per call is the difference).
pub(crate) fn ring(loops: u64, snapshot: bool) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    let mut samples = Vec::new();
    let mut tok = [0u8; 10];
    let mut in_snapshot = std::time::Duration::ZERO;
    for _ in 0..3 {
        w.barrier()?;
        let t = Instant::now();
        for _ in 0..loops {
            if r == 0 {
                w.send(&tok, 1 % p, 1)?;
                w.recv_into(&mut tok, Some(p - 1), Some(1))?;
            } else {
                w.recv_into(&mut tok, Some(r - 1), Some(1))?;
                w.send(&tok, (r + 1) % p, 1)?;
            }
            if snapshot {
                let t = Instant::now();
                w.snapshot()?;
                in_snapshot += t.elapsed();
            }
        }
        samples.push(t.elapsed().as_secs_f64());
    }
    if r == 0 {
        println!("ring {}", median(samples));
        let st = w.checkpoint_stats();
        let per_call_us = in_snapshot.as_secs_f64() * 1e6 / st.calls.max(1) as f64;
        println!("snapshots {per_call_us} {} {} {}", st.agreements, st.epoch, st.stride);
    }
    print_wait_stats(&w);
    w.finalize()
}

/// Integer square root (largest s with s*s <= n).
pub(crate) fn isqrt(n: u64) -> u64 {
    let mut s = (n as f64).sqrt() as u64;
    while s.checked_mul(s).is_none_or(|x| x > n) {
        s -= 1;
    }
    while (s + 1).checked_mul(s + 1).is_some_and(|x| x <= n) {
        s += 1;
    }
    s
}

/// Tries up to `k` candidates of `n` from `*cand` on, `step` apart and at
/// most `limit`: the first divisor, if any (`*cand` then stays at it; else it
/// moves past the ones tried).
pub(crate) fn trial_divide(n: u64, cand: &mut u64, step: u64, k: u64, limit: u64) -> Option<u64> {
    for _ in 0..k {
        if *cand > limit {
            return None;
        }
        if n % *cand == 0 {
            return Some(*cand);
        }
        *cand += step;
    }
    None
}

/// Trial division of `n`, flags exchanged with rank 0 every `k` candidates:
/// `factor <seconds> <factor>` from rank 0. With `snapshot`, the next
/// candidate and the factor found are protected and every flag round is a
/// safe point (`snapshots <checkpoints taken>` follows).
pub(crate) fn factor(n: u64, k: u64, snapshot: bool) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    let limit = isqrt(n);
    let (mut cand, step) = (2 + u64::from(r), u64::from(p));
    let mut found = 0u64;
    if snapshot {
        // SAFETY: both outlive the world and are only read by `snapshot`
        // between rounds.
        unsafe {
            w.protect(0, (&raw mut cand).cast(), 8)?;
            w.protect(1, (&raw mut found).cast(), 8)?;
        }
        w.recover()?;
    }
    w.barrier()?;
    let t = Instant::now();
    let global = loop {
        if let Some(f) = trial_divide(n, &mut cand, step, k, limit) {
            found = f;
        }
        let global = if r == 0 {
            let mut g = found;
            for src in 1..p {
                let mut f = [0u64];
                w.recv_into(&mut f, Some(src), Some(2))?;
                if g == 0 {
                    g = f[0];
                }
            }
            for dst in 1..p {
                w.send(&[g], dst, 3)?;
            }
            g
        } else {
            w.send(&[found], 0, 2)?;
            let mut g = [0u64];
            w.recv_into(&mut g, Some(0), Some(3))?;
            g[0]
        };
        if global != 0 {
            break global;
        }
        if snapshot {
            w.snapshot()?;
        }
    };
    if r == 0 {
        println!("factor {} {global}", t.elapsed().as_secs_f64());
        if snapshot {
            println!("snapshots {}", w.checkpoint_stats().epoch);
        }
    }
    print_wait_stats(&w);
    w.finalize()
}

/// The collectives the C program `coll.c` times, through the Rust API:
/// `coll <op> <bytes> <median µs per call>` from rank 0.
/// `only`: just this operation and size (`allreduce 65536`), for profiling.
pub(crate) fn coll(quick: bool, only: Option<(&str, usize)>) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let p = w.size() as usize;
    for op in crate::COLL_OPS {
        for bytes in crate::COLL_SIZES {
            if (op == "barrier" && bytes != 8) || only.is_some_and(|o| o != (op, bytes)) {
                continue;
            }
            let n = crate::coll_iters(bytes, quick);
            let doubles = vec![1.0f64; bytes / 8];
            let blocks = vec![1u8; bytes * p];
            let data = Bytes::from(vec![1u8; bytes]);
            let mut samples = Vec::new();
            for _ in 0..5 {
                w.barrier()?;
                let t = Instant::now();
                for _ in 0..n {
                    match op {
                        "allreduce" => drop(w.allreduce(&doubles, p2pmp_mpi::Op::Sum)?),
                        "alltoall" => drop(w.alltoall(&blocks)?),
                        "bcast" => drop(w.bcast_bytes(data.clone(), 0)?),
                        _ => w.barrier()?,
                    }
                }
                samples.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
            }
            if w.rank() == 0 {
                println!("coll {op} {bytes} {}", median(samples));
            }
        }
    }
    print_wait_stats(&w);
    w.finalize()
}

/// The bytes `rank` protects in `state` mode: an xorshift stream, which no
/// codec shrinks (the worst case for moving a checkpoint).
fn state_fill(rank: u32, buf: &mut [u8]) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(rank + 1);
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// `state BYTES LOOPS`: every rank protects `BYTES` of state and passes a
/// token round the ring `LOOPS` times (rank 0 pausing 1 ms a loop), a safe
/// point each loop; a resumed rank 0 says `resumed I`, and every rank checks
/// its state is intact at the end (`state ok`).
pub(crate) fn state(bytes: u64, loops: u64) -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    let mut buf = vec![0u8; usize::try_from(bytes).unwrap_or(usize::MAX)];
    state_fill(r, &mut buf);
    let want = buf.clone();
    let mut i = 0u64;
    // SAFETY: both regions outlive the world and are not touched while a
    // checkpoint copies them (only inside `snapshot` and `recover`).
    unsafe {
        w.protect(0, buf.as_mut_ptr(), buf.len())?;
        w.protect(1, (&raw mut i).cast(), 8)?;
    }
    if w.recover()? && r == 0 {
        println!("resumed {i}");
    }
    let mut tok = [0u8; 8];
    while i < loops {
        if r == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            w.send(&tok, 1 % p, 1)?;
            w.recv_into(&mut tok, Some(p - 1), Some(1))?;
        } else {
            w.recv_into(&mut tok, Some(r - 1), Some(1))?;
            w.send(&tok, (r + 1) % p, 1)?;
        }
        i += 1;
        w.snapshot()?;
    }
    if buf == want {
        println!("state ok");
    }
    w.finalize()
}
