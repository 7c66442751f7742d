//! The C ABI over real processes: the C programs of `tests/c/` are compiled with
//! the system C compiler through `p2pmpicc` and run as N ranks with `p2pjob run
//! --local N -n N` (N embedded daemons on loopback), for several N each.
//!
//! Each program checks its own results and rank 0 prints one summary line
//! ("<name>: <checks> checks, <failures> failures"); these tests assert on
//! that line, the exit status, and the messages of fatal errors. Without a C
//! compiler the tests say so and pass without running anything.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const PROGRAMS: [&str; 17] = [
    "ring",
    "pingpong",
    "collectives",
    "anysource",
    "sendrecv",
    "ssend",
    "errors",
    "factor",
    "finalize",
    "groups",
    "comms",
    "topo",
    "datatypes",
    "p2pmodes",
    "collv",
    "misc",
    "ckpt",
];

/// Where the compiled C programs go (`c-tests`), with p2pjob and p2pmp-launch
/// built beside; `None` without a C compiler.
fn built() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        p2pmp_tests::c::build("c-tests", &PROGRAMS)?;
        Some(p2pmp_tests::cargo_build(&[]))
    })
    .as_ref()
}

struct Run {
    ok: bool,
    /// stdout and stderr of p2pjob (rank lines are prefixed "[rank] ").
    out: String,
}

/// Runs C program `prog` on `n` ranks.
fn run(dir: &Path, n: u32, prog: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new(dir.join("p2pjob"));
    cmd.args(["run", "--local", &n.to_string(), "-n", &n.to_string()]).arg(dir.join("c-tests").join(prog)).args(args);
    let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(60));
    Run { ok: r.ok, out: r.stdout + &r.stderr }
}

/// Runs `prog` on each rank count and expects success and every line `want(n)`
/// gives for `n` ranks among rank 0's output.
fn expect<S: AsRef<str>>(prog: &str, ranks: &[u32], args: &[&str], want: impl Fn(u32) -> Vec<S>) {
    let Some(dir) = built() else { return };
    for &n in ranks {
        let r = run(dir, n, prog, args);
        assert!(r.ok, "{prog} on {n} ranks failed:\n{}", r.out);
        assert!(!r.out.contains("FAIL"), "{prog} on {n} ranks:\n{}", r.out);
        for w in want(n) {
            let line = format!("[0] {}", w.as_ref());
            assert!(r.out.lines().any(|l| l == line), "{prog} on {n} ranks: no line {line:?} in:\n{}", r.out);
        }
    }
}

/// The summary line of a self-checking program, with its check count unknown.
fn passes(prog: &str, ranks: &[u32], args: &[&str]) {
    let Some(dir) = built() else { return };
    for &n in ranks {
        let r = run(dir, n, prog, args);
        let prefix = format!("[0] {prog}: ");
        let summary = r.out.lines().filter_map(|l| l.strip_prefix(&prefix)).find(|l| l.contains(" checks, "));
        let Some(summary) = summary else { panic!("{prog} on {n} ranks: no summary in:\n{}", r.out) };
        let checks: u32 = summary.split(' ').next().and_then(|c| c.parse().ok()).unwrap_or(0);
        assert!(checks > 0 && summary.ends_with(" checks, 0 failures"), "{prog} on {n} ranks: {summary}\n{}", r.out);
        assert!(r.ok && !r.out.contains("FAIL"), "{prog} on {n} ranks:\n{}", r.out);
    }
}

#[test]
fn ring_passes_the_token_around_every_rank() {
    expect("ring", &[1, 2, 5], &["200"], |n| vec![format!("ring: {n} ranks, 200 loops, token {} (ok)", 200 * n)]);
}

#[test]
fn pingpong_moves_eager_and_rendezvous_messages_intact() {
    expect("pingpong", &[2], &["4"], |_| {
        ["pingpong: 0 bytes x 4 ok", "pingpong: 65537 bytes x 4 ok", "pingpong: 1048576 bytes x 4 ok"].to_vec()
    });
    passes("pingpong", &[2, 3], &["4"]);
}

#[test]
fn every_collective_computes_the_sequential_result() {
    passes("collectives", &[1, 2, 3, 4], &[]);
}

#[test]
fn any_source_receives_and_waitany_take_every_message_once() {
    passes("anysource", &[1, 2, 4], &["40"]);
}

#[test]
fn sendrecv_shifts_reach_every_distance() {
    passes("sendrecv", &[1, 3, 4], &[]);
}

#[test]
fn synchronous_sends_wait_for_their_receive() {
    passes("ssend", &[1, 2, 3], &[]);
}

#[test]
fn group_calls_build_translate_and_compare_groups() {
    passes("groups", &[1, 2, 5], &[]);
}

#[test]
fn communicators_split_create_dup_and_join_into_intercommunicators() {
    passes("comms", &[1, 2, 3, 4], &[]);
}

#[test]
fn cartesian_and_graph_topologies_number_shift_and_split() {
    passes("topo", &[1, 4, 6], &[]);
}

#[test]
fn derived_datatypes_lay_out_pack_and_travel() {
    passes("datatypes", &[1, 3], &[]);
}

#[test]
fn send_modes_persistent_requests_cancel_and_completion_calls() {
    passes("p2pmodes", &[1, 2, 3], &[]);
}

#[test]
fn v_collectives_scans_user_ops_and_intercommunicator_collectives() {
    passes("collv", &[1, 2, 5], &[]);
}

#[test]
fn added_error_codes_info_pcontrol_and_the_mpip2p_header() {
    passes("misc", &[1, 2], &[]);
}

#[test]
fn misuse_returns_its_error_class_under_errors_return() {
    passes("errors", &[1, 3], &[]);
}

#[test]
fn misuse_under_errors_are_fatal_ends_the_job_with_a_clear_message() {
    let Some(dir) = built() else { return };
    let r = run(dir, 3, "errors", &["fatal"]);
    assert!(!r.ok, "the job should fail:\n{}", r.out);
    assert!(!r.out.contains("survived"), "{}", r.out);
    // The first rank to abort stops the job; the others may be stopped before they print.
    let said = (0..3).any(|rank| {
        let msg = format!(
            "[{rank}] p2pmpi: rank {rank}: MPI_Send: MPI_ERR_RANK (invalid rank): rank 3 is not in a communicator of 3; aborting (MPI_ERRORS_ARE_FATAL)"
        );
        r.out.lines().any(|l| l == msg)
    });
    assert!(said, "no rank explained its abort in:\n{}", r.out);
    assert!(r.out.contains("exited with code"), "{}", r.out);
}

#[test]
fn mpi_abort_on_one_rank_stops_the_ranks_waiting_for_it() {
    let Some(dir) = built() else { return };
    let mut cmd = Command::new(dir.join("p2pjob"));
    cmd.args(["run", "--local", "3", "-n", "3"]).arg(dir.join("c-tests").join("errors")).arg("abort");
    // Well under the library's 60 s unreachable deadline: only the job-wide stop ends the waiters in time.
    let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(30));
    let out = r.stdout + &r.stderr;
    assert!(!r.ok, "the job should fail:\n{out}");
    assert!(out.contains("[2] rank 2 aborts"), "{out}");
    assert!(out.contains("[2] p2pmpi: rank 2: MPI_Abort(MPI_COMM_WORLD, error code 7)"), "{out}");
    assert!(out.contains("rank 2 exited with code 7"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn factoring_finds_both_primes_on_any_rank_count() {
    expect("factor", &[1, 3, 4], &["1000036000099", "200"], |_| ["factor: 1000036000099 = 1000003 x 1000033"].to_vec());
    expect("factor", &[2], &["1000003", "50"], |_| ["factor: 1000003 is prime"].to_vec());
}

/// Issue #13: a program that only initialises and finalises hung in one run of
/// four (one rank in finalize's barrier, the others gone). Many runs on 2 to 8
/// ranks, half of them printing first; each must end, and well before the 10 s
/// finalize gives unacknowledged peers (a run that needs it means a rank was
/// left waiting).
#[test]
fn init_then_finalize_never_hangs() {
    let Some(dir) = built() else { return };
    for (n, runs) in [(2, 12), (3, 6), (4, 8), (8, 6)] {
        for i in 0..runs {
            let print = i % 2 == 1;
            let mut cmd = Command::new(dir.join("p2pjob"));
            cmd.args(["run", "--local", &n.to_string(), "-n", &n.to_string()]).arg(dir.join("c-tests/finalize"));
            if print {
                cmd.arg("print");
            }
            let t = std::time::Instant::now();
            let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(30));
            let out = r.stdout + &r.stderr;
            assert!(r.ok, "run {i} on {n} ranks failed:\n{out}");
            assert!(!print || out.contains(&format!("[0] finalize: rank 0 of {n}")), "{out}");
            assert!(t.elapsed() < Duration::from_secs(8), "run {i} on {n} ranks took {:?}:\n{out}", t.elapsed());
        }
    }
}

/// A rank that ends without MPI_Finalize (returning from main, or exit(0)
/// while a peer waits for it) fails the job at once, saying so, as MPICH's
/// does: its peers waited for it until their 60 s unreachable deadline. One
/// that exits with a status of its own keeps it.
#[test]
fn a_rank_that_ends_without_finalize_fails_the_job() {
    let Some(dir) = built() else { return };
    for (how, code) in [("skip", 1), ("exit", 1), ("exit3", 3)] {
        let mut cmd = Command::new(dir.join("p2pjob"));
        cmd.args(["run", "--local", "2", "-n", "2"]).arg(dir.join("c-tests/finalize")).arg(how);
        let t = std::time::Instant::now();
        let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(30));
        let out = r.stdout + &r.stderr;
        assert!(!r.ok, "{how}: the job should fail:\n{out}");
        let said = format!("[1] p2pmpi: rank 1: the program ended without calling MPI_Finalize: exit status {code}");
        assert!(out.contains(&said), "{how}: {out}");
        assert!(out.contains(&format!("rank 1 exited with code {code}")), "{how}: {out}");
        assert!(t.elapsed() < Duration::from_secs(20), "{how}: took {:?}:\n{out}", t.elapsed());
    }
    // A child the program forks is no rank: its exit keeps its status.
    let mut cmd = Command::new(dir.join("p2pjob"));
    cmd.args(["run", "--local", "2", "-n", "2"]).arg(dir.join("c-tests/finalize")).arg("fork");
    let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(30));
    let out = r.stdout + &r.stderr;
    assert!(r.ok && !out.contains("without calling MPI_Finalize"), "{out}");
    assert!((0..2).all(|rank| out.contains(&format!("[{rank}] fork: rank {rank}'s child exited 0"))), "{out}");
}

/// Started alone, with no launcher and none of the P2PMP_ variables, a
/// program is a world of one rank (a node of its own started and stopped
/// with it), as MPI's singleton MPI_Init is; with some of the variables but
/// not all, it fails saying which is missing.
#[test]
fn a_program_started_alone_runs_as_one_rank() {
    let Some(dir) = built() else { return };
    let alone = |set: &[(&str, &str)]| {
        let mut cmd = Command::new(dir.join("c-tests/finalize"));
        cmd.arg("print");
        for v in ["P2PMP_JOB", "P2PMP_RANK", "P2PMP_SIZE", "P2PMP_NODE"] {
            cmd.env_remove(v);
        }
        cmd.envs(set.iter().copied());
        p2pmp_tests::run_to_end(cmd, Duration::from_secs(30))
    };
    for i in 0..3 {
        let t = std::time::Instant::now();
        let r = alone(&[]);
        let out = r.stdout.clone() + &r.stderr;
        assert!(r.ok && r.stdout == "finalize: rank 0 of 1\n", "run {i}:\n{out}");
        assert!(t.elapsed() < Duration::from_secs(8), "run {i} took {:?}:\n{out}", t.elapsed());
    }
    let r = alone(&[("P2PMP_RANK", "0")]);
    assert!(!r.ok && r.stderr.contains("P2PMP_JOB: not set, while others"), "{}", r.stderr);
}

#[test]
fn the_launcher_kills_a_job_that_outlives_mpiexec_timeout() {
    let Some(dir) = built() else { return };
    let mut cmd = Command::new(dir.join("p2pjob"));
    cmd.args(["run", "--local", "2", "-n", "2"]).arg(dir.join("c-tests/finalize")).arg("sleep");
    cmd.env("MPIEXEC_TIMEOUT", "2");
    let t = std::time::Instant::now();
    let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(30));
    let out = r.stdout + &r.stderr;
    assert!(!r.ok && out.contains("timed out after 2 s (MPIEXEC_TIMEOUT)"), "{out}");
    assert!(t.elapsed() < Duration::from_secs(20), "the ranks sleep 60 s: {:?}", t.elapsed());
}

#[test]
fn p2pmpicc_shows_its_command_and_compiles_without_linking() {
    let Some(dir) = built() else { return };
    let show = Command::new(dir.join("p2pmpicc")).args(["-show", "x.c", "-o", "x"]).output().unwrap();
    let line = String::from_utf8(show.stdout).unwrap();
    assert!(show.status.success() && line.contains("-lp2pmpi") && line.contains(" x.c -o x "), "{line}");
    let obj = dir.join("c-tests").join("ring.o");
    let st = Command::new(dir.join("p2pmpicc"))
        .arg("-c")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("c/ring.c"))
        .arg("-o")
        .arg(&obj)
        .status()
        .unwrap();
    assert!(st.success() && obj.is_file());
}

#[test]
fn the_static_library_links_and_runs() {
    let Some(dir) = built() else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = dir.join("c-tests").join("ring-static");
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("-I")
        .arg(root.join("mpi/include"))
        .arg(root.join("tests/c/ring.c"))
        .arg(dir.join("libp2pmpi.a"))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success(), "linking ring.c with libp2pmpi.a failed");
    let mut cmd = Command::new(dir.join("p2pjob"));
    cmd.args(["run", "--local", "2", "-n", "2"]).arg(&exe).arg("50");
    let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(60));
    assert!(r.ok && r.stdout.contains("[0] ring: 2 ranks, 50 loops, token 100 (ok)"), "{}\n{}", r.stdout, r.stderr);
}

/// Runs C program `prog` on `n` ranks started by `p2pmp-launch` (which passes
/// its environment on, unlike a daemon), with `env` added.
fn launch(dir: &Path, n: u32, prog: &str, args: &[&str], env: &[(&str, String)]) -> Run {
    let mut cmd = Command::new(dir.join("p2pmp-launch"));
    cmd.args(["-n", &n.to_string(), "--timeout", "60", "--"])
        .arg(dir.join("c-tests").join(prog))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)));
    let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(70));
    Run { ok: r.ok, out: r.stdout + &r.stderr }
}

/// What follows `prefix` on the first output line that starts with it.
fn after<'a>(r: &'a Run, prefix: &str) -> &'a str {
    r.out.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no line {prefix:?} in:\n{}", r.out))
}

/// A fresh directory under the system's temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("p2pmp-c-abi-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    /// `name` inside, as an environment value.
    fn sub(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file names in `dir`, sorted.
fn names(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_ring_killed_mid_run_resumes_from_its_checkpoint_with_the_undisturbed_results() {
    let Some(dir) = built() else { return };
    let tmp = Scratch::new("ckpt");
    for codec in ["zstd", "gzip", "none"] {
        let env = |sub: &str| {
            vec![
                ("P2PMP_CHECKPOINT_MS", "50".to_owned()),
                ("P2PMP_CHECKPOINT_CODEC", codec.to_owned()),
                ("P2PMP_CHECKPOINT_DIR", tmp.sub(&format!("{sub}-{codec}"))),
            ]
        };
        let clean = launch(dir, 3, "ckpt", &["300"], &env("clean"));
        assert!(clean.ok && !clean.out.contains("FAIL"), "{codec}: {}", clean.out);
        let result = after(&clean, "[0] ckpt: token ").to_owned();
        let taken: u32 = after(&clean, "[0] ckpt: checkpoints taken ").parse().unwrap();
        assert!(taken >= 2, "{codec}: 300 ms at a 50 ms interval took {taken} checkpoints");
        let files = names(&tmp.sub(&format!("clean-{codec}")));
        let want: Vec<String> = (0..3).map(|r| format!("rank-{r}.{taken}.ckpt")).collect();
        assert_eq!(files, want, "{codec}: the last epoch kept on every rank, the older ones dropped");

        let died = launch(dir, 3, "ckpt", &["300", "250"], &env("crashed"));
        assert!(!died.ok && died.out.contains("rank 1 dies at iteration 250"), "{codec}: {}", died.out);
        let mut again = env("crashed");
        again.push(("P2PMP_RESTART", tmp.sub(&format!("crashed-{codec}"))));
        let resumed = launch(dir, 3, "ckpt", &["300"], &again);
        assert!(resumed.ok && !resumed.out.contains("FAIL"), "{codec}: {}", resumed.out);
        let at: u64 = after(&resumed, "[0] resumed at iteration ").parse().unwrap();
        assert!(at > 0 && at <= 250, "{codec}: resumed at {at}");
        assert_eq!(after(&resumed, "[0] ckpt: token "), result, "{codec}: the undisturbed run's results");
    }
}

#[test]
fn a_corrupt_checkpoint_is_refused_naming_the_file() {
    let Some(dir) = built() else { return };
    let tmp = Scratch::new("ckpt-corrupt");
    let env = vec![("P2PMP_CHECKPOINT_MS", "50".to_owned()), ("P2PMP_CHECKPOINT_DIR", tmp.sub("c"))];
    let r = launch(dir, 2, "ckpt", &["300"], &env);
    assert!(r.ok, "{}", r.out);
    let file = names(&tmp.sub("c")).into_iter().find(|n| n.starts_with("rank-1.")).expect("rank 1's checkpoint");
    let path = tmp.0.join("c").join(&file);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let mut again = env.clone();
    again.push(("P2PMP_RESTART", tmp.sub("c")));
    let r = launch(dir, 2, "ckpt", &["300"], &again);
    assert!(!r.ok, "a corrupt checkpoint must not be resumed from:\n{}", r.out);
    assert!(r.out.contains(&file) && r.out.contains("digest mismatch"), "{}", r.out);
}

/// Submits a job file running the `ckpt` program on 2 ranks of an embedded
/// network, with `extra` elements.
fn submit_ckpt(dir: &Path, tmp: &Scratch, name: &str, extra: &str) -> Run {
    let prog = dir.join("c-tests").join("ckpt");
    let xml = format!(
        "<p2pjob><executable>{}</executable><arguments>300</arguments><processes>2</processes>\
         <requirement>linux</requirement>{extra}</p2pjob>",
        prog.display()
    );
    let file = tmp.0.join(name);
    std::fs::write(&file, xml).unwrap();
    let mut cmd = Command::new(dir.join("p2pjob"));
    cmd.args(["submit", "--local", "2"]).arg(&file);
    let r = p2pmp_tests::run_to_end(cmd, Duration::from_secs(60));
    Run { ok: r.ok, out: r.stdout + &r.stderr }
}

#[test]
fn the_job_files_checkpoint_interval_reaches_the_ranks_and_a_job_restarting_from_checkpoints_runs() {
    let Some(dir) = built() else { return };
    let tmp = Scratch::new("ckpt-job");
    let r = submit_ckpt(dir, &tmp, "every.xml", "<checkpoint>40ms</checkpoint>");
    assert!(r.ok && !r.out.contains("FAIL"), "{}", r.out);
    let taken: u32 = after(&r, "[0] ckpt: checkpoints taken ").parse().unwrap();
    assert!(taken >= 2, "300 ms at a 40 ms interval took {taken} checkpoints:\n{}", r.out);
    let r = submit_ckpt(dir, &tmp, "never.xml", "");
    assert_eq!(after(&r, "[0] ckpt: checkpoints taken "), "0", "no interval, no request: none");
    // Taken and shipped to the job's node as it runs (restarts are the
    // namespace tests' business): the result is the same.
    let r = submit_ckpt(dir, &tmp, "restart.xml", "<checkpoint>40ms</checkpoint><restart>checkpoint</restart>");
    assert!(r.ok && !r.out.contains("FAIL"), "{}", r.out);
    assert!(r.out.contains("[0] ckpt: token 600,"), "{}", r.out);
}
