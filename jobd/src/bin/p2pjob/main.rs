//! `p2pjob`: submit, follow, list, checkpoint and kill jobs of a p2pmp network; `run` is its
//! mpirun, `demo` a tour on an embedded network.
//!
//! Exit codes: 0 success, 1 the job failed, 2 bad input (command line, job
//! file), 3 no daemon reachable or a daemon error, 4 the job was killed, 130
//! interrupted, 141 its output closed.

mod checkpoint;
mod demo;
mod follow;
mod interrupt;
mod programs;
mod progress;
mod tables;
mod top;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::{CommandFactory, Parser, Subcommand};
use p2pmp_core::auth::SecretKey;
use p2pmp_core::job::description::MAX_PROCESSES;
use p2pmp_core::job::{JobDescription, JobId};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::{ToolReply, ToolRequest};
use p2pmp_jobd::Overlay;
use p2pmp_jobd::config::DEFAULT_CONTROL;
use p2pmp_jobd::embedded::EmbeddedNet;
use p2pmp_jobd::{Client, keys};
use serde_json::json;

use follow::{End, OnInterrupt, Show, StopRules, exit_code, follow, phase_name};
use interrupt::{Interrupts, cleanup_on_interrupt};

/// Submit and control jobs on a p2pmp network.
///
/// Talks to the local jobd on its control socket (--node, or $P2PJOB_NODE, or
/// 127.0.0.1:7420). `submit` and `run` take --local N to start an embedded network
/// of N daemons in this process for the duration of the job instead.
///
/// Requests about a job are signed with your Ed25519 key (--key, or
/// $P2PJOB_KEY, or ~/.config/p2pmp/key, made on first use; `p2pjob whoami`
/// prints its public half for a node owner's allow-list). A submitted job's
/// signature covers its job file and every file it stages, read here as you:
/// a node runs a job only if it allows the key and receives exactly those
/// files, and only the key that submitted a job (or a node's admin) may kill
/// it, checkpoint it or see its output.
///
/// Exit codes: 0 success, 1 the job failed, 2 bad input, 3 no daemon reachable or
/// a daemon error, 4 the job was killed, 130 interrupted (leaving or having
/// killed the job, as the command says), 141 its output closed (`| head`).
#[derive(Debug, Parser)]
#[command(name = "p2pjob", version)]
struct Cli {
    /// The jobd control address.
    #[arg(long, global = true, env = "P2PJOB_NODE", default_value = DEFAULT_CONTROL)]
    node: SocketAddr,
    /// Machine-readable output: JSON lines, the last one a summary.
    #[arg(long, global = true)]
    json: bool,
    /// The overlay of an embedded network (--local N, demo): chord or can.
    #[arg(long, global = true, default_value = "chord")]
    overlay: Overlay,
    /// CAN's dimensions in an embedded network (1 to 8).
    #[arg(long, global = true, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=8))]
    dims: u8,
    /// The key file requests are signed with (default ~/.config/p2pmp/key,
    /// made on first use).
    #[arg(long, global = true, env = "P2PJOB_KEY", value_name = "FILE")]
    key: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Submit a <p2pjob> job file; paths in it are relative to the file.
    Submit {
        /// The job file.
        job: PathBuf,
        /// Follow the job to its end, showing output and progress (Ctrl-C
        /// stops following and leaves the job running).
        #[arg(long)]
        wait: bool,
        /// Run on an embedded network of N local daemons, 1 to 64 (implies --wait).
        #[arg(long, value_name = "N", value_parser = local_nodes)]
        local: Option<usize>,
        /// How long the job may wait for free slots before it fails (e.g. 90s,
        /// 10m; the job file's <queuetimeout> otherwise; unlimited by default).
        #[arg(long, value_name = "DURATION", value_parser = duration)]
        queue_timeout: Option<std::time::Duration>,
    },
    /// Status of one job, or of every job the network knows (asked of every node).
    ///
    /// With a job: a line per rank too, with the node it runs on, its state,
    /// its last checkpoint (epoch, time, bytes stored and raw) or "none", and
    /// a line per recovery from a checkpoint. --json carries the same per rank
    /// (`checkpoint`, `recoveries`, `recovered`).
    Status {
        /// Job id (hex).
        job: Option<String>,
    },
    /// Ask every running rank of a job to checkpoint at its next safe point.
    ///
    /// The ranks of a program using the p2pmp checkpoint API (P2P_Protect,
    /// P2P_Snapshot) take one coordinated checkpoint together at their next
    /// P2P_Snapshot, as if the job's <checkpoint> interval had come round. Prints
    /// how many ranks the request reached, then waits until the checkpoint is
    /// taken and prints its epoch, time and size (bytes stored, and protected
    /// before compression), summed over the ranks; `--no-wait` returns once the
    /// ranks are asked (a program that stops calling P2P_Snapshot keeps the
    /// wait going until it ends). Fails (exit 3) when the job is not running,
    /// reaches no rank (not a p2pmp program), or ends before the checkpoint.
    /// Only the key that submitted the job, or a node's admin, may ask.
    Checkpoint {
        /// Job id (hex).
        job: String,
        /// Return once the ranks are asked, without waiting for the checkpoint.
        #[arg(long)]
        no_wait: bool,
    },
    /// Move a rank of a running job off its node.
    ///
    /// The job takes a checkpoint at its ranks' next P2P_Snapshot (as
    /// `checkpoint` does); after it the rank saves its MPI state and leaves
    /// its node, its checkpoint and that state go to the node holding the
    /// job and on to another node meeting the job's requirements and running
    /// no rank of it, and the rank resumes there from that checkpoint; its
    /// peers find it again and resend what it had not received. The other
    /// ranks go on: nothing rolls back. With --to, the rank goes to that
    /// node (its overlay address as `p2pjob status` and `nodes` show it):
    /// one meeting the job's requirements and running no rank of it, else
    /// the request fails at once; when that node does not take it, the rank
    /// goes elsewhere. Prints the ranks the checkpoint request reached, then
    /// where the rank moved; `p2pjob status` lists every move. When the rank,
    /// once left, cannot be placed alone, the whole job resumes from its
    /// newest checkpoint kept whole (`status` shows it as a restart). A
    /// migration whose rank has not left within 120 s gives up (the rank
    /// stays). Fails (exit 3) when the rank is not running, no other node
    /// meeting the job's requirements is free of its ranks, the request
    /// reaches no rank (not a program using the checkpoint API), or the job
    /// ends first. Only the key that submitted the job, or a node's
    /// admin, may ask.
    Migrate {
        /// Job id (hex).
        job: String,
        /// The rank to move.
        rank: u32,
        /// The node to move it to (e.g. 198.18.0.3:7400; default: any other).
        #[arg(long, value_name = "NODE")]
        to: Option<NodeAddr>,
    },
    /// Everything a job's ranks wrote to stdout and stderr so far, from the
    /// first byte (kept by the node holding the job until its retention ends).
    Output {
        /// Job id (hex).
        job: String,
        /// Only this rank's output, without the "[rank]" prefix.
        #[arg(long)]
        rank: Option<u32>,
    },
    /// Follow a job to its end, showing output and progress (Ctrl-C stops
    /// following and leaves the job running).
    Wait {
        /// Job id (hex).
        job: String,
    },
    /// Stop every rank of a job (one already over is an error: exit code 3).
    Kill {
        /// Job id (hex).
        job: String,
    },
    /// Every node of the network with its resources.
    Nodes,
    /// Make a new Ed25519 key pair (mode 0600) and print its public key.
    Keygen {
        /// Where (default: --key, $P2PJOB_KEY, or ~/.config/p2pmp/key).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Replace an existing key file.
        #[arg(long)]
        force: bool,
    },
    /// Print your public key on one line (`ed25519:` + 64 hex digits), the form
    /// `jobd --allow`, --admin and allow-files take.
    Whoami,
    /// Overlay diagnostics: the node responsible for SHA-1(NAME), and the hops.
    Lookup {
        /// Any name (a registration name, a process key, ...).
        name: String,
    },
    /// Overlay diagnostics: every live value registered under NAME (`res:any`,
    /// `res:tag:linux`, `job:<id>`, ...).
    Query {
        /// The registration name.
        name: String,
    },
    /// Run PROGRAM as N ranks (the mpirun of p2pmp); output prefixed by rank.
    ///
    /// As mpiexec does, a job still running after $MPIEXEC_TIMEOUT seconds is
    /// killed (exit code 4), and so is one whose run is interrupted (Ctrl-C or
    /// SIGTERM): p2pjob asks the kill and follows the job to its end; a second
    /// interrupt leaves at once (exit code 130). With --local an interrupt
    /// ends the embedded network, and the job with it.
    Run {
        /// Number of ranks, 1 to 4096.
        #[arg(short = 'n', long = "np", default_value_t = 1, value_parser = ranks)]
        n: u32,
        /// Run on an embedded network of N local daemons, 1 to 64.
        #[arg(long, value_name = "N", value_parser = local_nodes)]
        local: Option<usize>,
        /// How long the job may wait for free slots before it fails (unlimited by default).
        #[arg(long, value_name = "DURATION", value_parser = duration)]
        queue_timeout: Option<std::time::Duration>,
        /// A variable every rank gets (repeatable): NAME=VALUE, or NAME for its
        /// value here, as mpirun -x. Ranks get no other variable of this shell.
        #[arg(short = 'x', long = "env", value_name = "NAME[=VALUE]", value_parser = env_var)]
        env: Vec<(String, String)>,
        /// The program (a path, a file in this directory, or a name found on $PATH).
        program: PathBuf,
        /// Its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The network's jobs and nodes, redrawn every interval until Ctrl-C.
    Top {
        /// Seconds between two refreshes.
        #[arg(long, default_value_t = 1.0, value_parser = seconds)]
        every: f64,
        /// Print one frame and exit.
        #[arg(long)]
        once: bool,
    },
    /// Shell completions for p2pjob, on stdout (e.g. `p2pjob completions bash >
    /// /etc/bash_completion.d/p2pjob`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// The manual page (roff) on stdout (`p2pjob man | man -l -`); with --dir,
    /// p2pjob.1 and a page for each subcommand written there.
    Man {
        /// Write the pages into this directory (e.g. /usr/local/share/man/man1).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// A tour: 8 local nodes, the bundled MPI ring and factoring jobs, timings.
    ///
    /// The example programs (mpi_ring from p2pmp-mpi, factor from p2pmp-jobd) are
    /// looked up in the `examples` directory next to this binary; when missing
    /// they are built first with `cargo build --examples` in the source tree
    /// p2pjob was built from (so run it as `cargo run --release -p p2pmp-jobd
    /// --bin p2pjob -- demo`). Everything started is stopped and every file
    /// removed at the end.
    Demo {
        /// Nodes in the embedded network, 1 to 64.
        #[arg(long, default_value_t = 8, value_parser = local_nodes)]
        nodes: usize,
        /// Ring loops.
        #[arg(long, default_value_t = 20000)]
        loops: u64,
        /// Where the first node serves the status page (a port alone is
        /// loopback; another free port is taken when this one is busy).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7480")]
        http: String,
        /// Keep the network (and its status page) up after the jobs, until Ctrl-C.
        #[arg(long)]
        keep: bool,
    },
}

/// An error with the exit code it maps to.
#[derive(Debug)]
struct Fail(i32, anyhow::Error);

fn input(e: anyhow::Error) -> Fail {
    Fail(2, e)
}

fn daemon(e: anyhow::Error) -> Fail {
    Fail(3, e)
}

fn main() -> ExitCode {
    quiet_on_closed_output();
    let cli = Cli::parse();
    // P2PJOB_LOG=info (or error, warn, debug, trace): the embedded daemons' log on stderr.
    if let Ok(level) = std::env::var("P2PJOB_LOG") {
        let level = level.parse().unwrap_or(tracing::Level::INFO);
        tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).init();
    }
    let json = cli.json;
    let ran = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli))) {
        Ok(ran) => ran,
        Err(_) if stdout_closed() => return ExitCode::from(141),
        Err(panic) => std::panic::resume_unwind(panic),
    };
    match ran {
        Ok(code) => ExitCode::from(code as u8),
        Err(Fail(_, e)) if broken_pipe(&e) && stdout_closed() => ExitCode::from(141),
        Err(Fail(code, e)) => {
            if json {
                println!("{}", json!({"error": format!("{e:#}"), "exit": code}));
            } else {
                eprintln!("p2pjob: {e:#}");
            }
            ExitCode::from(code as u8)
        }
    }
}

/// Output read by a program that stopped reading (`p2pjob status | head -1`)
/// ends p2pjob quietly with 141, as SIGPIPE ends other tools and the shell
/// reports it; a failed print (Rust's print macros panic, with a backtrace)
/// said nothing useful. SIGPIPE itself stays ignored: the embedded daemons
/// write to pipes of their own, and a rank gone must not end p2pjob.
/// The failed print's panic unwinds (an embedded network's files go with
/// its drop) and `main` turns it into 141; this hook only keeps it quiet.
fn quiet_on_closed_output() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !(std::thread::current().name() == Some("main") && stdout_closed()) {
            default(info);
        }
    }));
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

/// Whether standard output is a pipe nobody reads any more.
fn stdout_closed() -> bool {
    let mut out = libc::pollfd { fd: libc::STDOUT_FILENO, events: 0, revents: 0 };
    // SAFETY: one valid pollfd, a timeout of 0; poll writes only `revents`.
    let ready = unsafe { libc::poll(&mut out, 1, 0) };
    ready == 1 && out.revents & libc::POLLERR != 0
}

/// A variable for the ranks: `NAME=VALUE`, or `NAME` with its value here.
/// A value may not end in whitespace: a job file's element text is trimmed.
fn env_var(s: &str) -> Result<(String, String), String> {
    let (name, value) = match s.split_once('=') {
        Some((n, v)) => (n, v.to_owned()),
        None => (s, std::env::var(s).map_err(|_| format!("{s} is not set here (give NAME=VALUE)"))?),
    };
    p2pmp_core::job::description::check_env_name(name).map_err(|e| e.to_string())?;
    if value.ends_with(char::is_whitespace) {
        return Err(format!("the value of {name} ends in whitespace, which a job file cannot carry"));
    }
    Ok((name.to_owned(), value))
}

/// The variables of `-x`, each name once: a later one wins, as with mpirun.
fn one_each(env: Vec<(String, String)>) -> anyhow::Result<Vec<(String, String)>> {
    let mut kept: Vec<(String, String)> = Vec::new();
    for (name, value) in env {
        kept.retain(|(n, _)| *n != name);
        kept.push((name, value));
    }
    let most = p2pmp_core::job::description::MAX_ENV;
    anyhow::ensure!(kept.len() <= most, "at most {most} variables, not {}", kept.len());
    Ok(kept)
}

/// A number of ranks: 1 to [`MAX_PROCESSES`], as a job file allows.
fn ranks(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("a job needs at least 1 rank".into()),
        Ok(n) if n <= MAX_PROCESSES => Ok(n),
        _ => Err(format!("{s:?} is not a number of ranks (1 to {MAX_PROCESSES})")),
    }
}

/// The most daemons an embedded network (`--local`) runs in this process.
const MAX_LOCAL: usize = 64;

/// A number of embedded daemons: 1 to [`MAX_LOCAL`].
fn local_nodes(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LOCAL).contains(n))
        .ok_or_else(|| format!("{s:?} is not a number of local daemons (1 to {MAX_LOCAL})"))
}

/// A positive number of seconds.
fn seconds(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.1)
        .ok_or_else(|| format!("{s:?} is not a number of seconds of at least 0.1"))
}

/// A duration as job files write them: a number and `ms`, `s` (default), `m` or `h`.
fn duration(s: &str) -> Result<std::time::Duration, String> {
    p2pmp_core::job::description::parse_duration(s)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?} is not a positive duration (e.g. 90s, 10m, 2h)"))
}

fn parse_job(s: &str) -> Result<JobId, Fail> {
    s.trim().parse().map(JobId).map_err(|_| input(anyhow!("{s:?} is not a job id (40 hex digits)")))
}

/// The key file chosen with --key or $P2PJOB_KEY (set once, at the start).
static KEY_FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The key requests are signed with, made on first use (saying so once).
fn signer() -> anyhow::Result<SecretKey> {
    let path = KEY_FILE.get().cloned().unwrap_or_else(|| keys::chosen_path(None));
    let (key, made) = keys::load_or_create(&path)?;
    if made {
        eprintln!("p2pjob: created your key in {} ({})", path.display(), key.public());
    }
    Ok(key)
}

fn connect(addr: SocketAddr) -> Result<Client, Fail> {
    let key = signer().map_err(input)?;
    Ok(Client::connect(addr).map_err(daemon)?.with_key(key))
}

fn run(cli: Cli) -> Result<i32, Fail> {
    if let Some(k) = &cli.key {
        let _ = KEY_FILE.set(k.clone());
    }
    let json = cli.json;
    let shape = (cli.overlay, cli.dims);
    match cli.cmd {
        Cmd::Submit { job, wait, local, queue_timeout } => {
            let xml =
                std::fs::read_to_string(&job).with_context(|| format!("reading {}", job.display())).map_err(input)?;
            let parsed = JobDescription::parse(xml.as_bytes()).map_err(|e| input(anyhow!("{}: {e}", job.display())))?;
            for w in &parsed.warnings {
                eprintln!("p2pjob: {}: warning: {w}", job.display());
            }
            let base = job.canonicalize().ok().and_then(|p| p.parent().map(Path::to_path_buf)).unwrap_or_default();
            let procs = parsed.job.processes;
            let xml = match queue_timeout {
                Some(t) => JobDescription { queue_timeout: Some(t), ..parsed.job }.to_xml(),
                None => xml,
            };
            // Waiting on a daemon's job, an interrupt leaves it running and
            // says so (with --local, it ends the embedded network and the job).
            let follow = match (wait, local) {
                (_, Some(_)) => Follow::Yes(StopRules::default()),
                (true, None) => Follow::Yes(StopRules::leave_on_interrupt()),
                (false, None) => Follow::No,
            };
            submit(cli.node, local.map(|n| (n, shape)), xml, base, procs, follow, json)
        }
        Cmd::Run { n, local, queue_timeout, env, program, args } => {
            let exe = find_program(&program).map_err(input)?;
            let env = one_each(env).map_err(input)?;
            let run = JobDescription::run(exe.to_string_lossy(), args, n);
            let xml = JobDescription { queue_timeout, env, ..run }.to_xml();
            let base = std::env::current_dir().map_err(|e| input(e.into()))?;
            // As mpiexec does: a job still running after MPIEXEC_TIMEOUT seconds
            // is killed, and so is one whose run is interrupted, the
            // interrupts counted from before the job exists (with --local, an
            // interrupt ends the embedded network and the job with it).
            let after = mpiexec_timeout()?;
            let kill =
                StopRules { after, interrupts: local.is_none().then(|| (Interrupts::count(), OnInterrupt::Kill)) };
            submit(cli.node, local.map(|n| (n, shape)), xml, base, n, Follow::Yes(kill), json)
        }
        Cmd::Keygen { out, force } => {
            let path = out.or(cli.key).unwrap_or_else(|| keys::chosen_path(None));
            let key = keys::generate(&path, force).map_err(input)?;
            eprintln!("p2pjob: new key in {}", path.display());
            println!("{}", key.public());
            Ok(0)
        }
        Cmd::Whoami => {
            println!("{}", signer().map_err(input)?.public());
            Ok(0)
        }
        Cmd::Status { job } => {
            let job = job.as_deref().map(parse_job).transpose()?;
            let mut c = connect(cli.node)?;
            match c.call(ToolRequest::Status { job }, Duration::from_secs(10)).map_err(daemon)? {
                ToolReply::Jobs { jobs } => {
                    if json {
                        println!("{}", p2pmp_jobd::json::jobs(&jobs));
                    } else if jobs.is_empty() {
                        println!("no jobs");
                    } else {
                        for j in &jobs {
                            let (running, exited) = tables::rank_counts(j);
                            let ranks = if job.is_some() { tables::ranks(j) } else { String::new() };
                            println!(
                                "{}  {:<9} {} rank(s): {running} running, {exited} exited  {}  (on {}){}",
                                j.job,
                                phase_name(j.phase),
                                j.ranks.len(),
                                j.executable,
                                j.holder,
                                j.error
                                    .as_deref()
                                    .or(j.waiting.as_deref())
                                    .map(|e| format!("  ({e})"))
                                    .unwrap_or_default()
                            );
                            for (i, why) in j.restarts.iter().enumerate() {
                                println!("  restart {}: {why}", i + 1);
                            }
                            for (i, how) in j.moves.iter().enumerate() {
                                println!("  move {}: {how}", i + 1);
                            }
                            print!("{ranks}");
                        }
                    }
                    Ok(0)
                }
                ToolReply::Error { message } => Err(daemon(anyhow!(message))),
                other => Err(daemon(anyhow!("unexpected answer {other:?}"))),
            }
        }
        Cmd::Output { job, rank } => {
            let job = parse_job(&job)?;
            let mut c = connect(cli.node)?;
            let id = c.send(ToolRequest::Output { job, rank }).map_err(daemon)?;
            print_output(&mut c, id, rank.is_some(), json).map_err(daemon)?;
            Ok(0)
        }
        Cmd::Wait { job } => {
            let job = parse_job(&job)?;
            let mut c = connect(cli.node)?;
            let id = c.send(ToolRequest::Watch { job }).map_err(daemon)?;
            let show = Show { json, output: true, progress: true };
            let end = follow(&mut c, id, Some(job), None, show, StopRules::leave_on_interrupt()).map_err(daemon)?;
            Ok(report(&end, json))
        }
        Cmd::Kill { job } => {
            let job = parse_job(&job)?;
            let mut c = connect(cli.node)?;
            match c.call(ToolRequest::Kill { job }, Duration::from_secs(10)).map_err(daemon)? {
                ToolReply::Killing { job } => {
                    if json {
                        println!("{}", json!({"killing": job.to_string()}));
                    } else {
                        println!("killing {job}");
                    }
                    Ok(0)
                }
                ToolReply::Error { message } => Err(daemon(anyhow!(message))),
                other => Err(daemon(anyhow!("unexpected answer {other:?}"))),
            }
        }
        Cmd::Checkpoint { job, no_wait } => {
            let job = parse_job(&job)?;
            let mut c = connect(cli.node)?;
            checkpoint::ask(&mut c, job, !no_wait, json).map_err(daemon)?;
            Ok(0)
        }
        Cmd::Migrate { job, rank, to } => {
            let job = parse_job(&job)?;
            let mut c = connect(cli.node)?;
            checkpoint::migrate(&mut c, job, rank, to, json).map_err(daemon)?;
            Ok(0)
        }
        Cmd::Nodes => {
            let mut c = connect(cli.node)?;
            match c.call(ToolRequest::Nodes, Duration::from_secs(15)).map_err(daemon)? {
                ToolReply::Nodes { nodes } => {
                    print_nodes(&nodes, json);
                    Ok(0)
                }
                ToolReply::Error { message } => Err(daemon(anyhow!(message))),
                other => Err(daemon(anyhow!("unexpected answer {other:?}"))),
            }
        }
        Cmd::Lookup { name } => {
            let mut c = connect(cli.node)?;
            match c.call(ToolRequest::Lookup { name }, Duration::from_secs(15)).map_err(daemon)? {
                ToolReply::Owner { owner, hops } => {
                    if json {
                        println!("{}", json!({"owner": owner.to_string(), "hops": hops}));
                    } else {
                        println!("owner {owner} hops {hops}");
                    }
                    Ok(0)
                }
                ToolReply::Error { message } => Err(daemon(anyhow!(message))),
                other => Err(daemon(anyhow!("unexpected answer {other:?}"))),
            }
        }
        Cmd::Query { name } => {
            let mut c = connect(cli.node)?;
            match c.call(ToolRequest::Query { name }, Duration::from_secs(15)).map_err(daemon)? {
                ToolReply::Values { values } => {
                    if json {
                        println!("{}", json!({"values": values}));
                    } else {
                        values.iter().for_each(|v| println!("{v}"));
                    }
                    Ok(0)
                }
                ToolReply::Error { message } => Err(daemon(anyhow!(message))),
                other => Err(daemon(anyhow!("unexpected answer {other:?}"))),
            }
        }
        Cmd::Top { every, once } => {
            top::run(cli.node, Duration::from_secs_f64(every), once, json).map_err(daemon)?;
            Ok(0)
        }
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "p2pjob", &mut std::io::stdout());
            Ok(0)
        }
        Cmd::Man { dir: None } => {
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()).map_err(|e| input(e.into()))?;
            Ok(0)
        }
        Cmd::Man { dir: Some(dir) } => {
            clap_mangen::generate_to(Cli::command(), &dir)
                .with_context(|| format!("writing the manual pages into {}", dir.display()))
                .map_err(input)?;
            Ok(0)
        }
        Cmd::Demo { nodes, loops, http, keep } => {
            demo::run(demo::Tour { nodes, loops, http, keep, shape }, json).map_err(|e| Fail(1, e))
        }
    }
}

/// Prints the replies to an output request until its end: lines prefixed by
/// rank, or (`raw`, one rank asked for) the bytes as they were written.
fn print_output(c: &mut Client, id: u64, raw: bool, json: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let show = Show { json, output: true, progress: false };
    let mut lines: std::collections::BTreeMap<(u32, p2pmp_core::job::Stream), Vec<u8>> = Default::default();
    loop {
        let (rid, reply, payload) = c.next(Some(Duration::from_secs(60)))?;
        if rid != id {
            continue;
        }
        match reply {
            ToolReply::Output { stream, .. } if raw && !json => {
                if stream == p2pmp_core::job::Stream::Stdout {
                    std::io::stdout().write_all(&payload)?;
                } else {
                    std::io::stderr().write_all(&payload)?;
                }
            }
            ToolReply::Output { rank, stream, .. } => {
                let buf = lines.entry((rank, stream)).or_default();
                buf.extend_from_slice(&payload);
                follow::flush_lines(buf, rank, stream, false, show);
            }
            ToolReply::OutputEnd { .. } => {
                for ((rank, stream), buf) in lines.iter_mut() {
                    follow::flush_lines(buf, *rank, *stream, true, show);
                }
                std::io::stdout().flush()?;
                return Ok(());
            }
            ToolReply::Error { message } => anyhow::bail!("{message}"),
            _ => {}
        }
    }
}

pub(crate) fn print_nodes(values: &[String], json: bool) {
    if json {
        println!("{}", p2pmp_jobd::json::nodes(values));
    } else {
        print!("{}", tables::nodes(values));
    }
}

/// A program path: as given when it names a file, else found on $PATH. It
/// must be a program (an ELF executable or a `#!` script, as the node
/// checks; the node makes it executable): one that is not is refused here,
/// before a job is placed. A bare name that is no program here is looked
/// up on $PATH.
fn find_program(p: &Path) -> anyhow::Result<PathBuf> {
    let program = |c: &Path| -> Result<(), String> {
        let mut head = [0u8; 256];
        let n = std::fs::File::open(c).and_then(|mut f| std::io::Read::read(&mut f, &mut head));
        p2pmp_jobd::interpreter(&head[..n.map_err(|e| e.to_string())?]).map(drop)
    };
    let bare = p.components().count() == 1;
    if !bare {
        let found = p.canonicalize().with_context(|| format!("no program {}", p.display()))?;
        program(&found).map_err(|why| anyhow!("{}: {why}", p.display()))?;
        return Ok(found);
    }
    if p.is_file() && program(p).is_ok() {
        return p.canonicalize().with_context(|| format!("no program {}", p.display()));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file() && program(c).is_ok())
        .ok_or_else(|| anyhow!("no program {} here or on $PATH", p.display()))
}

/// Whether `submit` follows the job to its end, and when it kills it.
#[derive(Debug, Clone)]
enum Follow {
    No,
    Yes(StopRules),
}

/// `$MPIEXEC_TIMEOUT`, seconds (unset, empty or 0: no limit).
fn mpiexec_timeout() -> Result<Option<Duration>, Fail> {
    let Ok(v) = std::env::var("MPIEXEC_TIMEOUT") else { return Ok(None) };
    match v.trim() {
        "" => Ok(None),
        t => match t.parse::<u64>() {
            Ok(s) => Ok((s > 0).then(|| Duration::from_secs(s))),
            Err(_) => Err(input(anyhow!("MPIEXEC_TIMEOUT={v:?} is not a whole number of seconds"))),
        },
    }
}

/// Slots per node so `procs` ranks fit on `nodes` nodes.
fn local_slots(procs: u32, nodes: usize) -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    cores.max(procs.div_ceil(nodes.max(1) as u32))
}

/// An embedded network of `n` daemons of `slots` slots running `overlay` (CAN in `dims`).
/// An embedded network of `n` nodes forming the overlay `shape`, each daemon's
/// configuration then adjusted by `tweak`.
fn local_net(
    n: usize,
    slots: u32,
    (overlay, dims): (Overlay, u8),
    tweak: impl Fn(&mut p2pmp_jobd::Config),
) -> anyhow::Result<EmbeddedNet> {
    // The embedded daemons run the jobs of the key this tool signs with.
    let me = signer()?.public().to_string();
    EmbeddedNet::start_with(n, slots, |c| {
        c.overlay = overlay;
        c.dims = dims;
        c.allow.push(me.clone());
        tweak(c);
    })
}

fn submit(
    node: SocketAddr,
    local: Option<(usize, (Overlay, u8))>,
    xml: String,
    base: PathBuf,
    procs: u32,
    follow_job: Follow,
    json: bool,
) -> Result<i32, Fail> {
    // Signed first, as this user: every file the job stages is read and hashed
    // here (a file this user cannot read fails the submit, before any daemon).
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()) << 48;
    let base_dir = base.to_string_lossy().into_owned();
    let wait = matches!(follow_job, Follow::Yes { .. });
    let submit = ToolRequest::Submit { nonce, xml, base_dir, watch: wait };
    let req = p2pmp_jobd::client::sign_now(submit, &signer().map_err(input)?).map_err(input)?;
    let net = match local {
        Some((n, shape)) => {
            let net = local_net(n, local_slots(procs, n), shape, |_| {}).map_err(daemon)?;
            if !net.wait_formed(Duration::from_secs(30), |_| {}) {
                return Err(daemon(anyhow!("the embedded network of {n} nodes did not form")));
            }
            Some(net)
        }
        None => None,
    };
    if let Some(n) = &net {
        cleanup_on_interrupt(vec![n.dir().to_path_buf()]);
    }
    let addr = net.as_ref().map_or(node, EmbeddedNet::control);
    let mut c = connect(addr)?;
    let id = c.send_as_is(req).map_err(daemon)?;
    let Follow::Yes(kill) = follow_job else {
        let (_, reply, _) = c.next(Some(Duration::from_secs(10))).map_err(daemon)?;
        return match reply {
            ToolReply::Submitted { job, .. } => {
                if json {
                    println!("{}", json!({"job": job.to_string()}));
                } else {
                    println!("{job}");
                }
                Ok(0)
            }
            ToolReply::Error { message } => Err(input(anyhow!(message))),
            other => Err(daemon(anyhow!("unexpected answer {other:?}"))),
        };
    };
    let show = Show { json, output: true, progress: true };
    let end = follow(&mut c, id, None, Some(procs), show, kill)
        .map_err(|e| if e.to_string().starts_with("bad job file") { input(e) } else { daemon(e) })?;
    drop(c);
    drop(net);
    Ok(report(&end, json))
}

/// Prints how a job ended; returns the exit code.
fn report(end: &End, json: bool) -> i32 {
    let job = end.job.map(|j| j.to_string()).unwrap_or_default();
    if json {
        println!(
            "{}",
            json!({"job": job, "phase": phase_name(end.phase), "codes": end.codes, "error": end.error,
            "all_running_ms": end.all_running.map(|d| d.as_secs_f64() * 1000.0),
            "total_ms": end.total.as_secs_f64() * 1000.0,
            "files": end.files.iter().map(|(r, p, ok)| json!({"rank": r, "path": p, "ok": ok})).collect::<Vec<_>>()})
        );
    } else {
        let why = end.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
        eprintln!("job {job} {}{why} ({:.0} ms)", phase_name(end.phase), end.total.as_secs_f64() * 1000.0);
    }
    exit_code(end.phase)
}
