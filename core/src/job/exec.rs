//! The executor side of jobs: one sans-IO [`Execution`] per node, for every job the
//! node runs.
//!
//! - **Offer.** Accepted only while enough slots are free (one per rank); the slots
//!   are reserved at once ([`ExecEvent::SlotsChanged`] tells the daemon to refresh its
//!   `res:any` registration). A repeated offer for ranks already accepted is answered
//!   again, never accepted twice. A [`JobMsg::SignedOffer`] reaches the executor
//!   once the node checked its signature, key and freshness
//!   (`DaemonNode::admit`); the executor keeps its [`JobManifest`].
//! - **Signed files.** Every file of a signed job (its [`JobMsg::Manifest`] entries,
//!   each [`JobMsg::Stage`] header, the count at [`JobMsg::StageEnd`], so the
//!   files taken from the cache too) must be the one the submitter signed; one
//!   that is not turns the job down with [`RejectReason::NotAllowed`] naming the
//!   file, before any rank starts.
//! - **Stage.** Each chunk is written through [`ExecEvent::WriteFile`] while a running
//!   SHA-1 checks it; a file whose digest does not match (or that has a gap) is
//!   re-requested with [`JobMsg::Resend`] at [`JobMsg::StageEnd`], and the job is not
//!   [`JobMsg::Staged`] (so never started) until every file matches. File 0, the job
//!   file, must also match the offer's digest; it is kept to read the arguments.
//! - **Start.** One [`ExecEvent::SpawnProcess`] per rank with the job file's
//!   `<env>` variables and the documented ones (`P2PMP_JOB`, `P2PMP_RANK`, `P2PMP_SIZE`, `P2PMP_NODE`,
//!   `P2PMP_HOST`: the node's advertised IP, where ranks listen, and
//!   `P2PMP_FAILURE_TIMEOUT_MS`: how long a silent peer rank is waited for;
//!   `P2PMP_CHECKPOINT_MS`: the job file's checkpoint interval, when it has one;
//!   `P2PMP_CHECKPOINT_DIR=.`: checkpoint files go to the job directory;
//!   `P2PMP_RESTART` and `P2PMP_RESTART_JOB` when the rank resumes from a cut);
//!   output comes in
//!   through [`Execution::handle_process_output`] and goes out as [`JobMsg::Output`].
//! - **Exit.** The rank's output files are read ([`ExecEvent::ReadOutputFile`]) and sent
//!   back in chunks with at most [`ExecConfig::output_window`] bytes unacknowledged
//!   ([`JobMsg::OutputAck`]), then [`JobMsg::Exit`]; the slot is freed.
//! - **Checkpoint** ([`ckpt`]): a rank's control connection is linked to it by
//!   the process key it registers; a checkpoint request reaches the linked
//!   ranks ([`ExecEvent::AskCheckpoint`]) and their reports go to the submitter.
//! - **Kill** stops every rank ([`ExecEvent::KillProcess`]); **Done** or an abandoned
//!   job (nothing started before [`ExecConfig::start_timeout`], or the submitter
//!   unreachable) ends in [`ExecEvent::Cleanup`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sha1::Sha1;

use super::cache::FileCache;
use super::description::JobDescription;
use super::msg::{JobMsg, RankState, RejectReason, StagedFile, Stream};
use super::{JobId, MAX_STAGED_FILES};
use crate::auth::JobManifest;
use crate::ckpt::{RankCheckpoints, engine_file_name};
use crate::id::Id;
use crate::machine::{Action, Machine, NodeAddr};
use crate::wire::Envelope;
use stage::Chunk;

/// Tunables of an executor.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecConfig {
    /// Process slots this node offers.
    pub slots: u32,
    /// How long an accepted job may wait to be started before it is dropped.
    pub start_timeout: Duration,
    /// The control address handed to processes as `P2PMP_NODE`.
    pub node_control: String,
    /// Bytes per output-file chunk.
    pub chunk_size: usize,
    /// Most output-file bytes in flight to the submitter before it acknowledges.
    pub output_window: usize,
    /// Most bytes of verified staged files kept for later jobs (0: none).
    pub cache_bytes: u64,
    /// How long a rank's peer may stay silent before their connection counts as
    /// broken (`P2PMP_FAILURE_TIMEOUT_MS` of every rank).
    pub failure_timeout: Duration,
    /// How long a running job whose submitter is gone waits for its deputy
    /// to take it over ([`JobMsg::Adopt`]) before it is stopped.
    pub adopt_timeout: Duration,
}

impl ExecConfig {
    /// A configuration with `slots` slots and control address `node_control`.
    pub fn new(slots: u32, node_control: impl Into<String>) -> Self {
        ExecConfig {
            slots,
            start_timeout: Duration::from_secs(300),
            node_control: node_control.into(),
            chunk_size: 256 * 1024,
            output_window: 4 << 20,
            cache_bytes: 1 << 30,
            failure_timeout: Duration::from_secs(10),
            adopt_timeout: Duration::from_secs(60),
        }
    }
}

/// What an executor asks its driver to do (all I/O) or reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExecEvent {
    /// Write `data` at `offset` of staged file `name` in the job's directory
    /// (`offset` 0 truncates: a resent file starts over).
    WriteFile { job: JobId, name: String, offset: u64, data: Bytes },
    /// Start `rank`: run `program` (a file in the job directory) with `args` and `env`.
    SpawnProcess { job: JobId, rank: u32, program: String, args: Vec<String>, env: Vec<(String, String)> },
    /// Stop `rank`; its exit comes back through [`Execution::handle_process_exit`].
    KillProcess { job: JobId, rank: u32 },
    /// Read output file `name` of `rank`; answer with [`Execution::handle_output_file`].
    ReadOutputFile { job: JobId, rank: u32, name: String },
    /// Remove the job's directory.
    Cleanup { job: JobId },
    /// Free slots changed: refresh the `res:any` registration.
    SlotsChanged { free: u32 },
    /// Keep a copy of the job's verified file `name` (all its chunks written) in
    /// the file cache under `digest`. `program`: it is the job's executable, which
    /// cannot be written while it runs, so a hard link may stand for the copy.
    CacheStore { job: JobId, name: String, digest: Id, program: bool },
    /// Copy the cached file `digest` into the job's directory as `name`
    /// (`program` as for [`ExecEvent::CacheStore`]).
    CacheFetch { job: JobId, name: String, digest: Id, program: bool },
    /// Forget the cached file `digest`.
    CacheEvict { digest: Id },
    /// The submitter has `bytes` more of `rank`'s output: read that much more of
    /// its stdout and stderr. A rank starts with [`super::STREAM_WINDOW`] bytes of
    /// credit; the driver reads its pipes only while it has credit left.
    OutputCredit { job: JobId, rank: u32, bytes: u64 },
    /// Ask `rank` of `job`, over its control connection `conn`, to take a
    /// checkpoint at its next safe point (checkpoint request `request`).
    AskCheckpoint { conn: u64, job: JobId, rank: u32, request: u64 },
    /// Ask `rank` of `job`, over its control connection `conn`, to move alone
    /// after the cut answering checkpoint request `request` ([`moving`]).
    AskMove { conn: u64, job: JobId, rank: u32, request: u64 },
}

/// An executor input that cannot be carried out (API misuse).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecCmdError {
    /// No such job or rank here.
    #[error("no running rank {rank} of job {job}")]
    Unknown { job: JobId, rank: u32 },
    /// Control connection `conn` serves no rank running here.
    #[error("control connection {conn} serves no rank running here")]
    NoRank { conn: u64 },
}

struct Incoming {
    name: String,
    total: u64,
    digest: Id,
    received: u64,
    hasher: Sha1,
    /// Kept only for file 0 (the job file).
    keep: Option<BytesMut>,
    /// Complete and matching.
    ok: bool,
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Incoming")
            .field("name", &self.name)
            .field("received", &self.received)
            .field("ok", &self.ok)
            .finish()
    }
}

/// An offer as the executor takes it (a signed one with its manifest).
struct Offered {
    ranks: Vec<u32>,
    size: u32,
    digest: Id,
    manifest: Option<JobManifest>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RankRun {
    Waiting,
    Running {
        stdout: u64,
        stderr: u64,
    },
    /// Exited; output files still being read.
    Collecting(i32),
    Exited(i32),
}

#[derive(Debug)]
struct ExecJob {
    submitter: NodeAddr,
    size: u32,
    digest: Id,
    /// What the submitter signed (a signed offer): every staged file must match.
    manifest: Option<JobManifest>,
    ranks: BTreeMap<u32, RankRun>,
    files: BTreeMap<u32, Incoming>,
    /// Stage payload bytes received so far (what [`JobMsg::StageAck`] reports).
    consumed: u64,
    staged: Option<JobDescription>,
    deadline: Option<Instant>,
    /// The submitter asked for a kill: no output files, clean up after the last exit.
    killed: bool,
    /// Output files still to read, per rank.
    pending_reads: BTreeMap<u32, BTreeSet<String>>,
    /// Output files read and going back.
    outgoing: output::Outgoing,
    /// Per running rank: stdout + stderr bytes the submitter acknowledged.
    stream_acked: BTreeMap<u32, u64>,
    /// What each rank reported of its checkpoints ([`ckpt`]).
    checkpoints: BTreeMap<u32, RankCheckpoints>,
    /// Checkpoint files being read to ship to the submitter: by rank and
    /// file name, their epoch ([`ckpt`]).
    ckpt_reads: BTreeMap<(u32, String), u64>,
    /// The ranks here resume from this cut: the run that wrote it, its epoch
    /// ([`JobMsg::Resume`]).
    resume: Option<(JobId, u64)>,
    /// The newest checkpoint request passed on to the ranks here.
    asked: u64,
    /// Per rank, the newest checkpoint request whose cut was shipped.
    shipped: BTreeMap<u32, u64>,
    /// Ranks asked to move alone ([`moving`]).
    moving: BTreeMap<u32, moving::Moving>,
    /// Ranks placed here that resume with the engine a moved rank carried.
    engines: BTreeSet<u32>,
    /// The output files a moved rank placed here carries
    /// ([`JobMsg::CarriedFiles`]), by staged file number.
    carried: BTreeMap<u32, StagedFile>,
    /// The nodes that take the job over if its submitter dies, in order of
    /// succession ([`adopt`]).
    deputies: Vec<NodeAddr>,
    /// The submitter is gone: the job waits for a deputy until `deadline`.
    orphaned: bool,
    /// Ranks that exited before the job was adopted: their output files and
    /// exit go to the new submitter again, their slot is free already.
    reexit: BTreeSet<u32>,
}

/// A node's executor for every job offered to it.
#[derive(Debug)]
pub struct Execution {
    config: ExecConfig,
    addr: NodeAddr,
    free: u32,
    jobs: BTreeMap<JobId, ExecJob>,
    cache: FileCache,
    /// Jobs waiting for slots here ([`queue`]).
    waiting: queue::Waiting,
    actions: VecDeque<Action<JobMsg, ExecEvent>>,
    ignored: u64,
    /// Which rank each linked control connection serves ([`ckpt`]).
    links: BTreeMap<u64, (JobId, u32)>,
    /// The node is shutting down: the jobs whose submitters may still move
    /// their ranks off it ([`Execution::handle_leaving`]).
    draining: BTreeSet<JobId>,
    /// The node is shutting down: no offer is taken any more.
    leaving: bool,
}

fn plain_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

impl Execution {
    /// An executor for the node at `addr`.
    pub fn new(config: ExecConfig, addr: NodeAddr) -> Self {
        Execution {
            free: config.slots,
            cache: FileCache::new(config.cache_bytes),
            config,
            addr,
            jobs: BTreeMap::new(),
            waiting: queue::Waiting::default(),
            actions: VecDeque::new(),
            ignored: 0,
            links: BTreeMap::new(),
            draining: BTreeSet::new(),
            leaving: false,
        }
    }

    /// Free slots right now.
    pub fn free_slots(&self) -> u32 {
        self.free
    }

    /// Messages dropped as unexpected or malformed.
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// Jobs this node holds.
    pub fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs.keys().copied()
    }

    /// The jobs this node runs for `submitter`.
    pub fn jobs_of(&self, submitter: NodeAddr) -> impl Iterator<Item = JobId> + '_ {
        let held = self.jobs.iter().filter(move |(_, j)| j.submitter == submitter).map(|(id, _)| *id);
        held.chain(self.waiting.jobs_of(submitter))
    }

    /// Staged file `file` of `job` as it arrived here whole: its name in the
    /// job directory and its digest.
    pub fn staged_file(&self, job: JobId, file: u32) -> Option<(&str, Id)> {
        let f = self.jobs.get(&job)?.files.get(&file).filter(|f| f.ok)?;
        Some((&f.name, f.digest))
    }

    /// The node `job` runs for here.
    pub fn submitter_of(&self, job: JobId) -> Option<NodeAddr> {
        self.jobs.get(&job).map(|j| j.submitter)
    }

    /// The nonce of `job`'s signature, when it was offered signed.
    pub fn signature_nonce(&self, job: JobId) -> Option<u64> {
        self.jobs.get(&job)?.manifest.as_ref().map(|m| m.nonce)
    }

    /// Whether this node runs `job` for `submitter`.
    pub fn runs_for(&self, job: JobId, submitter: NodeAddr) -> bool {
        self.jobs.get(&job).is_some_and(|j| j.submitter == submitter)
    }

    /// The jobs this node is named a deputy of (their wire ids), with the
    /// other deputies named.
    pub fn deputy_of(&self) -> impl Iterator<Item = (JobId, Vec<NodeAddr>)> + '_ {
        self.jobs.iter().filter(|(_, j)| j.deputies.contains(&self.addr)).map(|(job, j)| {
            let others = j.deputies.iter().copied().filter(|d| *d != self.addr).collect();
            (*job, others)
        })
    }

    /// The submitters of the jobs this node holds or queues.
    pub fn submitters(&self) -> impl Iterator<Item = NodeAddr> + '_ {
        self.jobs.values().map(|j| j.submitter).chain(self.waiting.submitters())
    }

    /// Jobs queued here, waiting for slots.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn event(&mut self, e: ExecEvent) {
        self.actions.push_back(Action::Event(e));
    }

    fn send(&mut self, to: NodeAddr, body: JobMsg, payload: Bytes) {
        let msg = Envelope::new(self.addr.id(), self.addr, 0, body).with_payload(payload);
        self.actions.push_back(Action::Send { to, msg });
    }

    fn release(&mut self, n: u32) {
        if n > 0 {
            self.free = (self.free + n).min(self.config.slots);
            self.event(ExecEvent::SlotsChanged { free: self.free });
            self.regrant();
        }
    }

    /// Drops a job: stops what runs, frees what is reserved, cleans its directory.
    fn drop_job(&mut self, job: JobId) {
        let Some(j) = self.jobs.remove(&job) else { return };
        self.unlink(job, None);
        self.draining.remove(&job);
        // Every slot not yet given back is freed now, a killed process's included.
        let mut freed = 0;
        for (rank, run) in j.ranks {
            match run {
                RankRun::Running { .. } => {
                    self.event(ExecEvent::KillProcess { job, rank });
                    freed += 1;
                }
                RankRun::Waiting | RankRun::Collecting(_) => freed += 1,
                RankRun::Exited(_) => {}
            }
        }
        self.release(freed);
        self.event(ExecEvent::Cleanup { job });
    }

    fn on_message(&mut self, now: Instant, from: NodeAddr, body: JobMsg, payload: Bytes) -> Option<()> {
        let job = body.job();
        match body {
            JobMsg::Offer { ranks, size, digest, .. } => {
                return self.on_offer(now, from, job, Offered { ranks, size, digest, manifest: None });
            }
            JobMsg::SignedOffer { ranks, size, digest, auth, .. } => {
                let manifest = Some(auth.manifest);
                return self.on_offer(now, from, job, Offered { ranks, size, digest, manifest });
            }
            JobMsg::Want { ranks, priority, .. } => return self.on_want(from, job, ranks, priority),
            JobMsg::Unwant { .. } => return self.on_unwant(from, job),
            // A kill of a job that only waits here ends its wait.
            JobMsg::Kill { .. } if !self.jobs.contains_key(&job) => return self.on_unwant(from, job),
            // From the deputy, not the submitter.
            JobMsg::Adopt { .. } => return self.on_adopt(from, job),
            _ => {}
        }
        let j = self.jobs.get_mut(&job).filter(|j| j.submitter == from)?;
        match body {
            JobMsg::Stage { file, name, offset, total, digest, .. } => {
                return self.on_stage(from, job, Chunk { file, name, offset, total, digest }, payload);
            }
            JobMsg::Manifest { files, .. } => return self.on_manifest(from, job, files),
            JobMsg::StageEnd { files, .. } => {
                if j.staged.is_some() || files > MAX_STAGED_FILES {
                    return None;
                }
                if let Some(error) = j.manifest.as_ref().and_then(|m| m.check_count(files).err()) {
                    self.refuse_unsigned(job, error);
                    return Some(());
                }
                let bad: Vec<u32> = (0..files)
                    .chain(ckpt::resume_files(j))
                    .chain(j.carried.keys().copied())
                    .filter(|f| !j.files.get(f).is_some_and(|i| i.ok))
                    .collect();
                if !bad.is_empty() {
                    for file in bad {
                        self.send(from, JobMsg::Resend { job, file }, Bytes::new());
                    }
                    return Some(());
                }
                let xml = j.files.get(&0).and_then(|f| f.keep.as_ref()).map(|b| b.to_vec()).unwrap_or_default();
                match JobDescription::parse(&xml) {
                    Ok(p) if p.job.processes == j.size && files >= 2 => {
                        j.staged = Some(p.job);
                        self.send(from, JobMsg::Staged { job }, Bytes::new());
                    }
                    _ => self.refuse(job, RejectReason::Other("unusable job file".into())),
                }
            }
            JobMsg::Start { .. } => {
                let desc = j.staged.clone()?;
                let program = j.files.get(&1).map(|f| f.name.clone())?;
                j.deadline = None;
                let waiting: Vec<u32> =
                    j.ranks.iter().filter(|(_, r)| **r == RankRun::Waiting).map(|(k, _)| *k).collect();
                let (size, resume) = (j.size, j.resume);
                for rank in &waiting {
                    j.ranks.insert(*rank, RankRun::Running { stdout: 0, stderr: 0 });
                }
                for rank in waiting {
                    // The job file's variables, then the node's (which they may not name).
                    let mut env = desc.env.clone();
                    env.extend([
                        ("P2PMP_JOB".to_owned(), job.to_string()),
                        ("P2PMP_RANK".to_owned(), rank.to_string()),
                        ("P2PMP_SIZE".to_owned(), size.to_string()),
                        ("P2PMP_NODE".to_owned(), self.config.node_control.clone()),
                        ("P2PMP_HOST".to_owned(), self.addr.0.ip().to_string()),
                        ("P2PMP_FAILURE_TIMEOUT_MS".to_owned(), self.config.failure_timeout.as_millis().to_string()),
                        // Checkpoint files go to the job directory itself,
                        // where this node reads them to ship them.
                        ("P2PMP_CHECKPOINT_DIR".to_owned(), ".".to_owned()),
                    ]);
                    if let Some(every) = desc.checkpoint {
                        env.push(("P2PMP_CHECKPOINT_MS".to_owned(), every.as_millis().to_string()));
                    }
                    env.extend(ckpt::resume_env(resume, rank));
                    env.extend(self.engine_env(job, rank));
                    let (program, args) = (program.clone(), desc.arguments.clone());
                    self.actions.push_back(Action::Event(ExecEvent::SpawnProcess { job, rank, program, args, env }));
                    self.send(from, JobMsg::Started { job, rank }, Bytes::new());
                }
            }
            JobMsg::Kill { .. } => {
                j.killed = true;
                let running: Vec<u32> =
                    j.ranks.iter().filter(|(_, r)| matches!(r, RankRun::Running { .. })).map(|(k, _)| *k).collect();
                let waiting = j.ranks.values().filter(|r| **r == RankRun::Waiting).count() as u32;
                j.ranks.retain(|_, r| *r != RankRun::Waiting);
                let empty = j.ranks.values().all(|r| matches!(r, RankRun::Exited(_)));
                // Nobody acknowledges output files any more: a rank waiting to send
                // them exits now.
                j.outgoing = output::Outgoing::default();
                self.release(waiting);
                for rank in running {
                    self.event(ExecEvent::KillProcess { job, rank });
                }
                if empty {
                    self.drop_job(job);
                } else {
                    self.pump_output(job);
                }
            }
            JobMsg::Status { .. } => {
                let ranks = j
                    .ranks
                    .iter()
                    .map(|(k, r)| {
                        let s = match r {
                            RankRun::Waiting if j.staged.is_some() => RankState::Staged,
                            RankRun::Waiting => RankState::Staging,
                            RankRun::Running { .. } | RankRun::Collecting(_) => RankState::Running,
                            RankRun::Exited(c) => RankState::Exited(*c),
                        };
                        (*k, s)
                    })
                    .collect();
                self.send(from, JobMsg::StatusReply { job, ranks }, Bytes::new());
            }
            JobMsg::Done { .. } => self.drop_job(job),
            JobMsg::Checkpoint { request, .. } => self.on_checkpoint_request(from, job, request, true),
            JobMsg::CheckpointStay { request, .. } => self.on_checkpoint_request(from, job, request, false),
            JobMsg::Move { rank, request, .. } => return self.on_move(job, rank, request),
            JobMsg::ResumeEngine { rank, .. } => return self.on_resume_engine(job, rank, payload),
            JobMsg::CarriedFiles { rank, files, .. } => return self.on_carried_files(job, rank, files),
            JobMsg::Resume { from: run, epoch, .. } if j.staged.is_none() => j.resume = Some((run, epoch)),
            JobMsg::Staying { .. } => {
                self.draining.remove(&job);
            }
            JobMsg::OutputAck { consumed, .. } => return self.on_output_ack(job, consumed),
            JobMsg::StreamAck { rank, consumed, .. } => return self.on_stream_ack(job, rank, consumed),
            JobMsg::Guard { deputies, .. } => {
                j.deputies = deputies.into_iter().filter(|d| *d != from).take(adopt::MAX_DEPUTIES).collect();
            }
            _ => return None,
        }
        Some(())
    }

    fn on_offer(&mut self, now: Instant, from: NodeAddr, job: JobId, offer: Offered) -> Option<()> {
        let Offered { ranks, size, digest, manifest } = offer;
        let valid = !ranks.is_empty()
            && size > 0
            && ranks.iter().all(|r| *r < size)
            && ranks.windows(2).all(|w| w[0] < w[1])
            && size <= super::description::MAX_PROCESSES;
        if !valid {
            return None;
        }
        if let Some(j) = self.jobs.get(&job) {
            if j.submitter != from || j.digest != digest || j.size != size || j.manifest != manifest {
                return None;
            }
            if ranks.iter().all(|r| j.ranks.contains_key(r)) {
                // A repeated offer: answer again, reserve nothing twice.
                self.send(from, JobMsg::Accept { job, ranks }, Bytes::new());
                return Some(());
            }
            if ranks.iter().any(|r| j.ranks.contains_key(r)) || j.staged.is_some() {
                return None;
            }
        }
        let n = ranks.len() as u32;
        if self.leaving {
            self.send(from, JobMsg::Reject { job, ranks, reason: RejectReason::Leaving }, Bytes::new());
            return Some(());
        }
        // Slots granted to jobs waiting before this one are theirs.
        if n > self.free.saturating_sub(self.waiting.granted_to_others(job)) {
            self.send(from, JobMsg::Reject { job, ranks, reason: RejectReason::NoSlot }, Bytes::new());
            return Some(());
        }
        self.free -= n;
        // Its grant (if it waited here) is taken by this offer.
        self.stop_waiting(job);
        let deadline = now + self.config.start_timeout;
        let j = self.jobs.entry(job).or_insert_with(|| ExecJob {
            submitter: from,
            size,
            digest,
            manifest,
            ranks: BTreeMap::new(),
            files: BTreeMap::new(),
            consumed: 0,
            staged: None,
            deadline: Some(deadline),
            killed: false,
            pending_reads: BTreeMap::new(),
            outgoing: output::Outgoing::default(),
            stream_acked: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            ckpt_reads: BTreeMap::new(),
            resume: None,
            asked: 0,
            shipped: BTreeMap::new(),
            moving: BTreeMap::new(),
            engines: BTreeSet::new(),
            carried: BTreeMap::new(),
            deputies: Vec::new(),
            orphaned: false,
            reexit: BTreeSet::new(),
        });
        j.ranks.extend(ranks.iter().map(|r| (*r, RankRun::Waiting)));
        self.event(ExecEvent::SlotsChanged { free: self.free });
        self.send(from, JobMsg::Accept { job, ranks }, Bytes::new());
        Some(())
    }

    /// A running rank wrote to stdout or stderr.
    pub fn handle_process_output(
        &mut self,
        job: JobId,
        rank: u32,
        stream: Stream,
        data: Bytes,
    ) -> Result<(), ExecCmdError> {
        let j = self.jobs.get_mut(&job).ok_or(ExecCmdError::Unknown { job, rank })?;
        let Some(RankRun::Running { stdout, stderr }) = j.ranks.get_mut(&rank) else {
            return Err(ExecCmdError::Unknown { job, rank });
        };
        let at = if stream == Stream::Stdout { stdout } else { stderr };
        let offset = *at;
        *at += data.len() as u64;
        let to = j.submitter;
        self.send(to, JobMsg::Output { job, rank, stream, offset }, data);
        Ok(())
    }

    /// The submitter has `consumed` bytes of `rank`'s output: hand the driver
    /// credit for what is newly acknowledged (never for bytes not yet sent).
    fn on_stream_ack(&mut self, job: JobId, rank: u32, consumed: u64) -> Option<()> {
        let j = self.jobs.get_mut(&job)?;
        let Some(RankRun::Running { stdout, stderr }) = j.ranks.get(&rank) else { return None };
        let consumed = consumed.min(stdout + stderr);
        let acked = j.stream_acked.entry(rank).or_default();
        let bytes = consumed.checked_sub(*acked).filter(|&b| b > 0)?;
        *acked = consumed;
        self.event(ExecEvent::OutputCredit { job, rank, bytes });
        Some(())
    }

    /// A rank's process ended (negative code: killed by that signal), or could not start.
    pub fn handle_process_exit(&mut self, job: JobId, rank: u32, code: i32) -> Result<(), ExecCmdError> {
        let j = self.jobs.get_mut(&job).ok_or(ExecCmdError::Unknown { job, rank })?;
        if !matches!(j.ranks.get(&rank), Some(RankRun::Running { .. })) {
            return Err(ExecCmdError::Unknown { job, rank });
        }
        let names: BTreeSet<String> = match &j.staged {
            Some(d) if !j.killed => d.outputfiles.iter().cloned().collect(),
            _ => BTreeSet::new(),
        };
        j.ranks.insert(rank, RankRun::Collecting(code));
        // A rank that left to move takes its output files along (read like
        // those of an exit, they go before its engine); its last reports
        // may still come over its control connection.
        let moving = self.left_to_move(job, rank, code);
        let names: BTreeSet<String> = names.into_iter().filter(|n| !moving || *n != engine_file_name(rank)).collect();
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        j.pending_reads.insert(rank, names.clone());
        if !moving {
            self.unlink(job, Some(rank));
        }
        for name in names {
            self.event(ExecEvent::ReadOutputFile { job, rank, name });
        }
        self.maybe_exit(job, rank);
        Ok(())
    }
}

impl Machine for Execution {
    type Body = JobMsg;
    type Command = std::convert::Infallible;
    type Event = ExecEvent;
    type CmdError = ExecCmdError;

    fn addr(&self) -> NodeAddr {
        self.addr
    }

    fn handle_message(&mut self, now: Instant, msg: Envelope<JobMsg>) {
        if self.on_message(now, msg.sender_addr, msg.body, msg.payload).is_none() {
            self.ignored += 1;
        }
    }

    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        // The submitter is gone: nobody can receive results, so stop its jobs
        // (unless a deputy may take them over) and forget what it waits for
        // (its grants go to others).
        self.drop_waiting_of(to);
        let gone: Vec<JobId> = self.jobs.iter().filter(|(_, j)| j.submitter == to).map(|(k, _)| *k).collect();
        for job in gone {
            if !self.orphan(now, job) {
                self.drop_job(job);
            }
        }
    }

    fn handle_command(&mut self, _now: Instant, cmd: std::convert::Infallible) -> Result<(), ExecCmdError> {
        match cmd {}
    }

    fn handle_timeout(&mut self, now: Instant) {
        let stale: Vec<JobId> =
            self.jobs.iter().filter(|(_, j)| j.deadline.is_some_and(|d| d <= now)).map(|(k, _)| *k).collect();
        for job in stale {
            self.drop_job(job);
        }
    }

    fn poll_action(&mut self) -> Option<Action<JobMsg, ExecEvent>> {
        self.actions.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.jobs.values().filter_map(|j| j.deadline).min()
    }
}

mod adopt;
mod ckpt;
mod moving;
mod output;
mod queue;
mod stage;

#[cfg(test)]
mod tests;
