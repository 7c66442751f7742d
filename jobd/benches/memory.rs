//! Daemon memory over many jobs: an embedded network of 2 daemons (in this
//! process) runs N small jobs (`/bin/echo`, 1 rank, 4 at a time), and the
//! process's resident set size is sampled as they go, then once the retention
//! time has passed after the last job. A daemon keeps a finished job (status,
//! exit codes, output logs) for its retention time and then forgets it, so with
//! a retention shorter than the run memory must level off, not grow with the
//! number of jobs. A table for people, then one JSON line for scripts.
//!
//! Run: `cargo bench -p p2pmp-jobd --bench memory -- [--jobs 10000] [--retention-s 10]`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use p2pmp_core::job::JobDescription;
use p2pmp_core::node::control::{JobPhase, ToolReply, ToolRequest};
use p2pmp_jobd::Client;
use p2pmp_jobd::embedded::EmbeddedNet;

const CLIENTS: usize = 4;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Resident set size of this process, MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    kb / 1024.0
}

/// Runs one job to its end; false if it did not end done.
fn run_one(c: &mut Client, nonce: u64, dir: &str) -> bool {
    let xml = JobDescription::run("/bin/echo", vec!["hello".into()], 1).to_xml();
    let Ok(id) = c.send(ToolRequest::Submit { nonce, xml, base_dir: dir.into(), watch: true }) else { return false };
    loop {
        match c.next(Some(Duration::from_secs(60))) {
            Ok((rid, ToolReply::Finished { phase, error, .. }, _)) if rid == id => {
                if phase != JobPhase::Done && std::env::var_os("MEMORY_BENCH_WHY").is_some() {
                    eprintln!("job failed: {error:?}");
                }
                return phase == JobPhase::Done;
            }
            Ok((rid, ToolReply::Error { message }, _)) if rid == id => {
                if std::env::var_os("MEMORY_BENCH_WHY").is_some() {
                    eprintln!("job refused: {message}");
                }
                return false;
            }
            Ok(_) => {}
            Err(e) => {
                if std::env::var_os("MEMORY_BENCH_WHY").is_some() {
                    eprintln!("connection: {e:#}");
                }
                return false;
            }
        }
    }
}

fn main() {
    let jobs = arg("--jobs", 10_000) as usize;
    let retention = arg("--retention-s", 10);
    let every = (jobs / 10).max(1);
    let net = EmbeddedNet::start_with(2, CLIENTS as u32, |c| c.retention_s = retention).expect("starting 2 daemons");
    assert!(net.wait_formed(Duration::from_secs(30), |_| {}), "the network did not form");
    let dir = std::env::temp_dir().to_string_lossy().into_owned();
    let done = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let t0 = Instant::now();
    let base_rss = rss_mib();
    let mut samples: Vec<(usize, f64, f64)> = vec![(0, 0.0, base_rss)];
    eprintln!("{jobs} jobs of /bin/echo through 2 daemons, {CLIENTS} at a time, retention {retention} s");
    std::thread::scope(|s| {
        for k in 0..CLIENTS {
            let (done, failed, dir, net) = (&done, &failed, &dir, &net);
            s.spawn(move || {
                let mut c = Client::connect(net.control()).expect("connecting");
                loop {
                    let i = done.fetch_add(1, Ordering::Relaxed);
                    if i >= jobs {
                        return;
                    }
                    if !run_one(&mut c, (k as u64) << 48 | i as u64, dir) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let mut next = every;
        while next <= jobs {
            if done.load(Ordering::Relaxed) >= next + CLIENTS {
                samples.push((next, t0.elapsed().as_secs_f64(), rss_mib()));
                eprintln!("  {next:>6} jobs  {:>7.1} s  RSS {:>7.1} MiB", t0.elapsed().as_secs_f64(), rss_mib());
                next += every;
            }
            if done.load(Ordering::Relaxed) >= jobs + CLIENTS {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let elapsed = t0.elapsed().as_secs_f64();
    // Past the retention every job is forgotten (not waited for when longer than a minute).
    let after = if retention <= 60 {
        std::thread::sleep(Duration::from_secs(retention + 3));
        rss_mib()
    } else {
        f64::NAN
    };
    let failed = failed.load(Ordering::Relaxed);
    println!("| jobs run | elapsed s | RSS MiB |\n|---|---|---|");
    for (n, t, r) in &samples {
        println!("| {n} | {t:.1} | {r:.1} |");
    }
    println!("| (retention {retention} s later) | {:.1} | {after:.1} |", elapsed + retention as f64 + 3.0);
    let half = samples.get(samples.len() / 2).map_or(f64::NAN, |s| s.2);
    let last = samples.last().map_or(f64::NAN, |s| s.2);
    println!(
        "jobs/s {:.1}, failed {failed}; RSS at half the jobs {half:.1} MiB, at the end {last:.1} MiB ({:+.1}), \
         after the retention {after:.1} MiB",
        jobs as f64 / elapsed,
        last - half
    );
    println!(
        "{}",
        serde_json::json!({"jobs": jobs, "retention_s": retention, "failed": failed, "jobs_per_s": jobs as f64 / elapsed,
            "p2pmp_rss_start_mib": base_rss, "p2pmp_rss_half_mib": half, "p2pmp_rss_end_mib": last,
            "p2pmp_rss_after_retention_mib": after,
            "samples": samples.iter().map(|(n, t, r)| serde_json::json!({"jobs": n, "s": t, "rss_mib": r})).collect::<Vec<_>>()})
    );
}
