//! `p2pmp-launch -n N [--timeout S] [--bootstrap ADDR] -- prog args...`: runs a
//! daemon node (the same `DaemonNode` as `jobd`, alone or joined through
//! `--bootstrap`, with its local node protocol served by the adapters on
//! 127.0.0.1), starts N ranks of `prog` itself with the documented environment
//! (a fresh random job id per run), forwards their output with a rank prefix,
//! and exits non-zero if any rank failed. The MPI tests and benchmarks start
//! their ranks with it: no job protocol, no staging, just the ranks and the
//! node they register with.
//!
//! The ranks die with the launcher (`PR_SET_PDEATHSIG`, also when it is
//! killed), and the first rank to fail stops the others at once; the
//! launcher then exits with that rank's status (128 + the signal of one
//! killed by a signal), as mpirun does.
//!
//! A rank that moved away (exit status [`MOVED_EXIT`], its engine saved
//! beside its checkpoint in `P2PMP_CHECKPOINT_DIR`, see
//! `p2pmp_mpi::ckpt`) is started again from that checkpoint and engine while
//! the other ranks go on.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use clap::Parser;
use p2pmp_core::job::description::MAX_PROCESSES;
use p2pmp_mpi::ckpt::{DIR_VAR, MOVED_EXIT, RESTART_VAR, RESUME_ENGINE_VAR};
use p2pmp_mpi::local_node;
use p2pmp_mpi::{JOB_VAR, NODE_VAR, RANK_VAR, SIZE_VAR, to_hex};

#[derive(Debug, Parser)]
#[command(name = "p2pmp-launch", about = "Start N ranks of an MPI program on this machine")]
struct Args {
    /// Number of ranks, 1 to 4096.
    #[arg(short = 'n', long = "np", alias = "n", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PROCESSES)))]
    n: u32,
    /// Kill every rank and fail after this many seconds.
    #[arg(long)]
    timeout: Option<f64>,
    /// Join the overlay through this node (default: start a network of one).
    #[arg(long)]
    bootstrap: Vec<p2pmp_core::machine::NodeAddr>,
    /// Where the overlay node listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    overlay_listen: String,
    /// Print the job id and node address on stderr.
    #[arg(long)]
    verbose: bool,
    /// The program and its arguments.
    #[arg(required = true, last = true)]
    cmd: Vec<String>,
}

/// Copies a rank's stdout or stderr line by line, prefixed by its rank, on a
/// thread of its own.
fn forward(
    rank: u32,
    src: impl std::io::Read + Send + 'static,
    to_stderr: bool,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name(format!("rank-{rank}-out")).spawn(move || {
        for line in BufReader::new(src).lines() {
            let Ok(line) = line else { break };
            if to_stderr {
                let _ = writeln!(std::io::stderr().lock(), "[{rank}] {line}");
            } else {
                let _ = writeln!(std::io::stdout().lock(), "[{rank}] {line}");
            }
        }
    })
}

/// Every rank's process, and when it started. Those still running when this
/// is dropped (a rank that could not be started, a timeout) are killed and
/// reaped: the launcher leaves none behind.
struct Ranks(Vec<Option<(Child, SystemTime)>>);

impl Ranks {
    fn stop(&mut self) {
        for (mut child, _) in self.0.iter_mut().filter_map(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The checkpoint and engine file a rank that moved away left: the engine
/// file its process (started at `since`) wrote, and its newest checkpoint
/// (the engine names its cut: the process resuming checks they agree).
fn moved_files(rank: u32, since: SystemTime) -> Option<(PathBuf, PathBuf)> {
    let dir = PathBuf::from(std::env::var_os(DIR_VAR).unwrap_or_else(|| "checkpoints".into()));
    let engine = p2pmp_mpi::ckpt::engine_path(&dir, rank);
    // File times come from a coarse clock: a little slack.
    let since = since - Duration::from_millis(100);
    std::fs::metadata(&engine).and_then(|m| m.modified()).ok().filter(|t| *t >= since)?;
    let prefix = format!("rank-{rank}.");
    let newest = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(&prefix)?.strip_suffix(".ckpt")?.parse::<u64>().ok())
        .max()?;
    Some((dir.join(p2pmp_core::ckpt::file_name(rank, newest)), engine))
}

fn main() -> ExitCode {
    let args = Args::parse();
    launch(&args).unwrap_or_else(|e| {
        eprintln!("p2pmp-launch: {e:#}");
        ExitCode::FAILURE
    })
}

/// Starts the node and the ranks, and supervises them to their end.
fn launch(args: &Args) -> anyhow::Result<ExitCode> {
    let (handle, node) = local_node::start(&args.overlay_listen, args.bootstrap.clone())?;
    let overlay_addr = handle.local_addr();
    let job = to_hex(&local_node::fresh_job_id());
    if args.verbose {
        eprintln!("p2pmp-launch: job {job}, node {node}, overlay {overlay_addr}, {} ranks", args.n);
    }
    let mut ranks = Ranks(Vec::new());
    let mut pipes = Vec::new();
    let mut start = |rank: u32, resume: &[(&str, &Path)]| -> anyhow::Result<(Child, SystemTime)> {
        let since = SystemTime::now();
        let mut cmd = Command::new(&args.cmd[0]);
        die_with_the_launcher(&mut cmd);
        let mut child = cmd
            .args(&args.cmd[1..])
            .env(JOB_VAR, &job)
            .env(RANK_VAR, rank.to_string())
            .env(SIZE_VAR, args.n.to_string())
            .env(NODE_VAR, node.to_string())
            .envs(resume.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting rank {rank}: {}", args.cmd[0]))?;
        let out = forward(rank, child.stdout.take().expect("piped"), false);
        let err = forward(rank, child.stderr.take().expect("piped"), true);
        match (out, err) {
            (Ok(o), Ok(e)) => pipes.extend([o, e]),
            (Err(e), _) | (_, Err(e)) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e).with_context(|| format!("starting the output threads of rank {rank}"));
            }
        }
        Ok((child, since))
    };
    for rank in 0..args.n {
        ranks.0.push(Some(start(rank, &[])?));
    }
    let deadline = args.timeout.map(|s| Instant::now() + Duration::from_secs_f64(s));
    // The status of the first rank that failed (or 1, for a timeout).
    let mut failed: Option<u8> = None;
    while ranks.0.iter().any(Option::is_some) {
        for (rank, slot) in ranks.0.iter_mut().enumerate() {
            let Some((child, since)) = slot else { continue };
            if let Some(status) = child.try_wait()? {
                let moved = (status.code() == Some(MOVED_EXIT)).then(|| moved_files(rank as u32, *since)).flatten();
                if let Some((ckpt, engine)) = moved {
                    eprintln!("p2pmp-launch: rank {rank} moved away: started again from {}", engine.display());
                    let resume = [(RESTART_VAR, ckpt.as_path()), (RESUME_ENGINE_VAR, engine.as_path())];
                    *slot = Some(start(rank as u32, &resume)?);
                    continue;
                }
                if !status.success() && failed.is_none() {
                    eprintln!("p2pmp-launch: rank {rank} failed: {status}; stopping the others");
                    failed = Some(exit_status(status));
                }
                *slot = None;
            }
        }
        let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
        if timed_out {
            eprintln!("p2pmp-launch: timeout; killing the ranks still running");
            failed.get_or_insert(1);
        }
        if failed.is_some() {
            // The others would wait for the failed rank until their deadline.
            ranks.stop();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for p in pipes {
        let _ = p.join();
    }
    Ok(failed.map_or(ExitCode::SUCCESS, ExitCode::from))
}

/// A failed rank's status as the launcher's own: its exit code, or 128 plus
/// the signal that killed it (as a shell reports it).
fn exit_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) if c & 0xff != 0 => (c & 0xff) as u8,
        (_, Some(sig)) => (128 + sig).clamp(129, 255) as u8,
        _ => 1,
    }
}

/// Makes the process `cmd` starts die (SIGKILL) when the launcher's thread
/// that starts it ends, also when the launcher is killed: no rank is left
/// waiting for peers that are gone.
fn die_with_the_launcher(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let launcher = std::process::id();
    // SAFETY: only async-signal-safe calls in the child, on values copied before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The launcher died before the death signal was set: stop now.
            if libc::getppid() as u32 != launcher {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}
