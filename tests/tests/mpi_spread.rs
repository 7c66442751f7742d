//! Ranks that outnumber the cores spread over them evenly, each on the core
//! of its place round them (see `mpi/src/progress/spread.rs`), even when they
//! all start on one core. A file of its own: ranks stop spreading once they
//! see other work on the machine, such as the other tests' ranks.

use std::time::Duration;

#[test]
fn ranks_that_outnumber_the_cores_run_each_on_the_core_of_its_place() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !(2..=8).contains(&cores) {
        eprintln!("skipped: {cores} cores; this test spreads 2 x cores + 2 ranks over 2 to 8");
        return;
    }
    // Two more ranks than twice the cores: the kernel alone (`P2PMP_SPREAD=0`)
    // balances them too, given time, but puts ranks that are a multiple of the
    // cores apart on one core by chance only (on 2 cores, 2 splits in 20).
    let n = 2 * cores + 2;
    let dir = p2pmp_tests::cargo_build(&["p2pmp-mpi/fault-injection"]);
    let prog = dir.join("examples").join("mpi_spread");
    let r = p2pmp_tests::launch_ranks(&dir, n as u32, &prog, &["1", "crowd"], Duration::from_secs(60), &[]);
    assert!(r.ok, "mpi_spread:\n{}\n{}", r.stdout, r.stderr);
    let line = r.stdout.lines().find_map(|l| l.strip_prefix("[0] spread ")).expect("rank 0's line");
    if let Some(why) = line.strip_prefix("skipped: ") {
        eprintln!("skipped: {why}");
        return;
    }
    // The cores the ranks spread over (those they may run on: a container's
    // may be fewer than the machine's), each rank's core, and moves home in
    // all (any number: the kernel may have moved some home before they looked).
    let (over, on) = line.strip_prefix("over ").and_then(|l| l.split_once(": ")).expect("spread over");
    let over: usize = over.parse().expect("a count of cores");
    let on = on.split_once(" moved ").expect("cores and moves").0;
    let on: Vec<u64> = on.split_whitespace().map(|c| c.parse().expect("a core")).collect();
    assert_eq!(on.len(), n, "{line}");
    let first: std::collections::BTreeSet<u64> = on[..over.min(n)].iter().copied().collect();
    assert_eq!(first.len(), over.min(n), "the first {over} ranks on as many cores: {line}");
    assert!((0..n).all(|r| on[r] == on[r % over]), "rank r on rank (r mod {over})'s core: {line}");
}
