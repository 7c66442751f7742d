//! A cluster of hosts on one machine: Linux network namespaces on one bridge,
//! each host with its own address in 198.18.0.0/15 (the benchmarking range), its
//! own `jobd` bound to that address and its own work directory.
//!
//! # Nothing left behind
//! Every namespace is held by a `sleep` process started through `setpriv
//! --pdeathsig KILL -- unshare --net`, never by a name under `/run/netns`: the
//! kernel frees a namespace, its veth pair and its nftables rules when its last
//! process exits. Every process started in a host (the holder, `jobd`, `p2pjob`)
//! gets `PR_SET_PDEATHSIG`, so they all die with the thread that built the
//! cluster, even on SIGKILL of the test; `jobd` kills its own ranks the same way.
//! Work directories live under one scratch directory removed on drop, and a new
//! cluster sweeps the directories of test processes that no longer exist.
//!
//! Keep a [`Cluster`] on the thread that made it (a test's own thread): the death
//! signal follows the creating thread.
//!
//! # Topology
//! The bridge `br0` lives in a namespace of its own (the switch), so nothing
//! touches the machine's own network. Host `i` has `eth0` = `198.18.0.(i+1)/15`,
//! its peer `h<i>` is a port of the bridge, and `lo` is up (the control socket
//! and a host's own ranks use it). Even hosts' daemons listen on their address;
//! odd hosts' on `0.0.0.0` with `--advertise` (a host with several interfaces),
//! so every cluster test runs both.
//!
//! # Faults
//! [`Cluster::crash`] is kill -9 of every process of a host, [`Cluster::pause`]
//! and [`Cluster::resume`] SIGSTOP/SIGCONT them, [`Cluster::partition`] drops
//! traffic between two sets of hosts with nftables inside each host,
//! [`Cluster::loss`] drops a share of every packet at random (`numgen random`;
//! this kernel has no netem), and [`Cluster::heal`] removes every rule.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The first three octets of every host address.
const NET: [u8; 3] = [198, 18, 0];
/// Every jobd of the cluster listens on this port of its host's address.
pub const OVERLAY_PORT: u16 = 7400;
/// ... and serves its control socket here on the host's loopback.
pub const CONTROL_PORT: u16 = 7420;

/// One cluster at a time per test process: each runs a daemon per host, and
/// several at once would only slow each other down on a small machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Why namespaces cannot be made here, or `None` when they can.
pub fn unavailable() -> Option<String> {
    for tool in ["ip", "unshare", "nsenter", "setpriv", "nft"] {
        if which(tool).is_none() {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    let st = Command::new("unshare").args(["--net", "true"]).stderr(Stdio::null()).status();
    match st {
        Ok(s) if s.success() => None,
        _ => Some("cannot create a network namespace (unshare --net failed: not root?)".into()),
    }
}

/// Returns a cluster of `n` hosts (namespaces only: start daemons with
/// [`Cluster::start_jobd`]), or prints why it cannot be made and returns
/// `None`. With `P2PMP_REQUIRE_NETNS=1` (CI sets it) a missing capability
/// fails the test instead.
pub fn cluster_or_skip(test: &str, n: usize) -> Option<Cluster> {
    if let Some(why) = unavailable() {
        assert!(
            std::env::var_os("P2PMP_REQUIRE_NETNS").is_none(),
            "{test}: P2PMP_REQUIRE_NETNS is set but namespaces are unavailable: {why}"
        );
        eprintln!("SKIPPED {test}: {why}; the multi-host tests need root, iproute2, util-linux and nftables");
        return None;
    }
    Some(Cluster::new(n, test))
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(["/usr/sbin".into(), "/sbin".into()]).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// A network namespace, alive as long as its holder process.
#[derive(Debug)]
struct Netns {
    holder: Child,
}

impl Netns {
    fn new() -> Netns {
        let holder = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "unshare", "--net", "--", "sleep", "infinity"])
            .stdin(Stdio::null())
            .spawn()
            .expect("starting a namespace holder");
        let ns = Netns { holder };
        // unshare has switched namespaces once the holder runs `sleep`.
        let mine = std::fs::read_link("/proc/self/ns/net").ok();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(ns.path()).ok() == mine || !ns.is_sleeping() {
            assert!(Instant::now() < deadline, "the namespace holder did not enter a new namespace");
            std::thread::sleep(Duration::from_millis(2));
        }
        ns
    }

    fn is_sleeping(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/comm", self.holder.id())).is_ok_and(|c| c.trim() == "sleep")
    }

    fn path(&self) -> String {
        format!("/proc/{}/ns/net", self.holder.id())
    }

    /// A command run inside this namespace, dying with the calling thread.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.path())).args(["--", "setpriv", "--pdeathsig", "KILL", "--"]).arg(program);
        c
    }

    /// Runs `args` in the namespace; panics with its stderr if it fails.
    fn sh(&self, args: &[&str]) {
        let out = self.command(args[0]).args(&args[1..]).output().expect("running a command in a namespace");
        assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Every process in this namespace but the holder.
    fn pids(&self) -> Vec<u32> {
        let Ok(me) = std::fs::read_link(self.path()) else { return Vec::new() };
        let holder = self.holder.id();
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| p != holder)
            .filter(|p| std::fs::read_link(format!("/proc/{p}/ns/net")).is_ok_and(|l| l == me))
            .collect()
    }

    fn signal(&self, sig: &str) {
        let pids: Vec<String> = self.pids().iter().map(u32::to_string).collect();
        if !pids.is_empty() {
            let _ = Command::new("kill").arg(format!("-{sig}")).args(&pids).stderr(Stdio::null()).status();
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.signal("KILL");
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// One host of the cluster.
#[derive(Debug)]
pub struct Host {
    /// Its index in the cluster.
    pub index: usize,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
    ns: Netns,
    jobd: Option<Child>,
    /// Its jobd's work directory.
    pub work: PathBuf,
}

impl Host {
    /// Where its jobd listens for the overlay.
    pub fn overlay(&self) -> SocketAddr {
        SocketAddr::from((self.ip, OVERLAY_PORT))
    }

    /// A command run on this host (in its namespace; it dies with the test).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.ns.command(program)
    }

    /// Its network namespace, as a path `nsenter --net=PATH` takes (for
    /// launchers of other systems, such as MPICH's hydra).
    pub fn netns_path(&self) -> String {
        self.ns.path()
    }

    /// Whether its jobd is running.
    pub fn jobd_running(&mut self) -> bool {
        self.jobd.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

/// A cluster of hosts; see the module docs. Dropping it kills everything and
/// removes every file it made.
#[derive(Debug)]
pub struct Cluster {
    /// The hosts, by index.
    pub hosts: Vec<Host>,
    switch: Netns,
    /// The scratch directory (work directories, job files of the tests).
    pub dir: PathBuf,
    jobd: PathBuf,
    _one: MutexGuard<'static, ()>,
}

impl Cluster {
    /// Makes `n` hosts (1..=250) on one bridge; `tag` names the scratch directory.
    pub fn new(n: usize, tag: &str) -> Cluster {
        assert!((1..=250).contains(&n), "a cluster has 1 to 250 hosts");
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        sweep_stale_dirs();
        let dir = std::env::temp_dir().join(format!("p2pmp-cluster-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("making the cluster's scratch directory");
        let switch = Netns::new();
        switch.sh(&["ip", "link", "add", "br0", "type", "bridge"]);
        switch.sh(&["ip", "link", "set", "br0", "up"]);
        let jobd = crate::target_dir().join("jobd");
        let mut hosts = Vec::with_capacity(n);
        for index in 0..n {
            let ns = Netns::new();
            let port = format!("h{index}");
            let peer_ns = ns.holder.id().to_string();
            switch.sh(&["ip", "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &peer_ns]);
            switch.sh(&["ip", "link", "set", &port, "master", "br0"]);
            switch.sh(&["ip", "link", "set", &port, "up"]);
            let ip = Ipv4Addr::new(NET[0], NET[1], NET[2], index as u8 + 1);
            ns.sh(&["ip", "addr", "add", &format!("{ip}/15"), "dev", "eth0"]);
            ns.sh(&["ip", "link", "set", "eth0", "up"]);
            ns.sh(&["ip", "link", "set", "lo", "up"]);
            let work = dir.join(format!("host{index}"));
            hosts.push(Host { index, ip, ns, jobd: None, work });
        }
        Cluster { hosts, switch, dir, jobd, _one: one }
    }

    /// The switch's network namespace (`/proc/PID/ns/net`): host `i`'s
    /// port there, `h<i>`, carries every packet to and from it.
    pub fn switch_netns_path(&self) -> String {
        self.switch.path()
    }

    /// The public key of this user's default key (`p2pjob whoami`, which makes
    /// it if none exists): what `p2pjob` run in a host signs with.
    pub fn user_key(&self) -> String {
        let out =
            Command::new(self.jobd.with_file_name("p2pjob")).arg("whoami").output().expect("running p2pjob whoami");
        assert!(out.status.success(), "p2pjob whoami: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Starts jobd on host `i`, joining through `bootstrap` hosts, with `extra`
    /// flags; returns once its control socket answers. Without an allow flag
    /// in `extra`, the node allows this user's key ([`Cluster::user_key`]),
    /// which every host's `p2pjob` signs with.
    pub fn start_jobd(&mut self, i: usize, bootstrap: &[usize], extra: &[&str]) {
        let own_allow = !extra.iter().any(|a| a.starts_with("--allow"));
        let me = if own_allow { Some(self.user_key()) } else { None };
        let boot: Vec<String> = bootstrap.iter().map(|b| self.hosts[*b].overlay().to_string()).collect();
        let h = &mut self.hosts[i];
        let log = std::fs::File::create(self.dir.join(format!("jobd{i}.log"))).expect("creating a jobd log");
        let mut cmd = h.ns.command(&self.jobd);
        if i % 2 == 0 {
            cmd.args(["--listen", &h.overlay().to_string()]);
        } else {
            cmd.args(["--listen", &format!("0.0.0.0:{OVERLAY_PORT}"), "--advertise", &h.ip.to_string()]);
        }
        cmd.args(["--control", &format!("127.0.0.1:{CONTROL_PORT}")]);
        cmd.arg("--work-dir").arg(&h.work);
        for b in &boot {
            cmd.args(["--bootstrap", b]);
        }
        cmd.args(extra);
        if let Some(me) = &me {
            cmd.args(["--allow", me]);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        h.jobd = Some(cmd.spawn().expect("starting jobd"));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let probe =
                h.ns.command("bash").args(["-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{CONTROL_PORT}")]).output();
            if probe.is_ok_and(|o| o.status.success()) {
                break;
            }
            assert!(h.jobd_running(), "jobd on host {i} exited: {}", self.log(i));
            assert!(Instant::now() < deadline, "jobd on host {i} did not start: {}", self.log(i));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a jobd on every host, host 0 first (it creates the network), each
    /// other joining through host 0 and the host before it.
    pub fn start_all(&mut self, extra: &[&str]) {
        for i in 0..self.hosts.len() {
            let boot: Vec<usize> = if i == 0 { Vec::new() } else { vec![0, i - 1] };
            self.start_jobd(i, &boot, extra);
        }
    }

    /// The log jobd `i` wrote so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("jobd{i}.log"))).unwrap_or_default()
    }

    /// Runs `p2pjob ARGS` on host `i` against its jobd, with a deadline.
    pub fn p2pjob(&self, i: usize, args: &[&str], limit: Duration) -> crate::Finished {
        crate::run_to_end(self.p2pjob_command(i, args), limit)
    }

    /// `p2pjob ARGS` on host `i`, to run: for one that runs meanwhile.
    pub fn p2pjob_command(&self, i: usize, args: &[&str]) -> Command {
        let mut cmd = self.hosts[i].command(self.jobd.with_file_name("p2pjob"));
        cmd.args(args).current_dir(&self.dir);
        cmd
    }

    /// Runs a command on host `i` to its end.
    pub fn run(&self, i: usize, args: &[&str]) -> Output {
        self.hosts[i].command(args[0]).args(&args[1..]).output().expect("running a command on a host")
    }

    /// kill -9 of every process on host `i`.
    pub fn crash(&mut self, i: usize) {
        let h = &mut self.hosts[i];
        h.ns.signal("KILL");
        if let Some(mut c) = h.jobd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM of host `i`'s jobd (a graceful stop), waiting at most `limit`
    /// for it to exit: how long it took.
    ///
    /// # Panics
    /// If it is still running after `limit`.
    pub fn terminate(&mut self, i: usize, limit: std::time::Duration) -> std::time::Duration {
        self.terminate_together(&[i], limit)[0]
    }

    /// SIGTERM of the jobd of every host in `hosts` at once, waiting at most
    /// `limit` for them to exit: how long each took.
    ///
    /// # Panics
    /// If one is still running after `limit`.
    pub fn terminate_together(&mut self, hosts: &[usize], limit: std::time::Duration) -> Vec<std::time::Duration> {
        let t0 = std::time::Instant::now();
        let mut running: Vec<(usize, std::process::Child)> =
            hosts.iter().filter_map(|&i| Some((i, self.hosts[i].jobd.take()?))).collect();
        for (_, c) in &running {
            let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
        }
        let mut took = vec![std::time::Duration::ZERO; hosts.len()];
        while !running.is_empty() && t0.elapsed() < limit {
            running.retain_mut(|(i, c)| {
                let exited = matches!(c.try_wait(), Ok(Some(_)));
                if exited {
                    took[hosts.iter().position(|h| h == i).unwrap_or(0)] = t0.elapsed();
                }
                !exited
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let late: Vec<usize> = running.iter().map(|(i, _)| *i).collect();
        for (_, mut c) in running {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(late.is_empty(), "jobd on hosts {late:?} still ran {limit:?} after SIGTERM");
        took
    }

    /// SIGSTOP of every process on host `i`: silent, no RST, nothing answers.
    pub fn pause(&self, i: usize) {
        self.hosts[i].ns.signal("STOP");
    }

    /// SIGCONT after [`Cluster::pause`].
    pub fn resume(&self, i: usize) {
        self.hosts[i].ns.signal("CONT");
    }

    /// Drops every packet between a host of `a` and a host of `b` (both ways).
    pub fn partition(&self, a: &[usize], b: &[usize]) {
        let set = |s: &[usize]| s.iter().map(|i| self.hosts[*i].ip.to_string()).collect::<Vec<_>>().join(", ");
        for (mine, other) in [(a, b), (b, a)] {
            for &i in mine {
                let rules = format!(
                    "table inet p2pmp_part {{\n chain in {{ type filter hook input priority 0; ip saddr {{ {o} }} drop; }}\n \
                     chain out {{ type filter hook output priority 0; ip daddr {{ {o} }} drop; }}\n}}\n",
                    o = set(other)
                );
                self.nft(i, &rules);
            }
        }
    }

    /// Drops `percent` % of the packets every host sends and receives, at random.
    pub fn loss(&self, percent: u32) {
        for i in 0..self.hosts.len() {
            let rules = format!(
                "table inet p2pmp_loss {{\n chain in {{ type filter hook input priority 0; iifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n \
                 chain out {{ type filter hook output priority 0; oifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n}}\n"
            );
            self.nft(i, &rules);
        }
    }

    /// Removes every partition and loss rule.
    pub fn heal(&self) {
        for h in &self.hosts {
            let _ = h.ns.command("nft").args(["flush", "ruleset"]).output();
        }
    }

    fn nft(&self, i: usize, rules: &str) {
        let mut c = self.hosts[i].ns.command("nft");
        let mut child = c.args(["-f", "-"]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("running nft");
        child.stdin.take().expect("piped").write_all(rules.as_bytes()).expect("writing nft rules");
        let out = child.wait_with_output().expect("waiting for nft");
        assert!(out.status.success(), "nft failed on host {i}: {}\n{rules}", String::from_utf8_lossy(&out.stderr));
    }

    /// Processes on host `i` other than its jobd (ranks, tools): once every job
    /// there is over, none.
    pub fn strays(&self, i: usize) -> Vec<u32> {
        let jobd = self.hosts[i].jobd.as_ref().map(Child::id);
        self.processes(i).into_iter().filter(|p| Some(*p) != jobd).collect()
    }

    /// Every process running on host `i` (jobd, ranks, tools).
    pub fn processes(&self, i: usize) -> Vec<u32> {
        self.hosts[i].ns.pids()
    }

    /// Whether the overlay of the `live` hosts has converged: from every one,
    /// `p2pjob lookup` of each of `keys` names the true owner among them, and
    /// `p2pjob nodes` lists exactly them (so their registrations, refreshed by
    /// live owners, are all there). The first discrepancy otherwise.
    pub fn converged(&self, live: &[usize], keys: &[&str]) -> Result<(), String> {
        let addrs: Vec<SocketAddr> = live.iter().map(|i| self.hosts[*i].overlay()).collect();
        let mut want: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        want.sort();
        for &i in live {
            let out = self.p2pjob(i, &["nodes"], Duration::from_secs(30));
            let mut listed: Vec<String> = out
                .stdout
                .lines()
                .filter(|l| l.starts_with("198.18."))
                .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
                .collect();
            listed.sort();
            if listed != want {
                return Err(format!("host {i} lists {listed:?}, want {want:?} {}", out.stderr.trim()));
            }
            for k in keys {
                let owner = crate::owner_of(p2pmp_core::id::Id::hash(k), &addrs);
                let out = self.p2pjob(i, &["lookup", k], Duration::from_secs(30));
                if !out.stdout.starts_with(&format!("owner {owner} ")) {
                    return Err(format!("lookup {k} from host {i}: {}{} (want {owner})", out.stdout, out.stderr));
                }
            }
        }
        Ok(())
    }

    /// Waits until [`Cluster::converged`] holds; returns how long it took.
    ///
    /// # Panics
    /// If it does not within `limit`.
    pub fn wait_converged(&self, live: &[usize], keys: &[&str], limit: Duration) -> Duration {
        let t0 = Instant::now();
        crate::wait_until("the overlay to converge", limit, || self.converged(live, keys));
        t0.elapsed()
    }

    /// Job directories (`job-*`, where ranks run) and kept logs (`out-*`) under
    /// host `i`'s work directory: once every job is over and forgotten, none.
    pub fn leftovers(&self, i: usize) -> Vec<PathBuf> {
        let mut out = Vec::new();
        walk(&self.hosts[i].work, &mut out);
        out.retain(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("job-") || n.starts_with("out-"))
        });
        out
    }

    /// The bridge namespace (for inspection in tests).
    pub fn switch_pids(&self) -> Vec<u32> {
        self.switch.pids()
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        }
        out.push(p);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The daemons' own account of a failed test.
            for i in 0..self.hosts.len() {
                let log = self.log(i);
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!("---- jobd on host {i} ({}), last lines:", self.hosts[i].ip);
                tail.iter().rev().for_each(|l| eprintln!("{l}"));
            }
            // The whole logs outlive the cluster's directory, for a closer look.
            // Named apart from the scratch directories the next test sweeps.
            let name =
                self.dir.file_name().map(|n| n.to_string_lossy().replace("p2pmp-cluster-", "")).unwrap_or_default();
            let kept = std::env::temp_dir().join(format!("p2pmp-failed-logs-{name}"));
            if std::fs::create_dir_all(&kept).is_ok() {
                for i in 0..self.hosts.len() {
                    let name = format!("jobd{i}.log");
                    let _ = std::fs::copy(self.dir.join(&name), kept.join(&name));
                }
                eprintln!("---- every jobd's whole log: {}", kept.display());
            }
        }
        for h in &mut self.hosts {
            h.ns.signal("KILL");
            if let Some(mut c) = h.jobd.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        self.hosts.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the scratch directories of earlier test processes that are gone
/// (a test killed before its drop ran).
fn sweep_stale_dirs() {
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("p2pmp-cluster-")) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
