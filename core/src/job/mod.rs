//! Jobs: the `<p2pjob>` description, requirement matching, the job protocol and
//! the submitter-side and executor-side state machines.
//!
//! - [`description`]: parse and write job files ([`JobDescription`]).
//! - [`requirements`]: [`Requirement`], [`Resources`] and the overlay registration
//!   naming scheme (`res:any`, `res:tag:T`, `res:K=V`).
//! - [`msg`]: [`JobMsg`], what submitters and executors exchange.
//! - [`submit`]: [`Submission`], one job from resolution to results, and
//!   [`Submitter`], which makes submission idempotent per request id.
//! - [`exec`]: [`Execution`], the executor side on every node.
//!
//! Identifiers (DESIGN "Identifiers and hashing"): a job id is SHA-1 of (submitter
//! address, counter, random nonce); a process key is SHA-1 of (job id, rank), see
//! [`process_key`].

mod cache;
pub mod description;
pub mod exec;
pub mod msg;
mod outbox;
pub mod requirements;
pub mod submit;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::id::Id;
use crate::machine::NodeAddr;

pub use description::{
    JobDescription, JobFileError, JobFileErrorKind, JobFileWarning, ParsedJob, PathProblem, PathUse, RestartPolicy,
};
pub use exec::{ExecCmdError, ExecConfig, ExecEvent, Execution};
pub use msg::{
    JobEnd, JobHistory, JobMsg, JobPast, RankState, RejectReason, STREAM_ACK_EVERY, STREAM_WINDOW, StagedFile, Stream,
};
pub use requirements::{ANY_NAME, Op, Requirement, Resources};
pub use submit::{
    FileData, Guarded, MAX_RESTARTS, Outcome, Phase, RankInfo, Replica, Submission, SubmissionCommand, SubmitCmdError,
    SubmitConfig, SubmitError, SubmitEvent, Submitter, SubmitterCommand,
};

/// Most files one job may stage (job file, executable, input files).
pub const MAX_STAGED_FILES: u32 = description::MAX_ELEMENTS as u32 + 2;

/// The staged file number of rank 0's checkpoint file when a job resumes
/// from a cut ([`JobMsg::Resume`]); rank `r`'s is this plus `r`. A wire
/// number: fixed, beyond every job's own files.
pub const RESUME_FILES: u32 = 1 << 20;
const _: () =
    assert!(RESUME_FILES > MAX_STAGED_FILES && RESUME_FILES.checked_add(description::MAX_PROCESSES).is_some());

/// The staged file number of the first output file a rank that moved alone
/// carries to its new node ([`JobMsg::CarriedFiles`]); the next is this
/// plus one. A wire number: fixed, beyond every rank's checkpoint file.
pub const CARRIED_FILES: u32 = 2 << 20;
const _: () = assert!(
    CARRIED_FILES >= RESUME_FILES + description::MAX_PROCESSES && CARRIED_FILES.checked_add(MAX_STAGED_FILES).is_some()
);

/// The rank whose checkpoint file staged file `file` is (a number from
/// [`RESUME_FILES`] up to [`CARRIED_FILES`]), if it is one.
pub fn resume_rank(file: u32) -> Option<u32> {
    file.checked_sub(RESUME_FILES).filter(|_| file < CARRIED_FILES)
}

/// A job's identifier, unique per submission.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub Id);

impl JobId {
    /// SHA-1 of the submitter's address, its submission counter and a random nonce.
    pub fn derive(submitter: NodeAddr, counter: u64, nonce: u64) -> Self {
        let addr = submitter.to_string();
        JobId(Id::hash_parts([addr.as_bytes(), &counter.to_be_bytes(), &nonce.to_be_bytes()]))
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobId({})", self.0)
    }
}

/// How a process ended, in words: `exited with code 3`, or for a negative
/// code (the executor's way of saying a signal killed it) `was killed by SIGSEGV`.
pub fn describe_exit(code: i32) -> String {
    if code >= 0 {
        return format!("exited with code {code}");
    }
    let name = match -code {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        n => return format!("was killed by signal {n}"),
    };
    format!("was killed by {name}")
}

/// The overlay key a rank registers while it runs: SHA-1 of (job id, rank).
pub fn process_key(job: JobId, rank: u32) -> Id {
    crate::local::process_key(job.0.as_bytes(), rank)
}
