//! What the `p2pjob` tool asks a daemon over its control socket, and the answers.
//!
//! The tool uses the socket the ranks use (`P2PMP_NODE`), but opens its
//! connection with [`TOOL_PREFACE`]; then every frame is an
//! `Envelope<ToolRequest>` one way and an `Envelope<ToolReply>` the other. A rank's
//! connection starts with a frame length, whose first byte is 0 for any frame
//! under 16 MiB, so the first byte tells the two apart. A submit or watch request is answered by a stream of
//! replies with its `request_id`, ending in [`ToolReply::Finished`]. Output bytes
//! ride as the envelope's payload. postcard encodes variants by index: every enum
//! here is append-only.
//!
//! Any node answers for any job: a request about a job submitted elsewhere is
//! forwarded to the node holding it (found through the overlay under the job's
//! key, [`job_key_name`]), and the answers come back the same way. `Status`
//! without a job, and `Zones`, ask every node of the network.

use serde::{Deserialize, Serialize};

use crate::auth::{AuthError, JobAuth, JobManifest, SecretKey, SignedRequest};
use crate::can::Zone;
use crate::ckpt::{CutInfo, RankCheckpoints};
use crate::job::description::StagedSource;
use crate::job::{JobDescription, JobId, StagedFile, Stream};
use crate::machine::NodeAddr;

/// The first bytes of a tool connection.
pub const TOOL_PREFACE: &[u8; 8] = b"P2PJOB1\n";

/// A request of the `p2pjob` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolRequest {
    /// Submit the job file `xml`; relative paths in it (executable, inputs, outputs)
    /// are taken from `base_dir`. `nonce` makes a retried submit idempotent. With
    /// `watch`, progress and output follow on this request id until the job is over.
    Submit { nonce: u64, xml: String, base_dir: String, watch: bool },
    /// Follow a job's progress and output until it is over.
    Watch { job: JobId },
    /// Every job this node submitted, or one.
    Status { job: Option<JobId> },
    /// Stop every rank of a job.
    Kill { job: JobId },
    /// Every node of the overlay with its resources.
    Nodes,
    /// Everything a job's ranks wrote to stdout and stderr so far (kept by the
    /// node that holds the job, from the first byte), as [`ToolReply::Output`]s,
    /// then [`ToolReply::OutputEnd`]; only `rank`'s when given.
    Output { job: JobId, rank: Option<u32> },
    /// Overlay diagnostics: the node responsible for SHA-1(`name`), and the hops
    /// it took to find out.
    Lookup { name: String },
    /// Overlay diagnostics: every live value registered under `name`.
    Query { name: String },
    /// The Chord state of the node asked: its predecessor, successor list and
    /// fingers, answered with [`ToolReply::Ring`] (the status page draws them).
    Ring,
    /// The CAN zones of the network: every node's zones and neighbours,
    /// answered with [`ToolReply::Zones`] (the status page draws them). Asked by
    /// a tool, the node gathers every node's answer as `Status` without a job
    /// does; forwarded by a node, it answers for itself.
    Zones,
    /// `request` (an encoded [`ToolRequest`]) signed by the tool's key, with the
    /// job's own signature beside it for a submit (over its job file and every
    /// file it stages, as the tool read them). A node that requires signatures
    /// takes the requests that act on or reveal a job only so; a request
    /// forwarded to the node holding a job goes on signed, and that node checks
    /// it itself. See [`ToolRequest::sign`].
    Signed { request: SignedRequest, job: Option<Box<JobAuth>> },
    /// Ask every running rank of a job to take a checkpoint at its next safe
    /// point: answered by [`ToolReply::CheckpointAsked`] (the ranks it
    /// reached), then [`ToolReply::CheckpointTaken`] once the cut is taken
    /// (or an error: the job ended first, no rank could be reached).
    Checkpoint { job: JobId },
    /// Move `rank` of a running job off its node alone: a checkpoint is
    /// taken, and the rank resumes from it on another node (`to` when one is
    /// named: a candidate of the job's placement running no rank of it)
    /// while the others go on.
    /// Answered by [`ToolReply::CheckpointAsked`], then [`ToolReply::Moved`]
    /// ([`ToolReply::Migrated`] when the job rolled back to the cut instead)
    /// or an error: no rank reached, the job ended first, `to` cannot take it.
    Migrate { job: JobId, rank: u32, to: Option<NodeAddr> },
}

impl ToolRequest {
    /// Whether it acts on or reveals one job (or submits one): the requests a
    /// node that requires signatures takes only signed.
    pub fn about_a_job(&self) -> bool {
        match self {
            ToolRequest::Submit { .. }
            | ToolRequest::Watch { .. }
            | ToolRequest::Kill { .. }
            | ToolRequest::Output { .. }
            | ToolRequest::Status { job: Some(_) }
            | ToolRequest::Checkpoint { .. }
            | ToolRequest::Migrate { .. } => true,
            ToolRequest::Status { job: None }
            | ToolRequest::Nodes
            | ToolRequest::Lookup { .. }
            | ToolRequest::Query { .. }
            | ToolRequest::Ring
            | ToolRequest::Zones
            | ToolRequest::Signed { .. } => false,
        }
    }

    /// Whether its answer is a stream that lasts (a watch, an output, a
    /// checkpoint waiting for its cut), looking inside a signed request.
    pub fn streams(&self) -> bool {
        let lasts = |r: &ToolRequest| {
            matches!(
                r,
                ToolRequest::Watch { .. }
                    | ToolRequest::Output { .. }
                    | ToolRequest::Checkpoint { .. }
                    | ToolRequest::Migrate { .. }
            )
        };
        match self {
            ToolRequest::Signed { request, .. } => {
                postcard::from_bytes::<ToolRequest>(&request.body).is_ok_and(|r| lasts(&r))
            }
            other => lasts(other),
        }
    }

    /// The files a submit stages beside its job file, in staging order: where
    /// the node will read each (relative paths taken from `base_dir`) and its
    /// name there. The tool reads and hashes them, as its user, for the job
    /// signature ([`ToolRequest::sign`]). Empty for any other request, or a
    /// job file that does not parse.
    pub fn staged_sources(&self) -> Vec<StagedSource> {
        match self {
            ToolRequest::Submit { xml, base_dir, .. } => {
                JobDescription::parse(xml.as_bytes()).map(|p| p.job.staged_sources(base_dir)).unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }

    /// This request signed with `secret` at wall clock `unix_ms` with `nonce`.
    /// A submit also gets the job's signature, stamped with the same timestamp
    /// and nonce, over its [`JobManifest`]: the job file as staged
    /// ([`crate::auth::job_file_digest`]) and `staged`, the files of
    /// [`ToolRequest::staged_sources`] as the tool read them (number, name,
    /// length, SHA-1), in that order. `staged` is ignored for other requests.
    /// A request already signed is kept.
    pub fn sign(self, secret: &SecretKey, unix_ms: u64, nonce: u64, staged: Vec<StagedFile>) -> ToolRequest {
        if matches!(self, ToolRequest::Signed { .. }) {
            return self;
        }
        let job = match &self {
            ToolRequest::Submit { xml, .. } => JobDescription::parse(xml.as_bytes()).ok().map(|p| {
                let job_file = crate::auth::job_file_digest(&p.job);
                Box::new(JobAuth::sign(secret, JobManifest { job_file, files: staged, timestamp_ms: unix_ms, nonce }))
            }),
            _ => None,
        };
        // Encoding a request into a Vec cannot fail (no I/O, no size limit).
        let body = postcard::to_allocvec(&self).expect("a tool request encodes");
        ToolRequest::Signed { request: SignedRequest::sign(secret, unix_ms, nonce, body), job }
    }

    /// The request inside a signed one, once its signature holds (the window
    /// and replays are the node's [`crate::auth::ReplayGuard`]'s business).
    pub fn open(request: &SignedRequest) -> Result<ToolRequest, AuthError> {
        request.verify()?;
        match postcard::from_bytes::<ToolRequest>(&request.body) {
            Ok(ToolRequest::Signed { .. }) | Err(_) => Err(AuthError::Malformed),
            Ok(inner) => Ok(inner),
        }
    }
}

/// The overlay name under which the node holding `job` registers its address.
pub fn job_key_name(job: JobId) -> String {
    format!("job:{job}")
}

/// How far a job got, for status lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobPhase {
    /// Asking the overlay for candidates.
    Resolving,
    /// Offering ranks and staging files.
    Placing,
    /// Started.
    Running,
    /// Every rank exited with code 0.
    Done,
    /// Could not run to the end.
    Failed,
    /// Killed by the user.
    Killed,
    /// Waiting for free slots on nodes that meet its requirements.
    Queued,
}

/// One rank in a status answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankStatus {
    /// The rank.
    pub rank: u32,
    /// Where it runs, once placed.
    pub node: Option<NodeAddr>,
    /// Whether it started.
    pub started: bool,
    /// Its exit code, once exited.
    pub exit: Option<i32>,
    /// Its last checkpoint and its recoveries, as it reported them.
    pub checkpoints: RankCheckpoints,
}

/// One job in a status answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job.
    pub job: JobId,
    /// Its executable, as written in the job file.
    pub executable: String,
    /// Where it is.
    pub phase: JobPhase,
    /// Every rank.
    pub ranks: Vec<RankStatus>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// The node that holds it (where it was submitted).
    pub holder: NodeAddr,
    /// While it is queued: why, and its place.
    pub waiting: Option<String>,
    /// Why it restarted, each time it did (`<restart>scratch</restart>`).
    pub restarts: Vec<String>,
    /// Every rank that moved alone (`p2pjob migrate`), in words.
    pub moves: Vec<String>,
}

/// A daemon's answer to a [`ToolRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolReply {
    /// The job was accepted (`new` is false for a retried submit).
    Submitted { job: JobId, new: bool },
    /// The request cannot be carried out (bad job file, unknown job, ...).
    Error { message: String },
    /// Answer to [`ToolRequest::Status`].
    Jobs { jobs: Vec<JobStatus> },
    /// Answer to [`ToolRequest::Nodes`]: `res:any` values (address, then resources).
    Nodes { nodes: Vec<String> },
    /// Answer to [`ToolRequest::Kill`]: the kill went out.
    Killing { job: JobId },
    /// Every rank has a node.
    Placed { job: JobId, ranks: Vec<(u32, NodeAddr)> },
    /// A rank is running.
    Started { job: JobId, rank: u32, node: NodeAddr },
    /// Output of a rank at `offset` of `stream`; payload = bytes.
    Output { job: JobId, rank: u32, stream: Stream, offset: u64 },
    /// An output file of `rank` came back to `path` (`ok`: its digest matched).
    OutputFile { job: JobId, rank: u32, path: String, ok: bool },
    /// A rank exited (negative: killed by that signal).
    Exited { job: JobId, rank: u32, code: i32 },
    /// The job is over; the last reply of a watch.
    Finished { job: JobId, phase: JobPhase, codes: Vec<i32>, error: Option<String> },
    /// The last reply of [`ToolRequest::Output`]: nothing more was written yet.
    OutputEnd { job: JobId },
    /// Answer to [`ToolRequest::Lookup`].
    Owner { owner: NodeAddr, hops: u32 },
    /// Answer to [`ToolRequest::Query`].
    Values { values: Vec<String> },
    /// The job waits for free slots, for this reason (sent when it changes).
    Queued { job: JobId, reason: String },
    /// Answer to [`ToolRequest::Ring`]: `me` and its neighbours on the ring
    /// (fingers as `(first finger index, node)`, distinct nodes only).
    Ring { me: NodeAddr, predecessor: Option<NodeAddr>, successors: Vec<NodeAddr>, fingers: Vec<(u8, NodeAddr)> },
    /// Staging the job's files to `node`: `done` of the `total` bytes that
    /// travel there (what its cache holds does not) have arrived.
    Staging { job: JobId, node: NodeAddr, done: u64, total: u64 },
    /// Output file `name` of `rank` is coming back: `done` of `total` bytes.
    Fetching { job: JobId, rank: u32, name: String, done: u64, total: u64 },
    /// Answer to [`ToolRequest::Zones`]: the node that answered (`me`), the
    /// CAN's dimensions, and what each node that answered in time told of
    /// itself, sorted by node.
    Zones { me: NodeAddr, dims: u8, nodes: Vec<NodeZones> },
    /// The job lost ranks, or moves one, and starts again (`reason` says
    /// from where and why: `from scratch: ...`, `from checkpoint 3: ...`):
    /// its `attempt`-th restart.
    Restarting { job: JobId, attempt: u32, reason: String },
    /// Answer to [`ToolRequest::Checkpoint`]: these ranks were asked (a cut
    /// follows when any was: the ranks agree on it at their next safe point).
    CheckpointAsked { job: JobId, ranks: Vec<u32> },
    /// The last answer to [`ToolRequest::Checkpoint`]: the ranks took `cut`.
    CheckpointTaken { job: JobId, cut: CutInfo },
    /// The last answer to [`ToolRequest::Migrate`] when the rank could not
    /// move alone: the cut of `epoch` is kept, and the whole job resumes from
    /// it away from node `from` (`to`: the node the rank was asked to go to,
    /// if any; `p2pjob status` shows where it went).
    Migrated { job: JobId, rank: u32, from: NodeAddr, to: Option<NodeAddr>, epoch: u64 },
    /// The last answer to [`ToolRequest::Migrate`]: the rank moved alone off
    /// node `from` and runs on node `to`, resumed from its checkpoint of
    /// `epoch`; the other ranks went on.
    Moved { job: JobId, rank: u32, from: NodeAddr, to: NodeAddr, epoch: u64 },
}

/// One CAN node in a [`ToolReply::Zones`], as it tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeZones {
    /// The node.
    pub node: NodeAddr,
    /// The zones it owns, sorted (usually one; more after a takeover; none
    /// while it joins).
    pub zones: Vec<Zone>,
    /// Its neighbours, by address.
    pub neighbours: Vec<NodeAddr>,
}

impl ToolReply {
    /// Whether this is the last reply to its request (everything but progress
    /// and output, which a watch streams before its [`ToolReply::Finished`]).
    pub fn ends_request(&self) -> bool {
        !matches!(
            self,
            ToolReply::Submitted { .. }
                | ToolReply::Placed { .. }
                | ToolReply::Started { .. }
                | ToolReply::Output { .. }
                | ToolReply::OutputFile { .. }
                | ToolReply::Exited { .. }
                | ToolReply::Queued { .. }
                | ToolReply::Staging { .. }
                | ToolReply::Fetching { .. }
                | ToolReply::Restarting { .. }
                | ToolReply::CheckpointAsked { .. }
        )
    }
}
