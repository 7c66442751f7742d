//! The messages submitters and executors exchange. postcard encodes variants by
//! index: append only, never reorder. File and output bytes ride as the envelope's
//! raw payload, never through serde.

use serde::{Deserialize, Serialize};

use super::JobId;
use crate::id::Id;

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
            | JobMsg::Done { job } => *job,
        }
    }

    /// Whether this variant carries bytes as payload.
    pub fn carries_payload(&self) -> bool {
        matches!(self, JobMsg::Stage { .. } | JobMsg::Output { .. } | JobMsg::OutputFile { .. })
    }
}
