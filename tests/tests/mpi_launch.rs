//! The MPI library over real processes on loopback, started by `p2pmp-launch`:
//! ring, every collective against a sequential computation, how often a
//! collective makes a rank wait, an ANY_SOURCE
//! stress, messages from 0 B to 64 MiB, the launcher's failure reporting (and
//! its ranks dying with it), and
//! faults: connections dropped every few frames, a rank moved to a new port.
//!
//! The programs are examples of `p2pmp-mpi`; the first test to run builds them
//! (a no-op when `cargo test --workspace` already did). Every run has a deadline
//! and its processes are killed if the test gives up.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use p2pmp_tests::Finished;

/// `target/<profile>`, with the programs this file runs freshly built (with
/// fault injection: the `P2PMP_FAULT_*` variables below act only then).
fn built() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| p2pmp_tests::cargo_build(&["p2pmp-mpi/fault-injection"]))
}

/// Runs `prog args` on `n` ranks, waiting at most `limit`.
fn launch(n: u32, prog: &str, args: &[&str], limit: Duration) -> Finished {
    launch_env(n, prog, args, limit, &[])
}

fn launch_env(n: u32, prog: &str, args: &[&str], limit: Duration, env: &[(&str, &str)]) -> Finished {
    let dir = built();
    let prog = if prog.starts_with('/') { PathBuf::from(prog) } else { dir.join("examples").join(prog) };
    p2pmp_tests::launch_ranks(dir, n, &prog, args, limit, env)
}

fn expect_ok(n: u32, prog: &str, args: &[&str], want: &str) {
    let r = launch(n, prog, args, Duration::from_secs(60));
    assert!(r.ok && r.stdout.contains(want), "{prog} on {n} ranks:\n{}\n{}", r.stdout, r.stderr);
}

#[test]
fn ring_on_2_3_and_8_ranks() {
    for n in [2, 3, 8] {
        expect_ok(n, "mpi_ring", &["300"], "[0] ring ok 300");
    }
}

/// Ranks that sleep at every wait (no polling): every message over shared
/// memory must ring the doorbell of a peer that announced its sleep, so a
/// lost wake-up would hang the ring (the launcher's limit fails it then).
#[test]
fn ring_of_ranks_that_always_sleep() {
    let sleep = [("P2PMP_SPIN_US", "0"), ("P2PMP_YIELDS", "0")];
    for (n, loops) in [(2, "5000"), (3, "2000")] {
        let r = launch_env(n, "mpi_ring", &[loops], Duration::from_secs(60), &sleep);
        let want = format!("[0] ring ok {loops}");
        assert!(r.ok && r.stdout.contains(&want), "mpi_ring on {n} ranks:\n{}\n{}", r.stdout, r.stderr);
    }
}

#[test]
fn collectives_match_sequential_results() {
    for n in [1, 2, 3, 4, 5, 8] {
        expect_ok(n, "mpi_collectives", &[], "[0] collectives ok");
    }
}

/// Collectives of small groups go through rank 0 in one step: on 8 ranks a
/// rank waits at most once per Allreduce or Barrier (rank 0: for the parts,
/// then perhaps for room to send the answers) and at most twice per Alltoall
/// (its receives, then its sends). Recursive doubling and dissemination made
/// every rank wait about 3 times a call, pairwise exchange about 7: on ranks
/// sharing cores each wait is a trip through the run queue.
#[test]
fn small_groups_collectives_wait_once_per_call() {
    let r = launch(8, "mpi_coll_waits", &["200"], Duration::from_secs(60));
    assert!(r.ok, "mpi_coll_waits:\n{}\n{}", r.stdout, r.stderr);
    let mut seen = 0;
    for line in r.stdout.lines().filter_map(|l| l.split_once("] waits ").map(|(_, rest)| rest)) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f[i].parse::<u64>().expect("a count");
        let (op, rank, waits, calls) = (f[0], num(1), num(2), num(3));
        let most = if op == "alltoall" || rank == 0 { 2 * calls } else { calls };
        assert!(waits <= most, "{op} on rank {rank}: {waits} waits in {calls} calls\n{}", r.stdout);
        seen += 1;
    }
    assert_eq!(seen, 3 * 8, "{}", r.stdout);
}

#[test]
fn any_source_stress() {
    expect_ok(4, "mpi_stress", &["3000"], "[0] stress ok 9000");
    expect_ok(8, "mpi_stress", &["1000"], "[0] stress ok 7000");
}

#[test]
fn messages_from_0_bytes_to_64_mib() {
    expect_ok(2, "mpi_sizes", &[], "[0] sizes ok 10");
}

#[test]
fn launcher_reports_failed_ranks() {
    let r = launch(2, "/bin/false", &[], Duration::from_secs(20));
    assert!(!r.ok, "a failed rank must fail the launch");
    assert!(r.stderr.contains("rank 0 failed") || r.stderr.contains("rank 1 failed"), "{}", r.stderr);
    // Its status is the launcher's, as mpirun's is; the others are stopped at once.
    let t = std::time::Instant::now();
    let r = launch(2, "/bin/sh", &["-c", "[ $P2PMP_RANK = 1 ] && exit 7; exec sleep 52.25"], Duration::from_secs(20));
    assert_eq!(r.code, Some(7), "{}", r.stderr);
    assert!(t.elapsed() < Duration::from_secs(5), "rank 0 was stopped only after {:?}", t.elapsed());
    let r = launch(1, "/bin/sh", &["-c", "kill -SEGV $$"], Duration::from_secs(20));
    assert_eq!(r.code, Some(128 + 11), "a rank killed by SIGSEGV: {}", r.stderr);
}

/// The ranks die with the launcher, even when it is killed (SIGKILL leaves
/// it no time to stop them).
#[test]
fn ranks_die_with_a_killed_launcher() {
    let arg = "53.25";
    // The sleeps, not the launcher whose arguments name them too.
    let is_rank = |c: Vec<u8>| matches!(c.split(|b| *b == 0).collect::<Vec<_>>()[..], [b"/bin/sleep", a, b""] if a == arg.as_bytes());
    let sleeping = || p2pmp_tests::count_processes(|p| std::fs::read(p.join("cmdline")).is_ok_and(is_rank));
    let mut launcher = std::process::Command::new(built().join("p2pmp-launch"))
        .args(["-n", "2", "--", "/bin/sleep", arg])
        .spawn()
        .expect("start p2pmp-launch");
    p2pmp_tests::wait_for("both ranks to run", Duration::from_secs(20), || sleeping() == 2);
    launcher.kill().expect("SIGKILL the launcher");
    let _ = launcher.wait();
    p2pmp_tests::wait_for("the ranks to die with it", Duration::from_secs(10), || sleeping() == 0);
}

/// Connections dropped (with unwritten frames) every few frames: the sender
/// resolves the peer again, reconnects, and the engine resends what was lost. A
/// link that carried only acknowledgements and credit is reopened too (without
/// them the peer's sends stall: the 3-rank ring used to hang after ~100 loops).
#[test]
fn reconnects_after_dropped_connections() {
    for shm in ["1", "0"] {
        for (n, every, prog, args, want) in [
            (2, "7", "mpi_ring", &["500"][..], "[0] ring ok 500"),
            (3, "50", "mpi_ring", &["2000"][..], "[0] ring ok 2000"),
            (3, "7", "mpi_stress", &["1000"][..], "[0] stress ok 2000"),
            (2, "7", "mpi_sizes", &["8000000"][..], "[0] sizes ok 10"),
        ] {
            let env = [("P2PMP_FAULT_DROP_EVERY", every), ("P2PMP_SHM", shm)];
            let r = launch_env(n, prog, args, Duration::from_secs(60), &env);
            assert!(r.stderr.contains("fault injection"), "built without fault injection:\n{}", r.stderr);
            assert!(
                r.ok && r.stdout.contains(want),
                "{prog} on {n} ranks, drop every {every}, shared memory {shm}:\n{}\n{}",
                r.stdout,
                r.stderr
            );
        }
    }
}

/// A rank moves to a new port mid-conversation (`P2PMP_FAULT_MOVE=rank:n`: after
/// its n-th frame it listens elsewhere, registers the new address and closes its
/// inbound connections, as a migrated process would). Its peers look it up again,
/// reconnect and resend; every message arrives once and in order. (A process that
/// restarts from scratch would need the engine state from a checkpoint.) Over
/// TCP, and with shared memory between the ranks.
#[test]
fn a_rank_moved_to_a_new_port_mid_conversation() {
    for shm in ["1", "0"] {
        for (n, mv, prog, args, want) in [
            (3, "1:300", "mpi_ring", &["2000"][..], "[0] ring ok 2000"),
            (3, "0:3", "mpi_stress", &["1000"][..], "[0] stress ok 2000"),
            (2, "1:5", "mpi_sizes", &["8000000"][..], "[0] sizes ok 10"),
        ] {
            let env = [("P2PMP_FAULT_MOVE", mv), ("P2PMP_SHM", shm)];
            let r = launch_env(n, prog, args, Duration::from_secs(60), &env);
            assert!(r.stderr.contains("fault injection"), "built without fault injection:\n{}", r.stderr);
            assert!(
                r.ok && r.stdout.contains(want),
                "{prog} on {n} ranks, move {mv}, shm {shm}:\n{}\n{}",
                r.stdout,
                r.stderr
            );
        }
    }
}

/// Ranks move alone at checkpoints while the others go on
/// (`P2PMP_FAULT_MOVE_CUT`: after the cut the rank saves its engine and
/// exits; the launcher starts it again from that checkpoint and engine): rank
/// 1 twice, then rank 0 and rank 2, over shared memory and over TCP. Every
/// run ends with the checksum of an undisturbed run; the moved ranks say
/// where they resumed, and no other rank resumes (none rolls back).
#[test]
fn ranks_moved_alone_at_checkpoints_end_with_the_undisturbed_result() {
    let loops = "30000";
    let dir = std::env::temp_dir().join(format!("p2pmp-move-alone-{}", std::process::id()));
    let ckpt = |name: &str| dir.join(name).to_string_lossy().into_owned();
    // A cut every 20 ms: the cuts the moves name come early on any machine.
    let every = ("P2PMP_CHECKPOINT_MS", "20");
    let plain_dir = ckpt("plain");
    let plain = launch_env(
        3,
        "mpi_ckpt_ring",
        &[loops],
        Duration::from_secs(60),
        &[every, ("P2PMP_CHECKPOINT_DIR", &plain_dir)],
    );
    let result = |out: &str| out.lines().find(|l| l.starts_with("[0] ckpt ring ok ")).map(str::to_owned);
    let want = result(&plain.stdout).unwrap_or_else(|| panic!("undisturbed run:\n{}\n{}", plain.stdout, plain.stderr));
    for shm in ["1", "0"] {
        for moves in ["1:2,1:4", "0:2,2:3"] {
            let d = ckpt(&format!("shm{shm}-{}", moves.replace([':', ','], "_")));
            let env = [every, ("P2PMP_SHM", shm), ("P2PMP_FAULT_MOVE_CUT", moves), ("P2PMP_CHECKPOINT_DIR", &d)];
            let r = launch_env(3, "mpi_ckpt_ring", &[loops], Duration::from_secs(90), &env);
            let ctx = format!("moves {moves}, shm {shm}:\n{}\n{}", r.stdout, r.stderr);
            assert!(r.stderr.contains("fault injection"), "built without fault injection: {ctx}");
            assert!(r.ok, "{ctx}");
            assert_eq!(result(&r.stdout).as_deref(), Some(want.as_str()), "{ctx}");
            let moved: Vec<u32> = moves.split(',').map(|m| m[..1].parse().unwrap()).collect();
            assert_eq!(r.stderr.matches("moved away: started again").count(), moved.len(), "{ctx}");
            for rank in 0..3u32 {
                let resumed = r.stdout.lines().filter(|l| l.starts_with(&format!("[{rank}] resumed at loop "))).count();
                let times = moved.iter().filter(|&&m| m == rank).count();
                assert_eq!(resumed, times, "rank {rank} resumed {resumed} times: {ctx}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every shared-memory link is refused (as a bad segment would be): the ranks
/// of one host fall back to TCP and the programs still finish correctly.
#[test]
fn refused_shared_memory_falls_back_to_tcp() {
    for (n, prog, args, want) in [
        (3, "mpi_ring", &["1000"][..], "[0] ring ok 1000"),
        (2, "mpi_sizes", &["8000000"][..], "[0] sizes ok 10"),
        (4, "mpi_stress", &["500"][..], "[0] stress ok 1500"),
    ] {
        let r = launch_env(n, prog, args, Duration::from_secs(60), &[("P2PMP_FAULT_SHM_REFUSE", "1")]);
        assert!(r.stderr.contains("fault injection"), "built without fault injection:\n{}", r.stderr);
        assert!(r.ok && r.stdout.contains(want), "{prog} on {n} ranks:\n{}\n{}", r.stdout, r.stderr);
    }
}

/// Every rank sends to every other before it receives, so both ranks of a
/// pair open a connection at once: the pair ends up on one connection (the
/// higher rank moves to the lower rank's and closes its own), over TCP
/// (plain and encrypted) and over shared memory, and every message arrives
/// in order meanwhile. Before,
/// both stayed open and each side sent on its own: over TCP a segment a
/// message more.
#[test]
fn a_pair_that_opened_two_connections_keeps_one() {
    let encrypted = [("P2PMP_SHM", "0"), ("P2PMP_ENCRYPT", "always")];
    for env in [&[("P2PMP_SHM", "0")][..], &encrypted[..], &[][..]] {
        let r = launch_env(4, "mpi_exchange", &["300"], Duration::from_secs(60), env);
        assert!(r.ok, "mpi_exchange with {env:?}:\n{}\n{}", r.stdout, r.stderr);
        let links: Vec<&str> =
            r.stdout.lines().filter_map(|l| l.split_once("] exchange ok 300 links ")).map(|(_, n)| n).collect();
        assert_eq!(links, ["3"; 4], "connections to peers at the end, with {env:?}:\n{}", r.stdout);
    }
}
