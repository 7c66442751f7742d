//! Jobs in their sandbox (issue #15), with real daemons on loopback: a job
//! cannot read another job's files nor write outside its directory; a fork
//! bomb, a 10 GiB file, an allocation loop and a directory over its disk limit
//! are each stopped while the daemon and a job beside them carry on; paths
//! that leave the job directory are refused at parse with line and column; an
//! output file planted as a link is not read.
//!
//! Per-job users need root: without it each test says so and skips.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use p2pmp_tests::{Finished, run_to_end, wait_for, wait_until_or};

/// The limits the test daemons run with: small, so each test is quick.
const LIMITS: [&str; 5] = ["processes=64", "memory_mb=256", "file_size_mb=32", "disk_mb=48", "cpu_s=30"];

fn built() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| p2pmp_tests::cargo_build(&[]))
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: per-job users and their limits need jobd to run as root");
    }
    root
}

/// One daemon in a scratch directory; killed and removed on drop.
struct Node {
    child: Child,
    control: String,
    port: u16,
    dir: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Node {
    fn start(tag: &str, extra: &[&str]) -> Node {
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("p2pmp-sandbox-{tag}-{}-{nonce:x}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new(built().join("jobd"));
        cmd.args(["--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--print-addr", "--slots", "4"]);
        cmd.args(["--log-level", "warn"]).arg("--work-dir").arg(dir.join("work"));
        for l in LIMITS {
            cmd.args(["--limit", l]);
        }
        cmd.args(extra);
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawning jobd");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 4, "jobd said {line:?}");
        let port = words[3].rsplit(':').next().unwrap().parse().unwrap();
        Node { child, control: words[1].to_owned(), port, dir }
    }

    fn write(&self, name: &str, data: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, data).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p
    }

    fn p2pjob(&self, args: &[&str], limit: Duration) -> Finished {
        let mut cmd = Command::new(built().join("p2pjob"));
        cmd.arg("--node").arg(&self.control).args(args).current_dir(&self.dir);
        run_to_end(cmd, limit)
    }

    /// Runs script `name` (written with `body`) as a one-rank job with `args`.
    fn run(&self, name: &str, body: &str, args: &[&str]) -> Finished {
        self.write(name, &format!("#!/bin/sh\n{body}\n"));
        let program = format!("./{name}");
        let mut a = vec!["run", "-n", "1", &program];
        a.extend_from_slice(args);
        self.p2pjob(&a, Duration::from_secs(60))
    }

    /// Submits without waiting; the job's id.
    fn submit(&self, xml: &str) -> String {
        std::fs::write(self.dir.join("job.xml"), xml).unwrap();
        let out = self.p2pjob(&["submit", "job.xml"], Duration::from_secs(20));
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stdout.trim().to_owned()
    }

    fn job_dir(&self, job: &str) -> PathBuf {
        self.dir.join(format!("work/node-{}/job-{job}", self.port))
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none() && self.p2pjob(&["nodes"], Duration::from_secs(20)).ok
    }
}

fn job_file(exe: &str, args: &str, extra: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?>\n<p2pjob>\n  <executable>{exe}</executable>\n  <arguments>{args}</arguments>\n{extra}  \
         <processes>1</processes>\n  <requirement>linux</requirement>\n</p2pjob>\n"
    )
}

/// Processes of `uid` still alive.
fn processes_of(uid: u32) -> usize {
    p2pmp_tests::count_processes(|p| p.metadata().is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == uid))
}

/// Job A keeps a secret in its directory while job B, given A's directory,
/// tries to read it and to write beside and above its own directory.
fn snoop(n: &Node) -> (Finished, PathBuf) {
    n.write("keeper.sh", "#!/bin/sh\necho the-secret-of-a > secret\nsleep 4\necho keeper done\n");
    let a = n.submit(&job_file("keeper.sh", "", ""));
    let a_dir = n.job_dir(&a);
    wait_for("job A's secret", Duration::from_secs(20), || a_dir.join("secret").exists());
    let b = n.run(
        "snoop.sh",
        "cat \"$1/secret\"; ls \"$1\"; echo planted > \"$1/planted\"; echo x > ../escape; echo x > ../../escape; \
         ls ../cache; id -u",
        &[a_dir.to_str().unwrap()],
    );
    let out = n.p2pjob(&["wait", &a], Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "job A is unharmed: {out:?}");
    (b, a_dir)
}

#[test]
fn a_job_reads_no_other_jobs_files_and_writes_nothing_outside_its_directory() {
    if !root() {
        return;
    }
    let n = Node::start("snoop", &[]);
    let (b, a_dir) = snoop(&n);
    let said = format!("{}{}", b.stdout, b.stderr);
    assert!(!said.contains("the-secret-of-a"), "job B read job A's file: {said}");
    assert_eq!(said.matches("Permission denied").count(), 6, "{said}");
    assert!(!a_dir.join("planted").exists());
    let node_dir = n.dir.join(format!("work/node-{}", n.port));
    assert!(!node_dir.join("escape").exists() && !n.dir.join("work/escape").exists(), "wrote outside its directory");
    let uid: u32 = b.stdout.lines().last().and_then(|l| l.trim_start_matches("[0] ").trim().parse().ok()).unwrap();
    assert!(uid >= 1_900_000_000, "job B ran as uid {uid}");

    // The same with jobs run as the daemon's user (root): the test would see it.
    let open = Node::start("snoop-open", &["--no-job-user"]);
    let (b, _) = snoop(&open);
    assert!(b.stdout.contains("the-secret-of-a"), "without own users, job B reads A's files: {}", b.stdout);
}

#[test]
fn limits_stop_a_fork_bomb_a_huge_file_an_allocation_loop_and_a_full_disk_while_a_neighbour_finishes() {
    if !root() {
        return;
    }
    let mut n = Node::start("limits", &[]);
    n.write(
        "neighbour.sh",
        "#!/bin/sh\ni=0\nwhile [ $i -lt 40 ]; do sleep 0.25; i=$((i+1)); done\necho neighbour ok\n",
    );
    let neighbour = n.submit(&job_file("neighbour.sh", "", ""));

    // A fork bomb, left running when its job's first process ends: held at
    // 64 processes, and killed with everything else of its user after the job.
    // The job lasts 3 s: its directory (whose owner is the job's user) goes
    // with it, and a test thread starved by the bomb on a 2-core machine once
    // missed a 1 s window (CI).
    n.write(
        "bomb.sh",
        "#!/bin/sh\necho uid $(id -u)\nbomb() { bomb | bomb & }\n(bomb) >/dev/null 2>&1 </dev/null\nsleep 3\n",
    );
    let bomb = n.submit(&job_file("bomb.sh", "", ""));
    let bomb_dir = n.job_dir(&bomb);
    // On a timeout, the job's outcome says why.
    let outcome = || Some(format!("the job: {:?}", n.p2pjob(&["wait", &bomb], Duration::from_secs(30))));
    let uid = wait_until_or(
        "the bomb's job directory to show its user",
        Duration::from_secs(20),
        || match std::fs::metadata(&bomb_dir).map(|m| std::os::unix::fs::MetadataExt::uid(&m)) {
            Ok(uid) if uid >= 1_900_000_000 => Ok(uid),
            other => Err(format!("owner {other:?}")),
        },
        outcome,
    );
    let (mut most, started) = (0, Instant::now());
    while started.elapsed() < Duration::from_secs(30) {
        let now = processes_of(uid);
        most = most.max(now);
        if now == 0 && started.elapsed() > Duration::from_millis(500) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(most > 10, "the bomb never went off ({most} processes)");
    assert!(most <= 66, "the bomb grew to {most} processes");
    assert_eq!(processes_of(uid), 0, "the bomb's processes outlived its job");
    let _ = n.p2pjob(&["wait", &bomb], Duration::from_secs(30));

    // A 10 GiB file: stopped at the 32 MiB file-size limit (below the disk
    // limit, so the disk watcher never races the signal).
    let big =
        n.run("big.sh", "dd if=/dev/zero of=big bs=1M count=10240 2>/dev/null\necho dd $?\nstat -c 'size %s' big", &[]);
    assert!(big.stdout.contains("dd 153"), "dd was not stopped by SIGXFSZ: {big:?}");
    assert!(big.stdout.contains("size 33554432"), "{big:?}");

    // A directory filled file by file: killed over its 48 MiB disk limit.
    let fill = n.run(
        "fill.sh",
        "i=0\nwhile [ $i -lt 100 ]; do dd if=/dev/zero of=f$i bs=1M count=16 2>/dev/null; i=$((i+1)); sleep 0.2; done\necho survived",
        &[],
    );
    assert!(!fill.ok, "{fill:?}");
    assert!(!fill.stdout.contains("survived"), "{fill:?}");
    let said = format!("{}{}", fill.stdout, fill.stderr);
    assert!(said.contains("job directory used") && said.contains("over the 48 MiB limit"), "{said}");

    // An allocation loop: stopped by the memory limit (256 MiB).
    if Command::new("cc").arg("--version").output().is_ok_and(|o| o.status.success()) {
        let src = n.dir.join("alloc.c");
        std::fs::write(
            &src,
            "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\nint main(void) {\n  size_t mib = 0;\n  \
             for (;;) { char *p = malloc(1 << 20); if (!p) break; memset(p, 1, 1 << 20); mib++; if (mib > 8192) break; }\n  \
             printf(\"allocated %zu MiB\\n\", mib);\n  return mib > 8192 ? 0 : 3;\n}\n",
        )
        .unwrap();
        let st = Command::new("cc").arg("-O1").arg("-o").arg(n.dir.join("alloc")).arg(&src).status().unwrap();
        assert!(st.success());
        let alloc = n.p2pjob(&["run", "-n", "1", "./alloc"], Duration::from_secs(60));
        let mib: usize = alloc
            .stdout
            .split_whitespace()
            .skip_while(|w| *w != "allocated")
            .nth(1)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{alloc:?}"));
        assert!(mib < 256, "allocated {mib} MiB under a 256 MiB limit");
        assert_eq!(alloc.code, Some(1), "{alloc:?}");
    } else {
        eprintln!("allocation loop skipped: no C compiler (cc)");
    }

    assert!(n.alive(), "the daemon stays up");
    let out = n.p2pjob(&["wait", &neighbour], Duration::from_secs(60));
    assert_eq!(out.code, Some(0), "the neighbour finishes normally: {out:?}");
    assert!(out.stdout.contains("neighbour ok"), "{out:?}");
}

#[test]
fn escaping_paths_are_refused_at_parse_and_a_planted_link_is_not_read() {
    let n = Node::start("paths", &[]);
    n.write("prog.sh", "#!/bin/sh\necho hi\n");
    for (extra, line, column, says) in [
        ("    <inputfile>../x</inputfile>\n", 5, 5, "has a \"..\" component"),
        ("  <inputfile>/etc/passwd</inputfile>\n", 5, 3, "is an absolute path"),
        ("  <outputfile>../../x</outputfile>\n", 5, 3, "\"../../x\""),
    ] {
        std::fs::write(n.dir.join("bad.xml"), job_file("prog.sh", "", extra)).unwrap();
        let out = n.p2pjob(&["submit", "bad.xml", "--wait"], Duration::from_secs(20));
        assert_eq!(out.code, Some(2), "{out:?}");
        assert!(out.stderr.contains(&format!("line {line}, column {column}")) && out.stderr.contains(says), "{out:?}");
    }

    // A job that plants its output file as a link to a file of the daemon's.
    let victim = n.write("victim", "the daemon's own secret\n");
    n.write("link.sh", "#!/bin/sh\nln -s \"$1\" out.txt\necho planted\n");
    let xml = job_file("link.sh", victim.to_str().unwrap(), "  <outputfile>out.txt</outputfile>\n");
    std::fs::write(n.dir.join("link.xml"), xml).unwrap();
    let out = n.p2pjob(&["submit", "link.xml", "--wait"], Duration::from_secs(30));
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("out.txt") && out.stdout.contains("planted"), "{out:?}");
    assert!(!format!("{}{}", out.stdout, out.stderr).contains("own secret"));
    assert!(!Path::new(&n.dir.join("out.txt")).exists(), "the linked file came back");
}

#[test]
fn a_job_file_asks_for_lower_limits_but_never_higher() {
    let n = Node::start("asked", &[]);
    n.write(
        "write.sh",
        "#!/bin/sh\ndd if=/dev/zero of=out bs=1M count=100 2>/dev/null\necho dd $?\nstat -c 'size %s' out\n",
    );
    let extra = "  <limit>file_size_mb=2</limit>\n  <limit>disk_mb=100000</limit>\n";
    std::fs::write(n.dir.join("asked.xml"), job_file("write.sh", "", extra)).unwrap();
    let out = n.p2pjob(&["submit", "asked.xml", "--wait"], Duration::from_secs(30));
    assert!(out.stdout.contains("dd 153") && out.stdout.contains("size 2097152"), "{out:?}");
    // Asking for more than the node's 32 MiB gets the node's.
    let extra = "  <limit>file_size_mb=100000</limit>\n";
    std::fs::write(n.dir.join("more.xml"), job_file("write.sh", "", extra)).unwrap();
    let out = n.p2pjob(&["submit", "more.xml", "--wait"], Duration::from_secs(30));
    assert!(out.stdout.contains("dd 153") && out.stdout.contains("size 33554432"), "{out:?}");
}

/// A job file's variables reach the job's process, running as the job's own
/// user; the daemon's steps before the drop (the gate, setpriv) never see
/// them (the procs unit test pins the command), so an LD_PRELOAD of the job's
/// runs nothing as root.
#[test]
fn a_job_files_variables_reach_its_process_as_its_own_user() {
    if !root() {
        return;
    }
    let n = Node::start("env", &[]);
    n.write("env.sh", "#!/bin/sh\necho \"greeting [$GREETING] uid $(id -u)\"\n");
    let extra = "  <env>GREETING=hi there</env>\n  <env>LD_PRELOAD=/nonexistent-p2pmp-preload.so</env>\n";
    std::fs::write(n.dir.join("env.xml"), job_file("env.sh", "", extra)).unwrap();
    let out = n.p2pjob(&["submit", "env.xml", "--wait"], Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{out:?}");
    let uid: u32 =
        out.stdout.split("greeting [hi there] uid ").nth(1).and_then(|s| s.trim().parse().ok()).expect("said");
    assert!(uid >= 1_900_000_000, "the job's own user, not the daemon's: {out:?}");
}
