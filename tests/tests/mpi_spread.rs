//! Ranks that outnumber the cores spread over them evenly, each on the core
//! of its place round them (see `mpi/src/progress/spread.rs`), even when they
//! all start on one core. A file of its own: ranks stop spreading once they
//! see other work on the machine, such as the other tests' ranks.

use std::time::Duration;

/// Whether the calling thread (and so the ranks it starts) may run on every
/// online core: only such ranks spread (a pinned rank stays where it is).
/// As the library judges it: the thread's cores (of those online) at least
/// as many as the cores online. Worked out here, not asked of the library:
/// a library that wrongly thought itself pinned would otherwise skip this
/// test rather than fail it.
fn on_every_core() -> bool {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    // A kernel CPU list: `0-3,8,10-11`.
    let online = list.trim().split(',').try_fold(0usize, |n, part| {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        Some(n + hi.parse::<usize>().ok()?.checked_sub(lo.parse().ok()?)? + 1)
    });
    // SAFETY: an all-zero cpu_set_t is an empty set; sched_getaffinity(2)
    // writes at most its size into it; CPU_COUNT only reads it.
    let allowed = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let ok = libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) == 0;
        ok.then(|| libc::CPU_COUNT(&set) as usize)
    };
    matches!((allowed, online), (Some(a), Some(o)) if a >= o)
}

/// What rank 0 of `mpi_spread` says.
struct Spread {
    /// The fewest cores a rank spread over.
    over: usize,
    /// Each rank's core.
    on: Vec<u64>,
    /// Ranks that stopped spreading.
    stopped: u64,
}

impl Spread {
    /// `<over>: <core of rank 0> .. moved <moves> stopped <ranks>`.
    fn parse(line: &str) -> Option<Spread> {
        let (over, rest) = line.split_once(": ")?;
        let (on, rest) = rest.split_once(" moved ")?;
        let (_moved, stopped) = rest.split_once(" stopped ")?;
        let on = on.split_whitespace().map(|c| c.parse().ok()).collect::<Option<_>>()?;
        Some(Spread { over: over.parse().ok()?, on, stopped: stopped.parse().ok()? })
    }
}

#[test]
fn ranks_that_outnumber_the_cores_run_each_on_the_core_of_its_place() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !(2..=8).contains(&cores) {
        eprintln!("skipped: {cores} cores; this test spreads 2 x cores + 2 ranks over 2 to 8");
        return;
    }
    if !on_every_core() {
        eprintln!("skipped: this test may not run on every online core, so neither may its ranks");
        return;
    }
    // Two more ranks than twice the cores: the kernel alone (`P2PMP_SPREAD=0`)
    // balances them too, given time, but puts ranks that are a multiple of the
    // cores apart on one core by chance only (on 2 cores, 2 splits in 20).
    let n = 2 * cores + 2;
    let dir = p2pmp_tests::cargo_build(&["p2pmp-mpi/fault-injection"]);
    let prog = dir.join("examples").join("mpi_spread");
    let spread_on = [("P2PMP_SPREAD", "1")];
    // Ranks that saw other work stop spreading; brief work of the machine's
    // own stops them now and then (see `spread.rs`): up to 3 runs. (Moves
    // home may be any number: the kernel may move some home before they look.)
    let mut tries = 0;
    let (line, Spread { over, on, .. }) = loop {
        tries += 1;
        let r = p2pmp_tests::launch_ranks(&dir, n as u32, &prog, &["1", "crowd"], Duration::from_secs(60), &spread_on);
        assert!(r.ok, "mpi_spread:\n{}\n{}", r.stdout, r.stderr);
        let line = r.stdout.lines().find_map(|l| l.strip_prefix("[0] spread over ")).expect("rank 0's line");
        let spread = Spread::parse(line).unwrap_or_else(|| panic!("a spread line: {line}"));
        if spread.stopped == 0 {
            break (line.to_string(), spread);
        }
        if tries == 3 {
            eprintln!("skipped: other work ran on the machine (ranks stopped spreading in 3 runs): {line}");
            return;
        }
    };
    // Every online core is the ranks' (checked above), and they outnumber them.
    assert!(over >= 2, "every rank spread, over 2 cores or more: {line}");
    assert_eq!(on.len(), n, "{line}");
    let first: std::collections::BTreeSet<u64> = on[..over.min(n)].iter().copied().collect();
    assert_eq!(first.len(), over.min(n), "the first {over} ranks on as many cores: {line}");
    assert!((0..n).all(|r| on[r] == on[r % over]), "rank r on rank (r mod {over})'s core: {line}");
}
