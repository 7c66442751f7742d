//! One running daemon, as one event loop on one thread: the [`DaemonNode`]
//! (its peers and the local control connections of ranks and `p2pjob`, served
//! by the adapters) and the daemon's own loop ([`crate::shell`]: processes and
//! the file worker) run on the same current-thread tokio runtime. Every
//! decision is the node's; the shell carries out its [`p2pmp_core::node::NodeEvent`]s.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use anyhow::Context;
use p2pmp_adapters::local::DaemonCodec;
use p2pmp_adapters::{DriverConfig, NodeHandle, spawn_daemon};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::DaemonNode;
use tracing::info;

use crate::config::Config;
use crate::files;
use crate::sandbox::Sandbox;
use crate::shell::{Shell, Stop};

/// Bytes one peer connection may have queued; a message beyond it fails to send
/// (and an executor then gives up the jobs of that submitter). Everything bulky
/// travels under a window: staged files and output files 4 MiB per job and
/// direction (`SubmitConfig::stage_window`, `ExecConfig::output_window`),
/// stdout + stderr 1 MiB per rank (`STREAM_WINDOW`). A job with 16 ranks on one
/// node printing flat out has 20 MiB in flight towards its submitter at most;
/// this leaves room for several such jobs at once plus their control traffic.
const MAX_TX_BYTES: usize = 128 << 20;

/// How long a stopping daemon waits for ranks that can move to other nodes
/// to have moved (it stays in the overlay meanwhile), then to have left the
/// overlay, then for its processes to end.
const LEAVE_WAIT: Duration = Duration::from_secs(3);
const DRAIN_WAIT: Duration = Duration::from_secs(30);
const KILL_WAIT: Duration = Duration::from_secs(2);

/// A running daemon. Dropping it stops it (gracefully: it leaves the overlay).
#[derive(Debug)]
pub struct Daemon {
    overlay: SocketAddr,
    control: SocketAddr,
    /// The status page (`--http`), a client of the control socket.
    http: Option<crate::http::StatusServer>,
    work_dir: std::path::PathBuf,
    handle: Option<NodeHandle<DaemonNode>>,
    stop: Option<Stop>,
}

impl Daemon {
    /// Binds both sockets, joins the overlay and starts serving.
    pub fn start(cfg: &Config) -> anyhow::Result<Daemon> {
        cfg.check()?;
        let auth = crate::allow::policy(cfg)?;
        let fixed_keys = crate::allow::parse_keys(&cfg.allow, "allowed key")?;
        let listener = TcpListener::bind(cfg.listen).with_context(|| format!("binding {}", cfg.listen))?;
        let overlay = cfg.advertised(listener.local_addr()?)?;
        let control_l = TcpListener::bind(cfg.control).with_context(|| format!("binding {}", cfg.control))?;
        let control = control_l.local_addr()?;
        let http = cfg.http_addr()?.map(|a| crate::http::StatusServer::start(a, control)).transpose()?;
        std::fs::create_dir_all(&cfg.work_dir).with_context(|| format!("creating {}", cfg.work_dir.display()))?;
        let work_dir = cfg.work_dir.canonicalize()?.join(format!("node-{}", overlay.port()));
        // A daemon killed -9 on this port leaves its job directories, logs and
        // cache behind; its ranks died with it and this run knows none of them.
        if work_dir.exists() {
            info!(dir = %work_dir.display(), "removing what a previous run on this port left");
            files::remove_dir(&work_dir.to_string_lossy());
        }
        let sandbox = Sandbox::new(cfg.limits.clone(), cfg.per_job_user, &work_dir, overlay.port());
        let mut dc = cfg.daemon_config(overlay, control, &work_dir);
        dc.resources.tags.extend(sandbox.tags());
        dc.auth = auth;
        let resources = dc.resources.clone();
        let addr = NodeAddr(overlay);
        let guard = crate::limits::fit_descriptors(cfg.peers.guard());
        // Beside the node's directory, which every start clears: the key outlives runs.
        let key = crate::node_key::load_or_create(&cfg.work_dir.join(format!("node-{}.key", overlay.port())))?;
        let driver = DriverConfig {
            max_tx_bytes: MAX_TX_BYTES,
            overlay: Some(cfg.overlay_kind()),
            guard,
            noise: Some(key),
            ..DriverConfig::default()
        };
        let (stop, stopped) = Stop::new();
        let codec = DaemonCodec::new(NodeAddr(control));
        let name = format!("jobd-files-{}", overlay.port());
        let handle = spawn_daemon(
            listener,
            control_l,
            codec,
            driver,
            move |now| DaemonNode::new(dc, addr, now),
            move |events, remote| Shell::run(name, events, remote, stopped, sandbox),
        )?;
        if let Some(f) = &cfg.allow_file {
            crate::allow::watch(f.clone(), fixed_keys, handle.remote())?;
        }
        info!(%overlay, %control, resources = %resources.to_line(), "jobd started");
        info!("transparent checkpointing: {}", crate::criu::Criu::probe());
        Ok(Daemon { overlay, control, http, work_dir, handle: Some(handle), stop: Some(stop) })
    }

    /// Where the status page listens, when it is on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(crate::http::StatusServer::addr)
    }

    /// The overlay address (what other nodes bootstrap through).
    pub fn overlay_addr(&self) -> SocketAddr {
        self.overlay
    }

    /// The control address (`P2PMP_NODE`, and what `p2pjob --node` takes).
    pub fn control_addr(&self) -> SocketAddr {
        self.control
    }

    /// Leaves the overlay, stops every process, removes the node's work directory.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let Some(handle) = self.handle.take() else { return };
        if let Some(stop) = self.stop.take() {
            // The shell leaves the overlay, waits for it, stops every process.
            stop.wait(DRAIN_WAIT + LEAVE_WAIT + KILL_WAIT + Duration::from_secs(1));
        }
        if let Ok(s) = handle.inspect(|d| d.stats()) {
            let g = s.guard;
            info!(
                accepted = g.accepted,
                refused = g.refused,
                cut_off = g.cut_off,
                "connections: inbound overlay totals"
            );
        }
        let _ = handle.shutdown();
        files::remove_dir(&self.work_dir.to_string_lossy());
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.halt();
    }
}

/// How long the shell waits to have left, for ranks to move, and for
/// processes to end (for `shell`).
pub(crate) const fn stop_waits() -> (Duration, Duration, Duration) {
    (LEAVE_WAIT, DRAIN_WAIT, KILL_WAIT)
}
