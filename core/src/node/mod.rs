//! The daemon node: one [`Machine`] composed of the Chord overlay node, the job
//! submitter, the job executor and the local node protocol service, so a single
//! adapters `Driver` runs a whole `jobd`.
//!
//! - **Messages.** [`NodeMsg`] is the union body on the wire: overlay traffic and
//!   job traffic share one connection per peer. Job messages go to the executor or
//!   the submitter by direction ([`for_executor`]).
//! - **Overlay events.** Answers to queries whose token has bit 63 set belong to the
//!   submitter ([`crate::job::submit::TOKEN_TAG`]); the rest answer the node's own
//!   queries (rank resolutions, `nodes`), or are reported as [`NodeEvent::Overlay`].
//! - **Resources.** Once joined (and after every rejoin) the node registers
//!   [`Resources::registrations`] for its overlay address; the overlay node keeps
//!   refreshing them. The `res:any` line carries the configured slot count, not the
//!   free one: the overlay has no delete, so a churning value would linger as stale
//!   duplicates until its TTL. A busy executor rejects an offer and the submitter
//!   moves on to the next candidate.
//! - **Local node protocol.** The I/O shell hands each request of a control
//!   connection in as [`NodeCommand::Local`] and writes back every
//!   [`NodeEvent::Reply`]: ranks register and resolve process keys through the
//!   overlay (registrations die with their connection), the `p2pjob` tool submits,
//!   watches, kills and asks for status and nodes ([`control`]).
//! - **I/O.** Everything touching files or processes comes out as a [`NodeEvent`]
//!   with concrete paths (job directories live under the configured work
//!   directory); results come back as [`NodeCommand`]s.

pub mod control;
mod tool;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::chord::{ChordConfig, ChordMsg, ChordNode};
use crate::id::Id;
use crate::job::{
    ExecConfig, ExecEvent, Execution, FileData, JobId, JobMsg, Resources, Stream, SubmitConfig, Submitter,
};
use crate::local::{LocalError, LocalReply, LocalRequest};
use crate::machine::{Action, Machine, NodeAddr};
use crate::overlay::{OverlayCommand, OverlayError, OverlayEvent, Token};
use crate::wire::Envelope;

use control::{JobPhase, ToolReply, ToolRequest};

/// A control connection, numbered by the I/O shell.
pub type ConnId = u64;

/// Every message a daemon node exchanges. postcard encodes variants by index:
/// append only, never reorder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeMsg {
    /// Overlay maintenance, lookups and registrations.
    Chord(ChordMsg),
    /// Submitter and executor traffic.
    Job(JobMsg),
}

/// Whether a job message is meant for the executor side (else the submitter's).
/// Every variant is named, so a new one cannot be routed by default.
pub fn for_executor(m: &JobMsg) -> bool {
    match m {
        JobMsg::Offer { .. }
        | JobMsg::Manifest { .. }
        | JobMsg::Stage { .. }
        | JobMsg::StageEnd { .. }
        | JobMsg::Start { .. }
        | JobMsg::Kill { .. }
        | JobMsg::Status { .. }
        | JobMsg::Done { .. }
        | JobMsg::OutputAck { .. }
        | JobMsg::StreamAck { .. } => true,
        JobMsg::Accept { .. }
        | JobMsg::Reject { .. }
        | JobMsg::Resend { .. }
        | JobMsg::Staged { .. }
        | JobMsg::Started { .. }
        | JobMsg::Output { .. }
        | JobMsg::Exit { .. }
        | JobMsg::OutputFile { .. }
        | JobMsg::StatusReply { .. }
        | JobMsg::StageAck { .. }
        | JobMsg::Have { .. } => false,
    }
}

/// How a daemon node is set up.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DaemonConfig {
    /// The overlay node's tunables.
    pub chord: ChordConfig,
    /// Nodes to join through; empty creates a new network.
    pub bootstrap: Vec<NodeAddr>,
    /// What this node advertises; `slots` is its process capacity.
    pub resources: Resources,
    /// The control address processes get as `P2PMP_NODE`.
    pub control: String,
    /// Where job directories are made (`<work_dir>/job-<id>`).
    pub work_dir: String,
    /// The submitter's tunables.
    pub submit: SubmitConfig,
    /// TTL of process-key registrations (refreshed while the process lives).
    pub process_ttl: Duration,
    /// TTL of resource registrations (refreshed while the node lives).
    pub resource_ttl: Duration,
    /// Seeds the overlay node and the job-id nonces.
    pub seed: u64,
}

impl DaemonConfig {
    /// A configuration with defaults for everything but what a node must know.
    pub fn new(resources: Resources, control: impl Into<String>, work_dir: impl Into<String>, seed: u64) -> Self {
        DaemonConfig {
            chord: ChordConfig::default(),
            bootstrap: Vec::new(),
            resources,
            control: control.into(),
            work_dir: work_dir.into(),
            submit: SubmitConfig::default(),
            process_ttl: Duration::from_secs(9),
            resource_ttl: Duration::from_secs(9),
            seed,
        }
    }
}

/// What the I/O shell tells the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeCommand {
    /// A rank's request arrived on control connection `conn`.
    Local { conn: ConnId, request_id: u64, req: LocalRequest },
    /// A `p2pjob` request arrived on control connection `conn`.
    Tool { conn: ConnId, request_id: u64, req: ToolRequest },
    /// Control connection `conn` closed: its registrations and watches end.
    ConnClosed { conn: ConnId },
    /// Answer to [`NodeEvent::ReadFile`].
    FileRead { job: JobId, file: u32, data: Result<FileData, String> },
    /// A process wrote to stdout or stderr.
    ProcessOutput { job: JobId, rank: u32, stream: Stream, data: Bytes },
    /// A process ended (negative: killed by that signal) or could not start.
    ProcessExited { job: JobId, rank: u32, code: i32 },
    /// Answer to [`NodeEvent::ReadOutputFile`].
    OutputFileRead { job: JobId, rank: u32, name: String, data: Result<Bytes, String> },
    /// Leave the overlay gracefully.
    Leave,
}

/// What the node asks of its I/O shell, or reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// Joined, disconnected, left: for the log.
    Overlay(OverlayEvent),
    /// Read local file `path` for a submission; answer with [`NodeCommand::FileRead`].
    ReadFile { job: JobId, file: u32, path: String },
    /// Write `data` at `offset` of `path`, making its directory; offset 0 truncates.
    WriteFile { path: String, offset: u64, data: Bytes },
    /// Run `program` in `dir` with `args` and exactly `env` added to a clean
    /// environment; report output and exit with [`NodeCommand::ProcessOutput`]
    /// and [`NodeCommand::ProcessExited`].
    Spawn { job: JobId, rank: u32, dir: String, program: String, args: Vec<String>, env: Vec<(String, String)> },
    /// Stop a process started by [`NodeEvent::Spawn`].
    Kill { job: JobId, rank: u32 },
    /// Read output file `path`; answer with [`NodeCommand::OutputFileRead`] naming `name`.
    ReadOutputFile { job: JobId, rank: u32, name: String, path: String },
    /// Remove a job directory and everything in it.
    RemoveDir { path: String },
    /// Copy file `from` to `to` (a new file, its directory made), whole and
    /// before any later event. A process may change its input files, so those are
    /// copied; with `link` (an executable, which cannot be written while it runs) a
    /// hard link will do, a copy where linking fails.
    CopyFile { from: String, to: String, link: bool },
    /// Remove one file; a missing one is fine.
    RemoveFile { path: String },
    /// Write `reply` to a rank's control connection `conn`.
    Reply { conn: ConnId, request_id: u64, reply: LocalReply },
    /// Write `reply` (with `payload`) to a tool's control connection `conn`.
    ToolReply { conn: ConnId, request_id: u64, reply: ToolReply, payload: Bytes },
    /// A job submitted here ended.
    JobFinished { job: JobId, phase: JobPhase },
    /// Read `bytes` more of the stdout and stderr of process (`job`, `rank`):
    /// a process starts with [`crate::job::STREAM_WINDOW`] bytes of credit, and
    /// its pipes are read only while credit is left.
    OutputCredit { job: JobId, rank: u32, bytes: u64 },
}

/// A command the node cannot carry out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeCmdError {
    /// The node has left the overlay.
    #[error("the node has left the overlay")]
    Left,
}

#[derive(Debug)]
enum Pending {
    Resolve { conn: ConnId, request_id: u64, key: Id },
    Nodes { conn: ConnId, request_id: u64 },
}

/// What the node keeps about a job it submitted, beyond the submitter's state.
#[derive(Debug)]
struct JobMeta {
    base_dir: String,
    size: u32,
    watchers: Vec<(ConnId, u64)>,
    end: Option<(JobPhase, Vec<i32>, Option<String>)>,
}

/// The daemon node. See the module docs.
#[derive(Debug)]
pub struct DaemonNode {
    addr: NodeAddr,
    chord: ChordNode,
    submitter: Submitter,
    exec: Execution,
    resources: Resources,
    work_dir: String,
    process_ttl: Duration,
    resource_ttl: Duration,
    actions: VecDeque<Action<NodeMsg, NodeEvent>>,
    next_token: Token,
    pending: BTreeMap<Token, Pending>,
    regs: BTreeMap<ConnId, Vec<(String, String)>>,
    jobs: BTreeMap<JobId, JobMeta>,
    left: bool,
}

fn rewrap<A, B>(e: Envelope<A>, f: impl FnOnce(A) -> B) -> Envelope<B> {
    Envelope {
        version: e.version,
        sender: e.sender,
        sender_addr: e.sender_addr,
        request_id: e.request_id,
        body: f(e.body),
        payload: e.payload,
    }
}

/// A file name that stays inside its directory.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// `path` taken relative to `base` unless absolute.
fn join(base: &str, path: &str) -> String {
    if path.starts_with('/') || base.is_empty() {
        path.to_owned()
    } else {
        format!("{}/{path}", base.trim_end_matches('/'))
    }
}

impl DaemonNode {
    /// A node listening at `addr`; it starts joining at once.
    pub fn new(config: DaemonConfig, addr: NodeAddr, now: Instant) -> Self {
        let chord = ChordNode::new(config.chord, addr, config.bootstrap, now, config.seed);
        let submitter = Submitter::new(config.submit, addr, config.seed ^ 0x5eed_0b5e_55ed_cafe);
        let exec = Execution::new(ExecConfig::new(config.resources.slots, config.control), addr);
        let mut n = DaemonNode {
            addr,
            chord,
            submitter,
            exec,
            resources: config.resources,
            work_dir: config.work_dir,
            process_ttl: config.process_ttl,
            resource_ttl: config.resource_ttl,
            actions: VecDeque::new(),
            next_token: 1,
            pending: BTreeMap::new(),
            regs: BTreeMap::new(),
            jobs: BTreeMap::new(),
            left: false,
        };
        n.pump(now);
        n
    }

    /// The overlay node, for inspection.
    pub fn chord(&self) -> &ChordNode {
        &self.chord
    }

    /// The submitter, for inspection.
    pub fn submitter(&self) -> &Submitter {
        &self.submitter
    }

    /// The executor, for inspection.
    pub fn execution(&self) -> &Execution {
        &self.exec
    }

    /// What this node advertises.
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    /// The directory of `job` on this node.
    pub fn job_dir(&self, job: JobId) -> String {
        format!("{}/job-{job}", self.work_dir.trim_end_matches('/'))
    }

    /// Where the file cache keeps a verified staged file (`<work_dir>/cache/<digest>`).
    pub fn cache_path(&self, digest: Id) -> String {
        format!("{}/cache/{digest}", self.work_dir.trim_end_matches('/'))
    }

    fn event(&mut self, e: NodeEvent) {
        self.actions.push_back(Action::Event(e));
    }

    fn reply(&mut self, conn: ConnId, request_id: u64, reply: LocalReply) {
        self.event(NodeEvent::Reply { conn, request_id, reply });
    }

    fn token(&mut self) -> Token {
        // Bit 63 belongs to the submitter; 2^62 tokens never run out.
        let t = self.next_token;
        self.next_token = (self.next_token + 1) & !crate::job::submit::TOKEN_TAG;
        t
    }

    fn overlay(&mut self, now: Instant, cmd: OverlayCommand) -> bool {
        match self.chord.handle_command(now, cmd) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(%e, "overlay command refused");
                false
            }
        }
    }

    fn advertise(&mut self, now: Instant) {
        for (name, value) in self.resources.registrations(self.addr) {
            let ttl = self.resource_ttl;
            self.overlay(now, OverlayCommand::Register { name, value, ttl });
        }
    }

    /// Drains the three machines until none has anything left, routing between them.
    fn pump(&mut self, now: Instant) {
        loop {
            let mut busy = false;
            while let Some(a) = self.chord.poll_action() {
                busy = true;
                match a {
                    Action::Send { to, msg } => {
                        self.actions.push_back(Action::Send { to, msg: rewrap(msg, NodeMsg::Chord) })
                    }
                    Action::Event(e) => self.on_overlay_event(now, e),
                }
            }
            while let Some(a) = self.submitter.poll_action() {
                busy = true;
                match a {
                    Action::Send { to, msg } => {
                        self.actions.push_back(Action::Send { to, msg: rewrap(msg, NodeMsg::Job) })
                    }
                    Action::Event(e) => self.on_submit_event(now, e),
                }
            }
            while let Some(a) = self.exec.poll_action() {
                busy = true;
                match a {
                    Action::Send { to, msg } => {
                        self.actions.push_back(Action::Send { to, msg: rewrap(msg, NodeMsg::Job) })
                    }
                    Action::Event(e) => self.on_exec_event(e),
                }
            }
            if !busy {
                break;
            }
        }
    }

    fn on_overlay_event(&mut self, now: Instant, e: OverlayEvent) {
        if self.submitter.handle_overlay_event(now, &e) {
            return;
        }
        match e {
            OverlayEvent::QueryDone { token, result, .. } => match self.pending.remove(&token) {
                Some(Pending::Resolve { conn, request_id, key }) => {
                    let reply = match result {
                        Ok(values) => {
                            LocalReply::Resolved { key, addrs: values.iter().filter_map(|v| v.parse().ok()).collect() }
                        }
                        Err(OverlayError::NotConnected) => LocalReply::Failed { error: LocalError::NotConnected },
                        Err(_) => LocalReply::Failed { error: LocalError::Timeout },
                    };
                    self.reply(conn, request_id, reply);
                }
                Some(Pending::Nodes { conn, request_id }) => {
                    let reply = match result {
                        Ok(mut nodes) => {
                            nodes.sort();
                            nodes.dedup();
                            ToolReply::Nodes { nodes }
                        }
                        Err(e) => ToolReply::Error { message: format!("overlay query failed: {e}") },
                    };
                    self.tool_reply(conn, request_id, reply);
                }
                None => {}
            },
            OverlayEvent::LookupDone { .. } => {}
            other => {
                if other == OverlayEvent::Joined && !self.left {
                    self.advertise(now);
                }
                self.event(NodeEvent::Overlay(other));
            }
        }
    }

    fn on_exec_event(&mut self, e: ExecEvent) {
        match e {
            ExecEvent::WriteFile { job, name, offset, data } => {
                let path = join(&self.job_dir(job), &name);
                self.event(NodeEvent::WriteFile { path, offset, data });
            }
            ExecEvent::SpawnProcess { job, rank, program, args, env } => {
                let dir = self.job_dir(job);
                let program = join(&dir, &program);
                self.event(NodeEvent::Spawn { job, rank, dir, program, args, env });
            }
            ExecEvent::KillProcess { job, rank } => self.event(NodeEvent::Kill { job, rank }),
            ExecEvent::ReadOutputFile { job, rank, name } => {
                if plain_name(&name) {
                    let path = join(&self.job_dir(job), &name);
                    self.event(NodeEvent::ReadOutputFile { job, rank, name, path });
                } else {
                    self.exec.handle_output_file(job, rank, &name, Err("not a plain file name".into()));
                }
            }
            ExecEvent::Cleanup { job } => {
                let path = self.job_dir(job);
                self.event(NodeEvent::RemoveDir { path });
            }
            ExecEvent::CacheStore { job, name, digest, program } => {
                let from = join(&self.job_dir(job), &name);
                self.event(NodeEvent::CopyFile { from, to: self.cache_path(digest), link: program });
            }
            ExecEvent::CacheFetch { job, name, digest, program } => {
                let to = join(&self.job_dir(job), &name);
                self.event(NodeEvent::CopyFile { from: self.cache_path(digest), to, link: program });
            }
            ExecEvent::CacheEvict { digest } => self.event(NodeEvent::RemoveFile { path: self.cache_path(digest) }),
            // Capacity is advertised, not free slots (module docs).
            ExecEvent::SlotsChanged { .. } => {}
            ExecEvent::OutputCredit { job, rank, bytes } => self.event(NodeEvent::OutputCredit { job, rank, bytes }),
        }
    }

    fn on_local(&mut self, now: Instant, conn: ConnId, request_id: u64, req: LocalRequest) {
        match req {
            LocalRequest::Register { key, addr } => {
                let (name, value) = (key.to_string(), addr.to_string());
                let ttl = self.process_ttl;
                let ok = self.overlay(now, OverlayCommand::Register { name: name.clone(), value: value.clone(), ttl });
                if ok {
                    self.regs.entry(conn).or_default().push((name, value));
                    self.reply(conn, request_id, LocalReply::Registered { key });
                } else {
                    self.reply(conn, request_id, LocalReply::Failed { error: LocalError::Refused });
                }
            }
            LocalRequest::Resolve { key } => {
                if !self.chord.is_joined() {
                    return self.reply(conn, request_id, LocalReply::Failed { error: LocalError::NotConnected });
                }
                let token = self.token();
                if self.overlay(now, OverlayCommand::Query { token, name: key.to_string() }) {
                    self.pending.insert(token, Pending::Resolve { conn, request_id, key });
                } else {
                    self.reply(conn, request_id, LocalReply::Failed { error: LocalError::Refused });
                }
            }
            LocalRequest::Unregister { key, addr } => {
                let (name, value) = (key.to_string(), addr.to_string());
                if let Some(v) = self.regs.get_mut(&conn) {
                    v.retain(|r| *r != (name.clone(), value.clone()));
                }
                self.overlay(now, OverlayCommand::Unregister { name, value });
                self.reply(conn, request_id, LocalReply::Unregistered { key });
            }
        }
    }

    fn conn_closed(&mut self, now: Instant, conn: ConnId) {
        for (name, value) in self.regs.remove(&conn).unwrap_or_default() {
            self.overlay(now, OverlayCommand::Unregister { name, value });
        }
        for meta in self.jobs.values_mut() {
            meta.watchers.retain(|(c, _)| *c != conn);
        }
        self.pending.retain(|_, p| match p {
            Pending::Resolve { conn: c, .. } | Pending::Nodes { conn: c, .. } => *c != conn,
        });
    }
}

impl Machine for DaemonNode {
    type Body = NodeMsg;
    type Command = NodeCommand;
    type Event = NodeEvent;
    type CmdError = NodeCmdError;

    fn addr(&self) -> NodeAddr {
        self.addr
    }

    fn handle_message(&mut self, now: Instant, msg: Envelope<NodeMsg>) {
        let mut body = None;
        let head = rewrap(msg, |b| body = Some(b));
        match body {
            Some(NodeMsg::Chord(c)) => self.chord.handle_message(now, rewrap(head, |()| c)),
            Some(NodeMsg::Job(j)) if for_executor(&j) => self.exec.handle_message(now, rewrap(head, |()| j)),
            Some(NodeMsg::Job(j)) => self.submitter.handle_message(now, rewrap(head, |()| j)),
            None => {}
        }
        self.pump(now);
    }

    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        self.chord.handle_send_failed(now, to);
        self.submitter.handle_send_failed(now, to);
        self.exec.handle_send_failed(now, to);
        self.pump(now);
    }

    fn handle_command(&mut self, now: Instant, cmd: NodeCommand) -> Result<(), NodeCmdError> {
        let res = match cmd {
            NodeCommand::Local { conn, request_id, req } => {
                self.on_local(now, conn, request_id, req);
                Ok(())
            }
            NodeCommand::Tool { conn, request_id, req } => {
                self.on_tool(now, conn, request_id, req);
                Ok(())
            }
            NodeCommand::ConnClosed { conn } => {
                self.conn_closed(now, conn);
                Ok(())
            }
            NodeCommand::FileRead { job, file, data } => {
                self.submitter.handle_file_read(now, job, file, data);
                Ok(())
            }
            NodeCommand::ProcessOutput { job, rank, stream, data } => {
                // A late chunk of a killed or forgotten rank has nowhere to go.
                let _ = self.exec.handle_process_output(job, rank, stream, data);
                Ok(())
            }
            NodeCommand::ProcessExited { job, rank, code } => {
                let _ = self.exec.handle_process_exit(job, rank, code);
                Ok(())
            }
            NodeCommand::OutputFileRead { job, rank, name, data } => {
                self.exec.handle_output_file(job, rank, &name, data);
                Ok(())
            }
            NodeCommand::Leave => {
                if self.left {
                    Err(NodeCmdError::Left)
                } else {
                    self.left = true;
                    self.overlay(now, OverlayCommand::Leave);
                    Ok(())
                }
            }
        };
        self.pump(now);
        res
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.chord.poll_timeout().is_some_and(|t| t <= now) {
            self.chord.handle_timeout(now);
        }
        if self.submitter.poll_timeout().is_some_and(|t| t <= now) {
            self.submitter.handle_timeout(now);
        }
        if self.exec.poll_timeout().is_some_and(|t| t <= now) {
            self.exec.handle_timeout(now);
        }
        self.pump(now);
    }

    fn poll_action(&mut self) -> Option<Action<NodeMsg, NodeEvent>> {
        self.actions.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [self.chord.poll_timeout(), self.submitter.poll_timeout(), self.exec.poll_timeout()].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests;
