//! `p2pjob` as a user meets it: `top`, shell completions, the man page,
//! output into a pipe closed early,
//! what it says about a bad rank count and a finished job, and a run
//! interrupted or timed out as mpirun's are, and a wait interrupted.

mod web;

use std::process::{Command, Output};
use std::time::Duration;

use p2pmp_core::job::JobDescription;

fn p2pjob(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_p2pjob")).args(args).output().expect("run p2pjob")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn completions_and_the_man_page_come_from_the_command_line_definitions() {
    let bash = p2pjob(&["completions", "bash"]);
    assert!(bash.status.success());
    let script = text(&bash.stdout);
    assert!(script.contains("_p2pjob()") && script.contains("complete -F _p2pjob"), "{script}");
    for sub in ["submit", "status", "top", "run", "demo"] {
        assert!(script.contains(sub), "bash completion of {sub}");
    }
    let zsh = p2pjob(&["completions", "zsh"]);
    assert!(zsh.status.success() && text(&zsh.stdout).starts_with("#compdef p2pjob"));
    let man = p2pjob(&["man"]);
    let page = text(&man.stdout);
    assert!(man.status.success() && page.contains(".TH p2pjob 1"), "{page}");
    assert!(page.contains("Submit and control jobs") && page.contains("completions"), "{page}");
    let dir = std::env::temp_dir().join(format!("p2pjob-man-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = p2pjob(&["man", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in ["p2pjob.1", "p2pjob-run.1", "p2pjob-top.1", "p2pjob-submit.1"] {
        let roff = std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(roff.contains(".TH"), "{page}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn output_nobody_reads_any_more_ends_p2pjob_quietly_as_sigpipe_would() {
    for args in [&["completions", "bash"][..], &["man"]] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_p2pjob")).args(args).stdout(writer).output().expect("run p2pjob");
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", text(&out.stderr));
        assert_eq!(text(&out.stderr), "", "{args:?}: no panic, no backtrace");
    }
    // Following a job on an embedded network: its files go all the same.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let run = Command::new(env!("CARGO_BIN_EXE_p2pjob"))
        .args(["run", "--local", "1", "/bin/echo", "nobody reads this"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start p2pjob");
    let pid = run.id();
    let out = run.wait_with_output().expect("p2pjob's end");
    assert_eq!(out.status.code(), Some(141), "{}", text(&out.stderr));
    let prefix = format!("p2pmp-local-{pid}-");
    let left = std::fs::read_dir(std::env::temp_dir()).unwrap().flatten();
    let left: Vec<_> = left.filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).collect();
    assert!(left.is_empty(), "the embedded network's files stayed: {left:?}");
}

#[test]
fn a_daemon_asked_at_its_overlay_port_gets_a_hint_at_the_control_one() {
    let net = web::network(1);
    let overlay = net.overlay_addrs()[0].to_string();
    let out = p2pjob(&["--node", &overlay, "status"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(&format!("is {overlay} a jobd's control address")), "{err}");
}

#[test]
fn a_bad_rank_count_is_refused_saying_what_is_wanted() {
    let out = p2pjob(&["run", "-n", "0", "/bin/true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("a job needs at least 1 rank"), "{err}");
    assert!(!err.contains("line "), "no job file line numbers for a flag: {err}");
    // A program that cannot be run is refused before any job is placed.
    let file = std::env::temp_dir().join(format!("p2pjob-noexec-{}", std::process::id()));
    std::fs::write(&file, "not a program\n").unwrap();
    let out = p2pjob(&["run", "--local", "1", file.to_str().unwrap()]);
    std::fs::remove_file(&file).unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("neither a #! script nor an ELF program"), "{}", text(&out.stderr));
}

#[test]
fn top_shows_the_nodes_and_jobs_and_wait_names_the_job() {
    let net = web::network(3);
    let node = net.control().to_string();
    let dir = std::env::temp_dir().join(format!("p2pjob-top-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let desc = JobDescription::run("/bin/sh", vec!["-c".into(), "echo hi".into()], 2);
    let job = web::submit(net.control(), &desc, &dir).to_string();
    // `wait` of a job: its id on every line about it.
    let wait = p2pjob(&["--node", &node, "wait", &job]);
    assert!(wait.status.success(), "{}", text(&wait.stderr));
    let said = text(&wait.stderr);
    assert!(said.contains(&format!("job {job} done")), "{said}");
    let frame = web::until(Duration::from_secs(10), "top to list the job", || {
        let out = p2pjob(&["--node", &node, "top", "--once"]);
        let t = text(&out.stdout);
        (out.status.success() && t.contains(&job[..12])).then_some(t)
    });
    assert!(frame.contains("3 node(s), 1 job(s) (0 not over"), "{frame}");
    for addr in net.overlay_addrs() {
        assert!(frame.contains(&addr.to_string()), "{addr} in {frame}");
    }
    assert!(frame.lines().any(|l| l.starts_with(&job[..12]) && l.contains("done") && l.contains("0/2/2")), "{frame}");
    let json = p2pjob(&["--node", &node, "--json", "top", "--once"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON line");
    assert_eq!((v["nodes"].as_array().map(Vec::len), v["jobs"][0]["job"].as_str()), (Some(3), Some(job.as_str())));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_the_user_cannot_read_fails_the_submit_before_any_daemon_is_asked() {
    let dir = std::env::temp_dir().join(format!("p2pjob-unreadable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut desc = JobDescription::run("/bin/true", vec![], 1);
    desc.inputfiles = vec!["missing.dat".into()];
    let job = dir.join("job.xml");
    std::fs::write(&job, desc.to_xml()).unwrap();
    let key = dir.join("key");
    // No daemon listens on port 1: the signature fails first, as bad input.
    let out = p2pjob(&["--node", "127.0.0.1:1", "--key", key.to_str().unwrap(), "submit", job.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("missing.dat to sign the job") && err.contains("No such file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `sleep` processes of this host with exactly this argument.
fn sleeping(arg: &str) -> usize {
    let is_ours = |cmdline: Vec<u8>| {
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        matches!(argv[..], [exe, a, b""] if exe.ends_with(b"sleep") && a == arg.as_bytes())
    };
    p2pmp_tests::count_processes(|p| std::fs::read(p.join("cmdline")).is_ok_and(is_ours))
}

#[test]
fn an_interrupted_run_kills_its_job_as_mpirun_does_and_its_ranks_show_stopped() {
    let net = web::network(2);
    let node = net.control().to_string();
    // A duration no other test sleeps: these processes are this job's.
    let arg = "47.25";
    let (code, err) = interrupted(&node, &["run", "-n", "2", "sleep", arg], || sleeping(arg) == 2);
    assert_eq!(code, Some(4), "exit 4, killed: {err}");
    let job = err.split("interrupted: killing job ").nth(1).and_then(|s| s.split(' ').next()).expect("said").to_owned();
    assert!(err.contains(&format!("job {job} killed")), "{err}");
    web::until(Duration::from_secs(10), "the ranks' processes to go", || (sleeping(arg) == 0).then_some(()));
    let status = p2pjob(&["--node", &node, "status", &job]);
    let said = text(&status.stdout);
    assert!(status.status.success() && said.contains("killed    2 rank(s): 0 running"), "{said}");
    assert_eq!(said.matches(" stopped ").count() + said.matches(" killed by ").count(), 2, "{said}");
}

/// Starts `p2pjob --node NODE ARGS`, interrupts it (SIGINT) once `ready`
/// and it catches the signal, and returns its exit code and stderr.
fn interrupted(node: &str, args: &[&str], ready: impl Fn() -> bool) -> (Option<i32>, String) {
    let mut p2pjob = Command::new(env!("CARGO_BIN_EXE_p2pjob"))
        .args(["--node", node])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start p2pjob");
    web::until(Duration::from_secs(30), "the ranks to run", || ready().then_some(()));
    web::until(Duration::from_secs(30), "p2pjob to catch SIGINT", || catches_sigint(p2pjob.id()).then_some(()));
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    assert_eq!(unsafe { libc::kill(p2pjob.id() as i32, libc::SIGINT) }, 0);
    // Bounded: a p2pjob that never ends fails the test, not hangs it.
    web::until(Duration::from_secs(30), "p2pjob to end", || p2pjob.try_wait().ok().flatten());
    let out = p2pjob.wait_with_output().expect("p2pjob's output");
    (out.status.code(), text(&out.stderr))
}

/// Whether process `pid` has a handler of its own for SIGINT (`SigCgt` in
/// its status).
fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let caught = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).map(str::trim);
    caught.and_then(|hex| u64::from_str_radix(hex, 16).ok()).is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}

#[test]
fn an_interrupted_wait_leaves_its_job_running_and_says_how_to_find_it() {
    let net = web::network(1);
    let node = net.control().to_string();
    let arg = "48.25";
    let dir = std::env::temp_dir().join(format!("p2pjob-leave-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sleep.xml");
    std::fs::write(&file, JobDescription::run("/bin/sleep", vec![arg.into()], 1).to_xml()).unwrap();
    let leave = |args: &[&str]| {
        let (code, err) = interrupted(&node, args, || sleeping(arg) == 1);
        assert_eq!(code, Some(130), "{args:?}: {err}");
        let job = err.split("interrupted; job ").nth(1).and_then(|s| s.split(' ').next()).expect("named").to_owned();
        assert!(err.contains(&format!("`p2pjob kill {job}` stops it")), "{err}");
        assert_eq!(sleeping(arg), 1, "{args:?}: the job keeps running");
        job
    };
    let job = leave(&["submit", file.to_str().unwrap(), "--wait"]);
    assert_eq!(leave(&["wait", &job]), job);
    assert!(p2pjob(&["--node", &node, "kill", &job]).status.success());
    web::until(Duration::from_secs(10), "the rank's process to go", || (sleeping(arg) == 0).then_some(()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_run_past_mpiexec_timeout_kills_its_job() {
    let net = web::network(1);
    let node = net.control().to_string();
    let arg = "49.25";
    let out = Command::new(env!("CARGO_BIN_EXE_p2pjob"))
        .args(["--node", &node, "run", "-n", "1", "sleep", arg])
        .env("MPIEXEC_TIMEOUT", "1")
        .output()
        .expect("run p2pjob");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "exit 4, killed: {err}");
    assert!(err.contains("timed out after 1 s (MPIEXEC_TIMEOUT); killing it"), "{err}");
    web::until(Duration::from_secs(10), "the rank's process to go", || (sleeping(arg) == 0).then_some(()));
}

#[test]
fn run_passes_the_variables_it_names_and_no_others() {
    // (A later -x of a name wins, as with mpirun.)
    let script = "echo \"[$GREETING] [$OMP_NUM_THREADS] [${NOT_PASSED-unset}]\"";
    let out = Command::new(env!("CARGO_BIN_EXE_p2pjob"))
        .args([
            "run",
            "--local",
            "1",
            "-n",
            "2",
            "-x",
            "OMP_NUM_THREADS=1",
            "-x",
            "GREETING",
            "-x",
            "OMP_NUM_THREADS=3",
        ])
        .args(["/bin/sh", "-c", script])
        .env("GREETING", "hello there")
        .env("NOT_PASSED", "x")
        .output()
        .expect("run p2pjob");
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for rank in 0..2 {
        assert!(said.contains(&format!("[{rank}] [hello there] [3] [unset]")), "{said}");
    }
    for (bad, says) in [("P2PMP_RANK=3", "the node's to set"), ("A=b ", "ends in whitespace")] {
        let refused = p2pjob(&["run", "-x", bad, "/bin/true"]);
        assert_eq!(refused.status.code(), Some(2));
        assert!(text(&refused.stderr).contains(says), "{bad}: {}", text(&refused.stderr));
    }
}
