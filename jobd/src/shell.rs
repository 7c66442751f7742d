//! The daemon's own event loop, beside the node on the same runtime: it
//! carries out the node's events (processes to start, kill and feed credit;
//! file work, queued to the [`Worker`]; host figures measured every few
//! seconds) and never blocks. On [`Stop`] it waits for the ranks its node's
//! jobs' submitters move to other nodes (up to 30 s; the node stays in the
//! overlay meanwhile, so their peers find them again), has the node leave
//! the overlay, waits to have left, stops every process still here and says
//! it is done.

use std::time::Duration;

use async_channel::Receiver;
use p2pmp_adapters::Remote;
use p2pmp_core::node::{DaemonNode, NodeCommand, NodeEvent};
use p2pmp_core::overlay::OverlayEvent;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::procs::{Procs, Spawn, Tell};
use crate::sandbox::Sandbox;
use crate::worker::{Report, Work, Worker};

/// How often the host's load and free memory are measured for the node.
const HOST_STATS_EVERY: Duration = Duration::from_secs(2);
/// How often the directories of running jobs are measured against the disk limit.
const QUOTA_EVERY: Duration = Duration::from_secs(1);

/// The daemon's side of a stop: ask, then wait for the shell to be done.
#[derive(Debug)]
pub(crate) struct Stop {
    ask: async_channel::Sender<()>,
    done: async_channel::Receiver<()>,
}

/// The shell's side of a stop.
#[derive(Debug)]
pub(crate) struct Stopped {
    asked: async_channel::Receiver<()>,
    done: async_channel::Sender<()>,
}

impl Stop {
    pub(crate) fn new() -> (Stop, Stopped) {
        let (ask, asked) = async_channel::bounded(1);
        let (done_tx, done) = async_channel::bounded(1);
        (Stop { ask, done }, Stopped { asked, done: done_tx })
    }

    /// Asks the shell to stop and waits (at most `limit`) until it is done
    /// (from the daemon's owner's thread, never from the event loop).
    pub(crate) fn wait(self, limit: Duration) {
        if self.ask.try_send(()).is_err() {
            return;
        }
        let deadline = std::time::Instant::now() + limit;
        while self.done.try_recv().is_err() && !self.done.is_closed() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Where a stop is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stopping {
    No,
    /// Ranks moving off to other nodes, until the node says none is left
    /// to move or the instant passes; the node stays in the overlay
    /// meanwhile (their peers look their new places up through it).
    Draining(Instant),
    /// Leaving the overlay, until the node says it left or the instant passes.
    Leaving(Instant),
    /// Every process killed; waiting for them to end until the instant.
    Killing(Instant),
    Done,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Shell {
    remote: Remote<DaemonNode>,
    procs: Procs,
    worker: Worker,
    stopping: Stopping,
    /// Jobs that may still move their ranks off this node, as the node says.
    moving: usize,
}

impl Shell {
    /// Runs until the node's events stop (the node was shut down).
    pub(crate) async fn run(
        name: String,
        events: Receiver<NodeEvent>,
        remote: Remote<DaemonNode>,
        stop: Stopped,
        sandbox: Sandbox,
    ) {
        let (started_tx, started) = async_channel::unbounded();
        let rt = tokio::runtime::Handle::current();
        let worker = match Worker::start(name, remote.clone(), rt, started_tx, sandbox) {
            Ok(w) => w,
            Err(e) => {
                warn!(%e, "cannot start the file worker");
                return;
            }
        };
        let mut sh =
            Shell { procs: Procs::new(Tell::node(remote.clone())), remote, worker, stopping: Stopping::No, moving: 0 };
        let mut stats = tokio::time::interval(HOST_STATS_EVERY);
        let mut quota = tokio::time::interval(QUOTA_EVERY);
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        loop {
            let deadline = match sh.stopping {
                Stopping::Draining(t) | Stopping::Leaving(t) | Stopping::Killing(t) => t,
                Stopping::No | Stopping::Done => far,
            };
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(ev) => sh.on_event(ev),
                    Err(_) => break,
                },
                Ok(report) = started.recv() => match report {
                    Report::Started(started) => sh.adopt(started.0, started.1),
                    Report::OverQuota { job, message } => sh.procs.kill_job(job, &message),
                },
                Some(key) = sh.procs.ended() => sh.procs.forget(key),
                _ = stats.tick() => sh.host_stats(),
                _ = quota.tick(), if sh.procs.running() > 0 => sh.work(Work::CheckQuota),
                Ok(()) = stop.asked.recv(), if sh.stopping == Stopping::No => {
                    // The node says how many jobs may still move ranks off
                    // ([`NodeEvent::Draining`]), and leaves the overlay once
                    // none is left.
                    sh.stopping = Stopping::Draining(Instant::now() + crate::daemon::stop_waits().1);
                    let _ = sh.remote.post(NodeCommand::Leave);
                }
                _ = tokio::time::sleep_until(deadline), if deadline != far => sh.next_stop_step(),
            }
            if matches!(sh.stopping, Stopping::Killing(_)) && sh.procs.running() == 0 {
                sh.stopping = Stopping::Done;
            }
            if sh.stopping == Stopping::Done {
                let _ = stop.done.try_send(());
            }
        }
    }

    fn next_stop_step(&mut self) {
        match self.stopping {
            // Ranks still here are stopped after the overlay is left.
            Stopping::Draining(_) => self.leave_now(),
            Stopping::Leaving(_) => self.kill_all(),
            Stopping::Killing(_) => self.stopping = Stopping::Done,
            Stopping::No | Stopping::Done => {}
        }
    }

    /// Done waiting for ranks to move: the node leaves the overlay now (a
    /// second [`NodeCommand::Leave`] makes it leave with ranks still here).
    fn leave_now(&mut self) {
        let _ = self.remote.post(NodeCommand::Leave);
        self.stopping = Stopping::Leaving(Instant::now() + crate::daemon::stop_waits().0);
    }

    fn kill_all(&mut self) {
        self.procs.kill_all();
        self.stopping = Stopping::Killing(Instant::now() + crate::daemon::stop_waits().2);
    }

    fn adopt(&mut self, spawn: Spawn, child: std::io::Result<tokio::process::Child>) {
        let key = (spawn.job, spawn.rank);
        self.procs.adopt(spawn, child);
        if matches!(self.stopping, Stopping::Killing(_) | Stopping::Done) {
            // Started while the daemon stops: it goes at once.
            self.procs.kill(key.0, key.1);
        }
    }

    fn host_stats(&self) {
        if let Some((load_milli, mem_free_mb)) = crate::config::host_stats() {
            let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            let unix_ms = unix.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let _ = self.remote.post(NodeCommand::HostStats { load_milli, mem_free_mb, unix_ms });
        }
    }

    fn work(&self, w: Work) {
        if !self.worker.send(w) {
            warn!("the file worker is gone");
        }
    }

    fn on_event(&mut self, ev: NodeEvent) {
        match ev {
            NodeEvent::Overlay(OverlayEvent::Left) => {
                info!("left the overlay");
                if matches!(self.stopping, Stopping::Draining(_) | Stopping::Leaving(_)) {
                    self.kill_all();
                }
            }
            NodeEvent::Draining { jobs } => {
                let stopping = matches!(self.stopping, Stopping::Draining(_));
                if stopping && jobs > 0 && self.moving == 0 {
                    info!(jobs, "waiting for ranks to move to other nodes before stopping");
                }
                self.moving = jobs;
                if stopping && jobs == 0 {
                    // The node leaves the overlay by itself now.
                    self.stopping = Stopping::Leaving(Instant::now() + crate::daemon::stop_waits().0);
                }
            }
            NodeEvent::Overlay(OverlayEvent::Disconnected) => warn!(
                "cut off from the overlay: no bootstrap node (--bootstrap) and no peer known before answers \
                 (not running, a wrong address, a firewall, or an --advertise address they cannot reach); \
                 retrying, each attempt logged at --log-level debug"
            ),
            NodeEvent::Overlay(e) => info!(event = ?e, "overlay"),
            NodeEvent::ReadFile { job, file, path } => self.work(Work::ReadFile { job, file, path }),
            NodeEvent::WriteFile { path, offset, data } => self.work(Work::WriteFile { path, offset, data }),
            NodeEvent::Spawn { job, rank, dir, program, args, env } => {
                info!(%job, rank, program, "starting a process");
                self.procs.starting(job, rank);
                self.work(Work::Spawn(Spawn { job, rank, dir, program, args, env }));
            }
            NodeEvent::Kill { job, rank } => self.procs.kill(job, rank),
            NodeEvent::OutputCredit { job, rank, bytes } => self.procs.credit(job, rank, bytes),
            NodeEvent::ReadOutputFile { job, rank, name, path } => {
                self.work(Work::ReadOutputFile { job, rank, name, path })
            }
            NodeEvent::RemoveDir { path } => self.work(Work::RemoveDir { path }),
            NodeEvent::VerifyFiles { job, files } => self.work(Work::VerifyFiles { job, files }),
            NodeEvent::CopyFile { from, to, link } => self.work(Work::CopyFile { from, to, link }),
            NodeEvent::RemoveFile { path } => self.work(Work::RemoveFile { path }),
            NodeEvent::ReplayOutput { replay, files } => self.work(Work::Replay { replay, files }),
            NodeEvent::JobFinished { job, phase } => info!(%job, ?phase, "job finished"),
            other => debug!(event = ?other, "unhandled node event"),
        }
    }
}
