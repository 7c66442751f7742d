//! Overlay benchmark: a Chord network in the deterministic simulator.
//!
//! `cargo bench -p p2pmp-core --bench overlay -- --overlay chord --nodes N --lookups L --seed S`
//! builds the network (every node runs the real protocol), waits until every
//! successor, predecessor and finger is right (judged by a checker with global
//! knowledge), then runs L lookups between random nodes. It prints a table and, as
//! its last line, one JSON object. `--sweep` runs several N; `--churn` runs the
//! ramp-up / steady / ramp-down experiment; `--plot FILE.png` draws the result.

mod args;
mod churn;
mod net;
mod phases;
mod plot;

use std::io::Write;
use std::time::Instant;

use args::{Args, USAGE};
use net::{BuildReport, LookupReport};

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
    let result = if args.churn {
        churn::run(&args)
    } else if args.sweep {
        sweep(&args)
    } else {
        single(&args)
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// One row of the result table.
struct Row {
    build: BuildReport,
    lookups: LookupReport,
}

impl Row {
    fn json(&self) -> String {
        let b = &self.build;
        let l = &self.lookups;
        format!(
            concat!(
                "{{\"overlay\":\"chord\",\"nodes\":{},\"lookups\":{},\"seed\":{},",
                "\"mean_hops\":{:.4},\"p50_hops\":{},\"p99_hops\":{},\"max_hops\":{},",
                "\"half_log2_n\":{:.4},\"ratio_to_half_log2_n\":{},\"success_rate\":{:.6},",
                "\"failed\":{},\"wrong_owner\":{},\"maintenance_msgs_per_node_s\":{:.4},",
                "\"converge_virtual_s\":{:.1},\"build_wall_s\":{:.2},\"lookup_wall_s\":{:.2},",
                "\"sim_events\":{},\"peak_rss_mib\":{}}}"
            ),
            b.nodes,
            l.issued,
            b.seed,
            l.mean_hops,
            l.p50,
            l.p99,
            l.max,
            half_log2(b.nodes),
            ratio(l.mean_hops, half_log2(b.nodes)),
            l.success_rate(),
            l.failed,
            l.wrong_owner,
            b.maintenance_per_node_s,
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

fn measure(args: &Args, nodes: usize) -> Result<Row, String> {
    let (mut sim, build) = net::build(nodes, args.seed, args.join_rate, !args.quiet)?;
    let lookups = net::lookups(&mut sim, args.lookups, args.seed, !args.quiet);
    if !args.quiet {
        phases::print(build.phases.iter().chain(&lookups.phase));
        phases::print_kinds(&sim);
    }
    Ok(Row { build, lookups })
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:>7} {:>8} {:>9} {:>10} {:>6} {:>4} {:>4} {:>9} {:>12} {:>10} {:>8}",
        "nodes",
        "lookups",
        "mean hops",
        "0.5log2 N",
        "ratio",
        "p50",
        "p99",
        "success",
        "maint msg/n/s",
        "converge s",
        "wall s"
    );
    for r in rows {
        let (b, l) = (&r.build, &r.lookups);
        println!(
            "{:>7} {:>8} {:>9.3} {:>10.3} {:>6} {:>4} {:>4} {:>8.3}% {:>12.2} {:>10.1} {:>8.1}",
            b.nodes,
            l.issued,
            l.mean_hops,
            half_log2(b.nodes),
            ratio(l.mean_hops, half_log2(b.nodes)),
            l.p50,
            l.p99,
            100.0 * l.success_rate(),
            b.maintenance_per_node_s,
            b.converge_virtual_s,
            b.wall_s + l.wall_s,
        );
    }
}

fn write_json(args: &Args, name: &str, body: &str) -> Result<(), String> {
    let path = std::path::Path::new(&args.out).join(name);
    std::fs::write(&path, body).map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!("data written to {}", path.display());
    Ok(())
}

fn single(args: &Args) -> Result<(), String> {
    let row = measure(args, args.nodes)?;
    print_table(std::slice::from_ref(&row));
    let json = row.json();
    write_json(args, &format!("overlay-chord-{}-seed{}.json", args.nodes, args.seed), &json)?;
    if let Some(p) = &args.plot {
        plot::hops_vs_n(p, "Chord mean lookup hops", &[(row.build.nodes, row.lookups.mean_hops)])?;
    }
    println!("{json}");
    std::io::stdout().flush().ok();
    Ok(())
}

fn sweep(args: &Args) -> Result<(), String> {
    let mut sizes: Vec<usize> = (2..=16).collect();
    sizes.extend([100, 1_000, 10_000, 100_000, 1_000_000].into_iter().filter(|n| *n <= args.max_nodes));
    let started = Instant::now();
    let mut rows = Vec::new();
    for n in sizes {
        if !args.quiet {
            eprintln!("[{:>6.1}s] sweep: N = {n}", started.elapsed().as_secs_f64());
        }
        rows.push(measure(args, n)?);
    }
    print_table(&rows);
    let all: Vec<String> = rows.iter().map(Row::json).collect();
    write_json(args, &format!("overlay-chord-sweep-seed{}.json", args.seed), &format!("[{}]\n", all.join(",\n")))?;
    if let Some(p) = &args.plot {
        let pts: Vec<(usize, f64)> = rows.iter().map(|r| (r.build.nodes, r.lookups.mean_hops)).collect();
        plot::hops_vs_n(p, "Chord mean lookup hops vs N (simulated)", &pts)?;
        eprintln!("plot written to {p}");
    }
    let worst = rows
        .iter()
        .filter(|r| r.build.nodes >= 1000)
        .map(|r| (r.lookups.mean_hops / half_log2(r.build.nodes) - 1.0).abs())
        .fold(0.0, f64::max);
    let min_success = rows.iter().map(|r| r.lookups.success_rate()).fold(1.0, f64::min);
    println!(
        "{{\"overlay\":\"chord\",\"sweep\":[{}],\"max_rel_dev_from_half_log2_n_ge_1000\":{worst:.4},\"min_success_rate\":{min_success:.6}}}",
        rows.iter().map(|r| r.build.nodes.to_string()).collect::<Vec<_>>().join(",")
    );
    Ok(())
}

/// Peak resident memory of this process, from /proc (Linux only).
pub(crate) fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}
