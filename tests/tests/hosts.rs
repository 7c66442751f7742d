//! p2pmp on many hosts: a cluster of network namespaces (see
//! `p2pmp_tests::cluster`), one `jobd` per host on its own address, jobs that
//! span hosts, controlled from any node. Skipped, with a message, where
//! namespaces cannot be made (not root, no iproute2 or nftables); CI sets
//! `P2PMP_REQUIRE_NETNS=1` so there they must run.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use p2pmp_tests::cluster::{Cluster, cluster_or_skip};

/// `target/<profile>`, with the programs this file runs freshly built.
fn built() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        p2pmp_tests::cargo_build(&["-p", "p2pmp-jobd", "--bins", "-p", "p2pmp-mpi", "--example", "mpi_ring"])
    })
}

fn ring() -> String {
    built().join("examples/mpi_ring").to_string_lossy().into_owned()
}

/// The flags every test daemon gets: quick maintenance, one process slot.
const FAST: &[&str] = &["--stabilize-ms", "200", "--log-level", "info", "--slots", "1"];

/// A cluster of `n` hosts with a jobd on each, once the overlay lists them all.
fn cluster(test: &str, n: usize, extra: &[&str]) -> Option<Cluster> {
    built();
    let mut c = cluster_or_skip(test, n)?;
    let flags: Vec<&str> = FAST.iter().chain(extra).copied().collect();
    c.start_all(&flags);
    wait_for_nodes(&c, 0, n);
    Some(c)
}

/// Waits until `p2pjob nodes` on host `from` lists `n` nodes.
fn wait_for_nodes(c: &Cluster, from: usize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = c.p2pjob(from, &["nodes"], Duration::from_secs(20));
        let listed = out.stdout.lines().filter(|l| l.starts_with("198.18.")).count();
        if listed == n {
            return;
        }
        assert!(Instant::now() < deadline, "the overlay lists {listed} of {n} nodes: {} {}", out.stdout, out.stderr);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Distinct nodes named in "placed rank(s) [..] on ADDR" lines.
fn placed_nodes(stderr: &str) -> Vec<String> {
    let mut v: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("placed rank(s) "))
        .filter_map(|l| l.split(" on ").nth(1))
        .map(str::to_owned)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn an_mpi_ring_spans_three_hosts() {
    let Some(c) = cluster("ring_spans_hosts", 3, &[]) else { return };
    let out = c.p2pjob(1, &["run", "-n", "3", &ring(), "500"], Duration::from_secs(60));
    assert!(out.ok, "stdout {} stderr {}\njobd0: {}", out.stdout, out.stderr, c.log(0));
    assert!(out.stdout.contains("[0] ring ok 500"), "{}", out.stdout);
    let nodes = placed_nodes(&out.stderr);
    assert_eq!(nodes.len(), 3, "one rank per host: {}", out.stderr);
    assert!(nodes.iter().all(|n| n.starts_with("198.18.0.")), "{nodes:?}");
}
