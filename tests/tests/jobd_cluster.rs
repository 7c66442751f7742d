//! `jobd` and `p2pjob` end to end: real daemons on loopback (4 per test), jobs
//! submitted with the `p2pjob` binary. MPI jobs spread over the daemons,
//! sequential jobs with files, kill, unsatisfiable requirements, malformed job
//! files, a daemon killed with SIGKILL mid-job, two jobs at once, and `p2pjob
//! checkpoint` of a running C ring with `p2pjob status` showing each rank's file.
//!
//! The binaries and example programs are built by the first test to need them.
//! Every wait has a deadline; every process a test starts is killed when the test
//! ends, whatever happens.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `target/<profile>`, with the programs this file runs freshly built.
fn built() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| p2pmp_tests::cargo_build(&[]))
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let p = std::env::temp_dir().join(format!("p2pmp-jobd-test-{tag}-{}-{nonce:x}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Daemon {
    child: Child,
    control: String,
}

/// N daemons; killed (SIGKILL, their ranks die with them) on drop.
struct Cluster {
    daemons: Vec<Daemon>,
    dir: Scratch,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.child.kill();
            let _ = d.child.wait();
        }
    }
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Cluster {
    fn start(n: usize, tag: &str) -> Cluster {
        Cluster::start_with(n, tag, &[])
    }

    /// `n` daemons started with `extra` flags besides the usual ones.
    fn start_with(n: usize, tag: &str, extra: &[&str]) -> Cluster {
        let bin = built().join("jobd");
        let dir = Scratch::new(tag);
        let mut c = Cluster { daemons: Vec::new(), dir };
        let mut first_overlay: Option<String> = None;
        for _ in 0..n {
            let mut cmd = Command::new(&bin);
            cmd.args(["--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--print-addr", "--slots", "2"]);
            cmd.args(["--stabilize-ms", "200", "--log-level", "warn", "--tag", "test"]);
            cmd.arg("--work-dir").arg(c.dir.0.join("work"));
            cmd.args(extra);
            if let Some(b) = &first_overlay {
                cmd.args(["--bootstrap", b]);
            }
            let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawning jobd");
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            // "control ADDR overlay ADDR"
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words.len(), 4, "jobd said {line:?}");
            first_overlay.get_or_insert_with(|| words[3].to_string());
            c.daemons.push(Daemon { child, control: words[1].to_string() });
        }
        // Every node listed, and found by the search a job makes for
        // `linux` (its own registration, which may land a moment later or
        // move as later nodes join).
        c.wait_listed(&["nodes"], n, |l| l.starts_with("127.0.0.1:"));
        c.wait_listed(&["query", "res:tag:linux"], n, |l| !l.trim().is_empty());
        c
    }

    /// Waits until `p2pjob ARGS` on node 0 prints `n` distinct lines that
    /// `counts`, for at most 30 s.
    fn wait_listed(&self, args: &[&str], n: usize, counts: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.p2pjob(0, args, Duration::from_secs(20));
            let listed = out.stdout.lines().filter(|l| counts(l)).collect::<std::collections::BTreeSet<_>>().len();
            if listed == n {
                return;
            }
            assert!(Instant::now() < deadline, "p2pjob {args:?} lists {listed} of {n} nodes: {}", out.stdout);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn base(&self) -> &Path {
        &self.dir.0
    }

    /// Runs p2pjob against daemon `i`, killed after `limit`.
    fn p2pjob(&self, i: usize, args: &[&str], limit: Duration) -> Out {
        let mut child = Command::new(built().join("p2pjob"))
            .arg("--node")
            .arg(&self.daemons[i].control)
            .args(args)
            .current_dir(self.base())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning p2pjob");
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            s
        });
        let t_err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = se.read_to_string(&mut s);
            s
        });
        let deadline = Instant::now() + limit;
        let code = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("p2pjob {args:?} did not finish within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Out { code, stdout: t_out.join().unwrap(), stderr: t_err.join().unwrap() }
    }

    fn write(&self, name: &str, data: &[u8]) -> PathBuf {
        let p = self.base().join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    /// Waits until `p2pjob status JOB` shows every rank running.
    fn wait_running(&self, job: &str, ranks: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.p2pjob(0, &["status", job], Duration::from_secs(10));
            if s.stdout.contains(&format!("{ranks} rank(s): {ranks} running")) {
                return;
            }
            assert!(Instant::now() < deadline, "job never fully running: {}", s.stdout);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn ring() -> String {
    built().join("examples/mpi_ring").to_string_lossy().into_owned()
}

/// Distinct nodes named in "placed rank(s) [..] on ADDR" lines.
fn placed_nodes(stderr: &str) -> usize {
    let mut v: Vec<&str> = stderr.lines().filter_map(|l| l.trim().strip_prefix("placed rank(s) ")).collect();
    v = v.into_iter().filter_map(|l| l.split(" on ").nth(1)).collect();
    v.sort();
    v.dedup();
    v.len()
}

fn no_process_matching(pattern: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let out = Command::new("pgrep").args(["-f", pattern]).output().expect("pgrep");
        if out.stdout.is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes whose command line matches `pattern`, with their parents
/// (for a failure's message).
fn processes_matching(pattern: &str) -> String {
    let out = Command::new("pgrep").args(["-af", pattern]).output().expect("pgrep");
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let parents: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
        .map(|stat| stat.rsplit(')').next().unwrap_or("").split_whitespace().nth(1).unwrap_or("?").to_string())
        .collect();
    format!("{list}(parents: {parents:?})")
}

fn job_file(exe: &str, args: &str, procs: u32, extra: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?>\n<p2pjob>\n  <executable>{exe}</executable>\n  <arguments>{args}</arguments>\n{extra}  \
         <processes>{procs}</processes>\n  <requirement>linux</requirement>\n</p2pjob>\n"
    )
}

#[test]
fn an_mpi_job_spreads_over_four_daemons_and_a_sequential_job_returns_its_files() {
    let c = Cluster::start(4, "spread");
    let out = c.p2pjob(1, &["run", "-n", "4", &ring(), "300"], Duration::from_secs(60));
    assert_eq!(out.code, 0, "stdout {} stderr {}", out.stdout, out.stderr);
    assert!(out.stdout.contains("[0] ring ok 300"), "{}", out.stdout);
    assert_eq!(placed_nodes(&out.stderr), 4, "{}", out.stderr);
    // Every node keeps a verified copy of the program in its file cache ...
    let program = std::fs::read(ring()).unwrap();
    // (Each node's directory; beside them lie the nodes' Noise key files.)
    let nodes = std::fs::read_dir(c.base().join("work")).unwrap().flatten().filter(|e| e.path().is_dir());
    for node in nodes {
        let cached: Vec<_> = std::fs::read_dir(node.path().join("cache")).unwrap().flatten().collect();
        assert_eq!(cached.len(), 1, "{cached:?}");
        assert!(std::fs::read(cached[0].path()).unwrap() == program, "the cached copy differs");
    }
    // ... and the same program runs again from it (the nodes say they have it,
    // so only the job file travels: a broken cache would leave no program to run).
    let out = c.p2pjob(2, &["run", "-n", "4", &ring(), "200"], Duration::from_secs(60));
    assert_eq!(out.code, 0, "stdout {} stderr {}", out.stdout, out.stderr);
    assert!(out.stdout.contains("[0] ring ok 200"), "{}", out.stdout);

    // Sequential: one process, an input file staged, an output file back.
    let data: Vec<u8> = (0..700_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    c.write("input.bin", &data);
    c.write("copy.sh", b"#!/bin/sh\ncat input.bin > output.bin\necho copied $(wc -c < input.bin)\n");
    let xml = job_file("copy.sh", "", 1, "  <inputfile>input.bin</inputfile>\n  <outputfile>output.bin</outputfile>\n");
    let job = c.write("seq.xml", xml.as_bytes());
    let out = c.p2pjob(0, &["submit", "--wait", job.to_str().unwrap()], Duration::from_secs(60));
    assert_eq!(out.code, 0, "stdout {} stderr {}", out.stdout, out.stderr);
    assert!(out.stdout.contains("[0] copied 700000"), "{}", out.stdout);
    let back = std::fs::read(c.base().join("output.bin")).expect("the output file came back");
    assert!(back == data, "the output file differs from the input");
    // Job directories are cleaned once the results are home (each node's file
    // cache of verified staged files stays).
    let deadline = Instant::now() + Duration::from_secs(10);
    let work = c.base().join("work");
    loop {
        let left: Vec<_> = std::fs::read_dir(&work)
            .unwrap()
            .flatten()
            .flat_map(|node| std::fs::read_dir(node.path()).into_iter().flatten().flatten())
            .filter(|e| e.file_name().to_string_lossy().starts_with("job-"))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "job directories left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_mpi_job_runs_over_can_daemons_and_a_chord_daemon_is_refused() {
    let c = Cluster::start_with(4, "can", &["--overlay", "can", "--dims", "2"]);
    let out = c.p2pjob(1, &["run", "-n", "4", &ring(), "300"], Duration::from_secs(60));
    assert_eq!(out.code, 0, "stdout {} stderr {}", out.stdout, out.stderr);
    assert!(out.stdout.contains("[0] ring ok 300"), "{}", out.stdout);
    assert_eq!(placed_nodes(&out.stderr), 4, "{}", out.stderr);
    // A Chord daemon pointed at the CAN network is refused at the hello: the
    // network still lists its four nodes.
    let bootstrap = c.p2pjob(0, &["nodes"], Duration::from_secs(20));
    let first = bootstrap.stdout.lines().find(|l| l.starts_with("127.0.0.1:")).unwrap().split_whitespace().next();
    let mut chord = Command::new(built().join("jobd"))
        .args(["--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--print-addr", "--log-level", "warn"])
        .arg("--work-dir")
        .arg(c.base().join("chord-work"))
        .args(["--bootstrap", first.unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning jobd");
    std::thread::sleep(Duration::from_secs(2));
    let out = c.p2pjob(0, &["nodes"], Duration::from_secs(20));
    let listed = out.stdout.lines().filter(|l| l.starts_with("127.0.0.1:")).count();
    let _ = chord.kill();
    let _ = chord.wait();
    assert_eq!(listed, 4, "{}", out.stdout);
}

/// Submits a 4-rank `/bin/sleep TAG` job through daemon 0 and waits until every
/// rank runs; returns the job id.
fn start_sleep_job(c: &Cluster, tag: &str) -> String {
    let xml = job_file("/bin/sleep", tag, 4, "");
    let job = c.write("sleep.xml", xml.as_bytes());
    let out = c.p2pjob(0, &["submit", job.to_str().unwrap()], Duration::from_secs(20));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    c.wait_running(&id, 4);
    id
}

#[test]
fn kill_stops_every_rank() {
    let c = Cluster::start(4, "kill");
    let tag = format!("{}", 100_000 + std::process::id() % 800_000);
    let id = start_sleep_job(&c, &tag);
    let pattern = format!("job-.*/sleep {tag}");
    let k = c.p2pjob(0, &["kill", &id], Duration::from_secs(10));
    assert_eq!(k.code, 0, "{}", k.stderr);
    let w = c.p2pjob(0, &["wait", &id], Duration::from_secs(20));
    assert_eq!(w.code, 4, "wait on a killed job exits 4: {}", w.stderr);
    assert!(no_process_matching(&pattern, Duration::from_secs(10)), "a rank outlived the kill");
}

#[test]
fn unsatisfiable_requirements_fail_naming_the_requirement() {
    let c = Cluster::start(4, "unsat");
    let xml = job_file("/bin/true", "", 2, "  <requirement>mem_mb&gt;=999999999</requirement>\n");
    let job = c.write("big.xml", xml.as_bytes());
    let out = c.p2pjob(0, &["submit", "--wait", job.to_str().unwrap()], Duration::from_secs(30));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("mem_mb>=999999999: 0 node(s)"), "{}", out.stderr);
    assert!(out.stderr.contains("linux: 4 node(s)"), "{}", out.stderr);
}

#[test]
fn a_malformed_job_file_is_rejected_with_line_and_column() {
    let c = Cluster::start(1, "malformed");
    let job = c.write("bad.xml", b"<?xml version=\"1.0\"?>\n<p2pjob>\n  <executable>x</executable\n</p2pjob>\n");
    let out = c.p2pjob(0, &["submit", job.to_str().unwrap()], Duration::from_secs(10));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("line 3, column"), "{}", out.stderr);
    let job = c.write("nox.xml", b"<p2pjob>\n  <processes>2</processes>\n</p2pjob>\n");
    let out = c.p2pjob(0, &["submit", job.to_str().unwrap()], Duration::from_secs(10));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("line "), "{}", out.stderr);
}

#[test]
fn a_daemon_killed_mid_job_fails_the_job_with_a_clear_report() {
    let mut c = Cluster::start(4, "crash");
    let tag = format!("{}", 900_000 + std::process::id() % 90_000);
    let id = start_sleep_job(&c, &tag);
    // Every daemon holds one rank; kill one that is not the submitter.
    let victim = &mut c.daemons[2].child;
    victim.kill().unwrap();
    victim.wait().unwrap();
    let w = c.p2pjob(0, &["wait", &id], Duration::from_secs(30));
    assert_eq!(w.code, 1, "{}", w.stderr);
    assert!(w.stderr.contains("was lost"), "{}", w.stderr);
    let pattern = format!("job-.*/sleep {tag}");
    let gone = no_process_matching(&pattern, Duration::from_secs(10));
    assert!(gone, "ranks outlived the failed job: {}", processes_matching(&pattern));
}

#[test]
fn two_jobs_run_at_once_on_shared_nodes() {
    let c = Cluster::start(4, "two");
    let ring = ring();
    std::thread::scope(|s| {
        let a = s.spawn(|| c.p2pjob(0, &["run", "-n", "4", &ring, "200", "16"], Duration::from_secs(90)));
        let b = s.spawn(|| c.p2pjob(3, &["run", "-n", "4", &ring, "300", "32"], Duration::from_secs(90)));
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert_eq!(a.code, 0, "first: {} {}", a.stdout, a.stderr);
        assert_eq!(b.code, 0, "second: {} {}", b.stdout, b.stderr);
        assert!(a.stdout.contains("[0] ring ok 200"), "{}", a.stdout);
        assert!(b.stdout.contains("[0] ring ok 300"), "{}", b.stdout);
    });
}

/// Output files larger than a daemon's whole send queue (32 MiB per connection)
/// come back byte-identical: they travel under a window, as staged files do.
#[test]
fn large_output_files_come_back_byte_identical_under_the_window() {
    let c = Cluster::start(2, "bigout");
    let data: Vec<u8> = (0..40u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    c.write("input.bin", &data);
    c.write("copy.sh", b"#!/bin/sh\ncat input.bin > big.bin\n");
    let extra = "  <inputfile>input.bin</inputfile>\n  <outputfile>big.bin</outputfile>\n";
    let job = c.write("big.xml", job_file("copy.sh", "", 2, extra).as_bytes());
    let out = c.p2pjob(0, &["submit", "--wait", job.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(out.code, 0, "stdout {} stderr {}", out.stdout, out.stderr);
    assert_eq!(placed_nodes(&out.stderr), 2, "{}", out.stderr);
    for rank in 0..2 {
        let back = std::fs::read(c.base().join(format!("big.bin.{rank}"))).expect("the output file came back");
        assert!(back == data, "the output file of rank {rank} differs ({} bytes)", back.len());
    }
}

/// A rank printing many stream windows (4 MiB each) gets every line through:
/// the executor reads its pipe only as the submitter acknowledges what arrived,
/// so the credit must keep coming back for the job to finish.
#[test]
fn output_far_beyond_the_stream_window_arrives_whole() {
    let c = Cluster::start(2, "bigstdout");
    const LINES: usize = 600_000; // 600,000 x 37 bytes: 22 MB, 21 stream windows
    c.write("talk.sh", format!("#!/bin/sh\nyes 0123456789abcdefghijklmnopqrstuvwxyz | head -n {LINES}\n").as_bytes());
    let job = c.write("talk.xml", job_file("talk.sh", "", 2, "").as_bytes());
    let out = c.p2pjob(0, &["submit", "--wait", job.to_str().unwrap()], Duration::from_secs(120));
    assert_eq!(out.code, 0, "stderr {}", out.stderr);
    assert_eq!(placed_nodes(&out.stderr), 2, "{}", out.stderr);
    for rank in 0..2 {
        let line = format!("[{rank}] 0123456789abcdefghijklmnopqrstuvwxyz");
        let n = out.stdout.lines().filter(|l| *l == line).count();
        assert_eq!(n, LINES, "rank {rank}: {n} of {LINES} lines arrived");
    }
}

/// Waits until every rank of `job` has registered its process key (then it
/// holds its control connection to its node, which knows it by that key).
fn wait_registered(c: &Cluster, job: &str, ranks: u32) {
    let id = p2pmp_core::job::JobId(job.parse().expect("a job id"));
    for rank in 0..ranks {
        let key = p2pmp_core::job::process_key(id, rank).to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.p2pjob(0, &["query", &key], Duration::from_secs(10)).stdout.trim().is_empty() {
            assert!(Instant::now() < deadline, "rank {rank} of {job} never registered");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The checkpoint files of `job` on every daemon (each has its own job
/// directory, `work/node-PORT/job-ID`, where ranks write them): names
/// sorted, with their paths.
fn checkpoint_files(c: &Cluster, job: &str) -> Vec<(String, PathBuf)> {
    let nodes = std::fs::read_dir(c.base().join("work")).into_iter().flatten().flatten();
    let dirs = nodes.map(|n| n.path().join(format!("job-{job}")));
    let mut v: Vec<(String, PathBuf)> = dirs
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, _)| n.ends_with(".ckpt"))
        .collect();
    v.sort();
    v
}

fn names(files: &[(String, PathBuf)]) -> Vec<&str> {
    files.iter().map(|(n, _)| n.as_str()).collect()
}

/// Bytes stored of every rank line of `p2pjob status JOB` ("... checkpoint
/// epoch E at DATE: N bytes stored, ..."), by rank; `None` for "checkpoint none".
fn stored_per_rank(status: &str, epoch: u64) -> Vec<Option<u64>> {
    let lines = status.lines().filter(|l| l.trim_start().starts_with("rank "));
    lines
        .map(|l| {
            let (_, ckpt) = l.split_once(" checkpoint ").expect("a checkpoint column");
            ckpt.strip_prefix(&format!("epoch {epoch} at "))
                .and_then(|rest| rest.split(": ").nth(1))
                .and_then(|sizes| sizes.split(' ').next())
                .and_then(|n| n.parse().ok())
        })
        .collect()
}

#[test]
fn a_checkpoint_asked_of_a_running_ring_is_taken_once_by_every_rank_and_shown_in_its_status() {
    let Some(prog) = p2pmp_tests::c::ckpt_ring("c-tests-jobd") else { return };
    let c = Cluster::start(2, "ckpt");
    // No <checkpoint> interval: only the request takes one. Long enough to
    // ask during (rank 0 pauses 1 ms an iteration); killed at the end.
    let job = c.write("ckpt.xml", job_file(&prog, "100000", 3, "").as_bytes());
    let out = c.p2pjob(0, &["submit", job.to_str().unwrap()], Duration::from_secs(20));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    c.wait_running(&id, 3);
    let status = c.p2pjob(0, &["status", &id], Duration::from_secs(10)).stdout;
    assert_eq!(stored_per_rank(&status, 1), [None, None, None], "nothing taken yet:\n{status}");
    wait_registered(&c, &id, 3);

    // Asked of the daemon that does not hold the job: forwarded to the one that does.
    let ck = c.p2pjob(1, &["checkpoint", &id], Duration::from_secs(60));
    assert_eq!(ck.code, 0, "stdout {} stderr {}", ck.stdout, ck.stderr);
    assert!(ck.stdout.contains(&format!("checkpoint of job {id} asked of 3 rank(s): 0, 1, 2")), "{}", ck.stdout);
    assert!(
        ck.stdout.contains("checkpoint epoch 1 taken at ") && ck.stdout.contains("over 3 rank(s)"),
        "{}",
        ck.stdout
    );

    // Every rank wrote epoch 1, and only it; the files decode to the program's regions.
    let files = checkpoint_files(&c, &id);
    assert_eq!(names(&files), ["rank-0.1.ckpt", "rank-1.1.ckpt", "rank-2.1.ckpt"]);
    for (rank, (_, path)) in (0u32..).zip(&files) {
        let bytes = std::fs::read(path).unwrap();
        let (header, stored) = p2pmp_core::ckpt::decode_file(&bytes, 1 << 20).expect("a checkpoint file");
        assert_eq!((header.job.to_string(), header.rank, header.size, header.epoch), (id.clone(), rank, 3, 1));
        let raw = p2pmp_mpi::ckpt::decompress(header.codec, stored, header.raw_len).expect("its body decompresses");
        let body = p2pmp_core::ckpt::Body::decode(&raw.into()).expect("its body decodes");
        let regions: Vec<(u32, usize)> = body.regions.iter().map(|r| (r.id, r.data.len())).collect();
        assert_eq!(regions, [(0, 8), (1, 8), (7, 512)], "i, token and the checksums of rank {rank}");
    }
    // Status, asked of either daemon, shows each rank's file; no second cut
    // follows (the request reached some ranks after others had taken it).
    std::thread::sleep(Duration::from_millis(500));
    for daemon in 0..2 {
        let status = c.p2pjob(daemon, &["status", &id], Duration::from_secs(10)).stdout;
        let stored = stored_per_rank(&status, 1);
        assert!(stored.len() == 3 && stored.iter().all(|s| s.is_some_and(|n| n > 0)), "{status}");
    }
    let files = checkpoint_files(&c, &id);
    assert_eq!(names(&files), ["rank-0.1.ckpt", "rank-1.1.ckpt", "rank-2.1.ckpt"], "exactly one epoch");
    let json = c.p2pjob(0, &["--json", "status", &id], Duration::from_secs(10)).stdout;
    let v: serde_json::Value = serde_json::from_str(json.trim()).expect("status --json");
    for r in v["jobs"][0]["ranks"].as_array().expect("ranks") {
        assert_eq!(r["checkpoint"]["epoch"], 1, "{r}");
        assert!(r["checkpoint"]["stored_bytes"].as_u64().is_some_and(|n| n > 0), "{r}");
        assert!(r["node"].as_str().is_some_and(|n| n.starts_with("127.0.0.1:")), "{r}");
        assert_eq!(r["recoveries"], serde_json::json!([]), "{r}");
    }

    // Another key may not ask; an unknown job and a finished one say so.
    let other = c.base().join("other.key");
    let k = c.p2pjob(0, &["--key", other.to_str().unwrap(), "keygen"], Duration::from_secs(10));
    assert_eq!(k.code, 0, "{}", k.stderr);
    let refused = c.p2pjob(0, &["--key", other.to_str().unwrap(), "checkpoint", &id], Duration::from_secs(20));
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(refused.stderr.contains(&format!("job {id} belongs to another key")), "{}", refused.stderr);
    let nobody = "0".repeat(40);
    let unknown = c.p2pjob(1, &["checkpoint", &nobody], Duration::from_secs(20));
    assert_eq!(unknown.code, 3, "{}", unknown.stderr);
    assert!(unknown.stderr.contains(&format!("no job {nobody} in the network")), "{}", unknown.stderr);
    assert_eq!(c.p2pjob(0, &["kill", &id], Duration::from_secs(10)).code, 0);
    let waited = c.p2pjob(0, &["wait", &id], Duration::from_secs(30));
    assert_eq!(waited.code, 4, "killed: {}", waited.stderr);
    assert_eq!(waited.stderr.matches("killed").count(), 1, "said once: {}", waited.stderr);
    // A kill is the phase, not an error.
    let json = c.p2pjob(1, &["--json", "status", &id], Duration::from_secs(10)).stdout;
    let v: serde_json::Value = serde_json::from_str(json.trim()).expect("status --json");
    assert_eq!((&v["jobs"][0]["phase"], &v["jobs"][0]["error"]), (&"killed".into(), &serde_json::Value::Null), "{v}");
    let over = c.p2pjob(1, &["checkpoint", &id], Duration::from_secs(20));
    assert_eq!(over.code, 3, "{}", over.stderr);
    assert!(
        over.stderr.contains(&format!("job {id} has no running rank to checkpoint: it is over")),
        "{}",
        over.stderr
    );
}
