//! `jobd`: the p2pmp node daemon. Joins the overlay, advertises this machine's
//! resources, runs the processes of jobs offered to it, and serves the local node
//! protocol (ranks and the `p2pjob` tool) on a loopback control socket.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use p2pmp_jobd::{Config, Daemon, Overlay};

/// The p2pmp node daemon.
///
/// Settings come from the TOML file given with --config (keys: listen, advertise, control,
/// bootstrap, overlay, dims, work_dir, slots, tags, log_level, stabilize_ms, heartbeat_ms,
/// failure_timeout_ms, retention_s, http, allow, allow_file, allow_any, admin,
/// per_job_user, a [limits] table for every job's processes and a [peers] table against
/// hostile peers: max_conns, max_conns_per_ip, frames_per_s, frame_burst, mib_per_s,
/// max_buffered_mib, max_queued_mib, ban_s, ban_max_s), then from the flags. OS,
/// architecture, cores and memory are detected. Run as root, jobd runs each job as a
/// user of its own (a uid from 1900000000 on, no account), under rlimits and, where
/// cgroups v2 offers memory and pids, a cgroup per job. SIGTERM or Ctrl-C
/// leaves the overlay gracefully and stops every process.
///
/// Exit status: 0 after such a stop, 1 when the daemon cannot start or run
/// (a port taken, a work directory not writable), 2 for bad flags or
/// configuration (nothing is bound or written then).
#[derive(Debug, Parser)]
#[command(name = "jobd", version)]
struct Args {
    /// TOML configuration file.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Overlay address to listen on (default 127.0.0.1:7400; 0.0.0.0:PORT for
    /// every interface, with --advertise).
    #[arg(long, value_name = "IP:PORT", value_parser = ip_port)]
    listen: Option<SocketAddr>,
    /// The address other hosts reach this node at (IP or IP:PORT; the port
    /// defaults to the listening one). Ranks of jobs listen on its IP.
    #[arg(long, value_name = "ADDR")]
    advertise: Option<String>,
    /// Loopback control address for ranks and p2pjob (default 127.0.0.1:7420).
    #[arg(long, value_name = "IP:PORT", value_parser = ip_port)]
    control: Option<SocketAddr>,
    /// A node to join through (repeatable); none starts a new network.
    #[arg(long, value_name = "IP:PORT", value_parser = ip_port)]
    bootstrap: Vec<SocketAddr>,
    /// Overlay: chord (the default), or can.
    #[arg(long)]
    overlay: Option<Overlay>,
    /// CAN's dimensions, 1 to 8 (default 2); every node of a network must agree.
    #[arg(long)]
    dims: Option<u8>,
    /// Where job directories are made (default $TMPDIR/p2pmp-jobd, /tmp/p2pmp-jobd
    /// without TMPDIR): the daemon works in node-PORT there and keeps its key in
    /// node-PORT.key.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Process slots offered (default: cores).
    #[arg(long)]
    slots: Option<u32>,
    /// A tag to advertise (repeatable).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// error, warn, info, debug or trace (default info).
    #[arg(long)]
    log_level: Option<String>,
    /// Overlay maintenance period in milliseconds (default 1000).
    #[arg(long)]
    stabilize_ms: Option<u64>,
    /// Heartbeat period towards a job's submitter and executors, in ms (default 1000).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// How long a job's submitter or executor may stay silent (a paused or
    /// partitioned host) before the job fails naming it, in ms (default 10000).
    #[arg(long)]
    failure_timeout_ms: Option<u64>,
    /// How long finished jobs (status, exit codes, output) are kept, in seconds
    /// (default 3600).
    #[arg(long)]
    retention_s: Option<u64>,
    /// Serve the status page (nodes, the ring, jobs, live; JSON under /api/) at
    /// ADDR: a port alone is loopback (127.0.0.1:PORT). Off by default; no
    /// access control yet, so give another address only on a trusted network.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// A limit on every job (repeatable), KEY=VALUE with KEY one of cpu_s,
    /// memory_mb, open_files, processes, file_size_mb, disk_mb; 0 is none.
    /// Defaults: open_files 4096, processes 1024, file_size_mb and disk_mb 16384.
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    limits: Vec<String>,
    /// Run jobs as the daemon's user even when it is root (not advised).
    #[arg(long)]
    no_job_user: bool,
    /// A key whose jobs this node runs (repeatable), in the form `p2pjob whoami`
    /// prints (`ed25519:` + 64 hex digits). With no allow-list at all, a node on
    /// a loopback address runs only its own user's key; one on any other address
    /// does not start.
    #[arg(long, value_name = "KEY")]
    allow: Vec<String>,
    /// A file of allowed keys, one a line (# comments), re-read when it changes.
    #[arg(long, value_name = "PATH")]
    allow_file: Option<PathBuf>,
    /// Run jobs of any key that reaches this node: any program as this daemon's
    /// user. Only for trusted networks.
    #[arg(long)]
    allow_any: bool,
    /// A key that may kill and inspect every job this node holds (repeatable);
    /// otherwise only a job's submitter may (and this daemon's user).
    #[arg(long, value_name = "KEY")]
    admin: Vec<String>,
    /// Print the control address on stdout once serving (for scripts and tests).
    #[arg(long)]
    print_addr: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (cfg, level) = match configure(&args) {
        Ok(c) => c,
        Err(e) => return fail(&e, 2),
    };
    match serve(&args, &cfg, level) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e, 1),
    }
}

/// An address as IP:PORT, saying so when it is not one.
fn ip_port(s: &str) -> Result<SocketAddr, String> {
    s.trim().parse().map_err(|_| format!("{s:?} is not IP:PORT (e.g. 10.0.0.2:7400; host names are not looked up)"))
}

fn fail(e: &anyhow::Error, code: u8) -> ExitCode {
    eprintln!("jobd: {e:#}");
    ExitCode::from(code)
}

/// An address already taken gets a word on what to do.
fn port_hint(e: anyhow::Error) -> anyhow::Error {
    let in_use = e
        .chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse));
    if in_use {
        anyhow::anyhow!(
            "{e:#}: another jobd (or another program) holds it; stop that one or choose other ports with \
             --listen, --control and --http"
        )
    } else {
        e
    }
}

/// The configuration the file and the flags give, checked: nothing is bound
/// or written before it passes.
fn configure(a: &Args) -> anyhow::Result<(Config, tracing::Level)> {
    let mut cfg = match &a.config {
        Some(p) => Config::from_file(p)?,
        None => Config::default(),
    };
    cfg.listen = a.listen.unwrap_or(cfg.listen);
    cfg.advertise = a.advertise.clone().or(cfg.advertise);
    cfg.control = a.control.unwrap_or(cfg.control);
    if !a.bootstrap.is_empty() {
        cfg.bootstrap = a.bootstrap.clone();
    }
    cfg.overlay = a.overlay.unwrap_or(cfg.overlay);
    cfg.dims = a.dims.unwrap_or(cfg.dims);
    cfg.work_dir = a.work_dir.clone().unwrap_or(cfg.work_dir);
    cfg.slots = a.slots.or(cfg.slots);
    cfg.tags.extend(a.tags.iter().cloned());
    cfg.log_level = a.log_level.clone().unwrap_or(cfg.log_level);
    cfg.stabilize_ms = a.stabilize_ms.unwrap_or(cfg.stabilize_ms);
    cfg.heartbeat_ms = a.heartbeat_ms.unwrap_or(cfg.heartbeat_ms);
    cfg.failure_timeout_ms = a.failure_timeout_ms.unwrap_or(cfg.failure_timeout_ms);
    cfg.retention_s = a.retention_s.unwrap_or(cfg.retention_s);
    cfg.http = a.http.clone().or(cfg.http);
    for kv in &a.limits {
        cfg.limits.set(kv)?;
    }
    cfg.per_job_user &= !a.no_job_user;
    cfg.allow.extend(a.allow.iter().cloned());
    cfg.allow_file = a.allow_file.clone().or(cfg.allow_file);
    cfg.allow_any |= a.allow_any;
    cfg.admin.extend(a.admin.iter().cloned());
    let level = cfg.log_level.parse().with_context(|| format!("log level {:?}", cfg.log_level))?;
    cfg.check()?;
    Ok((cfg, level))
}

fn serve(a: &Args, cfg: &Config, level: tracing::Level) -> anyhow::Result<()> {
    // Colours only for a person watching, not in a log file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_max_level(level).with_ansi(ansi).with_writer(std::io::stderr).init();
    let daemon = Daemon::start(cfg).map_err(port_hint)?;
    if a.print_addr {
        println!("control {} overlay {}", daemon.control_addr(), daemon.overlay_addr());
    }
    if let Some(page) = daemon.http_addr() {
        eprintln!("jobd: status page at http://{page}/");
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    })?;
    tracing::info!("stopping");
    daemon.stop();
    Ok(())
}
