//! The executor's side of staging: the manifest answered from the file cache,
//! chunks checked against their digest and acknowledged, verified files cached;
//! for a signed job, every file held to what the submitter signed.

use bytes::{Bytes, BytesMut};
use sha1::{Digest, Sha1};

use super::{ExecEvent, Execution, Incoming};
use crate::auth::{FileMismatch, Refusal};
use crate::id::Id;
use crate::job::description::MAX_JOB_FILE;
use crate::job::msg::{JobMsg, RejectReason, StagedFile};
use crate::job::{JobId, MAX_STAGED_FILES};
use crate::machine::NodeAddr;

/// The staged file that is the job's executable.
const PROGRAM: u32 = 1;

/// The header of one [`JobMsg::Stage`] chunk.
pub(super) struct Chunk {
    pub(super) file: u32,
    pub(super) name: String,
    pub(super) offset: u64,
    pub(super) total: u64,
    pub(super) digest: Id,
}

impl Execution {
    /// Files of the manifest that the cache holds are taken from it; the
    /// submitter learns which with [`JobMsg::Have`].
    pub(super) fn on_manifest(&mut self, from: NodeAddr, job: JobId, files: Vec<StagedFile>) -> Option<()> {
        let j = self.jobs.get(&job).filter(|j| j.staged.is_none())?;
        if let Some(m) = &j.manifest {
            let count = u32::try_from(files.len()).unwrap_or(u32::MAX);
            if let Some(error) = m.check_count(count).err().or_else(|| files.iter().find_map(|f| m.check(f).err())) {
                self.refuse_unsigned(job, error);
                return Some(());
            }
        }
        let j = self.jobs.get_mut(&job)?;
        let mut have = Vec::new();
        for f in files.into_iter().take(MAX_STAGED_FILES as usize) {
            // The job file is never taken from the cache: its bytes are read here.
            let usable = f.file != 0 && f.file < MAX_STAGED_FILES && super::plain_name(&f.name);
            if !usable || !self.cache.has(f.digest, f.total) || j.files.contains_key(&f.file) {
                continue;
            }
            let inc = Incoming {
                name: f.name.clone(),
                total: f.total,
                digest: f.digest,
                received: f.total,
                hasher: Sha1::new(),
                keep: None,
                ok: true,
            };
            j.files.insert(f.file, inc);
            have.push((f.file, f.name, f.digest));
        }
        let files = have.iter().map(|(file, _, _)| *file).collect();
        for (file, name, digest) in have {
            self.event(ExecEvent::CacheFetch { job, name, digest, program: file == PROGRAM });
        }
        self.send(from, JobMsg::Have { job, files }, Bytes::new());
        Some(())
    }

    /// One chunk: acknowledged whatever it holds, written and hashed when it
    /// continues its file, the file cached once it is complete and verified.
    pub(super) fn on_stage(&mut self, from: NodeAddr, job: JobId, c: Chunk, payload: Bytes) -> Option<()> {
        let j = self.jobs.get_mut(&job)?;
        // Every chunk moves the submitter's window, whether it is used or not.
        j.consumed += payload.len() as u64;
        let consumed = j.consumed;
        self.send(from, JobMsg::StageAck { job, consumed }, Bytes::new());
        let j = self.jobs.get_mut(&job)?;
        // A rank's checkpoint file to resume from, or an output file a moved
        // rank carries, is the job's own data, not a file its submitter signed.
        let head = || StagedFile { file: c.file, name: c.name.clone(), total: c.total, digest: c.digest };
        let resumed =
            super::ckpt::is_resume_file(j, c.file, &c.name, c.total) || super::moving::is_carried_file(j, &head());
        if (c.file >= MAX_STAGED_FILES && !resumed) || !super::plain_name(&c.name) || j.staged.is_some() {
            return None;
        }
        if let Some(error) = j.manifest.as_ref().filter(|_| !resumed).and_then(|m| m.check(&head()).err()) {
            self.refuse_unsigned(job, error);
            return Some(());
        }
        let j = self.jobs.get_mut(&job)?;
        if c.offset == 0 {
            let keep = (c.file == 0 && c.total <= MAX_JOB_FILE as u64).then(BytesMut::new);
            let inc = Incoming {
                name: c.name.clone(),
                total: c.total,
                digest: c.digest,
                received: 0,
                hasher: Sha1::new(),
                keep,
                ok: false,
            };
            j.files.insert(c.file, inc);
        }
        let fits = |f: &&mut Incoming| f.received == c.offset && f.received + payload.len() as u64 <= f.total;
        let inc = j.files.get_mut(&c.file).filter(|f| f.name == c.name).filter(fits)?;
        inc.hasher.update(&payload);
        inc.received += payload.len() as u64;
        if let Some(k) = &mut inc.keep {
            k.extend_from_slice(&payload);
        }
        if inc.received >= inc.total {
            let got = Id::from_bytes(inc.hasher.clone().finalize().into());
            inc.ok = inc.received == inc.total && got == inc.digest && (c.file != 0 || got == j.digest);
        }
        let verified = (inc.ok && c.file != 0 && !resumed).then_some((inc.digest, inc.total));
        let name = inc.name.clone();
        self.event(ExecEvent::WriteFile { job, name: name.clone(), offset: c.offset, data: payload });
        if let Some((digest, total)) = verified.filter(|(d, t)| self.cache.wants(*d, *t)) {
            let evicted = self.cache.insert(digest, total);
            for old in evicted {
                self.event(ExecEvent::CacheEvict { digest: old });
            }
            self.event(ExecEvent::CacheStore { job, name, digest, program: c.file == PROGRAM });
        }
        Some(())
    }

    /// Turns an accepted job down: the submitter learns why (and tries other
    /// nodes), and everything reserved here is freed.
    pub(super) fn refuse(&mut self, job: JobId, reason: RejectReason) {
        let Some(j) = self.jobs.get(&job) else { return };
        let (to, ranks) = (j.submitter, j.ranks.keys().copied().collect());
        self.send(to, JobMsg::Reject { job, ranks, reason }, Bytes::new());
        self.drop_job(job);
    }

    /// A staged file of a signed job is not the one signed: the job is
    /// refused, naming the file.
    pub(super) fn refuse_unsigned(&mut self, job: JobId, error: FileMismatch) {
        let refusal = Refusal::NotAsSigned { node: self.addr.to_string(), error };
        tracing::info!(%job, "staging refused: {refusal}");
        self.refuse(job, RejectReason::NotAllowed(refusal.to_string()));
    }
}
