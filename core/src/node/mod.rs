//! The daemon node: one [`Machine`] composed of the Chord overlay node, the job
//! submitter, the job executor and the local node protocol service, so a single
//! adapters `Driver` runs a whole `jobd`.
//!
//! - **Messages.** [`NodeMsg`] is the union body on the wire: overlay traffic, job
//!   traffic, heartbeats and forwarded tool requests share one connection per
//!   peer. Job messages go to the executor or the submitter by direction
//!   ([`for_executor`]).
//! - **Overlay events.** Every overlay request the node makes gets a token of its
//!   own and a [`Pending`] entry saying who asked (a submission's query, a
//!   rank's resolution, `nodes`, finding a job's node); the rest are reported as
//!   [`NodeEvent::Overlay`].
//! - **Resources** ([`advert`]). Once joined the node registers
//!   [`Resources::registrations`] for its overlay address; its `res:any` line is
//!   live (free slots, load, free memory) and replaced as they change.
//! - **Liveness** ([`heartbeat`]). A node heartbeats every peer it has business
//!   with (the executors of its jobs, the submitters of the jobs it runs, nodes it
//!   forwards requests to or streams output to); one silent past the failure
//!   timeout counts as gone: its jobs fail with a message naming it.
//! - **Jobs it holds** ([`held`]). A job belongs to the node it was submitted to:
//!   that node registers the job's key, keeps its stdout and stderr (as files, so
//!   a late `wait` or `output` shows all of it) and forgets the job a retention
//!   time after it ended. Requests about a job held elsewhere are forwarded there
//!   ([`remote`]).
//! - **Checkpoints** ([`checkpoint`]). `p2pjob checkpoint` of a job held here,
//!   the executor's asks pushed to its ranks, and the ranks' reports.
//! - **Local node protocol** ([`ranks`], [`tool`]). The I/O shell hands each
//!   request of a control connection in as [`NodeCommand::Local`] or
//!   [`NodeCommand::Tool`] and writes back every [`NodeEvent::Reply`] and
//!   [`NodeEvent::ToolReply`].
//! - **I/O.** Everything touching files or processes comes out as a [`NodeEvent`]
//!   with concrete paths (job directories live under the configured work
//!   directory); results come back as [`NodeCommand`]s.

mod advert;
mod authz;
mod checkpoint;
pub mod control;
mod deputy;
mod heartbeat;
mod held;
mod overlay;
mod ranks;
mod remote;
pub mod sim_shell;
mod tool;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::auth::{Allow, Policy, ReplayGuard};
use crate::can::{CanConfig, CanMsg};
use crate::chord::{ChordConfig, ChordMsg, ChordNode};
use crate::id::Id;
use crate::job::description::join_path as join;
use crate::job::{
    ExecConfig, ExecEvent, Execution, FileData, Guarded, JobId, JobMsg, JobPast, Resources, Stream, SubmitConfig,
    Submitter,
};
use crate::local::{LocalReply, LocalRequest};
use crate::machine::{Action, Machine, NodeAddr};
use crate::overlay::{OverlayCommand, OverlayEvent, Token};
use crate::time::{TimerKey, TimerTable};
use crate::wire::Envelope;

use control::{JobPhase, ToolReply, ToolRequest};
pub use overlay::OverlayNode;

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
    /// "Still here", to a peer this node has business with ([`heartbeat`]),
    /// with the jobs the sender runs for the receiver as their submitter: one the
    /// receiver no longer runs (it failed the job while the sender was cut off)
    /// is killed.
    Heartbeat { running: Vec<JobId> },
    /// A tool request about a job this node holds, forwarded by the node the tool
    /// talks to; answered with [`NodeMsg::ToolReply`]s carrying the same `fwd`.
    Tool { fwd: u64, req: ToolRequest },
    /// An answer to a forwarded request (output bytes as the envelope's payload).
    ToolReply { fwd: u64, reply: ToolReply },
    /// The tool behind forwarded request `fwd` went away: stop answering it.
    ToolCancel { fwd: u64 },
    /// CAN maintenance, routes and registrations (a daemon running CAN).
    Can(CanMsg),
    /// The job of forwarded request `fwd` is held here no more (this node
    /// stops, and handed it to a deputy): ask where it is now.
    Relocate { fwd: u64 },
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
        | JobMsg::StreamAck { .. }
        | JobMsg::Want { .. }
        | JobMsg::Unwant { .. }
        | JobMsg::SignedOffer { .. }
        | JobMsg::Checkpoint { .. }
        | JobMsg::Resume { .. }
        | JobMsg::Staying { .. }
        | JobMsg::Move { .. }
        | JobMsg::ResumeEngine { .. }
        | JobMsg::CheckpointStay { .. }
        | JobMsg::CarriedFiles { .. }
        | JobMsg::Guard { .. }
        | JobMsg::Adopt { .. } => true,
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
        | JobMsg::Have { .. }
        | JobMsg::Grant { .. }
        | JobMsg::CheckpointAsked { .. }
        | JobMsg::Checkpointed { .. }
        | JobMsg::Recovered { .. }
        | JobMsg::CheckpointFile { .. }
        | JobMsg::Leaving { .. }
        | JobMsg::Moved { .. }
        | JobMsg::Adopted { .. }
        | JobMsg::CutDropped { .. }
        | JobMsg::Ended { .. }
        | JobMsg::HandOver { .. }
        | JobMsg::DeputyStopping { .. } => false,
    }
}

/// How a daemon node is set up.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DaemonConfig {
    /// The overlay node's tunables.
    pub chord: ChordConfig,
    /// Run CAN with this configuration instead of Chord. Every daemon of a network
    /// runs the same overlay (and CAN shape); others are refused at the hello.
    pub can: Option<CanConfig>,
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
    /// TTL of a held job's key (refreshed while the node keeps the job). Every
    /// job a node holds, finished ones too until their retention ends, costs a
    /// refresh a third of this apart; a key outliving a dead holder only makes
    /// requests for that job answer that its node is unreachable.
    pub job_key_ttl: Duration,
    /// How often a peer this node has business with is sent a heartbeat.
    pub heartbeat_period: Duration,
    /// How long a peer with business may stay silent before it counts as gone.
    pub failure_timeout: Duration,
    /// How long a finished job (status, exit codes, output) is kept.
    pub retention: Duration,
    /// Shortest interval between two re-advertisements of the live resources.
    pub advert_gap: Duration,
    /// The first `gen` of the `res:any` line: give a value that grows across
    /// restarts at one address (the shell uses the wall clock in ms), so a line
    /// of this run outranks a stale line of the last.
    pub generation_base: u64,
    /// Seeds the overlay node and the job-id nonces.
    pub seed: u64,
    /// Whose jobs run here and who may act on the jobs held here
    /// ([`Policy::open`] by default: no checks, for simulations; `jobd` always
    /// sets keys).
    pub auth: Policy,
    /// The wall clock (ms since the Unix epoch) when the node is made, until
    /// the shell's [`NodeCommand::HostStats`] say otherwise (0: unknown). Signed
    /// requests' timestamps are checked against it.
    pub unix_ms: u64,
}

impl DaemonConfig {
    /// A configuration with defaults for everything but what a node must know.
    pub fn new(resources: Resources, control: impl Into<String>, work_dir: impl Into<String>, seed: u64) -> Self {
        DaemonConfig {
            chord: ChordConfig::default(),
            can: None,
            bootstrap: Vec::new(),
            resources,
            control: control.into(),
            work_dir: work_dir.into(),
            submit: SubmitConfig::default(),
            process_ttl: Duration::from_secs(9),
            resource_ttl: Duration::from_secs(9),
            job_key_ttl: Duration::from_secs(120),
            heartbeat_period: Duration::from_secs(1),
            failure_timeout: Duration::from_secs(10),
            retention: Duration::from_secs(3600),
            advert_gap: Duration::from_millis(250),
            generation_base: 0,
            seed,
            auth: Policy::open(),
            unix_ms: 0,
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
    /// The host's load average (thousandths) and free memory (MiB), measured
    /// now; the node re-advertises when they moved enough. `unix_ms` is the
    /// wall clock now: jobs waiting for slots are ordered by submission time.
    HostStats { load_milli: u32, mem_free_mb: u64, unix_ms: u64 },
    /// A chunk of a log file read for [`NodeEvent::ReplayOutput`] `replay`.
    Replayed { replay: u64, rank: u32, stream: Stream, offset: u64, data: Bytes },
    /// Every file of [`NodeEvent::ReplayOutput`] `replay` has been read.
    ReplayDone { replay: u64 },
    /// Answer to [`NodeEvent::VerifyFiles`]: a line for each file that is not
    /// whole (missing, shorter or longer), empty when all are.
    FilesVerified { job: JobId, bad: Vec<String> },
    /// The allow-list changed (its file was edited): jobs of these keys run
    /// from now on; jobs already running go on.
    SetAllow { allow: Allow },
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
    /// Once every earlier [`NodeEvent::WriteFile`] is done, check that each
    /// file exists with exactly its length; answer with
    /// [`NodeCommand::FilesVerified`].
    VerifyFiles { job: JobId, files: Vec<(String, u64)> },
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
    /// The node is leaving and `jobs` jobs may still move their ranks off
    /// it (their submitters take a checkpoint and place them elsewhere, then
    /// stop them here): the shell waits for those ranks, within its limit,
    /// before it stops the rest. Told whenever the number changes.
    Draining { jobs: usize },
    /// Read the first `len` bytes of each log file (every earlier
    /// [`NodeEvent::WriteFile`] to it is done) and hand them back in order as
    /// [`NodeCommand::Replayed`] chunks, then [`NodeCommand::ReplayDone`].
    ReplayOutput { replay: u64, files: Vec<LogFile> },
}

/// One rank's stdout or stderr as the node that holds its job keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFile {
    /// The rank.
    pub rank: u32,
    /// Which stream.
    pub stream: Stream,
    /// Where it is kept.
    pub path: String,
    /// How many of its bytes to read.
    pub len: u64,
}

/// A command the node cannot carry out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeCmdError {
    /// The node has left the overlay.
    #[error("the node has left the overlay")]
    Left,
}

/// A query of the node's own (not the submitter's) waiting for its answer.
#[derive(Debug)]
enum Pending {
    /// A rank resolves a process key.
    Resolve { conn: ConnId, request_id: u64, key: Id, keyed: bool },
    /// `p2pjob nodes`.
    Nodes { conn: ConnId, request_id: u64 },
    /// Where forwarded request `fwd` must go: the job's key.
    Locate { fwd: u64 },
    /// Which nodes forwarded status request `fwd` asks: `res:any`.
    Gather { fwd: u64 },
    /// `p2pjob lookup` or `p2pjob query`.
    Diagnose { conn: ConnId, request_id: u64 },
    /// Query `query` of the submission of `job`.
    Submit { job: JobId, query: u32 },
}

/// Who asked a tool request: a tool on a local connection, or another node
/// that forwarded a tool's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Client {
    Local { conn: ConnId, request_id: u64 },
    Remote { node: NodeAddr, fwd: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// Heartbeats out, silent peers found.
    Heartbeat,
    /// Finished jobs past their retention forgotten.
    Retention,
    /// A postponed re-advertisement of the live resources.
    Advert,
    /// Forwarded requests and status gathers that ran out of time.
    Forward,
}

impl TimerKey for Timer {
    const COUNT: usize = 4;
    const ALL: &'static [Self] = &[Timer::Heartbeat, Timer::Retention, Timer::Advert, Timer::Forward];
    fn index(self) -> usize {
        self as usize
    }
}

/// The daemon node. See the module docs.
#[derive(Debug)]
pub struct DaemonNode {
    addr: NodeAddr,
    overlay: OverlayNode,
    submitter: Submitter,
    exec: Execution,
    work_dir: String,
    process_ttl: Duration,
    resource_ttl: Duration,
    job_key_ttl: Duration,
    retention: Duration,
    timers: TimerTable<Timer>,
    actions: VecDeque<Action<NodeMsg, NodeEvent>>,
    next_token: Token,
    pending: BTreeMap<Token, Pending>,
    /// Process keys registered by ranks, by control connection.
    regs: BTreeMap<ConnId, Vec<(String, String)>>,
    /// Jobs submitted here (or taken over: see `deputy`).
    jobs: BTreeMap<JobId, held::JobMeta>,
    replays: held::Replays,
    /// Jobs this node takes over if their submitting node dies.
    guards: deputy::Guards,
    advert: advert::Advert,
    liveness: heartbeat::Liveness,
    forwards: remote::Forwards,
    /// The wall clock (ms since the Unix epoch) at an instant, as the shell last said.
    wall: (Instant, u64),
    /// Stopping: no more advertising (set by [`NodeCommand::Leave`]).
    left: bool,
    /// Stopping: the jobs held here handed to their deputies (a request
    /// about one forwarded here is sent after it).
    handed: BTreeSet<JobId>,
    /// Stopping, with ranks still to move off: the overlay is left once
    /// they are gone (their peers find their new places through this node's
    /// lookups until then), or on a second [`NodeCommand::Leave`].
    leave_after_drain: bool,
    /// Jobs that may still move their ranks off this node, as last told
    /// to the shell ([`NodeEvent::Draining`]).
    draining: usize,
    /// Whose jobs run here, who may act on the jobs held here.
    policy: Policy,
    /// Signed tool requests taken within the window.
    replay: ReplayGuard,
    /// Job signatures of offers taken within the window, each for the node
    /// that offered it first.
    job_replay: ReplayGuard<NodeAddr>,
}

/// A file name that stays inside its directory.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

impl DaemonNode {
    /// A node listening at `addr`; it starts joining at once.
    pub fn new(config: DaemonConfig, addr: NodeAddr, now: Instant) -> Self {
        let overlay = OverlayNode::new(config.chord, config.can, addr, config.bootstrap, now, config.seed);
        let submitter = Submitter::new(config.submit, addr, config.seed ^ 0x5eed_0b5e_55ed_cafe);
        let mut exec_config = ExecConfig::new(config.resources.slots, config.control);
        exec_config.failure_timeout = config.failure_timeout;
        // A deputy finds its submitter gone within the failure timeout (and a
        // heartbeat): the executors wait well beyond that for it.
        exec_config.adopt_timeout =
            exec_config.adopt_timeout.max(3 * (config.failure_timeout + config.heartbeat_period));
        let exec = Execution::new(exec_config, addr);
        let mut timers = TimerTable::default();
        timers.set(Timer::Heartbeat, now + config.heartbeat_period);
        let mut n = DaemonNode {
            addr,
            overlay,
            submitter,
            exec,
            work_dir: config.work_dir,
            process_ttl: config.process_ttl,
            resource_ttl: config.resource_ttl,
            job_key_ttl: config.job_key_ttl,
            retention: config.retention,
            timers,
            actions: VecDeque::new(),
            next_token: 0,
            pending: BTreeMap::new(),
            regs: BTreeMap::new(),
            jobs: BTreeMap::new(),
            replays: held::Replays::default(),
            guards: deputy::Guards::default(),
            advert: advert::Advert::new(config.resources, config.advert_gap, config.generation_base),
            liveness: heartbeat::Liveness::new(config.heartbeat_period, config.failure_timeout),
            forwards: remote::Forwards::default(),
            wall: (now, config.unix_ms),
            left: false,
            handed: BTreeSet::new(),
            leave_after_drain: false,
            draining: 0,
            policy: config.auth,
            replay: ReplayGuard::default(),
            job_replay: ReplayGuard::new(crate::auth::JOB_SIGNATURE_WINDOW_MS, crate::auth::REPLAY_CAP),
        };
        n.pump(now);
        n
    }

    /// The overlay node (Chord or CAN), for inspection.
    pub fn overlay_node(&self) -> &OverlayNode {
        &self.overlay
    }

    /// The Chord node, for inspection, if the daemon runs Chord.
    pub fn chord(&self) -> Option<&ChordNode> {
        self.overlay.chord()
    }

    /// The submitter, for inspection.
    pub fn submitter(&self) -> &Submitter {
        &self.submitter
    }

    /// The executor, for inspection.
    pub fn execution(&self) -> &Execution {
        &self.exec
    }

    /// What this node advertises right now (free slots, load, ...).
    pub fn resources(&self) -> Resources {
        self.advert.current(self.exec.free_slots())
    }

    /// Jobs submitted here and not yet forgotten.
    pub fn held_jobs(&self) -> usize {
        self.jobs.len()
    }

    /// The directory of `job` on this node.
    pub fn job_dir(&self, job: JobId) -> String {
        format!("{}/job-{job}", self.work_dir.trim_end_matches('/'))
    }

    /// Where the file cache keeps a verified staged file (`<work_dir>/cache/<digest>`).
    pub fn cache_path(&self, digest: Id) -> String {
        format!("{}/cache/{digest}", self.work_dir.trim_end_matches('/'))
    }

    /// The wall clock at `now`, in ms (from the shell's last reading; time
    /// since the node started when it never said).
    fn wall_ms(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.wall.0);
        self.wall.1.saturating_add(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }

    fn event(&mut self, e: NodeEvent) {
        self.actions.push_back(Action::Event(e));
    }

    fn send(&mut self, to: NodeAddr, body: NodeMsg, payload: Bytes) {
        let msg = Envelope::new(self.addr.id(), self.addr, 0, body).with_payload(payload);
        self.actions.push_back(Action::Send { to, msg });
    }

    fn reply(&mut self, conn: ConnId, request_id: u64, reply: LocalReply) {
        self.event(NodeEvent::Reply { conn, request_id, reply });
    }

    fn token(&mut self) -> Token {
        // 2^64 tokens never run out.
        self.next_token += 1;
        self.next_token
    }

    fn overlay(&mut self, now: Instant, cmd: OverlayCommand) -> bool {
        match self.overlay.handle_command(now, cmd) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(%e, "overlay command refused");
                false
            }
        }
    }

    /// Stopping: the jobs the node waits for before it leaves the overlay
    /// (see [`NodeEvent::Draining`]).
    pub fn draining(&self) -> usize {
        self.draining
    }

    /// What a stopping node waits for before it leaves the overlay: jobs
    /// whose ranks may still move off it, and jobs held here not yet handed
    /// over for a rank on its way (see `held`).
    fn still_draining(&self) -> usize {
        if !self.left {
            return 0;
        }
        let running = |s: &&crate::job::Submission| s.phase() == crate::job::Phase::Running;
        let unsettled = |s: &&crate::job::Submission| s.moving() && s.told_deputies().next().is_some();
        self.exec.draining() + self.submitter.jobs().filter(running).filter(unsettled).count()
    }

    /// Drains the three machines until none has anything left, routing between them.
    fn pump(&mut self, now: Instant) {
        loop {
            let mut busy = false;
            while let Some(a) = self.overlay.poll_action() {
                busy = true;
                match a {
                    Action::Send { to, msg } => self.actions.push_back(Action::Send { to, msg }),
                    Action::Event(e) => self.on_overlay_event(now, e),
                }
            }
            while let Some(a) = self.submitter.poll_action() {
                busy = true;
                match a {
                    Action::Send { to, msg } => self.actions.push_back(Action::Send { to, msg: msg.map(NodeMsg::Job) }),
                    Action::Event(e) => self.on_submit_event(now, e),
                }
            }
            while let Some(a) = self.exec.poll_action() {
                busy = true;
                match a {
                    Action::Send { to, msg } => self.actions.push_back(Action::Send { to, msg: msg.map(NodeMsg::Job) }),
                    Action::Event(e) => self.on_exec_event(now, e),
                }
            }
            if !busy {
                // Stopping: a job held here whose rank was on its way
                // somewhere goes to its deputies once it arrived.
                if self.left && self.hand_over_held(now, false) > 0 {
                    continue;
                }
                break;
            }
        }
        let draining = self.still_draining();
        if draining != self.draining {
            self.draining = draining;
            self.event(NodeEvent::Draining { jobs: draining });
            if draining == 0 && self.leave_after_drain {
                // The last ranks moved off: now the overlay is left (once).
                self.leave_after_drain = false;
                self.overlay(now, OverlayCommand::Leave);
                self.pump(now);
            }
        }
    }

    fn on_overlay_event(&mut self, now: Instant, e: OverlayEvent) {
        match e {
            OverlayEvent::QueryDone { token, result, .. } => match self.pending.remove(&token) {
                Some(Pending::Resolve { conn, request_id, key, keyed }) => {
                    self.resolved(conn, request_id, key, keyed, result)
                }
                Some(Pending::Nodes { conn, request_id }) => self.nodes_listed(conn, request_id, result),
                Some(Pending::Locate { fwd }) => self.located(now, fwd, result),
                Some(Pending::Gather { fwd }) => self.gather_nodes(now, fwd, result),
                Some(Pending::Submit { job, query }) => self.submitter.handle_query_done(now, job, query, &result),
                Some(Pending::Diagnose { conn, request_id }) => {
                    let reply = match result {
                        Ok(values) => ToolReply::Values { values },
                        Err(e) => ToolReply::Error { message: format!("overlay query failed: {e}") },
                    };
                    self.event(NodeEvent::ToolReply { conn, request_id, reply, payload: Bytes::new() });
                }
                None => {}
            },
            OverlayEvent::LookupDone { token, result, .. } => {
                if let Some(Pending::Diagnose { conn, request_id }) = self.pending.remove(&token) {
                    let reply = match result {
                        Ok(r) => ToolReply::Owner { owner: r.owner, hops: r.hops },
                        Err(e) => ToolReply::Error { message: format!("overlay lookup failed: {e}") },
                    };
                    self.event(NodeEvent::ToolReply { conn, request_id, reply, payload: Bytes::new() });
                }
            }
            other => {
                if other == OverlayEvent::Joined && !self.left {
                    self.advertise_all(now);
                }
                self.event(NodeEvent::Overlay(other));
            }
        }
    }

    fn on_exec_event(&mut self, now: Instant, e: ExecEvent) {
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
            ExecEvent::SlotsChanged { .. } => self.resources_changed(now),
            ExecEvent::OutputCredit { job, rank, bytes } => self.event(NodeEvent::OutputCredit { job, rank, bytes }),
            ExecEvent::AskCheckpoint { conn, request, .. } => self.push_checkpoint_wanted(conn, request),
            ExecEvent::AskMove { conn, request, .. } => self.push_move_wanted(conn, request),
        }
    }

    fn on_node_message(&mut self, now: Instant, from: NodeAddr, body: NodeMsg, payload: Bytes) {
        match body {
            NodeMsg::Chord(_) | NodeMsg::Job(_) | NodeMsg::Can(_) => {}
            NodeMsg::Heartbeat { running } => self.check_running(from, running),
            NodeMsg::Tool { fwd, req } => self.on_forwarded(now, from, fwd, req),
            NodeMsg::ToolReply { fwd, reply } => self.on_forwarded_reply(from, fwd, reply, payload),
            NodeMsg::ToolCancel { fwd } => self.drop_client(Client::Remote { node: from, fwd }),
            NodeMsg::Relocate { fwd } => self.relocate(now, from, fwd),
        }
    }

    fn on_timer(&mut self, now: Instant, t: Timer) {
        match t {
            Timer::Heartbeat => self.heartbeat(now),
            Timer::Retention => self.forget_expired(now),
            Timer::Advert => self.readvertise(now),
            Timer::Forward => self.forwards_expired(now),
        }
    }

    /// A peer is gone (a failed send, or silent for `silent`): everything that
    /// depends on it is told.
    fn peer_gone(&mut self, now: Instant, peer: NodeAddr, silent: Option<Duration>) {
        // Jobs it submitted are held here first, so its loss is one of their
        // nodes' losses below (when it ran ranks of them too).
        self.take_over(now, peer);
        self.job_replay.holder_lost(&peer);
        match silent {
            Some(d) => self.submitter.handle_peer_silent(now, peer, d),
            None => self.submitter.handle_send_failed(now, peer),
        }
        self.exec.handle_send_failed(now, peer);
        self.forward_target_gone(now, peer, silent);
        self.drop_remote_clients(peer);
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
        self.liveness.heard(msg.sender_addr, now);
        self.exec.heard_from(msg.sender_addr);
        self.guards.heard_from(msg.sender_addr);
        let (body, head) = msg.split();
        match body {
            m @ (NodeMsg::Chord(_) | NodeMsg::Can(_)) => self.overlay.handle_message(now, head, m),
            NodeMsg::Job(JobMsg::Guard { job, id, restarts, deputies, ranks, auth, past }) => {
                let from = head.sender_addr;
                // The deputies may offer the job again here once they hold it.
                if let Some(nonce) = auth.as_ref().map(|a| a.manifest.nonce) {
                    self.job_replay.name_deputies(nonce, &from, &deputies);
                }
                let g = Guarded { job: id, wire: job, restarts, ranks, auth, past };
                self.on_guard(from, g, &deputies, head.payload.clone());
                let (ranks, auth, past) = (Vec::new(), None, JobPast::default());
                let j = JobMsg::Guard { job, id, restarts, deputies, ranks, auth, past };
                self.exec.handle_message(now, head.map(|()| j));
            }
            NodeMsg::Job(JobMsg::Adopt { job }) => {
                let (from, before) = (head.sender_addr, self.exec.submitter_of(job));
                self.exec.handle_message(now, head.map(|()| JobMsg::Adopt { job }));
                // The deputy holds the job now: its signature is the deputy's
                // to offer again here.
                let adopted = before.filter(|old| *old != from && self.exec.runs_for(job, from));
                if let (Some(old), Some(nonce)) = (adopted, self.exec.signature_nonce(job)) {
                    self.job_replay.hand_over(nonce, &old, from);
                }
            }
            NodeMsg::Job(j) if for_executor(&j) => {
                // A refused offer ends the job's wait here, so the slots
                // granted to it go back to the queue.
                let j = self.admit(now, head.sender_addr, j).unwrap_or_else(|job| JobMsg::Unwant { job });
                self.exec.handle_message(now, head.map(|()| j));
            }
            NodeMsg::Job(JobMsg::Output { job, rank, stream, offset }) => {
                // A copy for the deputy, or output of a job held here.
                if !self.copy_output(head.sender_addr, job, rank, stream, &head.payload) {
                    let j = JobMsg::Output { job, rank, stream, offset };
                    self.submitter.handle_message(now, head.map(|()| j));
                }
            }
            NodeMsg::Job(JobMsg::CheckpointFile { job, rank, epoch, offset, total, digest }) => {
                // A copy for the deputy, or a cut of a job held here.
                let c = deputy::CutChunk { rank, epoch, offset, total, digest };
                if !self.copy_checkpoint(head.sender_addr, job, c, &head.payload) {
                    let j = JobMsg::CheckpointFile { job, rank, epoch, offset, total, digest };
                    self.submitter.handle_message(now, head.map(|()| j));
                }
            }
            NodeMsg::Job(JobMsg::OutputFile { job, rank, name, offset, total, digest }) => {
                // A copy for a deputy, or an output file of a job held here.
                if !self.copy_output_file(head.sender_addr, job, (rank, &name), (offset, total), &head.payload) {
                    let j = JobMsg::OutputFile { job, rank, name, offset, total, digest };
                    self.submitter.handle_message(now, head.map(|()| j));
                }
            }
            NodeMsg::Job(JobMsg::Ended { job, end, history }) => {
                self.keep_results(now, head.sender_addr, job, end, history);
            }
            NodeMsg::Job(JobMsg::CutDropped { job, rank, epoch }) => {
                self.drop_checkpoint_copy(head.sender_addr, job, rank, epoch);
            }
            NodeMsg::Job(JobMsg::HandOver { job }) => self.on_hand_over(now, head.sender_addr, job),
            NodeMsg::Job(JobMsg::DeputyStopping { job }) => self.on_deputy_stopping(now, head.sender_addr, job),
            NodeMsg::Job(j) => self.submitter.handle_message(now, head.map(|()| j)),
            other => self.on_node_message(now, head.sender_addr, other, head.payload),
        }
        self.pump(now);
    }

    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        self.overlay.handle_send_failed(now, to);
        self.peer_gone(now, to, None);
        self.pump(now);
    }

    fn handle_command(&mut self, now: Instant, cmd: NodeCommand) -> Result<(), NodeCmdError> {
        let res = match cmd {
            NodeCommand::Local { conn, request_id, req } => {
                self.on_local(now, conn, request_id, req);
                Ok(())
            }
            NodeCommand::SetAllow { allow } => {
                self.policy.allow = allow;
                Ok(())
            }
            NodeCommand::Tool { conn, request_id, req } => {
                self.on_tool(now, Client::Local { conn, request_id }, req);
                Ok(())
            }
            NodeCommand::ConnClosed { conn } => {
                self.conn_closed(now, conn);
                Ok(())
            }
            NodeCommand::FileRead { job, file, data } => {
                if !self.deputy_file_read(job, file, &data) {
                    self.submitter.handle_file_read(now, job, file, data);
                }
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
            NodeCommand::HostStats { load_milli, mem_free_mb, unix_ms } => {
                self.wall = (now, unix_ms);
                if self.advert.host_stats(load_milli, mem_free_mb) {
                    self.resources_changed(now);
                }
                Ok(())
            }
            NodeCommand::Replayed { replay, rank, stream, offset, data } => {
                self.replayed(replay, rank, stream, offset, data);
                Ok(())
            }
            NodeCommand::ReplayDone { replay } => {
                self.replay_done(replay);
                Ok(())
            }
            NodeCommand::FilesVerified { job, bad } => {
                self.files_verified(now, job, bad);
                Ok(())
            }
            NodeCommand::Leave => {
                if self.leave_after_drain {
                    // The shell waited long enough for ranks to move: the
                    // jobs held here go to their deputies as they are.
                    self.leave_after_drain = false;
                    self.hand_over_held(now, true);
                    self.overlay(now, OverlayCommand::Leave);
                    Ok(())
                } else if self.left {
                    Err(NodeCmdError::Left)
                } else {
                    self.left = true;
                    // The jobs submitted here go on at their deputies; then
                    // ranks that can be moved are (those of the jobs handed
                    // over too, once adopted), before the shell stops them,
                    // and before the overlay is left: their peers look their
                    // new places up through this node.
                    self.hand_over_held(now, false);
                    self.drop_guards();
                    self.tell_co_deputies();
                    self.exec.handle_leaving();
                    self.draining = self.still_draining();
                    self.event(NodeEvent::Draining { jobs: self.draining });
                    if self.draining == 0 {
                        self.overlay(now, OverlayCommand::Leave);
                    } else {
                        self.leave_after_drain = true;
                    }
                    Ok(())
                }
            }
        };
        self.pump(now);
        res
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.overlay.poll_timeout().is_some_and(|t| t <= now) {
            self.overlay.handle_timeout(now);
        }
        if self.submitter.poll_timeout().is_some_and(|t| t <= now) {
            self.submitter.handle_timeout(now);
        }
        if self.exec.poll_timeout().is_some_and(|t| t <= now) {
            self.exec.handle_timeout(now);
        }
        for t in self.timers.take_expired(now) {
            self.on_timer(now, t);
        }
        self.pump(now);
    }

    fn poll_action(&mut self) -> Option<Action<NodeMsg, NodeEvent>> {
        self.actions.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [self.overlay.poll_timeout(), self.submitter.poll_timeout(), self.exec.poll_timeout(), self.timers.next()]
            .into_iter()
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests;
