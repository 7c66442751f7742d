//! Cuts kept for a restart (`<restart>checkpoint</restart>`): the node
//! holding the job keeps a copy of every rank's checkpoint files as the
//! executors ship them ([`JobMsg::CheckpointFile`]), so a cut outlives the
//! nodes that wrote it; and when a node holding ranks is lost, the whole job
//! is placed again and resumes from the newest cut it holds whole.
//!
//! - **Keeping.** Executors ship the files of every cut of a job that
//!   restarts from its checkpoints, and of every cut a checkpoint request
//!   asked for (`p2pjob checkpoint`, `migrate`). Each file arrives in order, under the output files' window,
//!   is written through [`SubmitEvent::StoreCheckpoint`] and checked against
//!   its SHA-1; a cut is complete once every rank's file of its epoch arrived
//!   whole. The newest complete cut and the one before it are kept (the older
//!   one in case the newer turns out damaged on disk); older files are
//!   removed ([`SubmitEvent::DropCheckpoint`]).
//! - **Resuming.** A restart reads the newest complete cut back
//!   ([`SubmitEvent::ReadCheckpoint`]) and checks every file (its digest, and
//!   that it is that rank's file of that epoch of this job); a damaged cut is
//!   dropped and the one before it tried, and with none left the job starts
//!   from scratch. Nothing is offered before the cut is settled; each node is
//!   told the cut ([`JobMsg::Resume`]) before the manifest and gets its ranks'
//!   files after the job's own.
//! - Rolling back: every rank resumes from the same cut, the ranks that were
//!   not lost too (they are stopped and placed again with the others). A cut
//!   holds no message in flight (see the MPI library's checkpoints), so the
//!   ranks' files of one epoch are a consistent state of the whole job.

use super::*;
use crate::ckpt::{self, MAX_SHIPPED_FILE};
use crate::job::RESUME_FILES;

/// Most cuts newer than the newest complete one kept in part.
const MAX_INCOMPLETE_CUTS: usize = 3;

/// A cut whose files (some or all) are kept here.
#[derive(Debug)]
struct Kept {
    /// The run that wrote it (the id its files carry).
    wire: JobId,
    /// The ranks whose files arrived whole.
    ranks: BTreeSet<u32>,
}

/// The cut a restart resumes from, while its files are read and staged.
#[derive(Debug)]
pub(super) struct Resume {
    from: JobId,
    epoch: u64,
    /// Each rank's file read and checked: name, bytes, digest.
    files: BTreeMap<u32, (String, Bytes, Id)>,
    /// Why the job restarts, and what went wrong with newer cuts.
    why: String,
    /// The first of its files found damaged: the cut is given up once every
    /// read is answered (so no answer of it is taken for the next cut's).
    damaged: Option<String>,
    /// Ranks whose read is not answered yet.
    unread: BTreeSet<u32>,
}

/// A submission's kept cuts.
#[derive(Debug, Default)]
pub(super) struct Cuts {
    /// Files on their way in, by rank and epoch (hashed as they come, like output files).
    arriving: BTreeMap<(u32, u64), OutFile>,
    kept: BTreeMap<u64, Kept>,
    resume: Option<Resume>,
    /// The cut the current run resumed from, once its files checked.
    resumed: Option<u64>,
}

impl Cuts {
    /// The cuts a deputy kept whole, for the job it takes over: epoch, the
    /// run that wrote it, its ranks.
    pub(super) fn adopt(&mut self, kept: Vec<(u64, JobId, BTreeSet<u32>)>) {
        for (epoch, wire, ranks) in kept {
            self.kept.insert(epoch, Kept { wire, ranks });
        }
    }

    /// Staged file `file` beyond the job's own: a rank's file of the cut
    /// resumed from, once read.
    pub(super) fn file(&self, file: u32) -> Option<&(String, Bytes, Id)> {
        let rank = crate::job::resume_rank(file)?;
        self.resume.as_ref()?.files.get(&rank)
    }

    /// Whether `rank`'s file of the cut of `epoch` written by run `wire` is
    /// kept whole.
    pub(super) fn holds(&self, wire: JobId, rank: u32, epoch: u64) -> bool {
        self.kept.get(&epoch).is_some_and(|k| k.wire == wire && k.ranks.contains(&rank))
    }

    /// Epochs of the complete cuts kept, newest first.
    fn complete(&self, size: u32) -> impl Iterator<Item = u64> + '_ {
        self.kept.iter().rev().filter(move |(_, k)| k.ranks.len() as u32 == size).map(|(e, _)| *e)
    }
}

impl Submission {
    /// The epoch of the newest cut kept whole for this job, if any.
    pub fn newest_cut(&self) -> Option<u64> {
        self.cuts.complete(self.desc.processes).next()
    }

    /// The cut the current run resumes from, once its files are read and checked.
    pub fn resumed_from(&self) -> Option<u64> {
        self.cuts.resumed
    }

    /// A chunk of `rank`'s checkpoint file of `epoch` from `from` (its
    /// window already moved): kept when it continues the file.
    pub(super) fn on_checkpoint_file(&mut self, from: NodeAddr, file: ShippedCheckpoint, payload: Bytes) -> Option<()> {
        let ShippedCheckpoint { rank, epoch, offset, total, digest } = file;
        let newest = self.newest_cut().unwrap_or(0);
        let wanted = epoch > newest && total <= MAX_SHIPPED_FILE;
        if !wanted || !self.holds(from, rank) {
            return None;
        }
        let size = self.desc.processes as usize;
        // Only a cut the rank said it took (a file follows its report).
        let reported = self.checkpoints(rank).and_then(|c| c.last).map_or(0, |c| c.epoch);
        let cuts = &mut self.cuts;
        if offset == 0 {
            // Ranks ship one file at a time: a peer's made-up epochs must not grow the map.
            let full = !cuts.arriving.contains_key(&(rank, epoch)) && cuts.arriving.len() >= 2 * size;
            if full || epoch > reported {
                return None;
            }
            cuts.arriving.insert((rank, epoch), OutFile { hasher: Sha1::new(), received: 0 });
        }
        let a = cuts.arriving.get_mut(&(rank, epoch)).filter(|a| a.received == offset)?;
        if a.received + payload.len() as u64 > total {
            return None;
        }
        a.hasher.update(&payload);
        a.received += payload.len() as u64;
        let complete = a.received >= total;
        let job = self.job;
        // The deputies keep a copy, so the cut outlives this node.
        self.copy_to_deputies(&JobMsg::CheckpointFile { job: self.wire, rank, epoch, offset, total, digest }, &payload);
        self.event(SubmitEvent::StoreCheckpoint { job, rank, epoch, offset, data: payload });
        if complete {
            let a = self.cuts.arriving.remove(&(rank, epoch))?;
            if Id::from_bytes(a.hasher.finalize().into()) != digest {
                self.drop_cut_file(rank, epoch);
                return Some(());
            }
            let wire = self.wire;
            let kept = self.cuts.kept.entry(epoch).or_insert_with(|| Kept { wire, ranks: BTreeSet::new() });
            if kept.wire != wire {
                // Files of an earlier run's cut of the same number: not part of this one.
                (kept.wire, kept.ranks) = (wire, BTreeSet::new());
            }
            kept.ranks.insert(rank);
            if kept.ranks.len() == size {
                self.prune_cuts();
            } else {
                self.limit_incomplete_cuts();
            }
            self.maybe_migrate();
        }
        Some(())
    }

    /// At most [`MAX_INCOMPLETE_CUTS`] cuts newer than the newest complete
    /// one are kept in part: the oldest goes first (a peer shipping made-up
    /// epochs fills no disk).
    fn limit_incomplete_cuts(&mut self) {
        let newest = self.newest_cut().unwrap_or(0);
        let incomplete: Vec<u64> = self.cuts.kept.keys().copied().filter(|e| *e > newest).collect();
        for &epoch in incomplete.iter().take(incomplete.len().saturating_sub(MAX_INCOMPLETE_CUTS)) {
            self.drop_cut(epoch);
        }
    }

    /// Keeps the newest complete cut, the complete one before it and any
    /// newer files; removes the rest.
    fn prune_cuts(&mut self) {
        let keep: Vec<u64> = self.cuts.complete(self.desc.processes).take(2).collect();
        let Some(&newest) = keep.first() else { return };
        let gone: Vec<u64> = self.cuts.kept.keys().copied().filter(|e| *e < newest && !keep.contains(e)).collect();
        for epoch in gone {
            self.drop_cut(epoch);
        }
        self.cuts.arriving.retain(|(_, epoch), _| *epoch > newest);
    }

    fn drop_cut(&mut self, epoch: u64) {
        let Some(kept) = self.cuts.kept.remove(&epoch) else { return };
        for rank in kept.ranks {
            self.drop_cut_file(rank, epoch);
        }
    }

    /// `rank`'s file of `epoch` is kept no more, here and at the deputies.
    fn drop_cut_file(&mut self, rank: u32, epoch: u64) {
        self.event(SubmitEvent::DropCheckpoint { job: self.job, rank, epoch });
        self.copy_to_deputies(&JobMsg::CutDropped { job: self.wire, rank, epoch }, &Bytes::new());
    }

    /// A restart: resumes from the newest complete cut (reading its files
    /// back), or starts from scratch when there is none. Either way the
    /// restart is announced once it is settled.
    pub(super) fn restart_from_cut(&mut self, why: String, from_cut: bool) {
        self.cuts.arriving.clear();
        (self.cuts.resume, self.cuts.resumed) = (None, None);
        if from_cut {
            if let Some(epoch) = self.newest_cut() {
                return self.read_cut(epoch, why);
            }
            self.forget_cuts();
            return self.announce_restart(format!("from scratch (no checkpoint was kept whole yet): {why}"));
        }
        self.forget_cuts();
        self.announce_restart(format!("from scratch: {why}"))
    }

    /// The run starts from scratch: its cuts count from 1 again, so none
    /// kept from earlier runs may stand for them.
    fn forget_cuts(&mut self) {
        let epochs: Vec<u64> = self.cuts.kept.keys().copied().collect();
        for epoch in epochs {
            self.drop_cut(epoch);
        }
    }

    /// A rank moving alone resumes from its file of the cut of `epoch` (of
    /// this run): that file alone is read back.
    pub(super) fn read_moved_rank(&mut self, rank: u32, epoch: u64, why: String) {
        let (from, unread) = (self.wire, BTreeSet::from([rank]));
        self.cuts.resume = Some(Resume { from, epoch, files: BTreeMap::new(), why, damaged: None, unread });
        self.event(SubmitEvent::ReadCheckpoint { job: self.job, rank, epoch });
    }

    fn read_cut(&mut self, epoch: u64, why: String) {
        // Newer cuts were never completed: the resumed run writes its own.
        let newer: Vec<u64> = self.cuts.kept.keys().copied().filter(|e| *e > epoch).collect();
        for e in newer {
            self.drop_cut(e);
        }
        let Some(kept) = self.cuts.kept.get(&epoch) else { return };
        let (from, unread) = (kept.wire, kept.ranks.clone());
        self.cuts.resume = Some(Resume { from, epoch, files: BTreeMap::new(), why, damaged: None, unread });
        let job = self.job;
        for rank in 0..self.desc.processes {
            self.event(SubmitEvent::ReadCheckpoint { job, rank, epoch });
        }
    }

    /// The driver read (or failed to read) `rank`'s file of the cut being resumed from.
    pub(super) fn cut_file_read(&mut self, now: Instant, rank: u32, data: Result<FileData, String>) {
        if self.phase == Phase::Finished {
            return;
        }
        let size = self.desc.processes;
        let Some(r) = self.cuts.resume.as_mut().filter(|r| r.unread.contains(&rank)) else { return };
        r.unread.remove(&rank);
        let (from, epoch) = (r.from, r.epoch);
        let checked = data.and_then(|FileData { bytes, digest }| {
            let (h, _) = ckpt::decode_file(&bytes, u64::MAX).map_err(|e| e.to_string())?;
            if (h.job, h.rank, h.size, h.epoch) != (from, rank, size, epoch) {
                return Err(format!("holds rank {} of {} of epoch {} of job {}", h.rank, h.size, h.epoch, h.job));
            }
            Ok((ckpt::file_name(rank, epoch), bytes, digest))
        });
        match checked {
            Ok(file) => {
                r.files.insert(rank, file);
            }
            Err(e) => {
                r.damaged.get_or_insert(format!("checkpoint {epoch} is damaged (rank {rank}'s file {e})"));
            }
        }
        if !r.unread.is_empty() {
            return;
        }
        if self.migration.as_ref().is_some_and(|m| m.alone.is_some()) {
            let damage = r.damaged.take();
            return self.moved_file_read(now, damage);
        }
        match r.damaged.take() {
            None => {
                let how = format!("from checkpoint {epoch}: {}", r.why);
                self.cuts.resumed = Some(epoch);
                self.announce_restart(how);
            }
            // This cut is no use: the one before it, or scratch.
            Some(damage) => {
                let why = format!("{damage}; {}", r.why);
                self.cuts.resume = None;
                self.drop_cut(epoch);
                match self.newest_cut() {
                    Some(older) => return self.read_cut(older, why),
                    None => {
                        self.forget_cuts();
                        self.announce_restart(format!("from scratch ({why})"));
                    }
                }
            }
        }
        self.try_offer(now);
    }

    /// Forgets the cut being read back (a move alone given up).
    pub(super) fn abandon_resume(&mut self) {
        self.cuts.resume = None;
    }

    /// The run started: the bytes of the cut it resumed from are not needed
    /// here any more (what it resumed from stays known).
    pub(super) fn release_cut_files(&mut self) {
        if let Some(r) = self.cuts.resume.as_mut() {
            r.files.clear();
        }
    }

    /// The job is over: a cut being read back is of no use.
    pub(super) fn end_cuts(&mut self) {
        self.cuts.resume = None;
        self.cuts.arriving.clear();
    }

    /// Whether the cut to resume from is still being read.
    pub(super) fn reading_cut(&self) -> bool {
        self.cuts.resume.as_ref().is_some_and(|r| !r.unread.is_empty())
    }

    /// What a node holding `ranks` is told before the manifest, and the
    /// staged numbers of their files: nothing when the run starts afresh.
    pub(super) fn resume_for(&self, ranks: &[u32]) -> Option<(JobMsg, Vec<u32>)> {
        let r = self.cuts.resume.as_ref()?;
        let msg = JobMsg::Resume { job: self.wire, from: r.from, epoch: r.epoch };
        Some((msg, ranks.iter().map(|rank| RESUME_FILES + rank).collect()))
    }
}

/// The header of one [`JobMsg::CheckpointFile`] chunk.
pub(super) struct ShippedCheckpoint {
    pub(super) rank: u32,
    pub(super) epoch: u64,
    pub(super) offset: u64,
    pub(super) total: u64,
    pub(super) digest: Id,
}
