//! The files a job stages beside its job file, numbered as they are staged:
//! the executable is file 1, the input files follow in the job file's order.
//! The submitting node reads them and the tool hashes them for the job
//! signature from the same list, resolved the same way ([`join_path`]).

use super::{JobDescription, staged_name};
use crate::id::Id;
use crate::job::StagedFile;

/// One file a job stages, before it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedSource {
    /// Its number (1 = executable, then the input files).
    pub file: u32,
    /// Where the submitting side reads it.
    pub path: String,
    /// Its name in the job directory.
    pub name: String,
}

impl StagedSource {
    /// The manifest entry of this file, once read: `total` bytes with SHA-1 `digest`.
    pub fn read_as(&self, total: u64, digest: Id) -> StagedFile {
        StagedFile { file: self.file, name: self.name.clone(), total, digest }
    }
}

/// `path` taken relative to `base` unless absolute (or `base` is empty).
pub fn join_path(base: &str, path: &str) -> String {
    if path.starts_with('/') || base.is_empty() {
        path.to_owned()
    } else {
        format!("{}/{path}", base.trim_end_matches('/'))
    }
}

impl JobDescription {
    /// The paths of the files staged beside the job file, as written, with
    /// their numbers.
    pub fn staged_paths(&self) -> impl Iterator<Item = (u32, &str)> {
        std::iter::once(&self.executable).chain(&self.inputfiles).zip(1u32..).map(|(p, i)| (i, p.as_str()))
    }

    /// The files staged beside the job file, in staging order, their paths
    /// taken relative to `base_dir` (the job file's directory).
    pub fn staged_sources(&self, base_dir: &str) -> Vec<StagedSource> {
        self.staged_paths()
            .map(|(file, p)| StagedSource { file, path: join_path(base_dir, p), name: staged_name(p).to_owned() })
            .collect()
    }
}
