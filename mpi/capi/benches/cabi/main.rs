//! `cargo bench -p p2pmp-capi --bench cabi [-- --quick]`: what the C ABI costs.
//!
//! The ping-pong and ring programs of `mpi/benches/c/` are compiled with
//! `p2pmpicc` and run through libp2pmpi, interleaved run by run with their
//! twins against the Rust API, all started by `p2pmp-launch`:
//! - `p2pmp_rust`: this binary's rank modes (`ranks.rs`), the same buffer
//!   semantics as C (copy in on send, copy out on receive): the baseline of the
//!   target, C / Rust <= 1.05 on every row;
//! - `p2pmp_rust_bytes`: the rank modes of p2pmp-mpi's `mpi` bench, which pass
//!   shared `Bytes` (no copies at all; C's buffer semantics cannot do that, so
//!   large messages cost C two copies more);
//!
//! and, beside them, the same C programs on MPICH and Open MPI (over TCP and over
//! their default shared-memory transports) where installed.
//!
//! Every p2pmp run (C and Rust alike) is pinned to the host's last CPU, so
//! that the kernel's placement of the ranks, which changes a ping-pong by half
//! from run to run, is the same for both; `--no-pin` lets the kernel place them.
//! The references are not pinned (they busy-poll, and would starve on one CPU).
//!
//! First, without the network: one rank sends to itself and receives, in thread
//! CPU time (which load from other processes does not inflate): what the C ABI
//! layer adds per call. `--no-refs` skips MPICH and Open MPI.
//!
//! Each p2pmp figure is the median over `reps` runs (7, quick 5) of the
//! programs' own medians; CPU seconds per run (all processes of the run) stand
//! beside them, and the ratio of the best runs (the lowest per-run medians:
//! other load on a shared host only ever adds time). The verdict is the worst
//! C / Rust ratio of the medians on the ping-pong and ring rows, the issue's
//! benchmarks; the self row is the layer's own cost per call, given in
//! nanoseconds beside the verdict. References run once; a
//! run past the limit is reported as a timeout, and a reference that timed out
//! is skipped on more ranks. Prints a table, writes
//! `target/bench-results/cabi[-quick].json`, and prints one JSON object as its
//! last line.

mod ranks;
mod run;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use run::{Output, System, launch, run_limited, timed_out, values};

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Samples of one figure for one system, or why there are none.
#[derive(Debug, Default)]
struct Figure {
    samples: Vec<f64>,
    cpu_s: Vec<f64>,
    error: Option<String>,
}

impl Figure {
    fn value(&self) -> Option<f64> {
        median(self.samples.clone())
    }

    /// The best (lowest) run.
    fn best(&self) -> Option<f64> {
        self.samples.iter().copied().reduce(f64::min)
    }

    fn cell(&self) -> String {
        match (self.value(), &self.error) {
            (Some(v), _) => format!("{v:.3}"),
            (None, Some(e)) => format!("- ({e})"),
            (None, None) => "-".into(),
        }
    }
}

/// Figures by (row key, system).
#[derive(Debug, Default)]
struct Results {
    figs: BTreeMap<(String, String), Figure>,
    rows: Vec<(&'static str, String, String)>,
}

impl Results {
    fn fig(&mut self, section: &'static str, label: &str, key: &str, system: &str) -> &mut Figure {
        if !self.rows.iter().any(|(_, _, k)| k == key) {
            self.rows.push((section, label.to_string(), key.to_string()));
        }
        self.figs.entry((key.to_string(), system.to_string())).or_default()
    }

    fn get(&self, key: &str, system: &str) -> Option<f64> {
        self.figs.get(&(key.to_string(), system.to_string())).and_then(Figure::value)
    }

    fn best(&self, key: &str, system: &str) -> Option<f64> {
        self.figs.get(&(key.to_string(), system.to_string())).and_then(Figure::best)
    }

    /// C / Rust of the best runs.
    fn best_ratio(&self, key: &str) -> Option<f64> {
        Some(self.best(key, "p2pmp_c")? / self.best(key, "p2pmp_rust")?)
    }

    /// Records one run's values for `keys` (parsed from its output by `parse`).
    fn record(
        &mut self,
        section: &'static str,
        system: &str,
        run: Result<Output, String>,
        parse: impl Fn(&[String]) -> Vec<(String, String, f64)>,
    ) {
        match run {
            Ok(out) => {
                for (label, key, v) in parse(&out.lines) {
                    let f = self.fig(section, &label, &key, system);
                    f.samples.push(v);
                    f.cpu_s.push(out.cpu_s);
                }
            }
            Err(e) => {
                eprintln!("  {system}: {e}");
                self.error(section, system, &e);
            }
        }
    }

    /// Marks every row of `section` without a value for `system` with `e`.
    fn error(&mut self, section: &'static str, system: &str, e: &str) {
        let keys: Vec<String> = self.rows.iter().filter(|(s, _, _)| *s == section).map(|(_, _, k)| k.clone()).collect();
        for k in keys {
            let f = self.figs.entry((k, system.to_string())).or_default();
            if f.samples.is_empty() {
                f.error = Some(e.to_string());
            }
        }
    }
}

const SYSTEMS: [&str; 7] =
    ["p2pmp_rust", "p2pmp_rust_bytes", "p2pmp_c", "mpich_tcp", "mpich_default", "openmpi_tcp", "openmpi_default"];

fn size_label(size: u64) -> String {
    match size {
        s if s >= 1 << 20 => format!("{}mib", s >> 20),
        s if s >= 1 << 10 => format!("{}kib", s >> 10),
        s => format!("{s}b"),
    }
}

/// `pp <size> <µs>` lines as latency rows.
fn pp_rows(lines: &[String]) -> Vec<(String, String, f64)> {
    values(lines, "pp")
        .iter()
        .filter(|v| v.len() == 2)
        .map(|v| (format!("{} B", v[0] as u64), format!("lat_{}_us", size_label(v[0] as u64)), v[1]))
        .collect()
}

/// `self <bytes> <ns>` lines as rows of the ABI layer's CPU cost.
fn self_rows(lines: &[String]) -> Vec<(String, String, f64)> {
    values(lines, "self")
        .iter()
        .filter(|v| v.len() == 2)
        .map(|v| (format!("{} B to self", v[0] as u64), format!("self_{}_ns", size_label(v[0] as u64)), v[1]))
        .collect()
}

/// The `ring <s>` line as the row of `n` ranks and `loops` loops.
fn ring_row(n: u32, loops: u32) -> impl Fn(&[String]) -> Vec<(String, String, f64)> {
    move |lines| {
        let v = values(lines, "ring").first().and_then(|v| v.first().copied());
        v.map(|s| (format!("{n} ranks x {loops}"), format!("ring_{n}x{loops}_s"), s)).into_iter().collect()
    }
}

fn main() {
    if std::env::var_os(p2pmp_mpi::RANK_VAR).is_some() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if let Err(e) = ranks::run(&args) {
            eprintln!("cabi rank: {e}");
            std::process::exit(1);
        }
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    // Every p2pmp run on the last CPU (the same placement for C and Rust), unless --no-pin.
    let pin = std::thread::available_parallelism().map_or(0, |c| c.get() - 1);
    let pin = (!std::env::args().any(|a| a == "--no-pin")).then_some(pin);
    run::pin_to(pin);
    let t0 = Instant::now();
    let me = std::env::current_exe().expect("own path");
    let bytes_exe = match run::build_p2pmp() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cabi bench: {e}");
            std::process::exit(1);
        }
    };
    let out_dir = run::target_dir().join("../bench-results");
    let progs = out_dir.join("cabi-programs");
    let systems: Vec<System> = SYSTEMS[2..].iter().map(|s| System::new(s, &progs)).collect();
    let (reps, limit) = if quick { (5, Duration::from_secs(30)) } else { (7, Duration::from_secs(120)) };
    let pp_arg: &[&str] = if quick { &["quick"] } else { &[] };
    let loops: u32 = if quick { 3000 } else { 10_000 };
    let ring_ranks = [2u32, 4, 8];
    let mut res = Results::default();

    // The Rust API and the C API, run by run in turn so load changes hit both alike.
    for rep in 0..reps {
        eprintln!("p2pmp round {}/{reps}", rep + 1);
        let self_iters = if quick { "20000" } else { "100000" };
        let mut rust = launch(1, &me);
        rust.args(["selfloop", self_iters]);
        res.record("self", "p2pmp_rust", run_limited(rust, limit), self_rows);
        res.record("self", "p2pmp_c", systems[0].run(1, "selfloop", &[self_iters], limit), self_rows);
        for (name, exe) in [("p2pmp_rust", &me), ("p2pmp_rust_bytes", &bytes_exe)] {
            let mut rust = launch(2, exe);
            rust.arg("pingpong").args(pp_arg);
            res.record("lat", name, run_limited(rust, limit), pp_rows);
        }
        res.record("lat", "p2pmp_c", systems[0].run(2, "pingpong", pp_arg, limit), pp_rows);
        for n in ring_ranks {
            for (name, exe) in [("p2pmp_rust", &me), ("p2pmp_rust_bytes", &bytes_exe)] {
                let mut rust = launch(n, exe);
                rust.args(["ring", &loops.to_string()]);
                res.record("ring", name, run_limited(rust, limit), ring_row(n, loops));
            }
            res.record("ring", "p2pmp_c", systems[0].run(n, "ring", &[&loops.to_string()], limit), ring_row(n, loops));
        }
    }
    // The references, once each.
    let refs = if std::env::args().any(|a| a == "--no-refs") { &systems[..0] } else { &systems[1..] };
    for sys in refs {
        eprintln!("{}", sys.name);
        res.record("lat", sys.name, sys.run(2, "pingpong", pp_arg, limit * 2), pp_rows);
        let mut gave_up = None;
        for n in ring_ranks {
            if let Some(why) = &gave_up {
                let f = res.fig("ring", &format!("{n} ranks x {loops}"), &format!("ring_{n}x{loops}_s"), sys.name);
                f.error = Some(format!("skipped: {why}"));
                continue;
            }
            let r = sys.run(n, "ring", &[&loops.to_string()], limit);
            if let Err(e) = &r {
                if timed_out(e) {
                    gave_up = Some(format!("timed out on {n} ranks"));
                }
                let f = res.fig("ring", &format!("{n} ranks x {loops}"), &format!("ring_{n}x{loops}_s"), sys.name);
                f.error = Some(e.clone());
                continue;
            }
            res.record("ring", sys.name, r, ring_row(n, loops));
        }
    }

    // The table.
    let mut report = String::new();
    let _ = match pin {
        Some(cpu) => writeln!(report, "\np2pmp runs (C and Rust) pinned to CPU {cpu}; references placed by the kernel"),
        None => writeln!(report, "\nevery run placed by the kernel (--no-pin)"),
    };
    for (section, title) in [
        ("self", "send + receive to self on one rank: the API layer alone (thread CPU ns per pair)"),
        ("lat", "ping-pong, half round trip (µs)"),
        ("ring", "ring, 10-byte token (s, median of 3 rounds)"),
    ] {
        let _ = writeln!(report, "\n{title}");
        let _ = write!(report, "{:<18}", "");
        for s in SYSTEMS {
            let _ = write!(report, "{s:>17}");
        }
        let _ = writeln!(
            report,
            "{:>10}{:>12}{:>10}{:>12}{:>12}",
            "C/Rust", "best C/Rust", "C/Bytes", "CPU s Rust", "CPU s C"
        );
        for (_, label, key) in res.rows.iter().filter(|(s, _, _)| *s == section) {
            let _ = write!(report, "{label:<18}");
            for s in SYSTEMS {
                let cell = res.figs.get(&(key.clone(), s.to_string())).map_or("-".into(), Figure::cell);
                let _ = write!(report, "{:>17}", if cell.len() > 16 { cell[..16].to_string() } else { cell });
            }
            let ratio = |base: &str| {
                res.get(key, "p2pmp_c").zip(res.get(key, base)).map_or("-".into(), |(c, r)| format!("{:.3}", c / r))
            };
            let cpu = |s: &str| {
                res.figs
                    .get(&(key.clone(), s.to_string()))
                    .and_then(|f| median(f.cpu_s.clone()))
                    .map_or("-".into(), |c| format!("{c:.2}"))
            };
            let _ = writeln!(
                report,
                "{:>10}{:>12}{:>10}{:>12}{:>12}",
                ratio("p2pmp_rust"),
                res.best_ratio(key).map_or("-".into(), |r| format!("{r:.3}")),
                ratio("p2pmp_rust_bytes"),
                cpu("p2pmp_rust"),
                cpu("p2pmp_c")
            );
        }
    }
    let mut notes: Vec<String> = Vec::new();
    for ((key, sys), f) in &res.figs {
        if let (None, Some(e)) = (f.value(), &f.error) {
            notes.push(format!("{sys} {key}: {e}"));
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(report, "\nmissing figures:\n  {}", notes.join("\n  "));
    }

    // Ratios C / Rust and the verdict (on the ping-pong and ring rows).
    let ratios: Vec<(String, f64)> = res
        .rows
        .iter()
        .filter_map(|(_, _, k)| Some((k.clone(), res.get(k, "p2pmp_c")? / res.get(k, "p2pmp_rust")?)))
        .collect();
    let judged = |k: &str| !k.starts_with("self_");
    let best: Vec<(String, f64)> = res
        .rows
        .iter()
        .filter(|(_, _, k)| judged(k))
        .filter_map(|(_, _, k)| Some((k.clone(), res.best_ratio(k)?)))
        .collect();
    let worst = ratios.iter().filter(|(k, _)| judged(k)).map(|(_, r)| *r).reduce(f64::max);
    let worst_best = best.iter().map(|(_, r)| *r).reduce(f64::max);
    let small: Vec<f64> = ratios
        .iter()
        .filter(|(k, _)| ["lat_1b_us", "lat_8b_us", "lat_1kib_us"].contains(&k.as_str()))
        .map(|(_, r)| *r)
        .collect();
    let fmt = |v: Option<f64>| v.map_or("n/a".into(), |w| format!("{w:.3}"));
    let _ = writeln!(
        report,
        "\nC through libp2pmpi / Rust API on the ping-pong and ring: worst row {} (medians; target <= 1.05), \
         {} of the best runs; {} rows; {:.0} s",
        fmt(worst),
        fmt(worst_best),
        best.len(),
        t0.elapsed().as_secs_f64()
    );
    for size in ["8b", "1kib"] {
        let key = format!("self_{size}_ns");
        if let Some((c, r)) = res.get(&key, "p2pmp_c").zip(res.get(&key, "p2pmp_rust")) {
            let _ = writeln!(
                report,
                "the C layer's own cost, {size} to self: {:+.0} ns per send + receive ({c:.0} vs {r:.0} ns)",
                c - r
            );
        }
    }
    println!("{report}");

    let mut flat: Vec<String> = Vec::new();
    for (_, _, key) in &res.rows {
        for s in SYSTEMS {
            let v = res.get(key, s).map_or("null".into(), |v| format!("{v}"));
            flat.push(format!("\"{s}_{key}\": {v}"));
        }
    }
    let short = |k: &str| k.trim_end_matches("_us").trim_end_matches("_ns").trim_end_matches("_s").to_string();
    for (key, r) in &ratios {
        flat.push(format!("\"c_over_rust_{}\": {r:.4}", short(key)));
    }
    for (_, _, key) in &res.rows {
        if let Some(r) = res.get(key, "p2pmp_c").zip(res.get(key, "p2pmp_rust_bytes")).map(|(c, b)| c / b) {
            flat.push(format!("\"c_over_rust_bytes_{}\": {r:.4}", short(key)));
        }
    }
    let num = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.4}"));
    for (key, r) in &best {
        flat.push(format!("\"best_c_over_rust_{}\": {r:.4}", short(key)));
    }
    flat.push(format!("\"c_over_rust_worst\": {}", num(worst)));
    flat.push(format!("\"c_over_rust_worst_of_best_runs\": {}", num(worst_best)));
    flat.push(format!("\"c_over_rust_small_lat_median\": {}", num(median(small))));
    flat.push(format!("\"c_over_rust_target_met\": {}", worst.is_some_and(|w| w <= 1.05)));
    let line = format!("{{{}}}", flat.join(", "));
    let _ = std::fs::create_dir_all(&out_dir);
    let reasons: Vec<String> = notes.iter().map(|n| format!("\"{}\"", n.replace('"', "'"))).collect();
    let doc = format!(
        "{{\"quick\": {quick}, \"reps\": {reps}, \"figures\": {line}, \"missing\": [{}]}}\n",
        reasons.join(", ")
    );
    let path = out_dir.join(if quick { "cabi-quick.json" } else { "cabi.json" });
    match std::fs::write(&path, doc) {
        Ok(()) => println!("wrote {}", path.display()),
        Err(e) => println!("cannot write {}: {e}", path.display()),
    }
    println!("{line}");
}
