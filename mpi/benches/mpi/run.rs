//! Running the measured programs: p2pmp under its launcher, the C programs under
//! MPICH's and Open MPI's `mpirun`, each with a wall-clock limit. A run that
//! exceeds it is killed with its whole process group and reported as a timeout.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one run gave: its output lines (rank prefixes removed), or why not.
pub(crate) type RunResult = Result<Vec<String>, Failed>;

/// A run that did not finish well, and the lines it printed before (a ping-pong
/// that timed out at 4 MiB still measured the small sizes).
#[derive(Debug, Clone)]
pub(crate) struct Failed {
    pub(crate) why: String,
    pub(crate) partial: Vec<String>,
}

impl Failed {
    fn new(why: impl Into<String>) -> Self {
        Failed { why: why.into(), partial: Vec::new() }
    }
}

/// Runs `cmd` in its own process group, killing the group after `limit`.
pub(crate) fn run_limited(mut cmd: Command, limit: Duration) -> RunResult {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = cmd.spawn().map_err(|e| Failed::new(format!("cannot start: {e}")))?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| Failed::new(e.to_string()))? {
            break Some(st);
        }
        if start.elapsed() > limit {
            // SAFETY: kill(2) on the child's process group; no memory involved.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let lines: Vec<String> = stdout
        .lines()
        .map(|l| if l.starts_with('[') { l.split_once("] ").map_or(l, |(_, r)| r) } else { l })
        .map(str::to_string)
        .collect();
    match status {
        None => Err(Failed { why: format!("timeout after {} s", limit.as_secs()), partial: lines }),
        Some(st) if !st.success() => {
            let tail: String = stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            Err(Failed { why: format!("failed ({st}): {tail}"), partial: lines })
        }
        Some(_) => Ok(lines),
    }
}

/// Numbers after `key` on the first line starting with it.
pub(crate) fn values(lines: &[String], key: &str) -> Vec<Vec<f64>> {
    lines
        .iter()
        .filter(|l| l.split_whitespace().next() == Some(key))
        .map(|l| l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect())
        .collect()
}

/// An MPI implementation from Debian, run over TCP or its default transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mpi {
    Mpich,
    OpenMpi,
}

impl Mpi {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mpi::Mpich => "mpich",
            Mpi::OpenMpi => "openmpi",
        }
    }
    fn cc(self) -> &'static str {
        match self {
            Mpi::Mpich => "mpicc.mpich",
            Mpi::OpenMpi => "mpicc.openmpi",
        }
    }
    fn mpirun(self) -> &'static str {
        match self {
            Mpi::Mpich => "mpirun.mpich",
            Mpi::OpenMpi => "mpirun.openmpi",
        }
    }
}

/// The C programs built with one MPI, or why they are missing.
#[derive(Debug)]
pub(crate) struct RefBuild {
    pub(crate) mpi: Mpi,
    pub(crate) dir: Result<PathBuf, String>,
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// Compiles `benches/c/*.c` with `mpi`'s compiler wrapper into `out/<mpi>/`.
pub(crate) fn build_refs(mpi: Mpi, out: &Path) -> RefBuild {
    let dir = (|| {
        for p in [mpi.cc(), mpi.mpirun()] {
            if !on_path(p) {
                return Err(format!("missing: {p} not installed"));
            }
        }
        let dir = out.join(mpi.name());
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/c");
        for prog in ["pingpong", "ring", "factor", "coll"] {
            let st = Command::new(mpi.cc())
                .args(["-O2", "-o"])
                .arg(dir.join(prog))
                .arg(src.join(format!("{prog}.c")))
                .arg("-lm")
                .status()
                .map_err(|e| format!("{}: {e}", mpi.cc()))?;
            if !st.success() {
                return Err(format!("{} failed on {prog}.c", mpi.cc()));
            }
        }
        Ok(dir)
    })();
    RefBuild { mpi, dir }
}

/// `mpirun -n n prog args` over TCP only (`tcp`) or the default transports.
pub(crate) fn mpirun(b: &RefBuild, tcp: bool, n: u32, prog: &str, args: &[String], limit: Duration) -> RunResult {
    let dir = b.dir.as_ref().map_err(|e| Failed::new(e.clone()))?;
    let mut cmd = Command::new(b.mpi.mpirun());
    match b.mpi {
        Mpi::Mpich => {
            if tcp {
                cmd.env("UCX_TLS", "tcp").env("MPIR_CVAR_NOLOCAL", "1");
            }
        }
        Mpi::OpenMpi => {
            cmd.args(["--allow-run-as-root", "--oversubscribe"]);
            if tcp {
                cmd.args(["--mca", "btl", "tcp,self"]);
            }
        }
    }
    cmd.arg("-n").arg(n.to_string()).arg(dir.join(prog)).args(args);
    run_limited(cmd, limit)
}

/// `p2pmp-launch -n n <this binary> args`.
pub(crate) fn p2pmp(n: u32, args: &[String], limit: Duration) -> RunResult {
    let me = std::env::current_exe().map_err(|e| Failed::new(e.to_string()))?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_p2pmp-launch"));
    cmd.args(["-n", &n.to_string(), "--"]).arg(me).args(args);
    run_limited(cmd, limit)
}
