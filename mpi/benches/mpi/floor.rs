//! The floor of the factoring rows: the same trial division and flag rounds
//! as `ranks::factor`, between processes that share one page and no MPI at
//! all. Each rank but 0 stores its round and its find in a cache line of its
//! own; rank 0 gathers them and stores the global find in a line of its own.
//! A process waiting for a line yields the CPU between looks (as Open MPI
//! does on oversubscribed cores; on 2 cores 8 ranks must take turns every
//! round). What no MPI built on processes can beat on this machine: the
//! verdicts print it beside the factoring targets.

use std::io;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::median;
use crate::ranks::{isqrt, trial_divide};
use crate::segment::{self, Segment};

/// Environment variable that makes this binary one rank of the raw factoring:
/// `fd n k ranks rank` (the shared page's inherited fd).
pub(crate) const VAR: &str = "MPI_BENCH_RAW_FACTOR";

/// Lines of the shared page: the start count, one per rank, rank 0's answer.
const LINE: usize = 64;
const PAGE: usize = 4096;
/// Ranks that fit the page (a line each, plus the start count and the answer).
const MAX_RANKS: u32 = (PAGE / LINE) as u32 - 2;

/// The shared page, mapped.
struct Page(Segment);

impl Page {
    fn map(fd: i32) -> io::Result<Self> {
        Segment::map(fd, PAGE).map(Page)
    }

    /// Word `w` (0 or 1) of line `line`.
    fn word(&self, line: usize, w: usize) -> &AtomicU64 {
        assert!(w < 2);
        self.0.word(line * LINE + w * 8)
    }

    /// Yields until word 0 of `line` reaches `v`.
    fn wait(&self, line: usize, v: u64) {
        while self.word(line, 0).load(Ordering::Acquire) < v {
            std::thread::yield_now();
        }
    }

    /// Publishes `found` for round `round` on `line` (the find first, then
    /// the round that makes it visible).
    fn post(&self, line: usize, round: u64, found: u64) {
        self.word(line, 1).store(found, Ordering::Relaxed);
        self.word(line, 0).store(round, Ordering::Release);
    }
}

/// One rank of the raw factoring (`VAR` set): rank 0 prints
/// `factor <seconds from the common start> <factor>`.
pub(crate) fn rank_main(spec: &str) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("{VAR}={spec}"));
    let v: Vec<u64> = spec.split_whitespace().map(str::parse).collect::<Result<_, _>>().map_err(|_| bad())?;
    let &[fd, n, k, ranks, rank] = &v[..] else { return Err(bad()) };
    if !(1..=u64::from(MAX_RANKS)).contains(&ranks) || rank >= ranks {
        return Err(bad());
    }
    let (fd, ranks) = (i32::try_from(fd).map_err(|_| bad())?, ranks as usize);
    let (page, answer) = (Page::map(fd)?, ranks + 1);
    // All start together, as the MPI runs start after a barrier.
    page.word(0, 0).fetch_add(1, Ordering::AcqRel);
    page.wait(0, ranks as u64);
    let t = Instant::now();
    let (limit, mut cand, mut round) = (isqrt(n), 2 + rank, 0);
    loop {
        let found = trial_divide(n, &mut cand, ranks as u64, k, limit).unwrap_or(0);
        round += 1;
        if rank == 0 {
            let mut g = found;
            for q in 1..ranks {
                page.wait(1 + q, round);
                if g == 0 {
                    g = page.word(1 + q, 1).load(Ordering::Relaxed);
                }
            }
            page.post(answer, round, g);
            if g != 0 {
                println!("factor {} {g}", t.elapsed().as_secs_f64());
                return Ok(());
            }
        } else {
            page.post(1 + rank as usize, round, found);
            page.wait(answer, round);
            if page.word(answer, 1).load(Ordering::Relaxed) != 0 {
                return Ok(());
            }
        }
    }
}

/// One raw factoring of `n` on `ranks` processes of this binary: rank 0's
/// seconds. Killed past `limit`.
fn once(n: u64, k: u64, ranks: u32, limit: Duration) -> io::Result<f64> {
    if !(1..=MAX_RANKS).contains(&ranks) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{ranks} ranks (1 to {MAX_RANKS})")));
    }
    let fd = segment::memfd(c"raw-factor", PAGE)?;
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for rank in 0..ranks {
        let spec = format!("{} {n} {k} {ranks} {rank}", fd.as_raw_fd());
        let out = if rank == 0 { Stdio::piped() } else { Stdio::null() };
        match Command::new(&exe).env(VAR, spec).stdout(out).spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                children.iter_mut().for_each(|c| drop(c.kill()));
                children.iter_mut().for_each(|c| drop(c.wait()));
                return Err(e);
            }
        }
    }
    let start = Instant::now();
    while children.iter_mut().any(|c| matches!(c.try_wait(), Ok(None))) {
        if start.elapsed() > limit {
            children.iter_mut().for_each(|c| drop(c.kill()));
            children.iter_mut().for_each(|c| drop(c.wait()));
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("timeout after {limit:?}")));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut out = String::new();
    if let Some(mut o) = children[0].stdout.take() {
        io::Read::read_to_string(&mut o, &mut out)?;
    }
    for c in &mut children {
        let st = c.wait()?;
        if !st.success() {
            return Err(io::Error::other(format!("a raw factoring rank: {st}")));
        }
    }
    out.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("raw factoring printed {out:?}")))
}

/// The median of `reps` raw factorings (see [`once`]).
pub(crate) fn factor(n: u64, k: u64, ranks: u32, reps: usize, limit: Duration) -> Result<f64, String> {
    let samples = (0..reps).map(|_| once(n, k, ranks, limit)).collect::<io::Result<Vec<f64>>>();
    samples.map(median).map_err(|e| e.to_string())
}
