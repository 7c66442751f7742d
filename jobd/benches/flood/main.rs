//! A real `jobd` (its own process) flooded for 60 s from 100 loopback
//! connections, each from its own source address, mixing junk bytes, oversized
//! length prefixes, valid frames at full speed from peers that never read,
//! half-open connections and thousands of connections opened and dropped,
//! while a normal job is submitted and must complete. Prints its RSS (before,
//! peak, after), what the flooders saw (connections taken and refused), the
//! daemon's own count, and the job's time against the same job alone; writes
//! the data as JSON to `target/flood-<unix time>.json`. See `harness.rs`.
//!
//! Run: `cargo bench -p p2pmp-jobd --bench flood -- [--secs 60] [--conns 100]`.

mod harness;

use std::time::Duration;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    // `cargo bench` passes --bench; nothing else to skip.
    let opts = harness::Opts { flood: Duration::from_secs(arg("--secs", 60)), conns: arg("--conns", 100) as usize };
    eprintln!("flooding a jobd for {:?} from {} connections...", opts.flood, opts.conns);
    let report = harness::run(opts);
    println!("{}", report.table());
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let path = harness::target_dir().join(format!("flood-{stamp}.json"));
    match std::fs::write(&path, report.json().to_string()) {
        Ok(()) => println!("data: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
    if report.job_flooded.is_err() || !report.alive_after {
        std::process::exit(1);
    }
}
