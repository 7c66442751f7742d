//! Who may do what: Ed25519 identities, signed tool requests, job signatures,
//! the replay guard and a node's policy (allow-list and admins). Pure: keys come
//! in as bytes, the wall clock as a number; key files live in the tool.
//!
//! - [`key`]: [`PublicKey`] (text form `ed25519:` + 64 hex digits, parsed
//!   strictly), [`SecretKey`], [`Signature`].
//! - [`signed`]: [`SignedRequest`] (a tool request, a timestamp, a nonce, a
//!   signature over their canonical bytes) and [`JobAuth`] (a signature over
//!   a [`JobManifest`], checked by every executor).
//! - [`manifest`]: [`JobManifest`], what a job signature covers: the job
//!   file's digest, every staged file's number, name, length and digest in
//!   staging order, a timestamp and a nonce; [`FileMismatch`] names a staged
//!   file that is not the one signed.
//! - [`replay`]: [`ReplayGuard`], the ±5 minute window and the bounded cache
//!   of (key, nonce) pairs seen in it (for tool requests at the node asked, for
//!   job signatures at every executor).
//! - [`Policy`]: whose jobs a node runs ([`Allow`]) and who, beside a job's
//!   submitter, may act on it (admins).

pub mod key;
pub mod manifest;
pub mod replay;
pub mod signed;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

pub use key::{KEY_PREFIX, KeyError, PublicKey, SecretKey, Signature, SignatureError};
pub use manifest::{FileMismatch, JobManifest, MAX_MANIFEST_FILES};
pub use replay::{JOB_SIGNATURE_WINDOW_MS, REPLAY_CAP, REPLAY_WINDOW_MS, ReplayGuard};
pub use signed::{JobAuth, MAX_SIGNED_BODY, SignedRequest};

use crate::id::Id;
use crate::job::JobDescription;

/// Why a signed request or a job's credentials were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The signature does not hold.
    #[error("{0}")]
    Signature(SignatureError),
    /// The timestamp is too far from the node's clock.
    #[error("signature timestamp is {skew_ms} ms off this node's clock (more than the window of {} s)", window_ms / 1000)]
    Stale {
        /// Timestamp minus the node's clock.
        skew_ms: i128,
        /// The window it is outside of.
        window_ms: u64,
    },
    /// This key's nonce was seen within the window (for a job signature: from
    /// another node).
    #[error("replayed signature (this key's nonce was taken already)")]
    Replayed,
    /// The replay guard is full.
    #[error("too many signed requests in the window; try again later")]
    Busy,
    /// The body is larger than [`MAX_SIGNED_BODY`].
    #[error("signed body of {0} bytes is too large")]
    TooLarge(usize),
    /// The body does not decode, or is itself a signed request.
    #[error("signed body does not decode to a request")]
    Malformed,
    /// A job signature over another job file than the one offered.
    #[error("the job signature covers another job file")]
    OtherJobFile,
    /// A job manifest lists more files than a job may stage.
    #[error("the job signature lists {0} files, more than {MAX_MANIFEST_FILES}")]
    TooManyFiles(usize),
    /// A job manifest's files are not numbered 1, 2, ... in staging order.
    #[error("the job signature lists file {file} in place {at} (files go 1, 2, ... in staging order)")]
    FileOrder {
        /// Where (from 1).
        at: u32,
        /// The number found there.
        file: u32,
    },
    /// The node requires a signature and there is none.
    #[error(
        "unsigned request refused: this node takes only signed requests (p2pjob signs with its key, see `p2pjob whoami`)"
    )]
    Unsigned,
}

/// Whose jobs a node runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allow {
    /// Everything, signed or not, and no per-job checks: the simulator and
    /// unit tests of the other machines. `jobd` never runs open.
    Open,
    /// Every validly signed key (`jobd --allow-any`).
    AnyKey,
    /// Only these keys.
    Keys(BTreeSet<PublicKey>),
}

/// A node's authorisation policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Whose jobs run here.
    pub allow: Allow,
    /// Keys that may act on (kill, inspect) any job this node holds.
    pub admins: BTreeSet<PublicKey>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::open()
    }
}

/// Why a node will not run a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The job carries no signature.
    #[error("node {node} runs only signed jobs")]
    Unsigned {
        /// The node refusing.
        node: String,
    },
    /// The job's signature is bad.
    #[error("node {node} refused the job's signature: {error}")]
    BadSignature {
        /// The node refusing.
        node: String,
        /// What was wrong.
        error: AuthError,
    },
    /// A staged file is not the one the submitter signed.
    #[error("node {node} refused the job's files: {error}")]
    NotAsSigned {
        /// The node refusing.
        node: String,
        /// Which file, and how it differs.
        error: FileMismatch,
    },
    /// The key is not on the node's allow-list.
    #[error("node {node} does not allow key {key}")]
    NotAllowed {
        /// The node refusing.
        node: String,
        /// The submitter's key.
        key: PublicKey,
    },
}

impl Policy {
    /// No checks at all (see [`Allow::Open`]).
    pub fn open() -> Self {
        Policy { allow: Allow::Open, admins: BTreeSet::new() }
    }

    /// Only `keys` run jobs here; `admins` may act on any job held here.
    pub fn keys(keys: impl IntoIterator<Item = PublicKey>, admins: impl IntoIterator<Item = PublicKey>) -> Self {
        Policy { allow: Allow::Keys(keys.into_iter().collect()), admins: admins.into_iter().collect() }
    }

    /// Whether requests about jobs must be signed.
    pub fn requires_signature(&self) -> bool {
        self.allow != Allow::Open
    }

    /// Whether node `node` runs the job with job file digest `digest` and
    /// credentials `auth` (checked here, whoever forwarded the job): the
    /// signature over the manifest holds and names this job file, and the key
    /// is allowed. Freshness and the staged files are checked apart (the
    /// node's job [`ReplayGuard`], the executor's [`JobManifest::check`]).
    pub fn admits(&self, node: &str, digest: &Id, auth: Option<&JobAuth>) -> Result<(), Refusal> {
        let Some(auth) = auth else {
            return match self.allow {
                Allow::Open => Ok(()),
                _ => Err(Refusal::Unsigned { node: node.to_owned() }),
            };
        };
        auth.verify(digest).map_err(|error| Refusal::BadSignature { node: node.to_owned(), error })?;
        match &self.allow {
            Allow::Open | Allow::AnyKey => Ok(()),
            Allow::Keys(keys) if keys.contains(&auth.key) => Ok(()),
            Allow::Keys(_) => Err(Refusal::NotAllowed { node: node.to_owned(), key: auth.key }),
        }
    }

    /// Whether `requester` may act on a job submitted by `owner`: the owner
    /// itself or an admin (anyone on an open node).
    pub fn may_act(&self, requester: Option<&PublicKey>, owner: Option<&PublicKey>) -> bool {
        if !self.requires_signature() {
            return true;
        }
        match requester {
            Some(r) => owner == Some(r) || self.admins.contains(r),
            None => false,
        }
    }
}

/// The job file digest a job signature covers ([`JobManifest::job_file`]):
/// SHA-1 of the job file as the submitting node stages it (file 0, the
/// description written back out), so the tool and every executor compute the
/// same bytes.
pub fn job_file_digest(desc: &JobDescription) -> Id {
    Id::hash(desc.to_xml())
}
