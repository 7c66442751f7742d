//! The jobs a node holds (those submitted to it): what the submitter reports
//! becomes tool replies for their watchers, file writes for output files, and
//! log files of every rank's stdout and stderr, kept from the first byte so a
//! `wait` that attaches late, or `output`, shows all of it (a replay from the
//! files, then the live stream). A finished job is forgotten `retention` after
//! it ended: its state, its logs and its key in the overlay.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use bytes::Bytes;

use super::control::{JobPhase, JobStatus, RankStatus, ToolReply, job_key_name};
use super::{Client, DaemonNode, LogFile, NodeEvent, NodeMsg, Timer, join, plain_name};
use crate::auth::PublicKey;
use crate::job::{JobEnd, JobId, JobMsg, Phase, Stream, SubmitEvent};
use crate::machine::NodeAddr;
use crate::overlay::OverlayCommand;

/// How a held job ended.
#[derive(Debug, Clone)]
pub(super) struct End {
    pub(super) phase: JobPhase,
    pub(super) codes: Vec<i32>,
    pub(super) error: Option<String>,
    pub(super) at: Instant,
}

/// One client following a job; while its replay of the logs runs, live
/// replies wait in `queued` so nothing overtakes the replay.
#[derive(Debug)]
pub(super) struct Watcher {
    pub(super) client: Client,
    replay: Option<u64>,
    queued: Vec<(ToolReply, Bytes)>,
}

/// What a node keeps about a job submitted to it, beside the submitter's state.
#[derive(Debug)]
pub(super) struct JobMeta {
    /// The key that submitted it (signed the request), if it was signed.
    pub(super) owner: Option<PublicKey>,
    base_dir: String,
    size: u32,
    pub(super) watchers: Vec<Watcher>,
    pub(super) end: Option<End>,
    /// Bytes of each rank's stdout and stderr kept in its log file.
    logs: BTreeMap<(u32, Stream), u64>,
    /// The output files written here and the length each will have.
    outputs: BTreeMap<String, u64>,
    /// How the job ended, held while the shell makes sure its output files are
    /// whole on disk ([`NodeEvent::VerifyFiles`]): the end is told only then.
    verifying: Option<(JobPhase, Vec<i32>, Option<String>)>,
    /// Tools following a checkpoint request: its number, who asked.
    pub(super) checkpoint_waiters: Vec<(u64, Client)>,
    /// Tools waiting for a migration, by its checkpoint request.
    pub(super) migrate_waiters: Vec<(u64, Client)>,
}

/// A replay of a job's logs to one client under way.
#[derive(Debug)]
struct Replay {
    job: JobId,
    client: Client,
    /// After the replay: follow the job (a watch), or end with `OutputEnd`.
    follow: bool,
}

/// Replays under way, by number.
#[derive(Debug, Default)]
pub(super) struct Replays {
    next: u64,
    live: BTreeMap<u64, Replay>,
}

impl DaemonNode {
    /// Where the node keeps `job`'s logs.
    pub(super) fn log_dir(&self, job: JobId) -> String {
        format!("{}/out-{job}", self.work_dir.trim_end_matches('/'))
    }

    /// Where the cuts of a job held here are kept for a restart.
    pub(super) fn cut_dir(&self, job: JobId) -> String {
        format!("{}/cuts-{job}", self.work_dir.trim_end_matches('/'))
    }

    pub(super) fn cut_path(&self, job: JobId, rank: u32, epoch: u64) -> String {
        format!("{}/{}", self.cut_dir(job), crate::ckpt::file_name(rank, epoch))
    }

    pub(super) fn log_path(&self, job: JobId, rank: u32, stream: Stream) -> String {
        let ext = if stream == Stream::Stdout { "out" } else { "err" };
        format!("{}/{rank}.{ext}", self.log_dir(job))
    }

    /// A job was submitted here: hold it, register its key.
    pub(super) fn hold(&mut self, now: Instant, job: JobId, base_dir: String, size: u32, owner: Option<PublicKey>) {
        if self.jobs.contains_key(&job) {
            return;
        }
        let meta = JobMeta {
            owner,
            base_dir,
            size,
            watchers: Vec::new(),
            end: None,
            logs: BTreeMap::new(),
            outputs: BTreeMap::new(),
            verifying: None,
            checkpoint_waiters: Vec::new(),
            migrate_waiters: Vec::new(),
        };
        self.jobs.insert(job, meta);
        let (name, value, ttl) = (job_key_name(job), self.addr.to_string(), self.job_key_ttl);
        self.overlay(now, OverlayCommand::Register { name, value, ttl });
    }

    /// `client` follows `job` from now on (its logs so far replayed first);
    /// with `follow` false it gets the logs so far and `OutputEnd`.
    pub(super) fn attach(&mut self, job: JobId, client: Client, follow: bool, rank: Option<u32>) {
        let Some(meta) = self.jobs.get(&job) else { return };
        if let Some(r) = rank.filter(|&r| r >= meta.size) {
            let message = format!("job {job} has {} rank(s): no rank {r}", meta.size);
            return self.send_reply(client, ToolReply::Error { message }, Bytes::new());
        }
        let files: Vec<LogFile> = meta
            .logs
            .iter()
            .filter(|((r, _), len)| **len > 0 && rank.is_none_or(|want| want == *r))
            .map(|(&(rank, stream), &len)| LogFile { rank, stream, path: self.log_path(job, rank, stream), len })
            .collect();
        let replay = if files.is_empty() {
            None
        } else {
            self.replays.next += 1;
            let id = self.replays.next;
            self.replays.live.insert(id, Replay { job, client, follow });
            self.event(NodeEvent::ReplayOutput { replay: id, files });
            Some(id)
        };
        match (replay, follow) {
            (Some(_), false) => {}
            (None, false) => self.send_reply(client, ToolReply::OutputEnd { job }, Bytes::new()),
            (replay, true) => {
                // The restarts so far come first, as a watch from the start saw them.
                let restarts = self.submitter.get(job).map(|s| s.restart_reasons().to_vec()).unwrap_or_default();
                for (i, reason) in restarts.into_iter().enumerate() {
                    let attempt = i as u32 + 1;
                    self.send_reply(client, ToolReply::Restarting { job, attempt, reason }, Bytes::new());
                }
                let Some(meta) = self.jobs.get_mut(&job) else { return };
                meta.watchers.push(Watcher { client, replay, queued: Vec::new() });
                if replay.is_none() {
                    self.replay_end(job, client);
                }
            }
        }
    }

    /// A chunk of a replayed log file.
    pub(super) fn replayed(&mut self, replay: u64, rank: u32, stream: Stream, offset: u64, data: Bytes) {
        let Some(r) = self.replays.live.get(&replay) else { return };
        let (job, client) = (r.job, r.client);
        self.send_reply(client, ToolReply::Output { job, rank, stream, offset }, data);
    }

    /// A replay is over: the client's queued live replies follow it.
    pub(super) fn replay_done(&mut self, replay: u64) {
        let Some(r) = self.replays.live.remove(&replay) else { return };
        if !r.follow {
            return self.send_reply(r.client, ToolReply::OutputEnd { job: r.job }, Bytes::new());
        }
        let Some(meta) = self.jobs.get_mut(&r.job) else { return };
        let Some(w) = meta.watchers.iter_mut().find(|w| w.replay == Some(replay)) else { return };
        w.replay = None;
        let queued = std::mem::take(&mut w.queued);
        let ended = queued.iter().any(|(reply, _)| matches!(reply, ToolReply::Finished { .. }));
        if ended {
            meta.watchers.retain(|w| w.client != r.client);
        }
        for (reply, payload) in queued {
            self.send_reply(r.client, reply, payload);
        }
        if !ended {
            self.replay_end(r.job, r.client);
        }
    }

    /// A watcher of a job that is already over gets its end at once.
    fn replay_end(&mut self, job: JobId, client: Client) {
        let Some(meta) = self.jobs.get_mut(&job) else { return };
        if let Some(end) = meta.end.clone() {
            meta.watchers.retain(|w| w.client != client);
            let fin = ToolReply::Finished { job, phase: end.phase, codes: end.codes, error: end.error };
            self.send_reply(client, fin, Bytes::new());
        }
    }

    /// Sends `reply` (with `payload`) to everyone following `job`.
    fn tell_watchers(&mut self, job: JobId, reply: ToolReply, payload: Bytes) {
        let Some(meta) = self.jobs.get_mut(&job) else { return };
        let mut now_out = Vec::new();
        for w in &mut meta.watchers {
            if w.replay.is_some() {
                w.queued.push((reply.clone(), payload.clone()));
            } else {
                now_out.push(w.client);
            }
        }
        for client in now_out {
            self.send_reply(client, reply.clone(), payload.clone());
        }
    }

    /// Clients matching `pick` stop following anything.
    pub(super) fn drop_clients(&mut self, pick: impl Fn(&Client) -> bool) {
        for meta in self.jobs.values_mut() {
            meta.watchers.retain(|w| !pick(&w.client));
            meta.checkpoint_waiters.retain(|(_, c)| !pick(c));
            meta.migrate_waiters.retain(|(_, c)| !pick(c));
        }
        self.replays.live.retain(|_, r| !pick(&r.client));
    }

    /// One client stops following anything.
    pub(super) fn drop_client(&mut self, client: Client) {
        self.drop_clients(|c| *c == client);
    }

    /// Every other node a job here streams to.
    pub(super) fn remote_clients(&self) -> impl Iterator<Item = crate::machine::NodeAddr> + '_ {
        let watching = self.jobs.values().flat_map(|m| m.watchers.iter().map(|w| w.client));
        watching.chain(self.replays.live.values().map(|r| r.client)).filter_map(|c| match c {
            Client::Remote { node, .. } if node != self.addr => Some(node),
            Client::Remote { .. } | Client::Local { .. } => None,
        })
    }

    /// Node `node` is gone: nothing more is streamed to it.
    pub(super) fn drop_remote_clients(&mut self, node: crate::machine::NodeAddr) {
        self.drop_clients(|c| matches!(c, Client::Remote { node: n, .. } if *n == node));
    }

    /// Where output file `name` of `rank` goes (see [`output_file_name`]).
    fn output_path(&self, job: JobId, rank: u32, name: &str) -> Option<String> {
        let meta = self.jobs.get(&job)?;
        Some(join(&meta.base_dir, &output_file_name(meta.size, rank, name)?))
    }

    pub(super) fn status_of(&self, job: JobId) -> Option<JobStatus> {
        let meta = self.jobs.get(&job)?;
        let s = self.submitter.get(job)?;
        let phase = match (&meta.end, s.phase()) {
            (Some(end), _) => end.phase,
            (None, Phase::Resolving) => JobPhase::Resolving,
            (None, Phase::Queued) => JobPhase::Queued,
            (None, Phase::Placing) => JobPhase::Placing,
            (None, _) => JobPhase::Running,
        };
        let ranks = s
            .ranks()
            .iter()
            .map(|r| RankStatus {
                rank: r.rank,
                node: r.node,
                started: r.started,
                exit: r.exit,
                checkpoints: s.checkpoints(r.rank).cloned().unwrap_or_default(),
            })
            .collect();
        let error = meta.end.as_ref().and_then(|e| e.error.clone());
        let executable = s.description().executable.clone();
        let waiting = s.waiting_reason();
        let (restarts, moves) = (s.restart_reasons().to_vec(), s.moves().to_vec());
        Some(JobStatus { job, executable, phase, ranks, error, holder: self.addr, waiting, restarts, moves })
    }

    pub(super) fn on_submit_event(&mut self, now: Instant, e: SubmitEvent) {
        match e {
            SubmitEvent::Query { job, query, name } => {
                let token = self.token();
                if self.overlay(now, OverlayCommand::Query { token, name }) {
                    self.pending.insert(token, super::Pending::Submit { job, query });
                } else {
                    let refused = Err(crate::overlay::OverlayError::NotConnected);
                    self.submitter.handle_query_done(now, job, query, &refused);
                }
            }
            SubmitEvent::ReadFile { job, file, path } => {
                let base = self.jobs.get(&job).map(|m| m.base_dir.clone()).unwrap_or_default();
                self.event(NodeEvent::ReadFile { job, file, path: join(&base, &path) });
            }
            SubmitEvent::Placed { job, ranks } => {
                self.tell_watchers(job, ToolReply::Placed { job, ranks }, Bytes::new())
            }
            SubmitEvent::Started { job, rank, node } => {
                self.tell_watchers(job, ToolReply::Started { job, rank, node }, Bytes::new())
            }
            SubmitEvent::Output { job, rank, stream, offset, data } => {
                self.keep_log(job, rank, stream, &data);
                self.tell_watchers(job, ToolReply::Output { job, rank, stream, offset }, data)
            }
            SubmitEvent::WriteFile { job, rank, name, offset, total, data } => {
                if let Some(path) = self.output_path(job, rank, &name) {
                    let done = offset + data.len() as u64;
                    if let Some(meta) = self.jobs.get_mut(&job) {
                        meta.outputs.insert(path.clone(), total);
                    }
                    self.event(NodeEvent::WriteFile { path, offset, data });
                    self.tell_watchers(job, ToolReply::Fetching { job, rank, name, done, total }, Bytes::new());
                }
            }
            SubmitEvent::Staging { job, node, done, total } => {
                self.tell_watchers(job, ToolReply::Staging { job, node, done, total }, Bytes::new())
            }
            SubmitEvent::OutputFileDone { job, rank, name, ok } => {
                if let Some(path) = self.output_path(job, rank, &name) {
                    self.tell_watchers(job, ToolReply::OutputFile { job, rank, path, ok }, Bytes::new());
                }
            }
            SubmitEvent::Exited { job, rank, code } => {
                self.tell_watchers(job, ToolReply::Exited { job, rank, code }, Bytes::new())
            }
            SubmitEvent::Queued { job, reason } => {
                self.tell_watchers(job, ToolReply::Queued { job, reason }, Bytes::new())
            }
            SubmitEvent::Restarting { job, attempt, reason } => {
                self.orphaned_migrations(job, &reason);
                self.tell_watchers(job, ToolReply::Restarting { job, attempt, reason }, Bytes::new())
            }
            SubmitEvent::StoreCheckpoint { job, rank, epoch, offset, data } => {
                let path = self.cut_path(job, rank, epoch);
                self.event(NodeEvent::WriteFile { path, offset, data });
            }
            SubmitEvent::Migrated { job, rank, from, to, epoch } => self.on_migrated(job, rank, from, to, epoch),
            SubmitEvent::Moved { job, rank, from, to, epoch } => self.on_moved(job, rank, from, to, epoch),
            SubmitEvent::DropCheckpoint { job, rank, epoch } => {
                let path = self.cut_path(job, rank, epoch);
                self.event(NodeEvent::RemoveFile { path });
            }
            SubmitEvent::ReadCheckpoint { job, rank, epoch } => {
                let path = self.cut_path(job, rank, epoch);
                self.event(NodeEvent::ReadFile { job, file: crate::job::RESUME_FILES + rank, path });
            }
            SubmitEvent::Finished { job, outcome } => {
                // Its cuts served their purpose.
                let path = self.cut_dir(job);
                self.event(NodeEvent::RemoveDir { path });
                self.finished(now, job, JobEnd::from(&outcome))
            }
            e @ (SubmitEvent::CheckpointAsked { .. }
            | SubmitEvent::CheckpointTaken { .. }
            | SubmitEvent::CheckpointFailed { .. }) => self.on_checkpoint_event(e),
            SubmitEvent::Status { .. } => {}
        }
    }

    /// `job`, taken over here, has the copies this node kept as its deputy:
    /// the lengths of its logs, and of the output files written so far.
    pub(super) fn adopt_copies(
        &mut self,
        job: JobId,
        logs: BTreeMap<(u32, Stream), u64>,
        outputs: BTreeMap<String, u64>,
    ) {
        if let Some(meta) = self.jobs.get_mut(&job) {
            (meta.logs, meta.outputs) = (logs, outputs);
        }
    }

    /// Appends output to its rank's log file.
    fn keep_log(&mut self, job: JobId, rank: u32, stream: Stream, data: &Bytes) {
        let path = self.log_path(job, rank, stream);
        let Some(meta) = self.jobs.get_mut(&job) else { return };
        let len = meta.logs.entry((rank, stream)).or_default();
        let offset = *len;
        *len += data.len() as u64;
        self.event(NodeEvent::WriteFile { path, offset, data: data.clone() });
    }

    /// `job` ended (here, or at the node it was submitted to, this node
    /// being its deputy).
    pub(super) fn finished(&mut self, now: Instant, job: JobId, end: JobEnd) {
        let (phase, codes, error) = match end {
            JobEnd::Done { codes } if codes.iter().all(|c| *c == 0) => (JobPhase::Done, codes, None),
            JobEnd::Done { codes } => {
                let bad: Vec<String> = codes
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c != 0)
                    .map(|(r, c)| format!("rank {r} {}", crate::job::describe_exit(*c)))
                    .collect();
                (JobPhase::Failed, codes, Some(bad.join(", ")))
            }
            JobEnd::Failed { error } => (JobPhase::Failed, Vec::new(), Some(error)),
            JobEnd::Killed => (JobPhase::Killed, Vec::new(), None),
        };
        // The shell writes output files in the background: the end waits until
        // they are whole on disk, so nobody reads a file still being written.
        if let Some(meta) = self.jobs.get_mut(&job) {
            if !meta.outputs.is_empty() {
                let files = std::mem::take(&mut meta.outputs).into_iter().collect();
                meta.verifying = Some((phase, codes, error));
                self.event(NodeEvent::VerifyFiles { job, files });
                return;
            }
        }
        self.conclude(now, job, phase, codes, error);
    }

    /// The shell checked `job`'s output files: `bad` names those not whole
    /// (a write failed: a full disk, a removed directory), which fail a job
    /// that would otherwise be done.
    pub(super) fn files_verified(&mut self, now: Instant, job: JobId, bad: Vec<String>) {
        let Some((phase, codes, error)) = self.jobs.get_mut(&job).and_then(|m| m.verifying.take()) else { return };
        if bad.is_empty() || phase != JobPhase::Done {
            return self.conclude(now, job, phase, codes, error);
        }
        let error = format!("output file(s) not written whole: {}", bad.join("; "));
        self.conclude(now, job, JobPhase::Failed, codes, Some(error));
    }

    fn conclude(&mut self, now: Instant, job: JobId, phase: JobPhase, codes: Vec<i32>, error: Option<String>) {
        let fin = ToolReply::Finished { job, phase, codes: codes.clone(), error: error.clone() };
        self.tell_watchers(job, fin, Bytes::new());
        if let Some(meta) = self.jobs.get_mut(&job) {
            // Watchers still replaying get the end when their replay is done.
            meta.watchers.retain(|w| w.replay.is_some());
            meta.end = Some(End { phase, codes, error, at: now });
        }
        if self.timers.get(Timer::Retention).is_none() {
            self.timers.set(Timer::Retention, now + self.retention);
        }
        self.event(NodeEvent::JobFinished { job, phase });
    }

    /// Stopping: each running job submitted here goes to its deputies
    /// ([`JobMsg::HandOver`] to each named in the last [`JobMsg::Guard`]):
    /// the first takes it over as if this node were lost, the second when
    /// the first is lost too. The job is forgotten here; whoever follows it
    /// from another node is sent after it ([`NodeMsg::Relocate`]), anyone
    /// else is told where it went. A job with a rank on its way to another
    /// node waits until it arrives (the deputies know its old place), unless
    /// `force`; a job with no deputy (every rank here) stays, and stops with
    /// this node. The jobs handed over.
    pub(super) fn hand_over_held(&mut self, now: Instant, force: bool) -> usize {
        let running = self.submitter.jobs().filter(|s| s.phase() == Phase::Running && (force || !s.moving()));
        let going: Vec<(JobId, JobId, Vec<NodeAddr>)> = running
            .map(|s| (s.job(), s.wire(), s.told_deputies().collect::<Vec<_>>()))
            .filter(|(.., to)| !to.is_empty())
            .collect();
        for (job, wire, deputies) in &going {
            for &to in deputies {
                self.send(to, NodeMsg::Job(JobMsg::HandOver { job: *wire }), Bytes::new());
            }
            self.let_go(now, *job, deputies);
        }
        going.len()
    }

    /// `job`, handed to `deputies`, is held here no more: forgotten, and
    /// its key unregistered.
    fn let_go(&mut self, now: Instant, job: JobId, deputies: &[NodeAddr]) {
        let named: Vec<String> = deputies.iter().map(NodeAddr::to_string).collect();
        let message = format!(
            "this node is stopping: job {job} goes on at its deputy (node {}); \
             `p2pjob wait {job}` on another node follows it",
            named.join(" or ")
        );
        let mut told = BTreeSet::new();
        let replays = self.replays.live.values().filter(|r| r.job == job).map(|r| (r.client, true));
        let mut clients: Vec<(Client, bool)> = replays.collect();
        if let Some(meta) = self.jobs.remove(&job) {
            clients.extend(meta.watchers.iter().map(|w| (w.client, true)));
            // A checkpoint or a move asked is not asked again elsewhere.
            let waiters = meta.checkpoint_waiters.iter().chain(&meta.migrate_waiters);
            clients.extend(waiters.map(|(_, c)| (*c, false)));
        }
        for (client, follows) in clients {
            if !told.insert(client) {
                continue;
            }
            match client {
                // Not this node's own forward: it is stopping.
                Client::Remote { node, fwd } if follows && node != self.addr => {
                    self.send(node, NodeMsg::Relocate { fwd }, Bytes::new());
                }
                _ => self.send_reply(client, ToolReply::Error { message: message.clone() }, Bytes::new()),
            }
        }
        self.submitter.forget(job);
        self.handed.insert(job);
        self.replays.live.retain(|_, r| r.job != job);
        let (name, value) = (job_key_name(job), self.addr.to_string());
        self.overlay(now, OverlayCommand::Unregister { name, value });
        tracing::info!(%job, deputies = named.join(","), "stopping: the job goes on at its deputy");
    }

    /// Forgets every job that ended `retention` ago or more.
    pub(super) fn forget_expired(&mut self, now: Instant) {
        let retention = self.retention;
        let expired: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, m)| m.end.as_ref().is_some_and(|e| e.at + retention <= now))
            .map(|(j, _)| *j)
            .collect();
        for job in expired {
            self.jobs.remove(&job);
            self.submitter.forget(job);
            self.replays.live.retain(|_, r| r.job != job);
            let (name, value) = (job_key_name(job), self.addr.to_string());
            self.overlay(now, OverlayCommand::Unregister { name, value });
            let path = self.log_dir(job);
            self.event(NodeEvent::RemoveDir { path });
        }
        match self.jobs.values().filter_map(|m| m.end.as_ref().map(|e| e.at + retention)).min() {
            Some(t) => self.timers.set(Timer::Retention, t),
            None => self.timers.clear(Timer::Retention),
        }
    }
}

/// The name output file `name` of `rank` has where the job is held: `name`
/// for a one-rank job, `name.rank` otherwise; `None` when it is not a plain
/// file name.
pub(super) fn output_file_name(size: u32, rank: u32, name: &str) -> Option<String> {
    if !plain_name(name) {
        return None;
    }
    Some(if size == 1 { name.to_owned() } else { format!("{name}.{rank}") })
}
