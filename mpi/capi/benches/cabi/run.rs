//! Building and running the measured programs, each with a wall-clock limit,
//! its wall and CPU time (all processes of the run, from `getrusage`). The
//! running, the reading of figures and the reference MPIs are
//! `p2pmp_tests::bench`, shared with p2pmp-mpi's `mpi` bench.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use p2pmp_tests::bench::{self, RefMpi, build_c, on_path};
pub(crate) use p2pmp_tests::bench::{Run as Output, timed_out, values};

/// Runs `cmd` in its own process group, killing the group after `limit`.
pub(crate) fn run_limited(cmd: Command, limit: Duration) -> Result<Output, String> {
    bench::run_limited(cmd, limit).map_err(|f| f.why)
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
    /// Programs built here, or why not.
    dir: Result<PathBuf, String>,
}

impl System {
    /// C through libp2pmpi (`p2pmpicc`, run by `p2pmp-launch`), MPICH or Open MPI,
    /// over TCP or their default (shared-memory) transports.
    pub(crate) fn new(name: &'static str, out: &Path) -> System {
        let cc = match name {
            "p2pmp_c" => Some(target_dir().join("p2pmpicc")),
            n if n.starts_with("mpich") => on_path(RefMpi::Mpich.cc()),
            _ => on_path(RefMpi::OpenMpi.cc()),
        };
        let Some(cc) = cc else {
            return System { name, dir: Err("missing: not installed".into()) };
        };
        let dir = out.join(name);
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut progs =
            vec![("pingpong", here.join("../benches/c/pingpong.c")), ("ring", here.join("../benches/c/ring.c"))];
        if name == "p2pmp_c" {
            progs.push(("selfloop", here.join("benches/selfloop.c")));
        }
        let built = build_c(&cc, &dir, &progs, &[]).map(|()| dir);
        System { name, dir: built }
    }

    /// Runs program `prog` on `n` ranks.
    pub(crate) fn run(&self, n: u32, prog: &str, args: &[&str], limit: Duration) -> Result<Output, String> {
        let dir = self.dir.as_ref().map_err(Clone::clone)?;
        let exe = dir.join(prog);
        let mut cmd = match self.name {
            "p2pmp_c" => launch(n, &exe),
            name => {
                let mpi = if name.starts_with("mpich") { RefMpi::Mpich } else { RefMpi::OpenMpi };
                mpi.command(name.ends_with("_tcp"), n, &exe)
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
