//! `cargo bench -p p2pmp-mpi --bench mpi [-- --quick]`: p2pmp beside MPICH and
//! Open MPI (over TCP and over their default intra-node transports) and a raw
//! Rust TCP ping-pong, in one run on this machine:
//! - ping-pong latency (half round trip) and bandwidth, 1 B to 4 MiB, and a
//!   window of 64 non-blocking 1 MiB sends, beside its floor (`raw_shm`: the
//!   same bytes through a ring in shared memory, no MPI; see `window_floor.rs`);
//! - a 10-byte token around 2, 4 and 8 ranks, 5,000 and 20,000 loops;
//! - trial-division factoring of 4611686039902224373, flags exchanged with rank 0
//!   every K = 10,000 and K = 500 candidates, on 1, 2, 4 and 8 ranks, beside
//!   its floor (`raw_shm_yield`: the same rounds through one shared page,
//!   yielding while waiting, no MPI; see `floor.rs`);
//! - MPI_Allreduce (sum of doubles), MPI_Alltoall and MPI_Bcast of 8 B, 64 KiB
//!   and 1 MiB per rank (per block for Alltoall) on 2, 4 and 8 ranks (µs a call,
//!   median of 5 repetitions; `--coll` runs only these rows).
//! - beside a CPU hog on each core: the 8 B latency and the ring of 2 ranks;
//! - an 8 B ping-pong of 1,000 round trips right after both ranks paused
//!   20 ms, 10 times: the median and the worst of the 10 (`--pause` runs
//!   only these rows).
//! - between two hosts of a namespace cluster (as root; `--no-hosts` skips
//!   them, `--hosts` runs only them): p2pmp's ping-pong through two jobds,
//!   encrypted as by default between hosts and again unencrypted, beside a raw
//!   TCP ping-pong between processes on the same two hosts (blocking and
//!   busy-polling) and MPICH over TCP.
//! - `--raw-shm` (only this row): the raw shared-memory ping-pong, each size
//!   three times as the bench runs it, to look at the one-host baseline alone.
//! - `--migrate` (only these rows): `p2pjob migrate` of a rank with 1.5 MB,
//!   16 MB and 256 MB of protected state between namespace hosts, beside a raw
//!   copy of the same bytes (see `migrate.rs`).
//!
//! Each figure is a median of repetitions (but the worst after a pause); the
//! two-rank ping-pongs of p2pmp, the references and the raw rows take turns
//! over three rounds, and so do the ring and factoring runs (until a
//! system's runs took 20 s), also when quick, so load drifting on a shared
//! machine hits them alike. The raw rows: blocking between two threads
//! (`raw_tcp`, the target's baseline), busy-polling between two threads
//! (`raw_tcp_spin`, with the quick counts: it collapses on a loaded
//! machine), blocking between two processes (`raw_tcp_proc`, the shape of
//! two ranks), and busy-polling shared memory between two processes
//! (`raw_shm`, quick counts too, and the window's floor). Rows whose MPI is not
//! installed are marked missing; runs past the time limit (MPICH and Open MPI:
//! 60 s, ping-pong 120 s, quick 5 s and 10 s; p2pmp: 180 s, quick 30 s, so
//! that its 8-rank K=500 factoring, about 537,000 flag rounds, finishes on 2
//! cores) are killed and reported as timeouts, and a reference that timed out
//! is not run again, in later rounds or on more ranks (reported as skipped).
//! Prints a table, writes JSON and a PNG plot under `target/<profile>/mpi-bench/`,
//! and prints one flat JSON object as the last line (`<system>_<metric>`, null
//! where missing). `--quick` runs a reduced set with a smaller semiprime, the
//! two-host rows included: 400-505 s on the 2-core machine, of which the
//! two-host section's build of the workspace's binaries can take minutes
//! (its feature set differs from `cargo bench -p p2pmp-mpi`'s, so each
//! rebuilds some crates the other built).
//!
//! The same binary is the p2pmp rank program: under `p2pmp-launch` (P2PMP_RANK
//! set) it runs the mode named by its first argument.

mod ckpt;
mod floor;
mod hosts;
mod migrate;
mod plot;
mod ranks;
mod raw;
mod run;
mod segment;
mod tcp_window;
mod verdicts;
mod window_floor;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use run::{Mpi, RefBuild, RunResult};

/// A figure as the tables print it: whole from 100 on, else three significant
/// digits (a ring of 0.0005 s must not read 0.000).
pub(crate) fn figure(v: f64) -> String {
    if v.abs() >= 100.0 || v == 0.0 || !v.is_finite() {
        return format!("{v:.0}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    format!("{v:.digits$}")
}

pub(crate) const SIZES: [usize; 7] = [1, 8, 1024, 64 << 10, 256 << 10, 1 << 20, 4 << 20];
pub(crate) const SEMIPRIME: u64 = 4_611_686_039_902_224_373;
/// Rounds of the ping-pongs, every system taking its turn in each.
const PP_ROUNDS: usize = 3;
/// The collectives timed, and the bytes per rank.
pub(crate) const COLL_OPS: [&str; 4] = ["allreduce", "alltoall", "bcast", "barrier"];
pub(crate) const COLL_SIZES: [usize; 3] = [8, 64 << 10, 1 << 20];

/// Calls timed per repetition of a collective of `bytes` (as `coll.c` does).
pub(crate) fn coll_iters(bytes: usize, quick: bool) -> usize {
    let n = if bytes <= 8 {
        2000
    } else if bytes <= 64 << 10 {
        100
    } else {
        10
    };
    if quick { (n / 10).max(1) } else { n }
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A ping-pong run's figure (or why not) per size.
type PpFigures = Vec<(usize, Result<f64, String>)>;

/// The median of the figures among `all`, else the first reason (or "no
/// figure" when there is nothing at all).
fn median_or_why<'a>(all: impl IntoIterator<Item = &'a Result<f64, String>>) -> Result<f64, String> {
    let (mut ok, mut why) = (Vec::new(), None);
    for r in all {
        match r {
            Ok(v) => ok.push(*v),
            Err(e) => drop(why.get_or_insert_with(|| e.clone())),
        }
    }
    if ok.is_empty() { Err(why.unwrap_or_else(|| "failed: no figure".into())) } else { Ok(median(ok)) }
}

/// Per size, the median of the rounds that gave a figure, else the first reason.
fn median_rounds(rounds: &[PpFigures]) -> PpFigures {
    median_by_key(rounds, SIZES)
}

/// For each of `keys` (a size, or another figure's key), the median of the
/// rounds that gave a figure for it, else the first reason.
pub(crate) fn median_by_key(rounds: &[PpFigures], keys: impl IntoIterator<Item = usize>) -> PpFigures {
    let of = |k: usize| median_or_why(rounds.iter().flat_map(|r| r.iter().filter(move |p| p.0 == k).map(|p| &p.1)));
    keys.into_iter().map(|k| (k, of(k))).collect()
}

pub(crate) fn iters(size: usize, quick: bool) -> usize {
    let base = if size <= 1024 {
        20_000
    } else if size <= 256 << 10 {
        2_000
    } else {
        200
    };
    if quick { base / 10 } else { base }
}

fn size_label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{}mib", s >> 20),
        s if s >= 1 << 10 => format!("{}kib", s >> 10),
        s => format!("{s}b"),
    }
}

/// One measured figure (or why there is none).
struct Cell {
    section: &'static str,
    row: String,
    system: String,
    /// JSON key without the system prefix.
    key: String,
    value: Result<f64, String>,
}

#[derive(Default)]
struct Results {
    cells: Vec<Cell>,
}

impl Results {
    fn put(&mut self, section: &'static str, row: &str, system: &str, key: &str, value: Result<f64, String>) {
        let shown = value.as_ref().map_or_else(|e| format!("- ({e})"), |&v| figure(v));
        eprintln!("  {section:<9} {row:<22} {system:<16} {shown}");
        let (row, system, key) = (row.to_string(), system.to_string(), key.to_string());
        self.cells.push(Cell { section, row, system, key, value });
    }

    /// Every figure measured, by `<system>_<key>`.
    fn figures(&self) -> BTreeMap<String, f64> {
        self.cells
            .iter()
            .filter_map(|c| c.value.as_ref().ok().map(|v| (format!("{}_{}", c.system, c.key), *v)))
            .collect()
    }

    fn get(&self, system: &str, key: &str) -> Option<f64> {
        self.cells.iter().find(|c| c.system == system && c.key == key).and_then(|c| c.value.as_ref().ok().copied())
    }

    /// The flat `<system>_<key>` object, null for anything not measured.
    fn flat(&self, quick: bool, extra: &[(&str, Option<f64>)]) -> String {
        let mut m: BTreeMap<String, Option<f64>> = BTreeMap::new();
        for c in &self.cells {
            m.insert(format!("{}_{}", c.system, c.key), c.value.as_ref().ok().copied());
        }
        for (k, v) in extra {
            m.entry((*k).to_string()).or_insert(*v);
        }
        let mut s = format!("{{\"quick\": {quick}");
        for (k, v) in m {
            let v = v.map_or_else(|| "null".to_string(), |v| format!("{v:.4}"));
            let _ = write!(s, ", \"{k}\": {v}");
        }
        s.push('}');
        s
    }

    fn table(&self, section: &str, title: &str) -> String {
        let cells: Vec<&Cell> = self.cells.iter().filter(|c| c.section == section).collect();
        let mut systems: Vec<&str> = Vec::new();
        let mut rows: Vec<&str> = Vec::new();
        for c in &cells {
            if !systems.contains(&c.system.as_str()) {
                systems.push(&c.system);
            }
            if !rows.contains(&c.row.as_str()) {
                rows.push(&c.row);
            }
        }
        let mut out = format!("\n{title}\n{:<24}", "");
        for s in &systems {
            let _ = write!(out, "{s:>16}");
        }
        out.push('\n');
        let mut notes: Vec<String> = Vec::new();
        for r in rows {
            let _ = write!(out, "{r:<24}");
            for s in &systems {
                let text = match cells.iter().find(|c| c.row == r && c.system == *s).map(|c| &c.value) {
                    None => String::new(),
                    Some(Ok(v)) => figure(*v),
                    Some(Err(e)) => {
                        let note = format!("{s}: {e}");
                        let i = notes.iter().position(|n| *n == note).unwrap_or_else(|| {
                            notes.push(note);
                            notes.len() - 1
                        });
                        format!("{} [{}]", e.split([':', ' ']).next().unwrap_or("error"), i + 1)
                    }
                };
                let _ = write!(out, "{text:>16}");
            }
            out.push('\n');
        }
        for (i, n) in notes.iter().enumerate() {
            let _ = writeln!(out, "  [{}] {n}", i + 1);
        }
        out
    }
}

/// The systems a reference row runs on: (name, build, over TCP only).
fn references(builds: &[RefBuild]) -> Vec<(String, &RefBuild, bool)> {
    let mut v = Vec::new();
    for tcp in [true, false] {
        for b in builds {
            v.push((format!("{}_{}", b.mpi.name(), if tcp { "tcp" } else { "default" }), b, tcp));
        }
    }
    v
}

fn out_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    // target/<profile>/deps/mpi-xxxx -> target/<profile>/mpi-bench
    let dir = exe.parent().and_then(|d| d.parent()).map_or_else(|| PathBuf::from("."), |d| d.join("mpi-bench"));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

fn is_prime(n: u64) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
}

/// A reference system: its name, its build, and whether over TCP only.
type Reference<'a> = (String, &'a RefBuild, bool);

/// p2pmp (`None`), then every reference: the systems of a row, in the
/// order they take their turns and fill the table's columns.
fn systems<'a>(refs: &'a [Reference<'a>]) -> Vec<Option<&'a Reference<'a>>> {
    std::iter::once(None).chain(refs.iter().map(Some)).collect()
}

/// The name of a system of [`systems`].
fn system_name<'a>(system: Option<&'a Reference<'_>>) -> &'a str {
    system.map_or("p2pmp", |r| r.0.as_str())
}

/// Wall-clock limits of one run: p2pmp's rows must give a figure; a reference
/// that busy-polls on oversubscribed cores is cut off sooner.
#[derive(Debug, Clone, Copy)]
struct Limits {
    p2pmp: Duration,
    reference: Duration,
}

/// The two-host rows (p2pmp encrypted and not, raw TCP, MPICH over TCP).
fn hosts_section(res: &mut Results, quick: bool, built: &[RefBuild], limit: Limits) {
    let mpich = built
        .iter()
        .find(|b| b.mpi == run::Mpi::Mpich)
        .map_or_else(|| Err("missing: MPICH not installed".to_string()), |b| b.dir.as_deref().map_err(Clone::clone));
    for (section, row, system, key, value) in hosts::pingpong(quick, limit.p2pmp, mpich) {
        res.put(section, &row, system, &key, value);
    }
}

fn pingpong_section(res: &mut Results, quick: bool, refs: &[(String, &RefBuild, bool)], limit: Limits) {
    let q: Vec<String> = if quick { vec!["quick".into()] } else { vec![] };
    // One figure (or why not) per size.
    let put_pp = |res: &mut Results, system: &str, got: PpFigures| {
        for (size, lat) in got {
            let l = size_label(size);
            res.put("lat", &format!("{size} B"), system, &format!("lat_{l}_us"), lat.clone());
            res.put("bw", &format!("{size} B"), system, &format!("bw_{l}_mbps"), lat.map(|us| size as f64 / us));
        }
    };
    // The sizes a run printed, even if it then timed out or failed, and its
    // window bandwidth.
    let parse = |r: RunResult| -> (PpFigures, Result<f64, String>) {
        let (lines, why) = match r {
            Ok(lines) => (lines, "failed: no figure".to_string()),
            Err(f) => (f.partial, f.why),
        };
        let win = run::values(&lines, "win").first().and_then(|x| x.get(1).copied()).ok_or_else(|| why.clone());
        let v = run::values(&lines, "pp");
        let figure = |size: usize| v.iter().find(|x| x.len() >= 2 && x[0] as usize == size).map(|x| x[1]);
        (SIZES.iter().map(|&size| (size, figure(size).ok_or_else(|| why.clone()))).collect(), win)
    };
    // Every system takes its turn in each round, so that the load of a shared
    // machine drifting during the run (on the reference VM, a quiet minute and
    // the next can differ twofold in small-message latency) hits them alike;
    // each figure is the median over the rounds. A reference that timed out
    // is not run again (p2pmp always is).
    let pp_args = [vec!["pingpong".to_string()], q.clone()].concat();
    let raws = [("raw_tcp", false, raw::Echo::Thread), ("raw_tcp_proc", false, raw::Echo::Process)];
    // Per MPI system: each round's figures and window.
    let mpi_systems = systems(refs);
    type Window = Result<f64, String>;
    let mut mpi: Vec<(Vec<PpFigures>, Vec<Window>)> = vec![Default::default(); mpi_systems.len()];
    let mut raw_rounds: Vec<Vec<PpFigures>> = vec![Vec::new(); raws.len()];
    // The busy-polling raw rows, and the window's floor.
    let (mut spin_rounds, mut shm_rounds, mut floor_wins) = (Vec::new(), Vec::new(), Vec::new());
    let gave_up = |w: &Window| w.as_ref().is_err_and(|e| run::timed_out(e));
    for _ in 0..PP_ROUNDS {
        for (&system, (figs, wins)) in mpi_systems.iter().zip(&mut mpi) {
            let got = match system {
                None => run::p2pmp(2, &pp_args, limit.p2pmp),
                Some(_) if wins.iter().any(gave_up) => continue,
                Some((_, b, tcp)) => run::mpirun(b, *tcp, 2, "pingpong", &q, limit.reference * 2),
            };
            let (f, w) = parse(got);
            figs.push(f);
            wins.push(w);
        }
        for (&(_, spin, peer), rounds) in raws.iter().zip(&mut raw_rounds) {
            let got = SIZES.iter().map(|&s| (s, raw::pingpong(s, quick, spin, peer).map_err(|e| e.to_string())));
            rounds.push(got.collect());
        }
        // Busy-polling collapses on a loaded machine (hundreds of µs a
        // message): with the quick counts, so it cannot hold the run up for
        // minutes, and in every round, so that one collapse (seen: raw
        // shared memory at 5,150 MB/s against 18,000) does not make the row.
        let spin =
            SIZES.iter().map(|&s| (s, raw::pingpong(s, true, true, raw::Echo::Thread).map_err(|e| e.to_string())));
        spin_rounds.push(spin.collect());
        // Raw shared memory between two processes, busy-polling.
        let shm = SIZES.iter().map(|&s| (s, raw::shm_pingpong(s, true).map_err(|e| e.to_string())));
        shm_rounds.push(shm.collect());
        // The window through a raw ring (see window_floor.rs), as many
        // windows as p2pmp's rank program sends.
        floor_wins.push(window_floor::window(window_floor::rounds(quick)).map_err(|e| e.to_string()));
    }
    put_pp(res, "p2pmp", median_rounds(&mpi[0].0));
    for (&(system, ..), rounds) in raws.iter().zip(&raw_rounds) {
        put_pp(res, system, median_rounds(rounds));
    }
    put_pp(res, "raw_tcp_spin", median_rounds(&spin_rounds));
    put_pp(res, "raw_shm", median_rounds(&shm_rounds));
    res.put("bw", "window 64 x 1 MiB", "raw_shm", "win_1mib_mbps", median_or_why(&floor_wins));
    for (&system, (figs, wins)) in mpi_systems.iter().zip(&mpi).skip(1) {
        put_pp(res, system_name(system), median_rounds(figs));
        res.put("bw", "window 64 x 1 MiB", system_name(system), "win_1mib_mbps", median_or_why(wins));
    }
    res.put("bw", "window 64 x 1 MiB", "p2pmp", "win_1mib_mbps", median_or_why(&mpi[0].1));
}

/// The 8-byte latency and the 2 x 2,000 ring beside a CPU hog on each core
/// (busy threads of this process), for p2pmp and the references' default
/// transports.
fn hog_section(res: &mut Results, refs: &[(String, &RefBuild, bool)], limit: Limits) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hogs: Vec<_> = (0..cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let q = vec!["quick".to_string()];
    let lat = |r: RunResult| -> Result<f64, String> {
        let lines = r.map_err(|f| f.why)?;
        let v = run::values(&lines, "pp");
        v.iter().find(|x| x.len() >= 2 && x[0] as usize == 8).map(|x| x[1]).ok_or_else(|| "failed: no figure".into())
    };
    let ring = |r: RunResult| -> Result<f64, String> {
        let lines = r.map_err(|f| f.why)?;
        run::values(&lines, "ring").first().and_then(|v| v.first().copied()).ok_or_else(|| "failed: no output".into())
    };
    let (lat_row, ring_row) = (format!("8 B latency (µs), {cores} hogs"), format!("ring 2 x 2000 (s), {cores} hogs"));
    let pp = [vec!["pingpong".to_string()], q.clone()].concat();
    res.put("hog", &lat_row, "p2pmp", "hog_lat_8b_us", lat(run::p2pmp(2, &pp, limit.p2pmp)));
    let ring_args = vec!["ring".to_string(), "2000".to_string()];
    res.put("hog", &ring_row, "p2pmp", "hog_ring_2x2000_s", ring(run::p2pmp(2, &ring_args, limit.p2pmp)));
    for (name, b, tcp) in refs.iter().filter(|r| !r.2) {
        res.put(
            "hog",
            &lat_row,
            name,
            "hog_lat_8b_us",
            lat(run::mpirun(b, *tcp, 2, "pingpong", &q, limit.reference * 2)),
        );
        let r = run::mpirun(b, *tcp, 2, "ring", &["2000".to_string()], limit.reference * 2);
        res.put("hog", &ring_row, name, "hog_ring_2x2000_s", ring(r));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        let _ = h.join();
    }
}

/// The 8-byte ping-pong right after a pause: 10 times, both ranks pause
/// 20 ms after a barrier (as programs that compute between exchanges do),
/// then 1,000 round trips are timed; the median and the worst of the 10, for
/// p2pmp and the references' default transports. Ranks that sleep through
/// the pause and then wake each other in turns show here, not in the
/// ping-pong rows, whose ranks never pause.
fn pause_section(res: &mut Results, refs: &[(String, &RefBuild, bool)], limit: Limits) {
    let args: Vec<String> = ["10", "20", "1000"].map(String::from).to_vec();
    let (median_row, worst_row) = ("8 B, median of 10 (µs a hop)", "8 B, worst of 10 (µs a hop)");
    let put = |res: &mut Results, name: &str, r: RunResult| {
        let fig = r.map_err(|f| f.why).and_then(|lines| {
            run::values(&lines, "pause")
                .first()
                .filter(|v| v.len() >= 2)
                .cloned()
                .ok_or_else(|| "failed: no figure".into())
        });
        res.put("pause", median_row, name, "pause_median_us", fig.clone().map(|v| v[0]));
        res.put("pause", worst_row, name, "pause_worst_us", fig.map(|v| v[1]));
    };
    let p2pmp_args = [vec!["pause".to_string()], args.clone()].concat();
    put(res, "p2pmp", run::p2pmp(2, &p2pmp_args, limit.p2pmp));
    for (name, b, tcp) in refs.iter().filter(|r| !r.2) {
        put(res, name, run::mpirun(b, *tcp, 2, "pause", &args, limit.reference * 2));
    }
}

/// Runs a ring or factoring row for every system, `reps` times in turns
/// (a system whose runs took 20 s in all is not run again), and puts each
/// system's median; a reference that timed out at fewer ranks is skipped at
/// more (p2pmp itself always runs).
#[allow(clippy::too_many_arguments)]
fn multi_rank_row(
    res: &mut Results,
    section: &'static str,
    row: &str,
    key: &str,
    n: u32,
    args: &[String],
    reps: usize,
    refs: &[Reference<'_>],
    limit: Limits,
    gave_up: &mut BTreeMap<String, String>,
) {
    let (prog, field) = (args[0].as_str(), if section == "ring" { "ring" } else { "factor" });
    let run_of = |reference: Option<&Reference<'_>>| -> Result<f64, String> {
        let got = match reference {
            None => run::p2pmp(n, args, limit.p2pmp),
            Some((_, b, tcp)) => run::mpirun(b, *tcp, n, prog, &args[1..], limit.reference),
        };
        got.map_err(|f| f.why)
            .and_then(|l| run::values(&l, field).first().map(|v| v[0]).ok_or_else(|| "failed: no output".into()))
    };
    let systems = systems(refs);
    // Per system: its figures and the time its runs took, or why it stopped.
    let mut got: Vec<Result<(Vec<f64>, Duration), String>> = systems
        .iter()
        .map(|r| match r.and_then(|r| gave_up.get(&r.0)) {
            Some(why) => Err(format!("skipped: {why}")),
            None => Ok((Vec::new(), Duration::ZERO)),
        })
        .collect();
    for _ in 0..reps {
        for (&reference, entry) in systems.iter().zip(&mut got) {
            let Ok((samples, spent)) = entry else { continue };
            if *spent >= Duration::from_secs(20) {
                continue;
            }
            let t = Instant::now();
            let v = run_of(reference);
            *spent += t.elapsed();
            match v {
                Ok(v) => samples.push(v),
                Err(e) => {
                    if let Some(r) = reference.filter(|_| run::timed_out(&e)) {
                        gave_up.insert(r.0.clone(), format!("timed out at {row}"));
                    }
                    *entry = Err(e);
                }
            }
        }
    }
    for (reference, g) in systems.into_iter().zip(got) {
        res.put(section, row, system_name(reference), key, g.map(|(samples, _)| median(samples)));
    }
}

/// Allreduce, Alltoall and Bcast rows on 2, 4 and 8 ranks: one run per system
/// and rank count prints every operation and size.
fn coll_section(res: &mut Results, quick: bool, refs: &[(String, &RefBuild, bool)], limit: Limits) {
    let q: Vec<String> = if quick { vec!["quick".into()] } else { vec![] };
    let ranks: &[u32] = if quick { &[2, 8] } else { &[2, 4, 8] };
    let mut gave_up: BTreeMap<String, String> = BTreeMap::new();
    for &n in ranks {
        let mut systems: Vec<(String, RunResult)> = Vec::new();
        let args = [vec!["coll".to_string()], q.clone()].concat();
        systems.push(("p2pmp".into(), run::p2pmp(n, &args, limit.p2pmp * 2)));
        for (name, b, tcp) in refs {
            let r = match gave_up.get(name) {
                Some(why) => Err(run::Failed { why: format!("skipped: {why}"), partial: Vec::new() }),
                None => run::mpirun(b, *tcp, n, "coll", &q, limit.reference * 3),
            };
            if let Err(f) = &r {
                if run::timed_out(&f.why) {
                    gave_up.insert(name.clone(), format!("timed out at {n} ranks"));
                }
            }
            systems.push((name.clone(), r));
        }
        for (system, r) in systems {
            let (lines, why) = match r {
                Ok(l) => (l, "failed: no figure".to_string()),
                Err(f) => (f.partial, f.why),
            };
            for op in COLL_OPS {
                for bytes in COLL_SIZES {
                    if op == "barrier" && bytes != 8 {
                        continue;
                    }
                    let fig = lines
                        .iter()
                        .filter_map(|l| l.strip_prefix(&format!("coll {op} {bytes} ")))
                        .find_map(|v| v.trim().parse::<f64>().ok())
                        .ok_or_else(|| why.clone());
                    let (row, key) = (
                        format!("{op} {}, {n} ranks", size_label(bytes)),
                        format!("{op}_{}_{n}_us", size_label(bytes)),
                    );
                    res.put("coll", &row, &system, &key, fig);
                }
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    // The raw rows' other processes: this binary again, told by a variable
    // which side it is and what to do.
    type Side = fn(&str) -> std::io::Result<()>;
    let sides: [(&str, Side, &str); 7] = [
        (raw::ECHO_VAR, raw::echo_main, "raw echo process"),
        (raw::CLIENT_VAR, raw::timer_main, "raw timing process"),
        (floor::VAR, floor::rank_main, "raw factoring rank"),
        (raw::SHM_ECHO_VAR, raw::shm_echo_main, "raw shared-memory echo"),
        (tcp_window::RECV_VAR, tcp_window::receiver_main, "raw TCP window receiver"),
        (tcp_window::SEND_VAR, tcp_window::sender_main, "raw TCP window sender"),
        (window_floor::VAR, window_floor::receiver_main, "raw window receiver"),
    ];
    for (var, side, what) in sides {
        if let Ok(spec) = std::env::var(var) {
            side(&spec).unwrap_or_else(|e| panic!("{what} failed: {e:?}"));
            return;
        }
    }
    if std::env::var_os(p2pmp_mpi::RANK_VAR).is_some() {
        let arg = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok()).unwrap_or(1000);
        let res = match args.first().map(String::as_str) {
            Some("pingpong") => ranks::pingpong(args.iter().any(|a| a == "quick"), args.iter().any(|a| a == "plain")),
            Some("pp1") => ranks::pingpong_one(arg(1), arg(2)),
            Some("win1") => ranks::window_one(arg(1)),
            Some("ring") => ranks::ring(arg(1), false),
            Some("ring_snap") => ranks::ring(arg(1), true),
            Some("factor") => ranks::factor(arg(1), arg(2), false),
            Some("factor_snap") => ranks::factor(arg(1), arg(2), true),
            Some("coll") => {
                let only = args.iter().position(|a| a == "only").and_then(|i| {
                    let op = args.get(i + 1)?;
                    Some((op.as_str(), args.get(i + 2)?.parse().ok()?))
                });
                ranks::coll(args.iter().any(|a| a == "quick"), only)
            }
            Some("state") => ranks::state(arg(1), arg(2)),
            Some("pause") => {
                let opt = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok());
                ranks::pause(opt(1), opt(2), opt(3))
            }
            other => panic!("unknown mode {other:?}"),
        };
        res.expect("rank failed");
        return;
    }
    if args.iter().any(|a| a == "--raw-shm") {
        for size in SIZES {
            // With the quick counts, as the bench's row runs.
            let runs: Vec<String> = (0..3)
                .map(|_| {
                    raw::shm_pingpong(size, true).map_or_else(|e| format!("(failed: {e})"), |us| figure(us) + " µs")
                })
                .collect();
            println!("raw_shm {size} B, half round trip: {}", runs.join(", "));
        }
        return;
    }
    let t0 = Instant::now();
    let limit = if quick {
        Limits { p2pmp: Duration::from_secs(30), reference: Duration::from_secs(5) }
    } else {
        Limits { p2pmp: Duration::from_secs(180), reference: Duration::from_secs(60) }
    };
    let dir = out_dir();
    let builds: Vec<RefBuild> = [Mpi::Mpich, Mpi::OpenMpi].into_iter().map(|m| run::build_refs(m, &dir)).collect();
    let mut res = Results::default();
    for b in &builds {
        if let Err(e) = &b.dir {
            for (section, key) in [("lat", "lat_8b_us"), ("ring", "ring_8x20000_s"), ("factor", "factor_8_s")] {
                for t in ["tcp", "default"] {
                    res.put(section, "-", &format!("{}_{t}", b.mpi.name()), key, Err(e.clone()));
                }
            }
        }
    }
    let built: Vec<RefBuild> = builds.into_iter().filter(|b| b.dir.is_ok()).collect();
    let refs = references(&built);
    eprintln!(
        "mpi bench ({}), {} cores, load {}",
        if quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );

    let ring_refs: Vec<_> = refs.to_vec();
    if args.iter().any(|a| a == "--ckpt") {
        ckpt::section(&mut res, quick, limit.p2pmp);
        println!(
            "{}",
            res.table("snap", "P2P_Snapshot on the ring (s for the loops; µs inside a call; agreements; checkpoints)")
        );
        println!("{}", res.table("codec", "checkpoint compression of 32 MiB (stored % of raw; MB/s of raw bytes)"));
        println!("{}", res.table("factor_ckpt", "periodic checkpoints on the factoring job (s; checkpoints taken)"));
        let flat = res.flat(quick, &[]);
        let _ = std::fs::write(dir.join(if quick { "ckpt-quick.json" } else { "ckpt.json" }), format!("{flat}\n"));
        println!("{flat}");
        return;
    }
    if args.iter().any(|a| a == "--migrate") {
        migrate::section(&mut res, quick);
        println!(
            "{}",
            res.table(
                "migrate",
                "p2pjob migrate between hosts: request to the rank resumed alone, beside a raw copy (s)"
            )
        );
        let flat = res.flat(quick, &[]);
        let _ = std::fs::write(
            dir.join(if quick { "migrate-quick.json" } else { "migrate.json" }),
            format!(
                "{flat}
"
            ),
        );
        println!("{flat}");
        return;
    }
    if args.iter().any(|a| a == "--hosts") {
        hosts_section(&mut res, quick, &built, limit);
        println!("{}", res.table("hosts_lat", "between two hosts (network namespaces on a bridge): latency (µs)"));
        println!("{}", res.table("hosts_bw", "between two hosts: bandwidth (MB/s)"));
        let flat = res.flat(quick, &[]);
        let _ = std::fs::write(dir.join(if quick { "hosts-quick.json" } else { "hosts.json" }), format!("{flat}\n"));
        println!("{flat}");
        return;
    }
    if args.iter().any(|a| a == "--pause") {
        pause_section(&mut res, &refs, limit);
        println!("{}", res.table("pause", "ping-pong of 1,000 round trips right after both ranks paused 20 ms"));
        println!("{}", res.flat(quick, &[]));
        return;
    }
    if args.iter().any(|a| a == "--coll") {
        coll_section(&mut res, quick, &refs, limit);
        println!("{}", res.table("coll", "collectives (µs a call, median of 5 repetitions)"));
        println!("{}", res.flat(quick, &[]));
        return;
    }
    pingpong_section(&mut res, quick, &refs, limit);
    if !args.iter().any(|a| a == "--no-hosts") {
        hosts_section(&mut res, quick, &built, limit);
    }

    let (ring_ranks, ring_loops): (&[u32], &[u64]) =
        if quick { (&[2, 8], &[2000]) } else { (&[2, 4, 8], &[5000, 20000]) };
    for &loops in ring_loops {
        let mut gave_up = BTreeMap::new();
        for &n in ring_ranks {
            let row = format!("{n} ranks x {loops}");
            let a = vec!["ring".to_string(), loops.to_string()];
            multi_rank_row(
                &mut res,
                "ring",
                &row,
                &format!("ring_{n}x{loops}_s"),
                n,
                &a,
                3,
                &ring_refs,
                limit,
                &mut gave_up,
            );
        }
    }

    // The semiprime: the real one, or (quick) the product of the two largest primes below 2^25.
    let semi = if quick {
        let mut ps = (1u64..1 << 25).rev().filter(|&p| is_prime(p)).take(2);
        ps.next().unwrap_or(3) * ps.next().unwrap_or(5)
    } else {
        SEMIPRIME
    };
    let (f_ranks, f_ks): (&[u32], &[u64]) =
        if quick { (&[1, 8], &[10_000, 500]) } else { (&[1, 2, 4, 8], &[10_000, 500]) };
    for &k in f_ks {
        let mut gave_up = BTreeMap::new();
        for &n in f_ranks {
            let row = format!("K={k}, {n} ranks");
            let key = if k == 500 { format!("factor_{n}_s") } else { format!("factor_{n}_k{k}_s") };
            let a = vec!["factor".to_string(), semi.to_string(), k.to_string()];
            multi_rank_row(&mut res, "factor", &row, &key, n, &a, 3, &ring_refs, limit, &mut gave_up);
            if n > 1 {
                res.put("factor", &row, "raw_shm_yield", &key, floor::factor(semi, k, n, 3, limit.reference));
            }
        }
    }

    let mut report = String::new();
    report += &res.table("lat", "ping-pong latency, half round trip (µs)");
    report += &res.table("bw", "ping-pong bandwidth (MB/s)");
    report += &res.table("hosts_lat", "between two hosts (network namespaces on a bridge): latency (µs)");
    report += &res.table("hosts_bw", "between two hosts: bandwidth (MB/s)");
    let ring_title = "ring, 10-byte token (s; median of up to 3 runs within 20 s, each the median of 3 rounds)";
    report += &res.table("ring", ring_title);
    report +=
        &res.table("factor", &format!("factoring {semi} (s; median of up to 3 runs, taken in turns, within 20 s)"));
    coll_section(&mut res, quick, &refs, limit);
    report += &res.table("coll", "collectives (µs a call, median of 5 repetitions)");
    hog_section(&mut res, &refs, limit);
    report += &res.table("hog", "beside a CPU hog on each core");
    pause_section(&mut res, &refs, limit);
    report += &res.table("pause", "ping-pong of 1,000 round trips right after both ranks paused 20 ms");
    report += &verdicts::report(&res.figures(), quick);
    println!("{report}");
    let required = [
        "p2pmp_lat_8b_us",
        "raw_tcp_lat_8b_us",
        "mpich_tcp_lat_8b_us",
        "openmpi_tcp_lat_8b_us",
        "p2pmp_bw_1mib_mbps",
        "raw_tcp_bw_1mib_mbps",
        "p2pmp_ring_8x20000_s",
        "mpich_tcp_ring_8x20000_s",
        "p2pmp_factor_8_s",
        "mpich_tcp_factor_8_s",
    ];
    let extra: Vec<(&str, Option<f64>)> = required.iter().map(|k| (*k, None)).collect();
    let flat = res.flat(quick, &extra);
    let mut reasons = BTreeMap::new();
    for c in &res.cells {
        if let Err(e) = &c.value {
            reasons.insert(format!("{}_{}", c.system, c.key), e.clone());
        }
    }
    let reasons: Vec<String> = reasons.iter().map(|(k, v)| format!("\"{k}\": \"{}\"", v.replace('"', "'"))).collect();
    let doc = format!("{{\"semiprime\": {semi}, \"figures\": {flat}, \"reasons\": {{{}}}}}\n", reasons.join(", "));
    let json_path = dir.join(if quick { "mpi-quick.json" } else { "mpi.json" });
    let _ = std::fs::write(&json_path, doc);
    let series: Vec<(String, Vec<(f64, f64)>)> = [
        "p2pmp",
        "raw_tcp",
        "raw_tcp_spin",
        "raw_tcp_proc",
        "raw_shm",
        "mpich_tcp",
        "openmpi_tcp",
        "mpich_default",
        "openmpi_default",
    ]
    .iter()
    .map(|s| {
        let pts = SIZES.iter().filter_map(|&z| res.get(s, &format!("lat_{}_us", size_label(z))).map(|v| (z as f64, v)));
        (s.to_string(), pts.collect::<Vec<_>>())
    })
    .filter(|(_, p)| !p.is_empty())
    .collect();
    let png = dir.join(if quick { "mpi-quick.png" } else { "mpi.png" });
    match plot::latency(&png, &series) {
        Ok(()) => {
            println!("wrote {} and {} in {:.0} s", json_path.display(), png.display(), t0.elapsed().as_secs_f64())
        }
        Err(e) => println!("wrote {} ({e}; no plot) in {:.0} s", json_path.display(), t0.elapsed().as_secs_f64()),
    }
    println!("{flat}");
}
