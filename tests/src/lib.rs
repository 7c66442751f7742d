//! p2pmp-tests: cross-crate integration tests.
//!
//! This library is the harness of the process tests in `tests/`: [`NodeProc`]
//! runs the node program (`p2pmp-node`, the node program of p2pmp-adapters) as a
//! child process on loopback, talks to it through its line protocol, and kills it
//! when dropped. [`wait_until`] polls a condition against a deadline.
//! [`cargo_build`] builds the programs and examples a process test runs;
//! [`run_to_end`] runs one to its end with a deadline; [`c::build`] compiles
//! the C test programs. [`cluster`] builds a
//! cluster of hosts out of network namespaces, a `jobd` on each. [`bench`](mod@bench) is
//! what the MPI benches share (running, figures, the reference MPIs).
//! [`sniff`] captures packets for the tests of what crosses the wire.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use p2pmp_core::id::Id;

pub mod bench;
pub mod c;
pub mod cluster;
pub mod sniff;

/// `target/<profile>` of the running test binary.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// Builds every library, program and example of the workspace (`cargo build -q
/// --workspace --lib --bins --examples`, plus `--features FEATURES` when some are
/// named) in the test binary's own profile, so the programs a process test starts
/// are current, and returns `target/<profile>`.
///
/// Every process test asks for the same set: a build of one package alone would
/// unify the dependencies' features differently from `cargo test --workspace`
/// and compile a second copy of them (four such sets took the target directory
/// of a CI run from 7 to 13 GB, and one run out of disk).
///
/// # Panics
/// If the build fails: the test cannot run without its programs.
pub fn cargo_build(features: &[&str]) -> PathBuf {
    let dir = target_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q", "--workspace", "--lib", "--bins", "--examples"]);
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("running cargo build");
    assert!(st.success(), "cargo build --features {} failed", features.join(","));
    dir
}

/// Runs `prog args` on `n` ranks with `p2pmp-launch` from `dir` (a
/// [`cargo_build`]), `env` added, waiting at most `limit` (the launcher's own
/// limit; a backstop kills it 10 s later).
pub fn launch_ranks(dir: &Path, n: u32, prog: &Path, args: &[&str], limit: Duration, env: &[(&str, &str)]) -> Finished {
    let secs = limit.as_secs_f64().to_string();
    let mut cmd = Command::new(dir.join("p2pmp-launch"));
    cmd.args(["-n", &n.to_string(), "--timeout", &secs, "--"]).arg(prog).args(args).envs(env.iter().copied());
    run_to_end(cmd, limit + Duration::from_secs(10))
}

/// How a program run by [`run_to_end`] ended.
#[derive(Debug)]
pub struct Finished {
    pub ok: bool,
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Kills a child (and, for launchers, with it their ranks) if a test gives up.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `cmd` to its end, capturing stdout and stderr; panics (killing it) if it
/// is still running after `limit`.
pub fn run_to_end(mut cmd: Command, limit: Duration) -> Finished {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("starting a test program");
    let mut g = KillOnDrop(child);
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(g.0.stdout.take().expect("piped")));
    let err = read(Box::new(g.0.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = g.0.try_wait().expect("waiting for a test program") {
            break st;
        }
        assert!(Instant::now() < deadline, "{cmd:?} did not finish in {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    Finished {
        ok: status.success(),
        code: status.code(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Longest wait for one answer line.
pub const ANSWER: Duration = Duration::from_secs(30);

/// One node program running as a child process.
#[derive(Debug)]
pub struct NodeProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Where the node listens (its overlay address).
    pub addr: SocketAddr,
    /// The runtime it was started with.
    pub runtime: String,
}

/// Fields of a `state` line, `key=value` each.
pub type StateLine = BTreeMap<String, String>;

impl NodeProc {
    /// Starts `bin` on `runtime`, listening on a free port of 127.0.0.1, joining
    /// through `bootstrap` (none: a new network), with `extra` flags.
    pub fn spawn(bin: &Path, runtime: &str, bootstrap: &[SocketAddr], extra: &[&str]) -> NodeProc {
        let mut cmd = Command::new(bin);
        cmd.args(["--runtime", runtime, "--listen", "127.0.0.1:0", "--log", "warn"]);
        if !bootstrap.is_empty() {
            cmd.arg("--bootstrap");
            cmd.args(bootstrap.iter().map(ToString::to_string));
        }
        cmd.args(extra);
        let stderr = if std::env::var_os("P2PMP_TEST_LOG").is_some() { Stdio::inherit() } else { Stdio::null() };
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut node = NodeProc { child, stdin, lines, addr: "0.0.0.0:0".parse().unwrap(), runtime: runtime.into() };
        let first = node.next_line(Duration::from_secs(20)).expect("the node prints its address");
        let addr = first.strip_prefix("listening ").unwrap_or_else(|| panic!("unexpected first line {first:?}"));
        node.addr = addr.parse().unwrap();
        node
    }

    /// The node's overlay id.
    pub fn id(&self) -> Id {
        Id::hash(self.addr.to_string())
    }

    /// The next stdout line that is not an unsolicited event.
    fn next_line(&mut self, wait: Duration) -> Option<String> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with("event ") => continue,
                Ok(l) => return Some(l),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Sends one command line and returns its answer line.
    pub fn cmd(&mut self, line: &str) -> String {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).unwrap_or_else(|e| panic!("{}: {e}", self.addr));
        self.next_line(ANSWER).unwrap_or_else(|| panic!("{} ({}): no answer to {line:?}", self.addr, self.runtime))
    }

    /// The parsed `state` line.
    pub fn state(&mut self) -> StateLine {
        parse_fields(&self.cmd("state"))
    }

    /// `lookup <key>`: the owner's address, or the error line.
    pub fn lookup(&mut self, key: &str) -> Result<SocketAddr, String> {
        let line = self.cmd(&format!("lookup {key}"));
        let f = parse_fields(&line);
        f.get("owner").and_then(|o| o.parse().ok()).ok_or(line)
    }

    /// `query <name>`: the values, or the error line.
    pub fn query(&mut self, name: &str) -> Result<Vec<String>, String> {
        let line = self.cmd(&format!("query {name}"));
        match parse_fields(&line).get("values") {
            Some(v) if v.is_empty() => Ok(Vec::new()),
            Some(v) => Ok(v.split(',').map(String::from).collect()),
            None => Err(line),
        }
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Splits `word key=value key=value ...` into its fields (an `error=` field runs
/// to the end of the line).
pub fn parse_fields(line: &str) -> StateLine {
    let mut out = BTreeMap::new();
    let (head, error) = match line.find(" error=") {
        Some(i) => (&line[..i], Some(&line[i + 7..])),
        None => (line, None),
    };
    for w in head.split_whitespace() {
        if let Some((k, v)) = w.split_once('=') {
            out.insert(k.to_string(), v.to_string());
        }
    }
    if let Some(e) = error {
        out.insert("error".into(), e.to_string());
    }
    out
}

/// Polls `f` every 50 ms until it returns `Ok`, panicking with `what` and the
/// last state after `timeout`.
pub fn wait_until<T>(what: &str, timeout: Duration, f: impl FnMut() -> Result<T, String>) -> T {
    wait_until_or(what, timeout, f, || None)
}

/// [`wait_until`], its panic also saying what `more` finds then, if
/// anything (asked only on a timeout: the outcome of a job, say).
pub fn wait_until_or<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Result<T, String>,
    more: impl FnOnce() -> Option<String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                let more = more().map(|m| format!("; {m}")).unwrap_or_default();
                panic!("timed out after {timeout:?} waiting for {what}: {last}{more}");
            }
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`wait_until`] for a condition with no state to report.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    wait_until(what, timeout, || if f() { Ok(()) } else { Err("not yet".into()) })
}

/// How many processes of this host (by their `/proc/PID` directory) `f`
/// holds for.
pub fn count_processes(mut f: impl FnMut(&std::path::Path) -> bool) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| f(&e.path()))
        .count()
}

/// The owner of `key` among nodes with these addresses: the first id at or after
/// the key on the ring.
pub fn owner_of(key: Id, addrs: &[SocketAddr]) -> SocketAddr {
    let mut ring: Vec<(Id, SocketAddr)> = addrs.iter().map(|a| (Id::hash(a.to_string()), *a)).collect();
    ring.sort();
    ring.iter().find(|(id, _)| *id >= key).unwrap_or(&ring[0]).1
}

/// The successor and predecessor every node should have, by address.
pub fn expected_neighbours(addrs: &[SocketAddr]) -> BTreeMap<SocketAddr, (SocketAddr, SocketAddr)> {
    let mut ring: Vec<(Id, SocketAddr)> = addrs.iter().map(|a| (Id::hash(a.to_string()), *a)).collect();
    ring.sort();
    let n = ring.len();
    (0..n).map(|i| (ring[i].1, (ring[(i + 1) % n].1, ring[(i + n - 1) % n].1))).collect()
}

/// Waits until every node's successor and predecessor are the true ones.
pub fn wait_for_ring(nodes: &mut [NodeProc], timeout: Duration) {
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    let want = expected_neighbours(&addrs);
    wait_until("one ring", timeout, || {
        let mut wrong = Vec::new();
        for n in nodes.iter_mut() {
            let s = n.state();
            let (succ, pred) = want[&n.addr];
            let first_succ = s.get("succ").and_then(|l| l.split(',').next()).unwrap_or("-").to_string();
            if first_succ != succ.to_string() || s.get("pred").map(String::as_str) != Some(&pred.to_string()) {
                wrong.push(format!(
                    "{} succ={first_succ} (want {succ}) pred={:?} (want {pred})",
                    n.addr,
                    s.get("pred")
                ));
            }
        }
        if wrong.is_empty() { Ok(()) } else { Err(format!("{} wrong: {}", wrong.len(), wrong.join("; "))) }
    })
}

/// Looks up `keys` from every node and checks each answer against the owner
/// computed from the ids. Retries (the ring may still be settling) until `timeout`.
pub fn check_lookups(nodes: &mut [NodeProc], keys: &[String], timeout: Duration) {
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    for k in keys {
        let want = owner_of(Id::hash(k), &addrs);
        for n in nodes.iter_mut() {
            wait_until(&format!("lookup {k} from {}", n.addr), timeout, || match n.lookup(k) {
                Ok(o) if o == want => Ok(()),
                Ok(o) => Err(format!("owner {o}, want {want}")),
                Err(line) => Err(line),
            });
        }
    }
}

/// The flags that make a test network settle fast.
pub const FAST: &[&str] = &["--stabilize-ms", "100", "--request-timeout-ms", "300", "--lookup-timeout-ms", "3000"];

/// Starts `n` nodes, the first creating the network, each later one joining
/// through a node started before it; runtimes are taken from `runtimes` in turn.
pub fn start_network(bin: &Path, runtimes: &[&str], n: usize) -> Vec<NodeProc> {
    let mut nodes: Vec<NodeProc> = Vec::with_capacity(n);
    for i in 0..n {
        let boot: Vec<SocketAddr> = match i {
            0 => Vec::new(),
            _ => vec![nodes[0].addr, nodes[(i - 1) / 2].addr],
        };
        nodes.push(NodeProc::spawn(bin, runtimes[i % runtimes.len()], &boot, FAST));
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_returns_the_value_and_a_timeout_says_the_last_state_and_more() {
        let mut polls = 0;
        let got = wait_until("three polls", Duration::from_secs(5), || {
            polls += 1;
            if polls == 3 { Ok(polls) } else { Err(format!("poll {polls}")) }
        });
        assert_eq!(got, 3);
        let failed = std::panic::catch_unwind(|| {
            wait_until_or("never", Duration::ZERO, || Err::<(), _>("still no".into()), || Some("the job: lost".into()))
        });
        let why = failed.expect_err("a timeout panics");
        let why = why.downcast_ref::<String>().expect("a formatted message");
        assert!(why.contains("waiting for never: still no; the job: lost"), "{why}");
    }
}
