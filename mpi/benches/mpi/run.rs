//! Running the measured programs: p2pmp under its launcher, the C programs under
//! MPICH's and Open MPI's `mpirun`, each with a wall-clock limit. A run that
//! exceeds it is killed with its whole process group and reported as a timeout.
//! The running, the reading of figures and the reference MPIs are
//! `p2pmp_tests::bench`, shared with p2pmp-capi's `cabi` bench.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use p2pmp_tests::bench::{self, build_c, on_path};
pub(crate) use p2pmp_tests::bench::{Failed, RefMpi as Mpi, timed_out, values};

/// What one run gave: its output lines (rank prefixes removed), or why not.
pub(crate) type RunResult = Result<Vec<String>, Failed>;

/// Runs `cmd` in its own process group, killing the group after `limit`.
pub(crate) fn run_limited(cmd: Command, limit: Duration) -> RunResult {
    bench::run_limited(cmd, limit).map(|run| run.lines)
}

/// The C programs built with one MPI, or why they are missing.
#[derive(Debug)]
pub(crate) struct RefBuild {
    pub(crate) mpi: Mpi,
    pub(crate) dir: Result<PathBuf, String>,
}

/// Compiles `benches/c/*.c` with `mpi`'s compiler wrapper into `out/<mpi>/`.
pub(crate) fn build_refs(mpi: Mpi, out: &Path) -> RefBuild {
    let dir = (|| {
        for p in [mpi.cc(), mpi.mpirun()] {
            if on_path(p).is_none() {
                return Err(format!("missing: {p} not installed"));
            }
        }
        let dir = out.join(mpi.name());
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/c");
        let progs: Vec<_> =
            ["pingpong", "ring", "factor", "coll", "pause"].iter().map(|p| (*p, src.join(format!("{p}.c")))).collect();
        build_c(Path::new(mpi.cc()), &dir, &progs, &["-lm"])?;
        Ok(dir)
    })();
    RefBuild { mpi, dir }
}

/// `mpirun -n n prog args` over TCP only (`tcp`) or the default transports.
pub(crate) fn mpirun(b: &RefBuild, tcp: bool, n: u32, prog: &str, args: &[String], limit: Duration) -> RunResult {
    let dir = b.dir.as_ref().map_err(|e| Failed { why: e.clone(), partial: Vec::new() })?;
    let mut cmd = b.mpi.command(tcp, n, &dir.join(prog));
    cmd.args(args);
    run_limited(cmd, limit)
}

/// `p2pmp-launch -n n <this binary> args`.
pub(crate) fn p2pmp(n: u32, args: &[String], limit: Duration) -> RunResult {
    p2pmp_env(n, args, &[], limit)
}

/// [`p2pmp`] with variables added to the ranks' environment.
pub(crate) fn p2pmp_env(n: u32, args: &[String], env: &[(&str, String)], limit: Duration) -> RunResult {
    let me = std::env::current_exe().map_err(|e| Failed { why: e.to_string(), partial: Vec::new() })?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_p2pmp-launch"));
    cmd.args(["-n", &n.to_string(), "--"]).arg(me).args(args).envs(env.iter().map(|(k, v)| (k, v)));
    run_limited(cmd, limit)
}
