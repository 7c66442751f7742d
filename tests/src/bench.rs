//! What the MPI benches share (p2pmp-mpi's `mpi`, p2pmp-capi's `cabi`):
//! running a program under a wall-clock limit, reading the figures it prints,
//! and building and running the C programs of `mpi/benches/c/` with the
//! reference MPIs from Debian (MPICH, Open MPI).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a run printed (rank prefixes removed) and the CPU seconds of all its
/// processes (from `getrusage` of the children).
#[derive(Debug)]
pub struct Run {
    pub lines: Vec<String>,
    pub cpu_s: f64,
}

/// A run that did not finish well, and the lines it printed before (a ping-pong
/// that timed out at 4 MiB still measured the small sizes).
#[derive(Debug)]
pub struct Failed {
    pub why: String,
    pub partial: Vec<String>,
}

impl Failed {
    fn new(why: impl Into<String>) -> Self {
        Failed { why: why.into(), partial: Vec::new() }
    }
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
pub fn run_limited(mut cmd: Command, limit: Duration) -> Result<Run, Failed> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let cpu0 = children_cpu_s();
    let mut child = cmd.spawn().map_err(|e| Failed::new(format!("cannot start {:?}: {e}", cmd.get_program())))?;
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
        if let Some(st) = child.try_wait().map_err(|e| Failed::new(e.to_string()))? {
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
    let lines: Vec<String> = stdout
        .lines()
        .map(|l| l.split_once("] ").filter(|_| l.starts_with('[')).map_or(l, |(_, r)| r).to_string())
        .collect();
    match status {
        None => Err(Failed { why: format!("{TIMEOUT} {} s", limit.as_secs()), partial: lines }),
        Some(st) if !st.success() => {
            let tail: String = stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            Err(Failed { why: format!("failed ({st}): {tail}"), partial: lines })
        }
        Some(_) => Ok(Run { lines, cpu_s: children_cpu_s() - cpu0 }),
    }
}

/// How the reason of a run killed at its time limit begins.
const TIMEOUT: &str = "timeout after";

/// Whether `why` (a [`Failed`]'s reason) says the run was killed at its
/// time limit.
pub fn timed_out(why: &str) -> bool {
    why.starts_with(TIMEOUT)
}

/// The numbers after `key` on each line starting with it.
pub fn values(lines: &[String], key: &str) -> Vec<Vec<f64>> {
    lines
        .iter()
        .filter(|l| l.split_whitespace().next() == Some(key))
        .map(|l| l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect())
        .collect()
}

/// `prog` as found on `PATH`.
pub fn on_path(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(prog)).find(|f| f.is_file()))
}

/// A reference MPI implementation from Debian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefMpi {
    Mpich,
    OpenMpi,
}

impl RefMpi {
    pub fn name(self) -> &'static str {
        match self {
            RefMpi::Mpich => "mpich",
            RefMpi::OpenMpi => "openmpi",
        }
    }

    /// Its compiler wrapper.
    pub fn cc(self) -> &'static str {
        match self {
            RefMpi::Mpich => "mpicc.mpich",
            RefMpi::OpenMpi => "mpicc.openmpi",
        }
    }

    /// Its launcher.
    pub fn mpirun(self) -> &'static str {
        match self {
            RefMpi::Mpich => "mpirun.mpich",
            RefMpi::OpenMpi => "mpirun.openmpi",
        }
    }

    /// `mpirun -n n exe` over TCP only (`tcp`) or the default transports
    /// (shared memory between ranks of a host); the caller adds arguments.
    pub fn command(self, tcp: bool, n: u32, exe: &Path) -> Command {
        let mut cmd = Command::new(self.mpirun());
        match self {
            RefMpi::Mpich => {
                if tcp {
                    cmd.env("UCX_TLS", "tcp").env("MPIR_CVAR_NOLOCAL", "1");
                }
            }
            RefMpi::OpenMpi => {
                cmd.args(["--allow-run-as-root", "--oversubscribe"]);
                if tcp {
                    cmd.args(["--mca", "btl", "tcp,self"]);
                }
            }
        }
        cmd.arg("-n").arg(n.to_string()).arg(exe);
        cmd
    }
}

/// Compiles each `(name, source)` with `cc -O2` (then `libs`) into `dir`.
pub fn build_c(cc: &Path, dir: &Path, progs: &[(&str, PathBuf)], libs: &[&str]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    for (prog, src) in progs {
        let st = Command::new(cc)
            .args(["-O2", "-o"])
            .arg(dir.join(prog))
            .arg(src)
            .args(libs)
            .status()
            .map_err(|e| format!("{}: {e}", cc.display()))?;
        if !st.success() {
            return Err(format!("{} failed on {prog}.c", cc.display()));
        }
    }
    Ok(())
}
