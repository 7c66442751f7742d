//! Overlay benchmark: a Chord or CAN network in the deterministic simulator.
//!
//! `cargo bench -p p2pmp-core --bench overlay -- --overlay chord|can [--dims D] --nodes N --lookups L --seed S`
//! builds the network (every node runs the real protocol), waits until every
//! node's routing state is right (judged by a checker with global knowledge),
//! then runs L lookups between random nodes. It prints a table and, as its last
//! line, one JSON object. `--sweep` runs several N; `--compare` sweeps Chord and
//! CAN in 1 to 4 dimensions; `--churn` runs the ramp-up / steady / ramp-down
//! experiment; `--burst K` measures recovery after K joins at once; `--plot
//! FILE.png` draws the result.

mod args;
mod burst;
mod churn;
mod net;
mod overlays;
mod phases;
mod plot;

use std::io::Write;
use std::time::Instant;

use args::{Args, USAGE};
use net::{BuildReport, LookupReport};
use overlays::BenchOverlay;
use p2pmp_core::can::CanNode;
use p2pmp_core::chord::ChordNode;

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("error: cannot create {}: {e}", args.out);
        std::process::exit(1);
    }
    let result = if args.compare {
        compare(&args)
    } else if args.overlay == "can" {
        dispatch::<CanNode>(&args)
    } else {
        dispatch::<ChordNode>(&args)
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn dispatch<O: BenchOverlay>(args: &Args) -> Result<(), String> {
    if args.churn {
        churn::run::<O>(args)
    } else if let Some(k) = args.burst {
        burst::run::<O>(args, k)
    } else if args.sweep {
        let rows = sweep::<O>(args, args.dims)?;
        print_table(&rows);
        print_small_table(&rows);
        let all: Vec<String> = rows.iter().map(Row::json).collect();
        let name = format!("overlay-{}-sweep-seed{}.json", file_label::<O>(args.dims), args.seed);
        write_json(args, &name, &format!("[{}]\n", all.join(",\n")))?;
        if let Some(p) = &args.plot {
            plot::hops_vs_n(
                p,
                &format!("{} mean lookup hops vs N (simulated)", label::<O>(args.dims)),
                &[series::<O>(args.dims, &rows)],
            )?;
            eprintln!("plot written to {p}");
        }
        println!("{}", summary::<O>(args.dims, &rows));
        Ok(())
    } else {
        single::<O>(args)
    }
}

/// How an overlay and shape reads in tables: `Chord`, `CAN d=2`.
pub(crate) fn label<O: BenchOverlay>(dims: usize) -> String {
    if O::NAME == "can" { format!("CAN d={dims}") } else { "Chord".into() }
}

/// How it reads in file names: `chord`, `can-d2`.
pub(crate) fn file_label<O: BenchOverlay>(dims: usize) -> String {
    if O::NAME == "can" { format!("can-d{dims}") } else { "chord".into() }
}

/// The `dims` JSON value: CAN's dimensions, null for Chord.
pub(crate) fn dims_json<O: BenchOverlay>(dims: usize) -> String {
    if O::NAME == "can" { dims.to_string() } else { "null".into() }
}

/// One row of the result table.
struct Row {
    overlay: &'static str,
    label: String,
    dims_json: String,
    theory: f64,
    build: BuildReport,
    lookups: LookupReport,
}

impl Row {
    fn json(&self) -> String {
        let b = &self.build;
        let l = &self.lookups;
        format!(
            concat!(
                "{{\"overlay\":\"{}\",\"dims\":{},\"nodes\":{},\"lookups\":{},\"seed\":{},",
                "\"mean_hops\":{:.4},\"p50_hops\":{},\"p99_hops\":{},\"max_hops\":{},",
                "\"half_log2_n\":{:.4},\"ratio_to_half_log2_n\":{},\"theory_hops\":{:.4},\"ratio_to_theory\":{},",
                "\"success_rate\":{:.6},\"failed\":{},\"wrong_owner\":{},\"maintenance_msgs_per_node_s\":{:.4},",
                "\"routing_entries_per_node\":{:.3},\"converge_virtual_s\":{:.1},\"build_wall_s\":{:.2},",
                "\"lookup_wall_s\":{:.2},\"sim_events\":{},\"peak_rss_mib\":{}}}"
            ),
            self.overlay,
            self.dims_json,
            b.nodes,
            l.issued,
            b.seed,
            l.mean_hops,
            l.p50,
            l.p99,
            l.max,
            half_log2(b.nodes),
            ratio(l.mean_hops, half_log2(b.nodes)),
            self.theory,
            ratio(l.mean_hops, self.theory),
            l.success_rate(),
            l.failed,
            l.wrong_owner,
            b.maintenance_per_node_s,
            b.routing_entries,
            b.converge_virtual_s,
            b.wall_s,
            l.wall_s,
            b.events + l.events,
            peak_rss_mib().map_or("null".into(), |m| m.to_string()),
        )
    }
}

fn half_log2(n: usize) -> f64 {
    0.5 * (n as f64).log2()
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 { format!("{:.4}", a / b) } else { "null".into() }
}

fn measure<O: BenchOverlay>(args: &Args, dims: usize, nodes: usize) -> Result<Row, String> {
    let cfg = O::config(dims, nodes);
    let theory = O::theory(dims, nodes);
    let (mut sim, build) = net::build::<O>(&cfg, nodes, args.seed, args.join_rate, !args.quiet)?;
    let count = net::lookup_count(args.lookups, theory);
    let lookups = net::lookups(&mut sim, count, args.seed, !args.quiet);
    if !args.quiet {
        phases::print(build.phases.iter().chain(&lookups.phase));
        phases::print_kinds(&sim);
    }
    Ok(Row { overlay: O::NAME, label: label::<O>(dims), dims_json: dims_json::<O>(dims), theory, build, lookups })
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:>8} {:>7} {:>8} {:>9} {:>9} {:>6} {:>4} {:>5} {:>9} {:>7} {:>12} {:>10} {:>8}",
        "overlay",
        "nodes",
        "lookups",
        "mean hops",
        "theory",
        "ratio",
        "p50",
        "p99",
        "success",
        "routing",
        "maint msg/n/s",
        "converge s",
        "wall s"
    );
    for r in rows {
        let (b, l) = (&r.build, &r.lookups);
        println!(
            "{:>8} {:>7} {:>8} {:>9.3} {:>9.3} {:>6} {:>4} {:>5} {:>8.3}% {:>7.1} {:>12.2} {:>10.1} {:>8.1}",
            r.label,
            b.nodes,
            l.issued,
            l.mean_hops,
            r.theory,
            ratio(l.mean_hops, r.theory),
            l.p50,
            l.p99,
            100.0 * l.success_rate(),
            b.routing_entries,
            b.maintenance_per_node_s,
            b.converge_virtual_s,
            b.wall_s + l.wall_s,
        );
    }
    println!("theory: Chord 0.5·log2 N; CAN (d/4)·N^(1/d); routing: distinct nodes in a node's routing state");
}

/// The 2..16-node rows of CAN in one and two dimensions beside what the original
/// system measured at 16 nodes (4.3 hops for d = 1, 2.3 for d = 2).
fn print_small_table(rows: &[Row]) {
    let small: Vec<&Row> = rows.iter().filter(|r| r.overlay == "can" && r.build.nodes <= 16).collect();
    if small.is_empty() {
        return;
    }
    println!();
    println!("{:>8} {:>6} {:>10} {:>10} {:>22}", "overlay", "nodes", "mean hops", "theory", "original system");
    for r in small {
        let original = match (r.dims_json.as_str(), r.build.nodes) {
            ("1", 16) => "4.3",
            ("2", 16) => "2.3",
            _ => "",
        };
        println!(
            "{:>8} {:>6} {:>10.3} {:>10.3} {:>22}",
            r.label, r.build.nodes, r.lookups.mean_hops, r.theory, original
        );
    }
}

fn write_json(args: &Args, name: &str, body: &str) -> Result<(), String> {
    let path = std::path::Path::new(&args.out).join(name);
    std::fs::write(&path, body).map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!("data written to {}", path.display());
    Ok(())
}

fn single<O: BenchOverlay>(args: &Args) -> Result<(), String> {
    let row = measure::<O>(args, args.dims, args.nodes)?;
    print_table(std::slice::from_ref(&row));
    let json = row.json();
    let name = format!("overlay-{}-{}-seed{}.json", file_label::<O>(args.dims), args.nodes, args.seed);
    write_json(args, &name, &json)?;
    if let Some(p) = &args.plot {
        let title = format!("{} mean lookup hops", label::<O>(args.dims));
        plot::hops_vs_n(p, &title, &[series::<O>(args.dims, std::slice::from_ref(&row))])?;
    }
    println!("{json}");
    std::io::stdout().flush().ok();
    Ok(())
}

fn series<O: BenchOverlay>(dims: usize, rows: &[Row]) -> plot::Series {
    plot::Series {
        label: format!("{} (dashed: {})", label::<O>(dims), O::theory_label(dims)),
        points: rows.iter().map(|r| (r.build.nodes, r.lookups.mean_hops)).collect(),
        theory: O::theory,
        dims,
    }
}

fn sweep<O: BenchOverlay>(args: &Args, dims: usize) -> Result<Vec<Row>, String> {
    let mut sizes: Vec<usize> = (2..=16).collect();
    sizes.extend([100, 1_000, 10_000, 100_000, 1_000_000].into_iter().filter(|n| *n <= args.max_nodes));
    let started = Instant::now();
    let mut rows = Vec::new();
    for n in sizes {
        if !args.quiet {
            eprintln!("[{:>6.1}s] sweep {}: N = {n}", started.elapsed().as_secs_f64(), label::<O>(dims));
        }
        rows.push(measure::<O>(args, dims, n)?);
    }
    Ok(rows)
}

/// A sweep's summary: its sizes, the largest deviation from the theory at
/// N >= 1,000, the lowest success rate.
fn summary<O: BenchOverlay>(dims: usize, rows: &[Row]) -> String {
    let dev = |f: &dyn Fn(&Row) -> f64| {
        rows.iter()
            .filter(|r| r.build.nodes >= 1000)
            .map(|r| (r.lookups.mean_hops / f(r) - 1.0).abs())
            .fold(0.0, f64::max)
    };
    let worst = dev(&|r| r.theory);
    let worst_half_log2 = dev(&|r| half_log2(r.build.nodes));
    let min_success = rows.iter().map(|r| r.lookups.success_rate()).fold(1.0, f64::min);
    format!(
        "{{\"overlay\":\"{}\",\"dims\":{},\"sweep\":[{}],\"max_rel_dev_from_theory_ge_1000\":{worst:.4},\"max_rel_dev_from_half_log2_n_ge_1000\":{worst_half_log2:.4},\"min_success_rate\":{min_success:.6}}}",
        O::NAME,
        dims_json::<O>(dims),
        rows.iter().map(|r| r.build.nodes.to_string()).collect::<Vec<_>>().join(",")
    )
}

/// Chord and CAN in 1 to 4 dimensions, swept alike: one table, one plot, and a
/// last line holding every sweep's summary.
fn compare(args: &Args) -> Result<(), String> {
    let mut all = Vec::new();
    let mut summaries = Vec::new();
    let mut plotted = Vec::new();
    let rows = sweep::<ChordNode>(args, 0)?;
    summaries.push(format!("\"chord\":{}", summary::<ChordNode>(0, &rows)));
    plotted.push(series::<ChordNode>(0, &rows));
    all.extend(rows);
    for d in 1..=4 {
        let rows = sweep::<CanNode>(args, d)?;
        summaries.push(format!("\"can_d{d}\":{}", summary::<CanNode>(d, &rows)));
        plotted.push(series::<CanNode>(d, &rows));
        all.extend(rows);
    }
    print_table(&all);
    print_small_table(&all);
    let json: Vec<String> = all.iter().map(Row::json).collect();
    write_json(args, &format!("overlay-compare-seed{}.json", args.seed), &format!("[{}]\n", json.join(",\n")))?;
    if let Some(p) = &args.plot {
        plot::hops_vs_n(p, "Chord and CAN: mean lookup hops vs N (simulated)", &plotted)?;
        eprintln!("plot written to {p}");
    }
    println!("{{\"mode\":\"compare\",\"seed\":{},{}}}", args.seed, summaries.join(","));
    Ok(())
}

/// Peak resident memory of this process, from /proc (Linux only).
pub(crate) fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}
