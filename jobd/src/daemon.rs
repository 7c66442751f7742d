//! One running daemon: the [`DaemonNode`] on the tokio adapter in its own thread,
//! and an I/O shell (a current-thread tokio runtime in another) that serves the
//! control socket, runs processes and does the node's file work. The shell only
//! moves bytes and carries out [`NodeEvent`]s; every decision is the node's.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use p2pmp_adapters::{DriverConfig, NodeHandle, Remote, RuntimeKind, spawn_node};
use p2pmp_core::local::LocalRequest;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::{TOOL_PREFACE, ToolRequest};
use p2pmp_core::node::{ConnId, DaemonConfig, DaemonNode, NodeCommand, NodeEvent};
use p2pmp_core::overlay::OverlayEvent;
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::files;
use crate::procs::{Procs, Spawn};

/// Bytes one peer connection may have queued; a message beyond it fails to send
/// (and an executor then gives up the jobs of that submitter). Everything bulky
/// travels under a window: staged files and output files 4 MiB per job and
/// direction (`SubmitConfig::stage_window`, `ExecConfig::output_window`),
/// stdout + stderr 1 MiB per rank (`STREAM_WINDOW`). A job with 16 ranks on one
/// node printing flat out has 20 MiB in flight towards its submitter at most;
/// this leaves room for several such jobs at once plus their control traffic.
const MAX_TX_BYTES: usize = 128 << 20;

type Conns = Arc<Mutex<BTreeMap<ConnId, mpsc::UnboundedSender<Bytes>>>>;

/// Bytes of a kept log file per replayed chunk.
const REPLAY_PIECE: usize = 256 << 10;

/// How often the host's load and free memory are measured for the node.
const HOST_STATS_EVERY: Duration = Duration::from_secs(2);

/// A running daemon. Dropping it stops it (gracefully: it leaves the overlay).
#[derive(Debug)]
pub struct Daemon {
    overlay: SocketAddr,
    control: SocketAddr,
    /// The status page (`--http`), a client of the control socket.
    http: Option<crate::http::StatusServer>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Daemon {
    /// Binds both sockets, joins the overlay and starts serving.
    pub fn start(cfg: &Config) -> anyhow::Result<Daemon> {
        cfg.check()?;
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
        let resources = cfg.resources();
        let seed = u64::from(overlay.port()) << 32 | u64::from(std::process::id());
        let mut dc = DaemonConfig::new(resources.clone(), control.to_string(), work_dir.to_string_lossy(), seed);
        dc.bootstrap = cfg.bootstrap.iter().map(|a| NodeAddr(*a)).collect();
        dc.heartbeat_period = Duration::from_millis(cfg.heartbeat_ms.max(10));
        dc.failure_timeout = Duration::from_millis(cfg.failure_timeout_ms.max(cfg.heartbeat_ms * 2));
        dc.retention = Duration::from_secs(cfg.retention_s);
        // Grows across restarts at one address: this run's lines outrank the last's.
        let unix_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        dc.generation_base = u64::try_from(unix_ms).unwrap_or(u64::MAX >> 24) << 20;
        let stab = Duration::from_millis(cfg.stabilize_ms.max(10));
        dc.chord.stabilize_period = stab;
        dc.chord.fix_fingers_period = stab;
        dc.chord.check_predecessor_period = stab * 2;
        dc.chord.join_backoff_min = stab.min(Duration::from_secs(1));
        dc.chord.join_backoff_max = (stab * 8).min(Duration::from_secs(8));
        let addr = NodeAddr(overlay);
        let driver = DriverConfig { max_tx_bytes: MAX_TX_BYTES, ..DriverConfig::default() };
        let handle = spawn_node(RuntimeKind::Tokio, listener, driver, move |now| DaemonNode::new(dc, addr, now))?;
        info!(%overlay, %control, resources = %resources.to_line(), "jobd started");
        let (stop_tx, stop_rx) = oneshot::channel();
        control_l.set_nonblocking(true)?;
        let thread = std::thread::Builder::new().name(format!("jobd-shell-{}", overlay.port())).spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
            match rt {
                Ok(rt) => {
                    if let Err(e) = rt.block_on(shell(handle, control_l, stop_rx, work_dir)) {
                        warn!(%e, "jobd shell ended with an error");
                    }
                }
                Err(e) => warn!(%e, "cannot start the tokio runtime"),
            }
        })?;
        Ok(Daemon { overlay, control, http, stop: Some(stop_tx), thread: Some(thread) })
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

    /// Waits until the daemon stops on its own (it never does unless its shell fails).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn halt(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.halt();
    }
}

fn command(remote: &Remote<DaemonNode>, cmd: NodeCommand) {
    match remote.command(cmd) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(%e, "node refused a command"),
        Err(e) => debug!(%e, "node gone"),
    }
}

async fn shell(
    handle: NodeHandle<DaemonNode>,
    control: TcpListener,
    mut stop: oneshot::Receiver<()>,
    work_dir: std::path::PathBuf,
) -> anyhow::Result<()> {
    let remote = handle.remote();
    let me = NodeAddr(control.local_addr()?);
    let listener = tokio::net::TcpListener::from_std(control)?;
    let conns: Conns = Arc::default();
    let procs = Procs::new(remote.clone());
    let mut next_conn: ConnId = 0;
    let mut stats = tokio::time::interval(HOST_STATS_EVERY);
    loop {
        tokio::select! {
            _ = stats.tick() => {
                if let Some((load_milli, mem_free_mb)) = crate::config::host_stats() {
                    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                    let unix_ms = unix.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                    command(&remote, NodeCommand::HostStats { load_milli, mem_free_mb, unix_ms });
                }
            },
            ev = handle.events().recv() => match ev {
                Ok(ev) => on_event(ev, &remote, &procs, &conns, me),
                Err(_) => break,
            },
            acc = listener.accept() => match acc {
                Ok((stream, _)) => {
                    next_conn += 1;
                    tokio::spawn(serve_conn(stream, next_conn, remote.clone(), conns.clone()));
                }
                Err(e) => warn!(%e, "accept on the control socket failed"),
            },
            _ = &mut stop => break,
        }
    }
    // Graceful stop: leave (the node hands its registrations over), stop processes.
    command(&remote, NodeCommand::Leave);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        match tokio::time::timeout_at(deadline, handle.events().recv()).await {
            Ok(Ok(NodeEvent::Overlay(OverlayEvent::Left))) => {
                info!("left the overlay");
                break;
            }
            Ok(Ok(ev)) => on_event(ev, &remote, &procs, &conns, me),
            _ => break,
        }
    }
    procs.kill_all();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while procs.running() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(handle);
    files::remove_dir(&work_dir.to_string_lossy());
    Ok(())
}

fn on_event(ev: NodeEvent, remote: &Remote<DaemonNode>, procs: &Procs, conns: &Conns, me: NodeAddr) {
    match ev {
        NodeEvent::Overlay(e) => info!(event = ?e, "overlay"),
        NodeEvent::ReadFile { job, file, path } => {
            command(remote, NodeCommand::FileRead { job, file, data: files::read_hashed(&path) });
        }
        NodeEvent::WriteFile { path, offset, data } => {
            if let Err(e) = files::write_at(&path, offset, &data) {
                warn!(path, %e, "cannot write a file");
            }
        }
        NodeEvent::Spawn { job, rank, dir, program, args, env } => {
            info!(%job, rank, program, "starting a process");
            procs.spawn(Spawn { job, rank, dir, program, args, env });
        }
        NodeEvent::Kill { job, rank } => procs.kill(job, rank),
        NodeEvent::OutputCredit { job, rank, bytes } => procs.credit(job, rank, bytes),
        NodeEvent::ReadOutputFile { job, rank, name, path } => {
            command(remote, NodeCommand::OutputFileRead { job, rank, name, data: files::read(&path) });
        }
        NodeEvent::RemoveDir { path } => files::remove_dir(&path),
        NodeEvent::CopyFile { from, to, link } => {
            if let Err(e) = files::copy(&from, &to, link) {
                warn!(from, to, %e, "cannot copy a file");
            }
        }
        NodeEvent::RemoveFile { path } => {
            if let Err(e) = std::fs::remove_file(&path).or_else(files::missing_is_fine) {
                warn!(path, %e, "cannot remove a file");
            }
        }
        NodeEvent::Reply { conn, request_id, reply } => {
            write_to(conns, conn, &Envelope::new(me.id(), me, request_id, reply));
        }
        NodeEvent::ToolReply { conn, request_id, reply, payload } => {
            write_to(conns, conn, &Envelope::new(me.id(), me, request_id, reply).with_payload(payload));
        }
        NodeEvent::JobFinished { job, phase } => info!(%job, ?phase, "job finished"),
        NodeEvent::ReplayOutput { replay, files } => {
            for f in files {
                files::read_pieces(&f.path, f.len, REPLAY_PIECE, |offset, data| {
                    let (rank, stream) = (f.rank, f.stream);
                    command(remote, NodeCommand::Replayed { replay, rank, stream, offset, data });
                });
            }
            command(remote, NodeCommand::ReplayDone { replay });
        }
        other => debug!(event = ?other, "unhandled node event"),
    }
}

fn write_to<B: serde::Serialize>(conns: &Conns, conn: ConnId, env: &Envelope<B>) {
    let mut buf = BytesMut::new();
    match encode_frame(env, &mut buf, DEFAULT_MAX_FRAME) {
        Ok(()) => {
            if let Some(tx) = conns.lock().expect("conn table lock").get(&conn) {
                let _ = tx.send(buf.freeze());
            }
        }
        Err(e) => warn!(%e, "cannot encode a reply"),
    }
}

async fn serve_conn(stream: tokio::net::TcpStream, conn: ConnId, remote: Remote<DaemonNode>, conns: Conns) {
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    conns.lock().expect("conn table lock").insert(conn, tx);
    let writer = tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if wr.write_all(&b).await.is_err() {
                break;
            }
        }
    });
    let mut dec = FrameDecoder::default();
    let mut buf = vec![0u8; 16 * 1024];
    // None until the first byte tells a tool (preface) from a rank (a frame).
    let mut tool: Option<bool> = None;
    let mut head: Vec<u8> = Vec::new();
    'read: loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut data = &buf[..n];
        if tool.is_none() {
            if head.is_empty() && data[0] != TOOL_PREFACE[0] {
                tool = Some(false);
            } else {
                let take = (TOOL_PREFACE.len() - head.len()).min(data.len());
                head.extend_from_slice(&data[..take]);
                data = &data[take..];
                if head.len() < TOOL_PREFACE.len() {
                    continue;
                }
                if head != TOOL_PREFACE {
                    debug!(conn, "bad preface on the control socket");
                    break;
                }
                tool = Some(true);
            }
        }
        dec.push(data);
        loop {
            let frame = match dec.decode() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    debug!(conn, %e, "bad frame on the control socket");
                    break 'read;
                }
            };
            let cmd = if tool == Some(true) {
                decode_envelope::<ToolRequest>(frame).map(|env| NodeCommand::Tool {
                    conn,
                    request_id: env.request_id,
                    req: env.body,
                })
            } else {
                decode_envelope::<LocalRequest>(frame).map(|env| NodeCommand::Local {
                    conn,
                    request_id: env.request_id,
                    req: env.body,
                })
            };
            match cmd {
                Ok(cmd) => command(&remote, cmd),
                Err(e) => {
                    debug!(conn, %e, "bad request on the control socket");
                    break 'read;
                }
            }
        }
    }
    conns.lock().expect("conn table lock").remove(&conn);
    command(&remote, NodeCommand::ConnClosed { conn });
    // Let queued replies go out before the socket closes.
    let _ = tokio::time::timeout(Duration::from_millis(200), writer).await;
}
