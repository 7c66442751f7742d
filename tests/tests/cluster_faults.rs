//! Fault injection on a cluster of hosts (network namespaces, a jobd on each;
//! see `p2pmp_tests::cluster`): crashes of random hosts, a host paused longer
//! than the failure timeout, a partition into two halves and its healing, and 5%
//! loss on every link. An MPI ring runs across the hosts while each fault hits.
//!
//! After each fault, once it is healed: the overlay converges (every lookup from
//! every live node finds the true owner, every live node's registrations are
//! listed by every node); the job either completed with the right output or
//! failed with a clear message (never hung, never succeeded with wrong output);
//! and no rank process or job directory is left on any host. A table of the
//! runs is printed at the end.
//!
//! 8 hosts by default; `P2PMP_CLUSTER_HOSTS=16` for more, `P2PMP_FAULT_SEED=n`
//! for other random choices. Skipped with a message where namespaces cannot be
//! made (CI sets `P2PMP_REQUIRE_NETNS=1`, so there it must run).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use p2pmp_tests::cluster::{Cluster, cluster_or_skip};

const FAILURE_TIMEOUT_MS: u64 = 2000;
/// Ring loops: several seconds across hosts, so each fault lands mid-run.
const LOOPS: u32 = 15_000;
/// Under 5% loss every lost segment of the ring's ping-pong costs a TCP
/// retransmission timeout (200 ms at least on Linux): fewer loops.
const LOSSY_LOOPS: u32 = 60;
/// When a fault hits a run: every rank is running by then.
const MID_RUN: Duration = Duration::from_millis(1500);
const KEYS: &[&str] = &["alpha", "bravo", "charlie", "delta"];

fn built() -> PathBuf {
    p2pmp_tests::cargo_build(&[])
}

/// A tiny seeded generator (xorshift) for the random choices of a run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Completed,
    FailedClearly,
    Wrong,
    Hung,
}

struct Row {
    fault: String,
    verdict: Verdict,
    detail: String,
    heal: Duration,
}

/// Runs the ring from host 0 while `fault` hits `after` the start; judges the outcome.
fn run_job_under(
    c: &mut Cluster,
    ring: &str,
    (ranks, loops): (usize, u32),
    after: Duration,
    fault: impl FnOnce(&mut Cluster),
) -> (Verdict, String) {
    let (n, l) = (ranks.to_string(), loops.to_string());
    let args = ["run", "-n", n.as_str(), ring, l.as_str()];
    let mut cmd = c.hosts[0].command(p2pjob_next_to(ring));
    cmd.args(args).current_dir(&c.dir);
    let started = Instant::now();
    let job = std::thread::scope(|s| {
        let h = s.spawn(move || run_limited(cmd, Duration::from_secs(120)));
        std::thread::sleep(after);
        fault(c);
        h.join().expect("the job thread")
    });
    let Some(out) = job else { return (Verdict::Hung, format!("no end after {:?}", started.elapsed())) };
    let want = format!("[0] ring ok {loops}");
    let ended = out.stderr.lines().rev().find(|l| l.starts_with("job ")).unwrap_or("").to_owned();
    match out.code {
        Some(0) if out.stdout.contains(&want) => (Verdict::Completed, ended),
        Some(0) => (Verdict::Wrong, format!("exit 0 without {want:?}: {}", out.stdout)),
        Some(1) if ended.contains(" failed: ") => (Verdict::FailedClearly, ended),
        other => (Verdict::Wrong, format!("exit {other:?}, no clear reason: {}", out.stderr)),
    }
}

/// `p2pjob`, in the directory above the ring's `examples`.
fn p2pjob_next_to(ring: &str) -> PathBuf {
    PathBuf::from(ring).parent().and_then(|p| p.parent()).expect("target/<profile>/examples").join("p2pjob")
}

/// Runs `cmd` to its end, or kills it after `limit` (None: it hung).
fn run_limited(mut cmd: std::process::Command, limit: Duration) -> Option<p2pmp_tests::Finished> {
    use std::process::Stdio;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("starting p2pjob");
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let read = |r: &mut dyn std::io::Read| {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    };
    let (to, te) = (std::thread::spawn(move || read(&mut so)), std::thread::spawn(move || read(&mut se)));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for p2pjob") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (to.join().unwrap_or_default(), te.join().unwrap_or_default());
    status.map(|st| p2pmp_tests::Finished { ok: st.success(), code: st.code(), stdout, stderr })
}

/// Once a fault is over: the job's processes and directories are gone everywhere.
fn assert_clean(c: &Cluster, live: &[usize]) {
    for &i in live {
        p2pmp_tests::wait_until(&format!("host {i} clean"), Duration::from_secs(20), || {
            let (strays, left) = (c.strays(i), c.leftovers(i));
            let job_dirs: Vec<_> = left.iter().filter(|p| p.to_string_lossy().contains("/job-")).collect();
            if strays.is_empty() && job_dirs.is_empty() {
                Ok(())
            } else {
                let inside: Vec<String> = job_dirs
                    .iter()
                    .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .take(20)
                    .collect();
                Err(format!("processes {strays:?}, job directories {job_dirs:?}, holding {inside:?}"))
            }
        });
    }
}

/// `n` random hosts (never the submitting host 0) among those running ranks of
/// the job, as `p2pjob status` on host 0 shows them; other hosts if too few.
fn pick(c: &Cluster, rng: &mut Rng, n: usize) -> Vec<usize> {
    let out = c.p2pjob(0, &["--json", "status"], Duration::from_secs(20));
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap_or_default();
    let mut running: Vec<usize> = v["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|j| j["ranks"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["node"].as_str().map(str::to_owned))
        .filter_map(|a| c.hosts.iter().position(|h| h.overlay().to_string() == a))
        .filter(|i| *i != 0)
        .collect();
    running.sort_unstable();
    running.dedup();
    let mut chosen = Vec::new();
    while chosen.len() < n {
        let pool: Vec<usize> = if running.len() >= n { running.clone() } else { (1..c.hosts.len()).collect() };
        let v = pool[rng.below(pool.len())];
        if !chosen.contains(&v) {
            chosen.push(v);
        }
    }
    chosen
}

const DAEMON: &[&str] = &[
    "--stabilize-ms",
    "200",
    "--heartbeat-ms",
    "250",
    "--failure-timeout-ms",
    "2000",
    "--slots",
    "2",
    "--log-level",
    "info",
];

fn restart(c: &mut Cluster, i: usize) {
    let boot: Vec<usize> = if i == 0 { vec![1] } else { vec![0] };
    c.start_jobd(i, &boot, DAEMON);
}

#[test]
fn the_network_heals_and_jobs_never_hang_or_lie_under_faults() {
    let hosts: usize = std::env::var("P2PMP_CLUSTER_HOSTS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let seed: u64 = std::env::var("P2PMP_FAULT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(20_261_126);
    let dir = built();
    let Some(mut c) = cluster_or_skip("cluster_faults", hosts) else { return };
    let ring = dir.join("examples/mpi_ring").to_string_lossy().into_owned();
    c.start_all(DAEMON);
    let all: Vec<usize> = (0..hosts).collect();
    c.wait_converged(&all, KEYS, Duration::from_secs(60));
    let mut rng = Rng(seed | 1);
    let mut rows: Vec<Row> = Vec::new();
    // One rank per host (the placement spreads them): every fault hits the job.
    let ranks = hosts;

    // 1. Crashes: two random hosts (never the submitting host 0) killed -9 mid-run.
    let mut victims = Vec::new();
    let (verdict, detail) = run_job_under(&mut c, &ring, (ranks, LOOPS), MID_RUN, |c| {
        victims = pick(c, &mut rng, 2);
        victims.iter().for_each(|v| c.crash(*v));
    });
    let live: Vec<usize> = all.iter().copied().filter(|i| !victims.contains(i)).collect();
    let t = Instant::now();
    c.wait_converged(&live, KEYS, Duration::from_secs(60));
    let heal = t.elapsed();
    assert_clean(&c, &live);
    rows.push(Row { fault: format!("crash of hosts {victims:?} (kill -9)"), verdict, detail, heal });
    for v in &victims {
        restart(&mut c, *v);
    }
    c.wait_converged(&all, KEYS, Duration::from_secs(60));

    // 2. A host paused (SIGSTOP) for twice the failure timeout, then resumed.
    let mut paused = 0;
    let (verdict, detail) = run_job_under(&mut c, &ring, (ranks, LOOPS), MID_RUN, |c| {
        paused = pick(c, &mut rng, 1)[0];
        c.pause(paused);
        std::thread::sleep(Duration::from_millis(2 * FAILURE_TIMEOUT_MS));
        c.resume(paused);
    });
    let t = Instant::now();
    c.wait_converged(&all, KEYS, Duration::from_secs(60));
    let heal = t.elapsed();
    assert_clean(&c, &all);
    rows.push(Row { fault: format!("host {paused} paused 4 s (SIGSTOP)"), verdict, detail, heal });

    // 3. A partition into two halves, long enough for each half to give the
    // other up in the overlay (P2PMP_PARTITION_S, default 20 s), then healed.
    let split = Duration::from_secs(std::env::var("P2PMP_PARTITION_S").ok().and_then(|v| v.parse().ok()).unwrap_or(20));
    let (a, b): (Vec<usize>, Vec<usize>) = all.iter().partition(|i| **i < hosts / 2);
    let (pa, pb) = (a.clone(), b.clone());
    let (verdict, detail) = run_job_under(&mut c, &ring, (ranks, LOOPS), MID_RUN, |c| {
        c.partition(&pa, &pb);
        let t = Instant::now();
        // Each half heals around the other: one overlay of its own.
        let halves = [&pa, &pb].map(|h| c.wait_converged(h, KEYS, split + Duration::from_secs(30)));
        eprintln!("the halves converged apart after {halves:?}");
        std::thread::sleep(split.saturating_sub(t.elapsed()));
        c.heal();
    });
    let t = Instant::now();
    c.wait_converged(&all, KEYS, Duration::from_secs(90));
    let heal = t.elapsed();
    assert_clean(&c, &all);
    rows.push(Row { fault: format!("partition {a:?} | {b:?} for {} s", split.as_secs()), verdict, detail, heal });

    // 4. 5% loss on every link while the job runs.
    // From the start: the job is slow under loss, and must still end right.
    let (verdict, detail) = run_job_under(&mut c, &ring, (ranks, LOSSY_LOOPS), Duration::ZERO, |c| c.loss(5));
    let t = Instant::now();
    c.heal();
    c.wait_converged(&all, KEYS, Duration::from_secs(60));
    let heal = t.elapsed();
    assert_clean(&c, &all);
    rows.push(Row { fault: "5% loss on every link".into(), verdict, detail, heal });

    let count = |v: Verdict| rows.iter().filter(|r| r.verdict == v).count();
    eprintln!("\n{hosts} hosts, seed {seed}, a ring of {ranks} ranks ({LOOPS} loops, {LOSSY_LOOPS} under loss)");
    eprintln!("| fault | outcome | time to heal | detail |\n|---|---|---|---|");
    for r in &rows {
        eprintln!("| {} | {:?} | {:.1} s | {} |", r.fault, r.verdict, r.heal.as_secs_f64(), r.detail);
    }
    eprintln!(
        "faults {}, jobs {}, completed {}, failed clearly {}, wrong results {}, hung {}",
        rows.len(),
        rows.len(),
        count(Verdict::Completed),
        count(Verdict::FailedClearly),
        count(Verdict::Wrong),
        count(Verdict::Hung)
    );
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Wrong | Verdict::Hung))
        .map(|r| format!("{}: {:?} {}", r.fault, r.verdict, r.detail))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}
