//! Job throughput through a busy network: 4 daemons of 4 slots each (embedded,
//! in this process) run batches of jobs of `/bin/true`, every job submitted at
//! once (a quarter through each daemon), so most of them wait in the queue:
//! 100 jobs of 1 rank, 100 jobs of 4 ranks (the issue's scenario: 400 ranks on
//! 16 slots), 25 jobs of 16 ranks (each takes every slot) and 1,000 jobs of 1
//! rank. Beside each, the
//! same batch on HyperQueue's LocalCluster (a server and 4 workers of 4 cores,
//! jobs of N tasks), installed into a virtual environment under target/ when
//! PyPI is reachable; skipped with the reason otherwise. Medians of 3 runs. A
//! table for people, then one JSON line for scripts.
//!
//! Run: `cargo bench -p p2pmp-jobd --bench queue`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use p2pmp_core::job::JobDescription;
use p2pmp_core::node::control::{JobPhase, ToolReply, ToolRequest};
use p2pmp_jobd::Client;
use p2pmp_jobd::embedded::EmbeddedNet;

const RUNS: usize = 3;
const BATCHES: [(usize, u32); 4] = [(100, 1), (100, 4), (25, 16), (1000, 1)];
const HQ_VERSION: &str = "0.27.0";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds until every job of the batch is done (all submitted at once).
fn p2pmp_batch(net: &EmbeddedNet, jobs: usize, ranks: u32, round: usize) -> Result<f64, String> {
    let controls = net.controls();
    let t0 = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = controls
            .iter()
            .enumerate()
            .map(|(d, &control)| {
                let share = jobs / controls.len() + usize::from(d < jobs % controls.len());
                s.spawn(move || -> Result<(), String> {
                    let mut c = Client::connect(control).map_err(|e| e.to_string())?;
                    let xml = JobDescription::run("/bin/true", vec![], ranks).to_xml();
                    let base = std::env::temp_dir().to_string_lossy().into_owned();
                    let mut ids = Vec::new();
                    for k in 0..share {
                        let nonce = (round as u64) << 40 | (d as u64) << 32 | k as u64;
                        let req = ToolRequest::Submit { nonce, xml: xml.clone(), base_dir: base.clone(), watch: true };
                        ids.push(c.send(req).map_err(|e| e.to_string())?);
                    }
                    let mut left = ids.len();
                    while left > 0 {
                        let (rid, reply, _) = c.next(Some(Duration::from_secs(120))).map_err(|e| format!("{e:#}"))?;
                        match reply {
                            ToolReply::Finished { phase: JobPhase::Done, .. } if ids.contains(&rid) => left -= 1,
                            ToolReply::Finished { error, .. } => return Err(error.unwrap_or_default()),
                            ToolReply::Error { message } => return Err(message),
                            _ => {}
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a client panicked".into()))).collect()
    });
    results.into_iter().collect::<Result<(), String>>()?;
    Ok(t0.elapsed().as_secs_f64())
}

const HQ_SCRIPT: &str = r#"
import pathlib, sys, tempfile, time
from hyperqueue import Job, LocalCluster
from hyperqueue.cluster import WorkerConfig
jobs, tasks, workers, cores, runs = map(int, sys.argv[1:6])
with tempfile.TemporaryDirectory() as d:
    cluster = LocalCluster(server_dir=d)
    try:
        for _ in range(workers):
            cluster.start_worker(WorkerConfig(cores=cores))
        client = cluster.client()
        time.sleep(1.0)
        for _ in range(runs):
            t0 = time.monotonic()
            submitted = []
            for _ in range(jobs):
                job = Job(pathlib.Path(d))
                for _ in range(tasks):
                    job.program(["/bin/true"], stdout=None, stderr=None)
                submitted.append(client.submit(job))
            client.wait_for_jobs(submitted)
            print(f"hq-run {time.monotonic() - t0:.6f}", flush=True)
    finally:
        cluster.stop()
"#;

/// A Python with HyperQueue's API, in a virtual environment made under `dir`.
fn hyperqueue(dir: &Path) -> Result<PathBuf, String> {
    let venv = dir.join("hq-venv");
    let py = venv.join("bin/python");
    let ok = |c: &mut Command| c.output().map(|o| o.status.success()).unwrap_or(false);
    if !ok(Command::new(&py).args(["-c", "import hyperqueue"])) {
        if !ok(Command::new("python3").args(["-m", "venv"]).arg(&venv)) {
            return Err("python3 -m venv failed".into());
        }
        let pip = venv.join("bin/pip");
        if !ok(Command::new(pip).args(["install", "-q", &format!("hyperqueue=={HQ_VERSION}")])) {
            return Err(format!("pip install hyperqueue=={HQ_VERSION} failed (no PyPI?)"));
        }
    }
    Ok(py)
}

/// HyperQueue's seconds per batch (median of `RUNS`), or why not.
fn hq_batch(py: &Path, dir: &Path, jobs: usize, tasks: u32) -> Result<f64, String> {
    let script = dir.join("hq_batch.py");
    std::fs::write(&script, HQ_SCRIPT).map_err(|e| e.to_string())?;
    let out = Command::new(py)
        .arg(&script)
        .args([jobs.to_string(), tasks.to_string(), "4".into(), "4".into(), RUNS.to_string()])
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let runs: Vec<f64> =
        text.lines().filter_map(|l| l.strip_prefix("hq-run ")).filter_map(|v| v.trim().parse().ok()).collect();
    if runs.len() == RUNS {
        Ok(median(runs))
    } else {
        Err(format!("hyperqueue failed: {}", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")))
    }
}

fn main() {
    let exe = std::env::current_exe().expect("bench path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps").join("queue-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let net = EmbeddedNet::start(4, 4).expect("4 daemons");
    assert!(net.wait_formed(Duration::from_secs(30), |_| {}), "the overlay did not form");
    let hq = hyperqueue(&dir);
    eprintln!(
        "4 daemons x 4 slots; load {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<22} {:>12} {:>10} {:>14} {:>10} {:>9}",
        "batch", "p2pmp s", "jobs/s", "hyperqueue s", "jobs/s", "ratio"
    );
    let mut json = Vec::new();
    for (round, (jobs, ranks)) in BATCHES.into_iter().enumerate() {
        let runs: Result<Vec<f64>, String> =
            (0..RUNS).map(|r| p2pmp_batch(&net, jobs, ranks, round * RUNS + r)).collect();
        let ours = runs.map(median);
        let theirs = hq.clone().and_then(|py| hq_batch(&py, &dir, jobs, ranks));
        let f = |r: &Result<f64, String>| r.as_ref().map_or_else(|e| format!("- ({e})"), |v| format!("{v:.3}"));
        let rate = |r: &Result<f64, String>| r.as_ref().map_or("-".into(), |v| format!("{:.1}", jobs as f64 / v));
        let ratio = match (&ours, &theirs) {
            (Ok(a), Ok(b)) => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        println!(
            "{:<22} {:>12} {:>10} {:>14} {:>10} {:>9}",
            format!("{jobs} x {ranks} rank(s)"),
            f(&ours),
            rate(&ours),
            f(&theirs),
            rate(&theirs),
            ratio
        );
        let j = |r: &Result<f64, String>| r.as_ref().map_or("null".into(), |v| format!("{v:.4}"));
        json.push(format!("\"p2pmp_queue_{jobs}x{ranks}_s\": {}", j(&ours)));
        json.push(format!("\"hyperqueue_queue_{jobs}x{ranks}_s\": {}", j(&theirs)));
    }
    println!("(ratio = p2pmp / HyperQueue; target for 100 x 4: at most 2)");
    println!("{{{}}}", json.join(", "));
}
