//! What a job signature covers: the job manifest. The tool reads every file a
//! job stages (as the user who submits, not as the daemon) and lists each by
//! number, name, length and SHA-1 beside the job file's digest, a timestamp and
//! a nonce. The submitting node and every executor hold what they stage or
//! receive to it ([`JobManifest::check`]), so a node that forwards a job can
//! neither swap a file nor offer the job again later unnoticed.

use std::fmt;

use serde::de::{Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::AuthError;
use crate::id::Id;
use crate::job::{MAX_STAGED_FILES, StagedFile};

/// Most files a manifest lists (every staged file but the job file).
pub const MAX_MANIFEST_FILES: usize = MAX_STAGED_FILES as usize - 1;

/// The domain tag of a job signature: a signature of another kind (a tool
/// request's) never passes for one.
const JOB_DOMAIN: &[u8] = b"p2pmp job manifest v2\0";

/// The job file and every file staged with it, as its submitter signed them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobManifest {
    /// SHA-1 of the job file as staged (file 0, [`super::job_file_digest`]).
    pub job_file: Id,
    /// The executable (file 1) and the input files (2, 3, ...), in staging
    /// order; at most [`MAX_MANIFEST_FILES`] (decoding refuses more).
    #[serde(deserialize_with = "bounded_files")]
    pub files: Vec<StagedFile>,
    /// The signer's wall clock, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// Random; an executor takes a (key, nonce) pair from one node only (the
    /// one that offered it first), and only within the replay window of its
    /// timestamp.
    pub nonce: u64,
}

/// Why a staged file is not the one the submitter signed. Each names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FileMismatch {
    /// A file number the manifest does not list.
    #[error("file {file} ({name:?}) is not among the files the submitter signed")]
    Unsigned {
        /// Its number.
        file: u32,
        /// Its name.
        name: String,
    },
    /// Another name than the one signed.
    #[error("file {file} is named {name:?} but the submitter signed {signed:?}")]
    Name {
        /// Its number.
        file: u32,
        /// The name staged.
        name: String,
        /// The name signed.
        signed: String,
    },
    /// Another length than the one signed.
    #[error("{name:?} (file {file}) is {len} bytes but the submitter signed {signed} bytes")]
    Length {
        /// Its number.
        file: u32,
        /// Its name.
        name: String,
        /// The length staged.
        len: u64,
        /// The length signed.
        signed: u64,
    },
    /// Other bytes than the ones signed.
    #[error("{name:?} (file {file}) has SHA-1 {digest} but the submitter signed {signed}")]
    Digest {
        /// Its number.
        file: u32,
        /// Its name.
        name: String,
        /// The digest staged.
        digest: Id,
        /// The digest signed.
        signed: Id,
    },
    /// Another number of files than the ones signed (the job file included).
    #[error("{count} file(s) staged but the submitter signed {signed}")]
    Count {
        /// Files staged.
        count: u32,
        /// Files signed, the job file included.
        signed: u32,
    },
}

impl JobManifest {
    /// The canonical bytes a job signature covers: the domain tag, the job
    /// file's digest, the number of files (4 bytes big-endian), each file's
    /// number (4), name length (4) and name, length (8) and digest (20) in
    /// staging order, then the timestamp and the nonce (8 each). Every integer
    /// is big-endian and every name length-prefixed, so no two manifests share
    /// their bytes.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(JOB_DOMAIN.len() + 40 + self.files.len() * 48);
        m.extend_from_slice(JOB_DOMAIN);
        m.extend_from_slice(self.job_file.as_bytes());
        m.extend_from_slice(&(self.files.len() as u32).to_be_bytes());
        for f in &self.files {
            m.extend_from_slice(&f.file.to_be_bytes());
            m.extend_from_slice(&(f.name.len() as u32).to_be_bytes());
            m.extend_from_slice(f.name.as_bytes());
            m.extend_from_slice(&f.total.to_be_bytes());
            m.extend_from_slice(f.digest.as_bytes());
        }
        m.extend_from_slice(&self.timestamp_ms.to_be_bytes());
        m.extend_from_slice(&self.nonce.to_be_bytes());
        m
    }

    /// Whether it is well formed: at most [`MAX_MANIFEST_FILES`] files,
    /// numbered 1, 2, ... in staging order.
    pub fn check_shape(&self) -> Result<(), AuthError> {
        if self.files.len() > MAX_MANIFEST_FILES {
            return Err(AuthError::TooManyFiles(self.files.len()));
        }
        match self.files.iter().zip(1u32..).find(|(f, n)| f.file != *n) {
            Some((f, n)) => Err(AuthError::FileOrder { at: n, file: f.file }),
            None => Ok(()),
        }
    }

    /// Files staged in all, the job file included.
    pub fn staged_count(&self) -> u32 {
        self.files.len() as u32 + 1
    }

    /// Whether staged file `f` is the one signed under its number: the job
    /// file (0) by its digest, every other file by name, length and digest.
    pub fn check(&self, f: &StagedFile) -> Result<(), FileMismatch> {
        let (file, name) = (f.file, f.name.clone());
        if f.file == 0 {
            return match f.digest == self.job_file {
                true => Ok(()),
                false => Err(FileMismatch::Digest { file, name, digest: f.digest, signed: self.job_file }),
            };
        }
        let Some(signed) = self.files.get(f.file as usize - 1).filter(|s| s.file == f.file) else {
            return Err(FileMismatch::Unsigned { file, name });
        };
        if f.name != signed.name {
            Err(FileMismatch::Name { file, name, signed: signed.name.clone() })
        } else if f.total != signed.total {
            Err(FileMismatch::Length { file, name, len: f.total, signed: signed.total })
        } else if f.digest != signed.digest {
            Err(FileMismatch::Digest { file, name, digest: f.digest, signed: signed.digest })
        } else {
            Ok(())
        }
    }

    /// Whether `count` files (the job file included) are the number signed.
    pub fn check_count(&self, count: u32) -> Result<(), FileMismatch> {
        match count == self.staged_count() {
            true => Ok(()),
            false => Err(FileMismatch::Count { count, signed: self.staged_count() }),
        }
    }
}

/// Decodes a manifest's files, refusing more than [`MAX_MANIFEST_FILES`]
/// before it holds them.
fn bounded_files<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<StagedFile>, D::Error> {
    struct Files;
    impl<'de> Visitor<'de> for Files {
        type Value = Vec<StagedFile>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "at most {MAX_MANIFEST_FILES} staged files")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            if let Some(n) = seq.size_hint().filter(|n| *n > MAX_MANIFEST_FILES) {
                return Err(A::Error::invalid_length(n, &self));
            }
            // The declared count is only a hint: room grows with what decodes.
            let mut files = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
            while let Some(f) = seq.next_element()? {
                if files.len() == MAX_MANIFEST_FILES {
                    return Err(A::Error::invalid_length(files.len() + 1, &self));
                }
                files.push(f);
            }
            Ok(files)
        }
    }
    d.deserialize_seq(Files)
}
