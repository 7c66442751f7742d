//! The submitter side of a job: a sans-IO [`Submission`] per job, and the
//! [`Submitter`] that owns them and makes submitting idempotent.
//!
//! # Lifecycle
//! 1. **Resolve.** Query the overlay for `res:any` and for each requirement's narrowing
//!    name ([`Requirement::query_name`]); read the executable and input files meanwhile
//!    ([`SubmitEvent::ReadFile`]). A candidate is a node listed in every narrowing
//!    answer whose `res:any` line satisfies every requirement, with free slots. A
//!    signed job ([`Submitter::submit_signed`]) fails here when a file read is not
//!    the one its submitter signed ([`SubmitError::NotAsSigned`]); nothing is
//!    offered before every file is read.
//! 2. **Offer.** Ranks go, in ascending order, one at a time to the candidate with the
//!    most free slots left (ties: lowest address), so placement is deterministic and
//!    spreads load; each node gets one [`JobMsg::Offer`] for its ranks. A reject, an
//!    unanswered offer ([`SubmitConfig::offer_timeout`]) or a failed send drops the
//!    node and returns its ranks to the pool. The job fails only when the slots left on
//!    the remaining candidates are fewer than the unplaced ranks; the error says how
//!    many nodes matched each requirement.
//! 3. **Stage.** Each accepting node gets file 0 (the job file), 1 (the executable)
//!    and the input files in chunks with a SHA-1 per file, then [`JobMsg::StageEnd`]; a
//!    [`JobMsg::Resend`] resends one file (at most [`SubmitConfig::max_resends`] times).
//! 4. **Start** once every rank is placed and every node staged; then **collect**
//!    output, output files (sent before the rank's exit) and exit codes; finish with
//!    [`Outcome::Done`], [`Outcome::Failed`] or [`Outcome::Killed`].
//!
//! Losing a node that holds live ranks fails the job, or, with
//! `<restart>scratch</restart>`, stops the other ranks and starts the job
//! again on other nodes under a new wire id (see [`Submission::wire`]); with
//! `<restart>checkpoint</restart>` the node holding the job keeps the ranks'
//! cuts as they are taken, and the job starts again from the newest one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use sha1::{Digest, Sha1};

use super::msg::{JobEnd, JobHistory, JobMsg, JobPast, STREAM_ACK_EVERY, StagedFile, Stream};
use super::requirements::{ANY_NAME, Requirement, Resources};
use super::{JobDescription, JobId, RestartPolicy};
use crate::ckpt::CutInfo;
use crate::id::Id;
use crate::machine::{Action, Machine, NodeAddr};
use crate::overlay::OverlayError;
use crate::wire::Envelope;

mod state;

pub use state::restart::MAX_RESTARTS;
pub use state::{Guarded, MAX_PENDING_CHECKPOINTS, Replica, Submission, SubmissionCommand};

/// Tunables of a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubmitConfig {
    /// How long an offer may stay unanswered before the node is dropped.
    pub offer_timeout: Duration,
    /// How long staging to a node may go without progress (an acknowledgement,
    /// or [`JobMsg::Staged`] after the last file) before the node counts as lost.
    pub stage_timeout: Duration,
    /// How often an overlay query is tried before the job fails.
    pub query_attempts: u32,
    /// Bytes per staged chunk.
    pub chunk_size: usize,
    /// Most staged bytes in flight to one node before it acknowledges.
    pub stage_window: usize,
    /// How often one file may be re-sent to one node.
    pub max_resends: u32,
    /// Test hook: a signed job's files are staged as read, unchecked against
    /// its signature, as a dishonest node would forward them (the executors
    /// must still refuse them).
    #[cfg(feature = "test-hooks")]
    pub forward_unchecked: bool,
}

impl Default for SubmitConfig {
    fn default() -> Self {
        SubmitConfig {
            offer_timeout: Duration::from_secs(5),
            stage_timeout: Duration::from_secs(120),
            query_attempts: 3,
            chunk_size: 256 * 1024,
            stage_window: 4 << 20,
            max_resends: 3,
            #[cfg(feature = "test-hooks")]
            forward_unchecked: false,
        }
    }
}

/// Why a job failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The nodes matching every requirement have fewer slots in all, idle, than
    /// the job has ranks: it can never run (a busy network makes it wait instead).
    #[error(
        "the job needs {needed} process slot(s) but the {nodes} node(s) matching every requirement have {slots} in all \
         ({rejected} node(s) dropped after refusing or not answering; per requirement: {})",
        per_requirement.iter().map(|(r, n)| format!("{r}: {n} node(s)")).collect::<Vec<_>>().join(", ")
    )]
    NotEnoughCandidates {
        /// Ranks still unplaced.
        needed: u32,
        /// Free slots on the remaining candidates.
        slots: u64,
        /// Remaining candidates.
        nodes: usize,
        /// Candidates dropped after a reject or timeout.
        rejected: usize,
        /// How many nodes matched each requirement on its own.
        per_requirement: Vec<(String, usize)>,
    },
    /// Nodes refused the job (its key is not allowed there, or its signature
    /// did not hold), and the others are too few.
    #[error("{}; {cause}", reasons.join("; "))]
    Refused {
        /// Each refusing node's reason.
        reasons: Vec<String>,
        /// What is left without them.
        cause: Box<SubmitError>,
    },
    /// An overlay query kept failing.
    #[error("overlay query {name:?} failed: {error}")]
    QueryFailed { name: String, error: OverlayError },
    /// A file to stage could not be read.
    #[error("cannot read {path:?}: {reason}")]
    FileRead { path: String, reason: String },
    /// A file to stage is not the one the job's submitter signed (it changed
    /// since the tool read it, or the node reads another file than the user
    /// did): nothing was offered.
    #[error("{path:?} is not the file the job was signed with: {error}; nothing was started")]
    NotAsSigned { path: String, error: crate::auth::FileMismatch },
    /// A node holding ranks became unreachable or stopped answering.
    #[error("node {node} holding rank(s) {ranks:?} was lost")]
    NodeLost { node: NodeAddr, ranks: Vec<u32> },
    /// Nothing was heard from a node holding ranks for longer than the failure
    /// timeout (a host paused, partitioned or gone without a reset).
    #[error("node {node} holding rank(s) {ranks:?} stopped answering (nothing heard for {:.1} s)", *silent_ms as f64 / 1e3)]
    NodeSilent { node: NodeAddr, ranks: Vec<u32>, silent_ms: u64 },
    /// Every rank ended, but output files did not all come back whole.
    #[error(
        "output file(s) not returned: {}",
        files.iter().map(|(r, n, why)| match *r {
            u32::MAX => format!("{n} ({why}: no rank wrote it)"),
            r => format!("{n} of rank {r} ({why})"),
        }).collect::<Vec<_>>().join(", ")
    )]
    /// (rank, name, what went wrong); rank `u32::MAX`: no rank of a
    /// multi-rank job wrote it.
    OutputFiles { files: Vec<(u32, String, String)> },
    /// A file kept arriving corrupt at a node.
    #[error("file {file} kept arriving corrupt at {node}")]
    StagingFailed { node: NodeAddr, file: u32 },
    /// A rank exited with a non-zero code (or was killed by a signal) while
    /// others still ran: like `mpirun`, the rest of the job is stopped.
    #[error("rank {rank} {}; the other ranks were stopped", super::describe_exit(*code))]
    RankFailed { rank: u32, code: i32 },
    /// The job's `<timeout>` passed.
    #[error("the job's timeout passed")]
    Timeout,
    /// The job waited for free slots longer than its `<queuetimeout>`.
    #[error("waited {:.1} s for free slots ({reason})", *waited_ms as f64 / 1e3)]
    QueueTimeout { waited_ms: u64, reason: String },
    /// The description asks for no process or more than [`super::description::MAX_PROCESSES`].
    #[error("a job needs 1 to {max} processes, not {0}", max = super::description::MAX_PROCESSES)]
    BadProcessCount(u32),
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited; codes by rank.
    Done { codes: Vec<i32> },
    /// The job could not run to the end.
    Failed(SubmitError),
    /// The user killed it.
    Killed,
}

impl From<&Outcome> for JobEnd {
    fn from(o: &Outcome) -> Self {
        match o {
            Outcome::Done { codes } => JobEnd::Done { codes: codes.clone() },
            Outcome::Failed(e) => JobEnd::Failed { error: e.to_string() },
            Outcome::Killed => JobEnd::Killed,
        }
    }
}

/// Where a submission is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Asking the overlay for candidates.
    Resolving,
    /// Waiting at the candidates for free slots (see [`Submission::waiting_reason`]).
    Queued,
    /// Offering ranks and staging files.
    Placing,
    /// Started; collecting results.
    Running,
    /// Over.
    Finished,
}

/// One rank as the submitter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankInfo {
    /// The rank.
    pub rank: u32,
    /// The node it was accepted by, if any.
    pub node: Option<NodeAddr>,
    /// Whether it reported running.
    pub started: bool,
    /// Its exit code, once exited.
    pub exit: Option<i32>,
}

/// What a submission reports or asks of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubmitEvent {
    /// Ask the overlay for every value under `name`; answer through
    /// `handle_query_done(job, query, ..)`.
    Query { job: JobId, query: u32, name: String },
    /// Read local file `path`; answer through `handle_file_read(job, file, ..)`
    /// with its bytes and digest ([`FileData`]).
    ReadFile { job: JobId, file: u32, path: String },
    /// Every rank has a node.
    Placed { job: JobId, ranks: Vec<(u32, NodeAddr)> },
    /// A rank is running.
    Started { job: JobId, rank: u32, node: NodeAddr },
    /// Output of a rank.
    Output { job: JobId, rank: u32, stream: Stream, offset: u64, data: Bytes },
    /// Write `data` at `offset` of output file `name` of `rank` (`total` bytes long).
    WriteFile { job: JobId, rank: u32, name: String, offset: u64, total: u64, data: Bytes },
    /// Output file `name` of `rank` is complete; `ok` when its digest matched.
    OutputFileDone { job: JobId, rank: u32, name: String, ok: bool },
    /// A rank exited.
    Exited { job: JobId, rank: u32, code: i32 },
    /// Answer to a status command.
    Status { job: JobId, phase: Phase, ranks: Vec<RankInfo> },
    /// The job waits for free slots, for this reason (emitted when it changes).
    Queued { job: JobId, reason: String },
    /// The job is over.
    Finished { job: JobId, outcome: Outcome },
    /// Staging to `node`: it has taken `done` of the `total` bytes that travel
    /// to it (files its cache holds do not travel). Emitted as it moves.
    Staging { job: JobId, node: NodeAddr, done: u64, total: u64 },
    /// The job lost ranks (`reason`) and starts again from scratch, its
    /// `attempt`-th restart (`<restart>scratch</restart>`).
    Restarting { job: JobId, attempt: u32, reason: String },
    /// Checkpoint request `request` ([`Submitter::request_checkpoint`])
    /// reached these ranks.
    CheckpointAsked { job: JobId, request: u64, ranks: Vec<u32> },
    /// The job's ranks took the cut `cut`, which answers checkpoint request `request`.
    CheckpointTaken { job: JobId, request: u64, cut: CutInfo },
    /// Checkpoint request `request` cannot be answered, for this reason.
    CheckpointFailed { job: JobId, request: u64, reason: String },
    /// Keep `data` at `offset` of `rank`'s checkpoint file of `epoch` (offset
    /// 0 truncates), for a restart (`<restart>checkpoint</restart>`).
    StoreCheckpoint { job: JobId, rank: u32, epoch: u64, offset: u64, data: Bytes },
    /// `rank` moves off node `from` by rolling the job back (its node shuts
    /// down with others, or it could not move alone), asked to go to node
    /// `to` when one was named: the job restarts from the cut of `epoch`,
    /// taken for it, away from that node.
    Migrated { job: JobId, rank: u32, from: NodeAddr, to: Option<NodeAddr>, epoch: u64 },
    /// `rank` moved alone off node `from` and runs on node `to`, resumed
    /// from its file of the cut of `epoch` (`p2pjob migrate`); the other
    /// ranks went on.
    Moved { job: JobId, rank: u32, from: NodeAddr, to: NodeAddr, epoch: u64 },
    /// `rank`'s checkpoint file of `epoch` is no longer needed: remove it.
    DropCheckpoint { job: JobId, rank: u32, epoch: u64 },
    /// Read `rank`'s kept checkpoint file of `epoch` back; answer through
    /// `handle_file_read(job, RESUME_FILES + rank, ..)` ([`super::RESUME_FILES`]).
    ReadCheckpoint { job: JobId, rank: u32, epoch: u64 },
}

/// A submitter command that cannot be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitCmdError {
    /// No job with this id.
    #[error("no job {0}")]
    UnknownJob(JobId),
    /// A kill of a job that has already ended.
    #[error("job {0} has already ended: nothing to kill")]
    AlreadyOver(JobId),
    /// The request id was used before for a different job description.
    #[error("request id {0} was already used for another job")]
    RequestIdReused(u64),
    /// A checkpoint was asked of a job none of whose ranks runs.
    #[error("job {job} has no running rank to checkpoint: {why}")]
    NoRunningRank { job: JobId, why: &'static str },
    /// A checkpoint was asked of a job already following
    /// [`MAX_PENDING_CHECKPOINTS`] requests.
    #[error("job {job} already waits for {pending} checkpoint(s): ask again once they are taken")]
    TooManyCheckpoints { job: JobId, pending: usize },
    /// A rank cannot be moved to the node named.
    #[error("rank {rank} of job {job} cannot move to node {to}: {why}")]
    CannotMoveTo { job: JobId, rank: u32, to: NodeAddr, why: &'static str },
    /// No node could take the rank alone: every other candidate of the job
    /// runs ranks of it, or is gone.
    #[error(
        "rank {rank} of job {job} has nowhere to go: every other node meeting the job's requirements runs ranks of it \
         or is gone"
    )]
    NowhereToGo { job: JobId, rank: u32 },
    /// A rank of the job is being moved already.
    #[error("job {job} is already moving rank {rank}: ask again once it has moved")]
    Migrating { job: JobId, rank: u32 },
    /// The job was taken over from its dead submitting node without every
    /// file it stages: its ranks cannot be placed anew.
    #[error("job {job} was taken over from its lost submitting node without its files: its ranks cannot move")]
    TakenOver { job: JobId },
    /// The job's signature does not hold for this job file.
    #[error("the job's signature is refused: {0}")]
    BadSignature(crate::auth::AuthError),
    /// The job's signature lists other files than the job stages.
    #[error("the job's signature does not match its files: {0}")]
    NotAsSigned(crate::auth::FileMismatch),
}

/// Every submission of one node, keyed by job id, with idempotent submit.
#[derive(Debug)]
pub struct Submitter {
    addr: NodeAddr,
    config: SubmitConfig,
    rng: Pcg64,
    counter: u64,
    by_request: BTreeMap<u64, JobId>,
    jobs: BTreeMap<JobId, Submission>,
}

/// What a submitter is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitterCommand {
    /// Kill a job.
    Kill(JobId),
    /// Report a job's status.
    Status(JobId),
}

impl Submitter {
    /// A submitter for the node at `addr`; `rng_seed` feeds the job-id nonces.
    pub fn new(config: SubmitConfig, addr: NodeAddr, rng_seed: u64) -> Self {
        Submitter {
            addr,
            config,
            rng: Pcg64::seed_from_u64(rng_seed),
            counter: 0,
            by_request: BTreeMap::new(),
            jobs: BTreeMap::new(),
        }
    }

    /// Submits `job` under the caller's `request_id`. A retry with the same request
    /// id and description returns the same job id and `false` (nothing new starts).
    ///
    /// `priority` orders the job among those waiting for the same nodes: lower
    /// first (the submission time in ms by the submitting node's clock).
    pub fn submit(
        &mut self,
        now: Instant,
        request_id: u64,
        job: JobDescription,
        priority: u64,
    ) -> Result<(JobId, bool), SubmitCmdError> {
        self.submit_signed(now, request_id, job, priority, None)
    }

    /// [`Submitter::submit`] with the submitter's credentials (`auth`), which
    /// go with every offer so each executor checks the submitter itself. They
    /// are checked here first: a signature over this job file listing as many
    /// files as the job stages; each file is held to it as it is read.
    pub fn submit_signed(
        &mut self,
        now: Instant,
        request_id: u64,
        job: JobDescription,
        priority: u64,
        auth: Option<crate::auth::JobAuth>,
    ) -> Result<(JobId, bool), SubmitCmdError> {
        if let Some(a) = &auth {
            a.verify(&crate::auth::job_file_digest(&job)).map_err(SubmitCmdError::BadSignature)?;
            let count = job.staged_paths().count() as u32 + 1;
            a.manifest.check_count(count).map_err(SubmitCmdError::NotAsSigned)?;
        }
        if let Some(&id) = self.by_request.get(&request_id) {
            return match self.jobs.get(&id) {
                Some(s) if s.description() != &job => Err(SubmitCmdError::RequestIdReused(request_id)),
                _ => Ok((id, false)),
            };
        }
        self.counter += 1;
        let id = JobId::derive(self.addr, self.counter, self.rng.random());
        self.by_request.insert(request_id, id);
        let mut s = Submission::new(self.config.clone(), self.addr, (id, priority), job, now);
        s.set_auth(auth);
        self.jobs.insert(id, s);
        Ok((id, true))
    }

    /// Asks every running rank of `job` for a checkpoint: the request's
    /// number (see [`Submission::request_checkpoint`]).
    pub fn request_checkpoint(&mut self, job: JobId) -> Result<u64, SubmitCmdError> {
        self.jobs.get_mut(&job).ok_or(SubmitCmdError::UnknownJob(job))?.request_checkpoint()
    }

    /// Moves `rank` of `job` off its node: the number of the checkpoint
    /// request that takes the cut it resumes from (see [`Submission::migrate`]).
    pub fn migrate(
        &mut self,
        now: Instant,
        job: JobId,
        rank: u32,
        to: Option<NodeAddr>,
    ) -> Result<u64, SubmitCmdError> {
        self.jobs.get_mut(&job).ok_or(SubmitCmdError::UnknownJob(job))?.migrate(now, rank, to)
    }

    /// Takes over job `g` (described by `desc`) from its dead submitting
    /// node (see [`Submission::adopt`]); `false` when it is held here already.
    pub fn adopt(&mut self, now: Instant, g: Guarded, desc: JobDescription, kept: Replica) -> bool {
        if self.jobs.contains_key(&g.job) {
            return false;
        }
        let s = Submission::adopt(self.config.clone(), self.addr, (g.clone(), desc), kept, now);
        self.jobs.insert(g.job, s);
        true
    }

    /// Keeps job `g` (described by `desc`), which ended at its submitting
    /// node with exit `codes`, for `status` and `wait` here (see
    /// [`Submission::ended`]); `false` when it is held here already.
    pub fn keep_ended(
        &mut self,
        now: Instant,
        (g, desc): (Guarded, JobDescription),
        end: (&[i32], JobHistory),
    ) -> bool {
        if self.jobs.contains_key(&g.job) {
            return false;
        }
        let s = Submission::ended(self.config.clone(), self.addr, (g.clone(), desc), end, now);
        self.jobs.insert(g.job, s);
        true
    }

    /// The submission of `job`.
    pub fn get(&self, job: JobId) -> Option<&Submission> {
        self.jobs.get(&job)
    }

    /// Every job, in id order.
    pub fn jobs(&self) -> impl Iterator<Item = &Submission> {
        self.jobs.values()
    }

    /// Every node some running job waits on (see [`Submission::peers`]).
    pub fn peers(&self) -> BTreeSet<NodeAddr> {
        self.jobs.values().flat_map(Submission::peers).collect()
    }

    /// Nothing was heard from `node` for `silent`: see [`Submission::handle_peer_silent`].
    pub fn handle_peer_silent(&mut self, now: Instant, node: NodeAddr, silent: Duration) {
        self.jobs.values_mut().for_each(|s| s.handle_peer_silent(now, node, silent));
    }

    /// Whether `job` (a wire id: see [`Submission::wire`]) is live here with
    /// ranks (or an offer) on `node`.
    pub fn runs_on(&self, job: JobId, node: NodeAddr) -> bool {
        self.jobs.values().find(|s| s.wire() == job).is_some_and(|s| s.peers().any(|p| p == node))
    }

    /// The submission whose current run goes by `wire` on the network (its
    /// job id until it restarts).
    fn by_wire(&mut self, wire: JobId) -> Option<&mut Submission> {
        if self.jobs.get(&wire).is_some_and(|s| s.wire() == wire) {
            return self.jobs.get_mut(&wire);
        }
        self.jobs.values_mut().find(|s| s.wire() == wire)
    }

    /// Forgets one job (its request id too).
    pub fn forget(&mut self, job: JobId) {
        self.jobs.remove(&job);
        self.by_request.retain(|_, id| *id != job);
    }

    /// Forgets finished jobs (their request ids too).
    pub fn forget_finished(&mut self) {
        self.jobs.retain(|_, s| s.phase() != Phase::Finished);
        let jobs = &self.jobs;
        self.by_request.retain(|_, id| jobs.contains_key(id));
    }

    /// The overlay answered query `query` of `job` ([`SubmitEvent::Query`]).
    pub fn handle_query_done(
        &mut self,
        now: Instant,
        job: JobId,
        query: u32,
        result: &Result<Vec<String>, OverlayError>,
    ) {
        if let Some(s) = self.jobs.get_mut(&job) {
            s.handle_query_done(now, query, result);
        }
    }

    /// The driver read (or failed to read) file `file` of `job`.
    pub fn handle_file_read(&mut self, now: Instant, job: JobId, file: u32, data: Result<FileData, String>) {
        if let Some(s) = self.jobs.get_mut(&job) {
            s.handle_file_read(now, file, data);
        }
    }
}

impl Machine for Submitter {
    type Body = JobMsg;
    type Command = SubmitterCommand;
    type Event = SubmitEvent;
    type CmdError = SubmitCmdError;

    fn addr(&self) -> NodeAddr {
        self.addr
    }

    fn handle_message(&mut self, now: Instant, msg: Envelope<JobMsg>) {
        if let Some(s) = self.by_wire(msg.body.job()) {
            s.handle_message(now, msg);
        }
    }

    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        self.jobs.values_mut().for_each(|s| s.handle_send_failed(now, to));
    }

    fn handle_command(&mut self, now: Instant, cmd: SubmitterCommand) -> Result<(), SubmitCmdError> {
        let (id, c) = match cmd {
            SubmitterCommand::Kill(id) => (id, SubmissionCommand::Kill),
            SubmitterCommand::Status(id) => (id, SubmissionCommand::Status),
        };
        let s = self.jobs.get_mut(&id).ok_or(SubmitCmdError::UnknownJob(id))?;
        s.handle_command(now, c)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.jobs.values_mut().for_each(|s| s.handle_timeout(now));
    }

    fn poll_action(&mut self) -> Option<Action<JobMsg, SubmitEvent>> {
        self.jobs.values_mut().find_map(|s| s.poll_action())
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.jobs.values().filter_map(|s| s.poll_timeout()).min()
    }
}

/// SHA-1 of `data`, as an [`Id`].
pub fn digest(data: &[u8]) -> Id {
    Id::from_bytes(Sha1::digest(data).into())
}

/// A file read for staging and its SHA-1, the answer to [`SubmitEvent::ReadFile`].
/// A driver may hash while it reads, so the digest costs no second pass over the
/// bytes after the read; [`FileData::new`] hashes them here. A wrong digest cannot
/// make a node run wrong bytes: every executor checks what it receives against it,
/// so such a file is only refused (re-sent, then the job fails).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileData {
    /// The whole file.
    pub bytes: Bytes,
    /// SHA-1 of `bytes`.
    pub digest: Id,
}

impl FileData {
    /// `bytes` with their digest computed here.
    pub fn new(bytes: Bytes) -> Self {
        FileData { digest: digest(&bytes), bytes }
    }
}

/// How many nodes satisfied each requirement on its own, for error messages.
fn per_requirement_counts(
    reqs: &[Requirement],
    nodes: &BTreeMap<NodeAddr, Resources>,
    narrowed: &BTreeMap<String, BTreeSet<NodeAddr>>,
) -> Vec<(String, usize)> {
    reqs.iter()
        .map(|r| {
            let listed = |a: &NodeAddr| r.query_name().is_none_or(|n| narrowed.get(&n).is_some_and(|s| s.contains(a)));
            (r.to_string(), nodes.iter().filter(|(a, res)| listed(a) && r.matches(res)).count())
        })
        .collect()
}

#[cfg(test)]
mod tests;
