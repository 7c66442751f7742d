//! Building and running the measured programs, each with a wall-clock limit,
//! its wall and CPU time (all processes of the run, from `getrusage`).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The output lines of a run (rank prefixes removed), with its CPU seconds.
#[derive(Debug, Clone)]
pub(crate) struct Output {
    pub(crate) lines: Vec<String>,
    pub(crate) cpu_s: f64,
}

fn children_cpu_s() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs `cmd` in its own process group, killing the group after `limit`.
pub(crate) fn run_limited(mut cmd: Command, limit: Duration) -> Result<Output, String> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let cpu0 = children_cpu_s();
    let mut child = cmd.spawn().map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().expect("piped")));
    let err = read(Box::new(child.stderr.take().expect("piped")));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(st);
        }
        if start.elapsed() > limit {
            // SAFETY: kill(2) of the child's process group; no memory involved.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let (stdout, stderr) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    match status {
        None => Err(format!("timeout after {} s", limit.as_secs())),
        Some(st) if !st.success() => {
            Err(format!("failed ({st}): {}", stderr.lines().rev().take(2).collect::<Vec<_>>().join(" | ")))
        }
        Some(_) => Ok(Output {
            lines: stdout
                .lines()
                .map(|l| l.split_once("] ").filter(|_| l.starts_with('[')).map_or(l, |(_, r)| r).to_string())
                .collect(),
            cpu_s: children_cpu_s() - cpu0,
        }),
    }
}

/// The numbers after `key` on each line starting with it.
pub(crate) fn values(lines: &[String], key: &str) -> Vec<Vec<f64>> {
    lines
        .iter()
        .filter(|l| l.split_whitespace().next() == Some(key))
        .map(|l| l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect())
        .collect()
}

/// `target/release` (this bench runs from `target/release/deps`).
pub(crate) fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<bench>").to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    c
}

/// Builds libp2pmpi, p2pmpicc and p2pmp-launch, and the MPI benchmark of
/// p2pmp-mpi, whose binary is the Rust-API rank program (its `pingpong` and
/// `ring` modes run the workloads of `mpi/benches/c/`); returns that binary.
pub(crate) fn build_p2pmp() -> Result<PathBuf, String> {
    let st = cargo()
        .args(["build", "-q", "--release", "-p", "p2pmp-capi", "-p", "p2pmp-mpi", "--lib"])
        .args(["--bin", "p2pmpicc", "--bin", "p2pmp-launch"])
        .status()
        .map_err(|e| e.to_string())?;
    if !st.success() {
        return Err("cargo build of libp2pmpi / p2pmp-launch failed".into());
    }
    let out = cargo()
        .args(["bench", "-p", "p2pmp-mpi", "--bench", "mpi", "--no-run", "--message-format=json"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    // The artifact line of the bench target carries its executable's path.
    text.lines()
        .filter(|l| l.contains("\"kind\":[\"bench\"]") && l.contains("\"name\":\"mpi\""))
        .find_map(|l| {
            l.split_once("\"executable\":\"").and_then(|(_, r)| r.split_once('"')).map(|(p, _)| PathBuf::from(p))
        })
        .ok_or_else(|| "cargo bench --no-run of p2pmp-mpi gave no executable".into())
}

/// A way to compile and run the C programs of `mpi/benches/c/`.
#[derive(Debug, Clone)]
pub(crate) struct System {
    /// Row name and JSON key prefix.
    pub(crate) name: &'static str,
    cc: PathBuf,
    /// Programs built here, or why not.
    dir: Result<PathBuf, String>,
}

fn on_path(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(prog)).find(|f| f.is_file()))
}

impl System {
    /// C through libp2pmpi (`p2pmpicc`, run by `p2pmp-launch`), MPICH or Open MPI,
    /// over TCP or their default (shared-memory) transports.
    pub(crate) fn new(name: &'static str, out: &Path) -> System {
        let cc = match name {
            "p2pmp_c" => Some(target_dir().join("p2pmpicc")),
            n if n.starts_with("mpich") => on_path("mpicc.mpich"),
            _ => on_path("mpicc.openmpi"),
        };
        let Some(cc) = cc else {
            return System { name, cc: PathBuf::new(), dir: Err("missing: not installed".into()) };
        };
        let dir = out.join(name);
        let built = (|| {
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let here = Path::new(env!("CARGO_MANIFEST_DIR"));
            let mut progs =
                vec![("pingpong", here.join("../benches/c/pingpong.c")), ("ring", here.join("../benches/c/ring.c"))];
            if name == "p2pmp_c" {
                progs.push(("selfloop", here.join("benches/selfloop.c")));
            }
            for (prog, src) in progs {
                let st = Command::new(&cc)
                    .args(["-O2", "-o"])
                    .arg(dir.join(prog))
                    .arg(src)
                    .status()
                    .map_err(|e| format!("{}: {e}", cc.display()))?;
                if !st.success() {
                    return Err(format!("{} failed on {prog}.c", cc.display()));
                }
            }
            Ok(dir)
        })();
        System { name, cc, dir: built }
    }

    /// Runs program `prog` on `n` ranks.
    pub(crate) fn run(&self, n: u32, prog: &str, args: &[&str], limit: Duration) -> Result<Output, String> {
        let dir = self.dir.as_ref().map_err(Clone::clone)?;
        let exe = dir.join(prog);
        let mut cmd = match self.name {
            "p2pmp_c" => launch(n, &exe),
            name => {
                let mut c = Command::new(
                    self.cc.with_file_name(
                        self.cc
                            .file_name()
                            .map_or_else(|| "mpirun".into(), |f| f.to_string_lossy().replace("mpicc", "mpirun")),
                    ),
                );
                if name.starts_with("openmpi") {
                    c.args(["--allow-run-as-root", "--oversubscribe"]);
                }
                if name == "mpich_tcp" {
                    c.env("UCX_TLS", "tcp").env("MPIR_CVAR_NOLOCAL", "1");
                }
                if name == "openmpi_tcp" {
                    c.args(["--mca", "btl", "tcp,self"]);
                }
                c.arg("-n").arg(n.to_string()).arg(exe);
                c
            }
        };
        cmd.args(args);
        run_limited(cmd, limit)
    }
}

static PIN: OnceLock<Option<usize>> = OnceLock::new();

/// Runs every p2pmp program on CPU `cpu` only (`None`: wherever the kernel
/// puts the ranks). Set once, before the first launch.
pub(crate) fn pin_to(cpu: Option<usize>) {
    let _ = PIN.set(cpu);
}

/// `p2pmp-launch -n N -- exe` (then the caller's arguments), pinned as
/// [`pin_to`] says, with the spin policy fixed: the library picks it from the
/// host's load average at start-up, which on a shared machine flips from run to
/// run and would swamp the C / Rust comparison. Spin 100 µs while every rank has
/// a core, block otherwise (the library's own rule without the load term).
///
/// Pinning matters as much: unpinned, a 2-rank ping-pong on this 2-core VM runs
/// at ~10.7 µs when the kernel keeps both ranks on one core and ~16 µs when it
/// spreads them (a cross-core wake-up), and which one a run gets is chance.
pub(crate) fn launch(n: u32, exe: &Path) -> Command {
    let pin = PIN.get().copied().flatten();
    let cores = if pin.is_some() { 1 } else { std::thread::available_parallelism().map_or(1, |c| c.get()) };
    let spin_us = if n as usize <= cores { "100" } else { "0" };
    let mut c = Command::new(target_dir().join("p2pmp-launch"));
    c.env("P2PMP_SPIN_US", spin_us).env("P2PMP_YIELDS", "0");
    c.args(["-n", &n.to_string(), "--"]).arg(exe);
    if let Some(cpu) = pin {
        // SAFETY: between fork and exec only sched_setaffinity (async-signal-safe)
        // runs, on a CPU set built on this stack frame.
        unsafe {
            c.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    c
}
