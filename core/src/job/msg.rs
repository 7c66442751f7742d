//! The messages submitters and executors exchange. postcard encodes variants by
//! index: append only, never reorder. File and output bytes ride as the envelope's
//! raw payload, never through serde.

use serde::{Deserialize, Serialize};

use super::JobId;
use crate::auth::JobAuth;
use crate::ckpt::{CheckpointInfo, RankCheckpoints, RecoveryInfo};
use crate::id::Id;
use crate::machine::NodeAddr;

/// Which output stream a chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Why an executor turned an offer down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// Not enough free slots for the offered ranks.
    NoSlot,
    /// The node does not meet a requirement (its advertisement was stale).
    Requirements,
    /// The node is shutting down.
    Leaving,
    /// Anything else, in words.
    Other(String),
    /// The node's policy refuses the job's submitter (its key is not allowed
    /// there, or the job's signature is missing or bad), in words.
    NotAllowed(String),
}

/// What an executor knows about one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RankState {
    /// Accepted, files arriving.
    Staging,
    /// Files verified, waiting for the start.
    Staged,
    /// Running.
    Running,
    /// Exited with this code (negative: killed by a signal).
    Exited(i32),
}

/// One job-protocol message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobMsg {
    /// Submitter -> executor: run `ranks` of a job of `size` ranks; `digest` is the
    /// SHA-1 of the job file that will be staged as file 0.
    Offer { job: JobId, ranks: Vec<u32>, size: u32, digest: Id },
    /// Executor -> submitter: the offer is taken; a slot is reserved per rank.
    Accept { job: JobId, ranks: Vec<u32> },
    /// Executor -> submitter: the offer is refused.
    Reject { job: JobId, ranks: Vec<u32>, reason: RejectReason },
    /// Submitter -> executor: bytes `offset..offset + payload.len()` of staged file
    /// `file` (0 = job file, 1 = executable, then the input files), `total` bytes
    /// long with SHA-1 `digest`.
    Stage { job: JobId, file: u32, name: String, offset: u64, total: u64, digest: Id },
    /// Submitter -> executor: every file has been sent (`files` of them).
    StageEnd { job: JobId, files: u32 },
    /// Executor -> submitter: file `file` arrived corrupt or incomplete; send it again.
    Resend { job: JobId, file: u32 },
    /// Executor -> submitter: every file arrived and matches its digest.
    Staged { job: JobId },
    /// Submitter -> executor: start the ranks (every node staged).
    Start { job: JobId },
    /// Executor -> submitter: `rank` is running.
    Started { job: JobId, rank: u32 },
    /// Executor -> submitter: output of `rank` at `offset` of its `stream`; payload = bytes.
    Output { job: JobId, rank: u32, stream: Stream, offset: u64 },
    /// Executor -> submitter: `rank` exited (negative: killed by that signal).
    Exit { job: JobId, rank: u32, code: i32 },
    /// Executor -> submitter: bytes of output file `name` of `rank`, like [`JobMsg::Stage`].
    OutputFile { job: JobId, rank: u32, name: String, offset: u64, total: u64, digest: Id },
    /// Submitter -> executor: stop every rank of the job.
    Kill { job: JobId },
    /// Submitter -> executor: report the ranks' states.
    Status { job: JobId },
    /// Executor -> submitter: answer to [`JobMsg::Status`].
    StatusReply { job: JobId, ranks: Vec<(u32, RankState)> },
    /// Submitter -> executor: the results are home; clean the job directory.
    Done { job: JobId },
    /// Executor -> submitter: `consumed` bytes of [`JobMsg::Stage`] payload have
    /// arrived for this job so far (cumulative); the submitter's window moves on.
    StageAck { job: JobId, consumed: u64 },
    /// Submitter -> executor: the files about to be staged, before any
    /// [`JobMsg::Stage`]; answered by [`JobMsg::Have`].
    Manifest { job: JobId, files: Vec<StagedFile> },
    /// Executor -> submitter: these files of the manifest are already here (a
    /// verified copy of the same length and digest); stage only the others.
    Have { job: JobId, files: Vec<u32> },
    /// Submitter -> executor: `consumed` bytes of [`JobMsg::OutputFile`] payload
    /// have arrived from this executor for this job so far (cumulative); the
    /// executor's output window moves on.
    OutputAck { job: JobId, consumed: u64 },
    /// Submitter -> executor: `consumed` bytes of `rank`'s [`JobMsg::Output`]
    /// (stdout and stderr together) have arrived so far (cumulative), sent every
    /// [`STREAM_ACK_EVERY`] bytes: the rank's output window moves on.
    StreamAck { job: JobId, rank: u32, consumed: u64 },
    /// Submitter -> executor: the job waits for `ranks` slots in all (on this
    /// node and others); queue it by `priority` (the submission time in ms of
    /// the submitting node's clock; ties by job id: lower first) and grant it
    /// slots as they are free ([`JobMsg::Grant`]). Granted slots are held for
    /// the job until it offers ranks, withdraws, or an earlier job needs them.
    Want { job: JobId, ranks: u32, priority: u64 },
    /// Executor -> submitter: this node holds `slots` free slots for the job now
    /// (0: none, or taken back for an earlier job); `ahead` jobs wait before it here.
    Grant { job: JobId, slots: u32, ahead: u32 },
    /// Submitter -> executor: the job no longer waits here (placed elsewhere, or over).
    Unwant { job: JobId },
    /// Submitter -> executor: [`JobMsg::Offer`] with the submitter's
    /// credentials: its key and signature over the job manifest (`digest`,
    /// every staged file's number, name, length and digest, a timestamp and a
    /// nonce). The executor checks the signature, the key and the freshness
    /// against its own policy before it takes the offer, then every staged
    /// file against the manifest (refusing with [`RejectReason::NotAllowed`]
    /// saying why).
    SignedOffer { job: JobId, ranks: Vec<u32>, size: u32, digest: Id, auth: JobAuth },
    /// Submitter -> executor: ask every rank of the job running here to take a
    /// checkpoint at its next safe point (`p2pjob checkpoint`); `request`
    /// numbers the job's checkpoint requests, from 1. Answered by
    /// [`JobMsg::CheckpointAsked`].
    Checkpoint { job: JobId, request: u64 },
    /// Executor -> submitter: checkpoint request `request` reached these ranks
    /// (those running here with a control connection to this node).
    CheckpointAsked { job: JobId, request: u64, ranks: Vec<u32> },
    /// Executor -> submitter: `rank` wrote checkpoint `ckpt`, a cut covering
    /// every checkpoint request up to `request` (0: none).
    Checkpointed { job: JobId, rank: u32, ckpt: CheckpointInfo, request: u64 },
    /// Executor -> submitter: `rank` resumed from a checkpoint.
    Recovered { job: JobId, rank: u32, recovery: RecoveryInfo },
    /// Executor -> submitter: bytes of `rank`'s checkpoint file of `epoch`,
    /// like [`JobMsg::OutputFile`] (and acknowledged with it by
    /// [`JobMsg::OutputAck`]): the node holding a job that restarts from its
    /// checkpoints keeps a copy of every cut.
    CheckpointFile { job: JobId, rank: u32, epoch: u64, offset: u64, total: u64, digest: Id },
    /// Submitter -> executor, before [`JobMsg::Manifest`]: the ranks placed
    /// here resume from cut `epoch`, written by the run `from` (whose id the
    /// files carry); each rank's file is staged as number
    /// [`super::RESUME_FILES`] + rank, named [`crate::ckpt::file_name`], apart
    /// from the files the submitter signed.
    Resume { job: JobId, from: JobId, epoch: u64 },
    /// Executor -> submitter: this node is shutting down (gracefully) with
    /// ranks of the job running: move them, if they can be moved, before it
    /// stops them.
    Leaving { job: JobId },
    /// Submitter -> executor: answer to [`JobMsg::Leaving`]: the ranks will
    /// not be moved (no checkpoint can be taken of them); stop them at will.
    Staying { job: JobId },
    /// Submitter -> executor, after [`JobMsg::Checkpoint`] of `request`:
    /// `rank` moves alone at the cut answering it (`p2pjob migrate`): it
    /// saves its engine and exits, and the node sends [`JobMsg::Moved`]
    /// instead of an exit.
    Move { job: JobId, rank: u32, request: u64 },
    /// Executor -> submitter: `rank`, asked to move at the cut answering
    /// checkpoint request `request`, left its process; payload = its engine
    /// file ([`crate::ckpt::engine_file_name`], whose header names the cut),
    /// empty when it could not be read. Its file of that cut is shipped as
    /// for any cut asked for (it may arrive after this).
    Moved { job: JobId, rank: u32, request: u64 },
    /// Submitter -> executor, after [`JobMsg::Resume`] and before
    /// [`JobMsg::Start`]: `rank`, placed here, takes the place of a rank that
    /// moved alone; payload = the engine it saved, written beside its
    /// checkpoint for it to resume with.
    ResumeEngine { job: JobId, rank: u32 },
    /// Submitter -> executor: as [`JobMsg::Checkpoint`], but the files of
    /// its cut stay on this node (unless the job restarts from its
    /// checkpoints, when every cut is shipped): a rank moving alone needs
    /// only its own file, whose node [`JobMsg::Move`] tells.
    CheckpointStay { job: JobId, request: u64 },
    /// Submitter -> executor, after [`JobMsg::ResumeEngine`]: the output
    /// files `rank` had written when it left its old node, staged here as
    /// [`super::CARRIED_FILES`] + their index in `files` before it starts,
    /// apart from the files the submitter signed, so the rank finds its job
    /// directory as it left it.
    CarriedFiles { job: JobId, rank: u32, files: Vec<StagedFile> },
    /// Submitter -> every node holding ranks, whenever the job (re)starts or
    /// a rank moves: the job `id` runs as `job` (its wire id, after
    /// `restarts` restarts) with `ranks` placed so; nodes `deputies`, in
    /// order of succession, take the job over if the submitter's node dies
    /// (the first, or the next when those before it died too: see
    /// `crate::node::deputy`), and the others take [`JobMsg::Adopt`] from
    /// one of them then (none named: nobody takes it over, and a node named
    /// before keeps nothing); `auth`: the job's
    /// signature, if it was signed (the deputy offers it again to place
    /// ranks anew, and each node lets the deputies its holder named offer
    /// it); `past`: why it restarted and which ranks moved so far, which
    /// the deputy that takes it over goes on from. Payload = the job file.
    Guard {
        job: JobId,
        id: JobId,
        restarts: u32,
        deputies: Vec<NodeAddr>,
        ranks: Vec<(u32, NodeAddr)>,
        auth: Option<JobAuth>,
        past: JobPast,
    },
    /// Deputy -> executor: the job's submitter is gone and this node holds the
    /// job from now on: send it what the old one would have got.
    Adopt { job: JobId },
    /// Executor -> the node that adopted the job: per rank here, the stdout +
    /// stderr bytes it sent so far (where its output goes on).
    Adopted { job: JobId, streamed: Vec<(u32, u64)> },
    /// Submitter -> its deputy, which keeps a copy of every checkpoint file
    /// the submitter keeps (each [`JobMsg::CheckpointFile`] chunk passed on):
    /// `rank`'s file of `epoch` is no longer kept.
    CutDropped { job: JobId, rank: u32, epoch: u64 },
    /// Submitter -> its deputies, before the job's nodes are told it is
    /// over: how job `job` (its id, not a run's wire id: a deputy named
    /// before a restart hears it too) ended, and its `history`. Each deputy then holds the
    /// ended job as the submitter does (its end, the output and output files
    /// it copied), so `p2pjob wait` or `status` from any node finds its
    /// results while one of them lives.
    Ended { job: JobId, end: JobEnd, history: JobHistory },
    /// Submitter -> each of its deputies, as the submitter stops
    /// gracefully: take the job (this run, `job` its wire id) over now, as
    /// if this node were lost (the first at once, the next once those
    /// before it are lost too); its ranks here then move like any other
    /// node's.
    HandOver { job: JobId },
    /// A deputy of job `job` (this run's wire id) -> the job's other
    /// deputies, as it stops gracefully: it takes nothing over, so those
    /// behind it need not wait until it is lost.
    DeputyStopping { job: JobId },
}

/// What `p2pjob status` shows of a job beside its placement and exits, as
/// its submitting node tells its deputies when it ends ([`JobMsg::Ended`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHistory {
    /// Why it restarted, each time.
    pub restarts: Vec<String>,
    /// Every rank moved alone.
    pub moves: Vec<String>,
    /// Each rank's checkpoints and recoveries, by rank.
    pub checkpoints: Vec<(u32, RankCheckpoints)>,
}

/// The restarts and moves of a running job, as its holder tells the nodes
/// that may take it over ([`JobMsg::Guard`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPast {
    /// Why it restarted, each time.
    pub restarts: Vec<String>,
    /// Every rank moved alone.
    pub moves: Vec<String>,
    /// How many of its restarts were migrations, not losses (those count
    /// against its restarts).
    pub migrations: u32,
}

/// How a job ended, as its submitting node tells its deputy ([`JobMsg::Ended`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEnd {
    /// Every rank exited; codes by rank.
    Done { codes: Vec<i32> },
    /// It could not run to the end, in words.
    Failed { error: String },
    /// The user killed it.
    Killed,
}

/// Most stdout + stderr bytes of one rank in flight to its submitter: the
/// executor stops reading the rank's pipes beyond it (the rank then blocks on
/// its writes), so a rank printing faster than the network carries it fills no
/// queue.
pub const STREAM_WINDOW: u64 = 1 << 20;

/// How often (in bytes of a rank's output received) the submitter sends a
/// [`JobMsg::StreamAck`]; well under [`STREAM_WINDOW`], so the window never
/// closes on bytes the submitter holds unacknowledged.
pub const STREAM_ACK_EVERY: u64 = 128 << 10;

/// One entry of a [`JobMsg::Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedFile {
    /// Its number (0 = job file, 1 = executable, then the input files).
    pub file: u32,
    /// Its plain name in the job directory.
    pub name: String,
    /// Its length in bytes.
    pub total: u64,
    /// Its SHA-1.
    pub digest: Id,
}

impl JobMsg {
    /// The job this message is about.
    pub fn job(&self) -> JobId {
        match self {
            JobMsg::Offer { job, .. }
            | JobMsg::Accept { job, .. }
            | JobMsg::Reject { job, .. }
            | JobMsg::Stage { job, .. }
            | JobMsg::StageEnd { job, .. }
            | JobMsg::Resend { job, .. }
            | JobMsg::Staged { job }
            | JobMsg::Start { job }
            | JobMsg::Started { job, .. }
            | JobMsg::Output { job, .. }
            | JobMsg::Exit { job, .. }
            | JobMsg::OutputFile { job, .. }
            | JobMsg::Kill { job }
            | JobMsg::Status { job }
            | JobMsg::StatusReply { job, .. }
            | JobMsg::Done { job }
            | JobMsg::StageAck { job, .. }
            | JobMsg::Manifest { job, .. }
            | JobMsg::Have { job, .. }
            | JobMsg::OutputAck { job, .. }
            | JobMsg::StreamAck { job, .. }
            | JobMsg::Want { job, .. }
            | JobMsg::Grant { job, .. }
            | JobMsg::Unwant { job }
            | JobMsg::SignedOffer { job, .. }
            | JobMsg::Checkpoint { job, .. }
            | JobMsg::CheckpointAsked { job, .. }
            | JobMsg::Checkpointed { job, .. }
            | JobMsg::Recovered { job, .. }
            | JobMsg::CheckpointFile { job, .. }
            | JobMsg::Resume { job, .. }
            | JobMsg::Leaving { job }
            | JobMsg::Staying { job }
            | JobMsg::Move { job, .. }
            | JobMsg::Moved { job, .. }
            | JobMsg::ResumeEngine { job, .. }
            | JobMsg::CheckpointStay { job, .. }
            | JobMsg::CarriedFiles { job, .. }
            | JobMsg::Guard { job, .. }
            | JobMsg::Adopt { job }
            | JobMsg::Adopted { job, .. }
            | JobMsg::CutDropped { job, .. }
            | JobMsg::Ended { job, .. }
            | JobMsg::HandOver { job }
            | JobMsg::DeputyStopping { job } => *job,
        }
    }

    /// Whether this variant carries bytes as payload.
    pub fn carries_payload(&self) -> bool {
        matches!(
            self,
            JobMsg::Stage { .. }
                | JobMsg::Output { .. }
                | JobMsg::OutputFile { .. }
                | JobMsg::CheckpointFile { .. }
                | JobMsg::Moved { .. }
                | JobMsg::ResumeEngine { .. }
                | JobMsg::Guard { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::auth::{JobManifest, PublicKey, Signature};
    use crate::wire::{DEFAULT_MAX_FRAME, Envelope};

    fn body_bytes(m: &JobMsg) -> Vec<u8> {
        postcard::to_allocvec(m).unwrap()
    }

    fn staged(file: u32, name: &str, total: u64) -> StagedFile {
        StagedFile { file, name: name.into(), total, digest: Id::ZERO }
    }

    /// postcard encodes variants by index: these pin the indices and field order.
    #[test]
    fn golden_bytes_pin_the_format() {
        let z = JobId(Id::ZERO);
        let mut want = vec![0u8]; // Offer
        want.extend([0u8; 20]); // job
        want.extend([2, 0, 1, 2]); // ranks [0, 1], size 2
        want.extend([0u8; 20]); // digest
        assert_eq!(body_bytes(&JobMsg::Offer { job: z, ranks: vec![0, 1], size: 2, digest: Id::ZERO }), want);
        let mut want = vec![10u8];
        want.extend([0u8; 20]);
        want.extend([3, 1]); // rank 3, code -1 zigzag
        assert_eq!(body_bytes(&JobMsg::Exit { job: z, rank: 3, code: -1 }), want);
        let mut want = vec![15u8];
        want.extend([0u8; 20]);
        assert_eq!(body_bytes(&JobMsg::Done { job: z }), want);
        let mut want = vec![16u8];
        want.extend([0u8; 20]);
        want.extend([0x80, 0x01]); // 128 as a varint
        assert_eq!(body_bytes(&JobMsg::StageAck { job: z, consumed: 128 }), want);
        let mut want = vec![19u8];
        want.extend([0u8; 20]);
        want.extend([0x80, 0x01]);
        assert_eq!(body_bytes(&JobMsg::OutputAck { job: z, consumed: 128 }), want);
        let mut want = vec![20u8];
        want.extend([0u8; 20]);
        want.extend([3, 0x80, 0x01]);
        assert_eq!(body_bytes(&JobMsg::StreamAck { job: z, rank: 3, consumed: 128 }), want);
        let mut want = vec![21u8];
        want.extend([0u8; 20]);
        want.extend([4, 0x80, 0x01]); // ranks 4, priority 128
        assert_eq!(body_bytes(&JobMsg::Want { job: z, ranks: 4, priority: 128 }), want);
        let mut want = vec![22u8];
        want.extend([0u8; 20]);
        want.extend([2, 5]);
        assert_eq!(body_bytes(&JobMsg::Grant { job: z, slots: 2, ahead: 5 }), want);
        let mut want = vec![23u8];
        want.extend([0u8; 20]);
        assert_eq!(body_bytes(&JobMsg::Unwant { job: z }), want);
        let mut want = vec![25u8];
        want.extend([0u8; 20]);
        want.push(3);
        assert_eq!(body_bytes(&JobMsg::Checkpoint { job: z, request: 3 }), want);
        let mut want = vec![26u8];
        want.extend([0u8; 20]);
        want.extend([3, 1, 2]); // request 3, ranks [2]
        assert_eq!(body_bytes(&JobMsg::CheckpointAsked { job: z, request: 3, ranks: vec![2] }), want);
        let ckpt = CheckpointInfo { epoch: 1, unix_ms: 2, stored_bytes: 3, raw_bytes: 4 };
        let mut want = vec![27u8];
        want.extend([0u8; 20]);
        want.extend([5, 1, 2, 3, 4, 6]); // rank 5, the checkpoint, request 6
        assert_eq!(body_bytes(&JobMsg::Checkpointed { job: z, rank: 5, ckpt, request: 6 }), want);
        let mut want = vec![28u8];
        want.extend([0u8; 20]);
        want.extend([5, 1, 2]);
        let recovery = RecoveryInfo { epoch: 1, unix_ms: 2 };
        assert_eq!(body_bytes(&JobMsg::Recovered { job: z, rank: 5, recovery }), want);
        let mut want = vec![29u8];
        want.extend([0u8; 20]);
        want.extend([5, 3, 0x80, 0x01, 0x81, 0x01]); // rank 5, epoch 3, offset 128, total 129
        want.extend([0u8; 20]);
        let file = JobMsg::CheckpointFile { job: z, rank: 5, epoch: 3, offset: 128, total: 129, digest: Id::ZERO };
        assert_eq!(body_bytes(&file), want);
        let mut want = vec![30u8];
        want.extend([0u8; 20]);
        want.extend([0u8; 20]);
        want.push(4);
        assert_eq!(body_bytes(&JobMsg::Resume { job: z, from: z, epoch: 4 }), want);
        assert_eq!(body_bytes(&JobMsg::Leaving { job: z }), [&[31u8][..], &[0u8; 20]].concat());
        assert_eq!(body_bytes(&JobMsg::Staying { job: z }), [&[32u8][..], &[0u8; 20]].concat());
        let (zero, tail) = (&[0u8; 20][..], &[1u8, 2][..]);
        assert_eq!(body_bytes(&JobMsg::Move { job: z, rank: 1, request: 2 }), [&[33u8][..], zero, tail].concat());
        assert_eq!(body_bytes(&JobMsg::Moved { job: z, rank: 1, request: 2 }), [&[34u8][..], zero, tail].concat());
        assert_eq!(body_bytes(&JobMsg::ResumeEngine { job: z, rank: 1 }), [&[35u8][..], zero, &[1]].concat());
        assert_eq!(body_bytes(&JobMsg::CheckpointStay { job: z, request: 2 }), [&[36u8][..], zero, &[2]].concat());
        let carried = JobMsg::CarriedFiles { job: z, rank: 1, files: vec![staged(0x200000, "o", 3)] };
        let want = [&[37u8][..], zero, &[1, 1, 0x80, 0x80, 0x80, 0x01, 1, b'o', 3], zero].concat();
        assert_eq!(body_bytes(&carried), want);
        let a = NodeAddr::loopback(2, 7000);
        let past = JobPast { restarts: vec!["r".into()], moves: vec![], migrations: 0 };
        let guard =
            JobMsg::Guard { job: z, id: z, restarts: 1, deputies: vec![a], ranks: vec![(0, a)], auth: None, past };
        let addr = postcard::to_allocvec(&a).unwrap();
        // restarts 1, the deputies [a], [(0, a)], not signed; restarted
        // once ("r"), no moves, no migrations
        let want = [&[38u8][..], zero, zero, &[1, 1], &addr, &[1, 0], &addr, &[0], &[1, 1, b'r', 0, 0]].concat();
        assert_eq!(body_bytes(&guard), want);
        assert_eq!(body_bytes(&JobMsg::Adopt { job: z }), [&[39u8][..], zero].concat());
        assert_eq!(body_bytes(&JobMsg::HandOver { job: z }), [&[43u8][..], zero].concat());
        assert_eq!(body_bytes(&JobMsg::DeputyStopping { job: z }), [&[44u8][..], zero].concat());
        let adopted = JobMsg::Adopted { job: z, streamed: vec![(1, 128)] };
        assert_eq!(body_bytes(&adopted), [&[40u8][..], zero, &[1, 1, 0x80, 0x01]].concat());
        let dropped = JobMsg::CutDropped { job: z, rank: 2, epoch: 3 };
        assert_eq!(body_bytes(&dropped), [&[41u8][..], zero, &[2, 3]].concat());
        let none = JobHistory::default();
        let ended = JobMsg::Ended { job: z, end: JobEnd::Done { codes: vec![0, -1] }, history: none.clone() };
        assert_eq!(body_bytes(&ended), [&[42u8][..], zero, &[0, 2, 0, 1], &[0, 0, 0]].concat());
        let failed = JobMsg::Ended { job: z, end: JobEnd::Failed { error: "x".into() }, history: none.clone() };
        assert_eq!(body_bytes(&failed), [&[42u8][..], zero, &[1, 1, b'x'], &[0, 0, 0]].concat());
        let history = JobHistory {
            restarts: vec!["r".into()],
            moves: vec![],
            checkpoints: vec![(1, RankCheckpoints::default())],
        };
        let killed = JobMsg::Ended { job: z, end: JobEnd::Killed, history };
        // restarts ["r"], no moves, rank 1: no checkpoint, no recoveries, 0 recovered
        assert_eq!(body_bytes(&killed), [&[42u8][..], zero, &[2], &[1, 1, b'r', 0, 1, 1, 0, 0, 0]].concat());
        let reject = JobMsg::Reject { job: z, ranks: vec![], reason: RejectReason::Other("x".into()) };
        assert_eq!(body_bytes(&reject)[21..], [0, 3, 1, b'x']);
        // A signed offer: the offer's fields, then the key, the manifest
        // (job file, files, timestamp, nonce) and the signature.
        let files = vec![StagedFile { file: 1, name: "p".into(), total: 3, digest: Id::ZERO }];
        let manifest = JobManifest { job_file: Id::ZERO, files, timestamp_ms: 128, nonce: 5 };
        let auth = JobAuth { key: PublicKey([1; 32]), manifest, signature: Signature([[2; 32]; 2]) };
        let mut want = vec![24u8];
        want.extend([0u8; 20]);
        want.extend([1, 0, 1]); // ranks [0], size 1
        want.extend([0u8; 20]); // digest
        want.extend([1u8; 32]); // key
        want.extend([0u8; 20]); // manifest: job file
        want.extend([1, 1, 1, b'p', 3]); // one file: 1, "p", 3 bytes
        want.extend([0u8; 20]); // its digest
        want.extend([0x80, 0x01, 5]); // timestamp 128, nonce 5
        want.extend([2u8; 64]); // signature
        assert_eq!(body_bytes(&JobMsg::SignedOffer { job: z, ranks: vec![0], size: 1, digest: Id::ZERO, auth }), want);
    }

    fn arb_msg() -> impl Strategy<Value = JobMsg> {
        let job = any::<[u8; 20]>().prop_map(|b| JobId(Id::from_bytes(b)));
        let id = any::<[u8; 20]>().prop_map(Id::from_bytes);
        prop_oneof![
            (job.clone(), proptest::collection::vec(any::<u32>(), 0..4), any::<u32>(), id.clone())
                .prop_map(|(job, ranks, size, digest)| JobMsg::Offer { job, ranks, size, digest }),
            (job.clone(), any::<u32>(), "[a-z.]{0,8}", any::<u64>(), any::<u64>(), id.clone()).prop_map(
                |(job, file, name, offset, total, digest)| JobMsg::Stage { job, file, name, offset, total, digest }
            ),
            (job.clone(), any::<u32>(), any::<bool>(), any::<u64>()).prop_map(|(job, rank, err, offset)| {
                JobMsg::Output { job, rank, stream: if err { Stream::Stderr } else { Stream::Stdout }, offset }
            }),
            (job.clone(), any::<u32>(), any::<i32>()).prop_map(|(job, rank, code)| JobMsg::Exit { job, rank, code }),
            (job.clone(), proptest::collection::vec((any::<u32>(), any::<i32>()), 0..4)).prop_map(|(job, r)| {
                JobMsg::StatusReply { job, ranks: r.into_iter().map(|(k, c)| (k, RankState::Exited(c))).collect() }
            }),
            (job.clone(), any::<u64>()).prop_map(|(job, consumed)| JobMsg::StageAck { job, consumed }),
            (job.clone(), any::<u64>()).prop_map(|(job, consumed)| JobMsg::OutputAck { job, consumed }),
            (job.clone(), any::<u32>(), any::<u64>()).prop_map(|(job, rank, consumed)| JobMsg::StreamAck {
                job,
                rank,
                consumed
            }),
            (job.clone(), any::<u32>(), "[a-z.]{0,8}", any::<u64>(), id.clone()).prop_map(
                |(job, file, name, total, digest)| JobMsg::Manifest {
                    job,
                    files: vec![StagedFile { file, name, total, digest }]
                }
            ),
            (job.clone(), proptest::collection::vec(any::<u32>(), 0..4))
                .prop_map(|(job, files)| JobMsg::Have { job, files }),
            job.clone().prop_map(|job| JobMsg::Kill { job }),
            (job.clone(), any::<u32>(), any::<u64>()).prop_map(|(job, ranks, priority)| JobMsg::Want {
                job,
                ranks,
                priority
            }),
            (job.clone(), any::<u32>(), any::<u32>()).prop_map(|(job, slots, ahead)| JobMsg::Grant {
                job,
                slots,
                ahead
            }),
            job.clone().prop_map(|job| JobMsg::Unwant { job }),
            job.clone().prop_map(|job| JobMsg::Leaving { job }),
            job.clone().prop_map(|job| JobMsg::Staying { job }),
            (job.clone(), any::<u32>(), any::<u64>()).prop_map(|(job, rank, request)| JobMsg::Move {
                job,
                rank,
                request
            }),
            (job.clone(), any::<u32>(), any::<u64>()).prop_map(|(job, rank, request)| JobMsg::Moved {
                job,
                rank,
                request
            }),
            (job.clone(), any::<u32>()).prop_map(|(job, rank)| JobMsg::ResumeEngine { job, rank }),
            (job.clone(), any::<u64>()).prop_map(|(job, request)| JobMsg::CheckpointStay { job, request }),
            (job.clone(), any::<u32>(), proptest::collection::vec((any::<u32>(), "[a-z]{0,4}", any::<u64>()), 0..3))
                .prop_map(|(job, rank, files)| {
                    let files = files.into_iter().map(|(f, n, t)| staged(f, &n, t)).collect();
                    JobMsg::CarriedFiles { job, rank, files }
                }),
            (job.clone(), any::<u32>(), any::<u16>(), proptest::collection::vec((any::<u32>(), any::<u16>()), 0..3))
                .prop_map(|(job, restarts, port, ranks)| {
                    let past = JobPast {
                        restarts: (0..restarts % 3).map(|i| format!("restart {i}")).collect(),
                        moves: (0..port % 2).map(|i| format!("move {i}")).collect(),
                        migrations: restarts % 2,
                    };
                    let ranks = ranks.into_iter().map(|(r, p)| (r, NodeAddr::loopback(3, p))).collect();
                    let auth = (port % 2 == 0).then(|| {
                        let manifest = JobManifest { job_file: Id::ZERO, files: vec![], timestamp_ms: 1, nonce: 2 };
                        JobAuth { key: PublicKey([port as u8; 32]), manifest, signature: Signature([[3; 32]; 2]) }
                    });
                    let deputies = vec![NodeAddr::loopback(2, port), NodeAddr::loopback(4, port)];
                    JobMsg::Guard { job, id: job, restarts, deputies, ranks, auth, past }
                }),
            job.clone().prop_map(|job| JobMsg::Adopt { job }),
            job.clone().prop_map(|job| JobMsg::HandOver { job }),
            job.clone().prop_map(|job| JobMsg::DeputyStopping { job }),
            (job.clone(), any::<u32>(), any::<u64>()).prop_map(|(job, rank, epoch)| JobMsg::CutDropped {
                job,
                rank,
                epoch
            }),
            (job.clone(), proptest::collection::vec((any::<u32>(), any::<u64>()), 0..3))
                .prop_map(|(job, streamed)| JobMsg::Adopted { job, streamed }),
            (job.clone(), proptest::collection::vec(any::<i32>(), 0..4), "[a-z ]{0,8}", any::<u8>()).prop_map(
                |(job, codes, error, pick)| {
                    let history = JobHistory { restarts: vec![error.clone()], ..JobHistory::default() };
                    let end = match pick % 3 {
                        0 => JobEnd::Done { codes },
                        1 => JobEnd::Failed { error },
                        _ => JobEnd::Killed,
                    };
                    JobMsg::Ended { job, end, history }
                }
            ),
            (job.clone(), any::<u64>()).prop_map(|(job, request)| JobMsg::Checkpoint { job, request }),
            (job.clone(), any::<u64>(), proptest::collection::vec(any::<u32>(), 0..4))
                .prop_map(|(job, request, ranks)| JobMsg::CheckpointAsked { job, request, ranks }),
            (job.clone(), any::<u32>(), any::<[u64; 4]>(), any::<u64>()).prop_map(|(job, rank, c, request)| {
                let ckpt = CheckpointInfo { epoch: c[0], unix_ms: c[1], stored_bytes: c[2], raw_bytes: c[3] };
                JobMsg::Checkpointed { job, rank, ckpt, request }
            }),
            (job.clone(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(job, rank, epoch, unix_ms)| {
                JobMsg::Recovered { job, rank, recovery: RecoveryInfo { epoch, unix_ms } }
            }),
            (job.clone(), any::<u32>(), any::<[u64; 3]>(), id).prop_map(|(job, rank, n, digest)| {
                JobMsg::CheckpointFile { job, rank, epoch: n[0], offset: n[1], total: n[2], digest }
            }),
            (job.clone(), any::<[u8; 20]>(), any::<u64>()).prop_map(|(job, from, epoch)| JobMsg::Resume {
                job,
                from: JobId(Id::from_bytes(from)),
                epoch
            }),
            (job, any::<[u8; 32]>(), any::<[[u8; 32]; 2]>(), any::<(u64, u64)>(), "[a-z.]{0,8}").prop_map(
                |(job, k, s, (timestamp_ms, nonce), name)| {
                    let files = vec![StagedFile { file: 1, name, total: timestamp_ms >> 3, digest: Id::hash(k) }];
                    let manifest = JobManifest { job_file: Id::hash(s[0]), files, timestamp_ms, nonce };
                    let (key, signature) = (crate::auth::PublicKey(k), crate::auth::Signature(s));
                    JobMsg::SignedOffer {
                        job,
                        ranks: vec![0],
                        size: 1,
                        digest: Id::ZERO,
                        auth: JobAuth { key, manifest, signature },
                    }
                }
            ),
        ]
    }

    proptest! {
        #[test]
        fn messages_round_trip_through_frames(m in arb_msg(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let env = Envelope::new(Id::hash("n"), NodeAddr::loopback(2, 7000), 0, m)
                .with_payload(Bytes::from(payload));
            let back = crate::wire::round_trip(&env, DEFAULT_MAX_FRAME).unwrap();
            prop_assert_eq!(back.body.job(), env.body.job());
            prop_assert_eq!(back, env);
        }
    }
}
