//! Staging: the files every accepting node needs (the job file, the
//! executable, the inputs), announced with a manifest, sent in chunks under a
//! window the node acknowledges, re-sent when they arrive corrupt; the start
//! once every rank is placed and every node staged.

use super::*;

impl Submission {
    /// A message while the ranks are offered and the files staged.
    pub(super) fn while_placing(&mut self, now: Instant, from: NodeAddr, body: JobMsg) -> Option<()> {
        match body {
            JobMsg::Accept { ranks, .. } => {
                let n = self.nodes.get_mut(&from)?;
                if n.offer.as_ref().map(|(r, _)| r) != Some(&ranks) {
                    return None;
                }
                n.offer = None;
                n.accepted.extend(&ranks);
                let first = n.stage == Stage::NotSent;
                for r in ranks {
                    self.ranks[r as usize].node = Some(from);
                }
                if first {
                    self.stage_node(now, from);
                }
                self.try_start(now);
            }
            JobMsg::Reject { ranks, reason, .. } => {
                self.refusal(from, &ranks, &reason)?;
                // Busy (a grant taken back for an earlier job): wait again, there too.
                self.retreat(now, from, reason != RejectReason::NoSlot);
            }
            JobMsg::Resend { file, .. } => {
                let max = self.config.max_resends;
                let deadline = now + self.config.stage_timeout;
                let len = self.file_len(file);
                // Only a file staged to it may be asked for again (a cut's
                // file only by the node holding that rank).
                self.staged_file(file)?;
                let rank = crate::job::resume_rank(file);
                if rank.is_some_and(|r| !self.nodes.get(&from).is_some_and(|n| n.accepted.contains(&r))) {
                    return None;
                }
                let n = self.nodes.get_mut(&from)?;
                let Stage::Sent { resends, deadline: d, out, total } = &mut n.stage else { return None };
                *total += len;
                let count = resends.entry(file).or_insert(0);
                *count += 1;
                if *count > max {
                    self.fail(SubmitError::StagingFailed { node: from, file });
                    return Some(());
                }
                *d = deadline;
                out.push_file(file);
                self.pump(from);
            }
            JobMsg::Have { files, .. } => return self.on_have(now, from, &files),
            JobMsg::StageAck { consumed, .. } => {
                let stage_timeout = self.config.stage_timeout;
                let Stage::Sent { deadline, out, total, .. } = &mut self.nodes.get_mut(&from)?.stage else {
                    return None;
                };
                if out.ack(consumed) {
                    *deadline = now + stage_timeout;
                    let (done, total) = (out.acked(), *total);
                    self.event(SubmitEvent::Staging { job: self.job, node: from, done, total });
                }
                self.pump(from);
            }
            JobMsg::Staged { .. } => {
                let n = self.nodes.get_mut(&from)?;
                if !matches!(n.stage, Stage::Sent { .. }) {
                    return None;
                }
                n.stage = Stage::Staged;
                self.try_start(now);
            }
            _ => return None,
        }
        Some(())
    }

    /// Node `from` refused `ranks` for `reason`: `None` unless it answers
    /// its offer, or refuses what it took (a node that accepted may still
    /// refuse while files arrive: a staged file is not the one signed, an
    /// unusable job file). A refusal by the node's policy is kept for the
    /// job's error.
    pub(super) fn refusal(&mut self, from: NodeAddr, ranks: &[u32], reason: &RejectReason) -> Option<()> {
        let n = self.nodes.get(&from)?;
        if n.offer.as_ref().map(|(r, _)| r.as_slice()) != Some(ranks) && n.accepted.is_empty() {
            return None;
        }
        if let RejectReason::NotAllowed(why) = reason {
            self.refused(why);
        }
        Some(())
    }

    /// The driver read (or failed to read) staged file number `file`. A
    /// signed job's file must be the one its submitter signed, or the job
    /// fails before anything is offered; once every file is read the job may
    /// be offered.
    pub fn handle_file_read(&mut self, now: Instant, file: u32, data: Result<FileData, String>) {
        if let Some(rank) = crate::job::resume_rank(file) {
            return self.cut_file_read(now, rank, data);
        }
        let i = file as usize;
        if self.phase == Phase::Finished || i == 0 || i >= self.files.len() || self.files[i].is_some() {
            return;
        }
        let Some(path) = self.desc.staged_paths().nth(i - 1).map(|(_, p)| p.to_owned()) else { return };
        match data {
            Ok(FileData { bytes, digest }) => {
                let name = crate::job::description::staged_name(&path).to_owned();
                let read = StagedFile { file, name, total: bytes.len() as u64, digest };
                if let Err(error) = self.check_signed(&read) {
                    return self.fail(SubmitError::NotAsSigned { path, error });
                }
                self.files[i] = Some((read.name, bytes, digest));
            }
            Err(reason) => return self.fail(SubmitError::FileRead { path, reason }),
        }
        self.try_offer(now);
    }

    /// Whether file `f`, as read here, is the one the submitter signed (any
    /// file is, for an unsigned job).
    fn check_signed(&self, f: &StagedFile) -> Result<(), crate::auth::FileMismatch> {
        #[cfg(feature = "test-hooks")]
        if self.config.forward_unchecked {
            return Ok(());
        }
        self.auth.as_ref().map_or(Ok(()), |a| a.manifest.check(f))
    }

    /// Once every file is read, tells `to` what is coming; [`JobMsg::Have`] starts the transfer.
    pub(super) fn stage_node(&mut self, now: Instant, to: NodeAddr) {
        let Some(files) = self
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.as_ref().map(|(name, data, digest)| StagedFile {
                    file: i as u32,
                    name: name.clone(),
                    total: data.len() as u64,
                    digest: *digest,
                })
            })
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        if let Some(n) = self.nodes.get_mut(&to) {
            n.stage = Stage::Asked { deadline: now + self.config.stage_timeout };
        }
        // The cut to resume from, if any, comes first: the node takes its
        // ranks' files for it only.
        if let Some((resume, _)) = self.resume_for(&[]) {
            self.send(to, resume, Bytes::new());
        }
        self.send(to, JobMsg::Manifest { job: self.wire, files }, Bytes::new());
    }

    /// `to` holds `have` already: every other file goes out, as far as the window allows.
    fn on_have(&mut self, now: Instant, to: NodeAddr, have: &[u32]) -> Option<()> {
        let mut out = Outbox::default();
        let mut total = 0;
        // The job file always travels: the executor reads its arguments from it.
        let own = (0..self.files.len() as u32).filter(|f| *f == 0 || !have.contains(f));
        // Then the files its ranks resume from (a rank accepted later asks
        // for its file with a resend).
        let accepted = self.nodes.get(&to).map(|n| n.accepted.clone()).unwrap_or_default();
        let resumed = self.resume_for(&accepted).map(|(_, files)| files).unwrap_or_default();
        for f in own.chain(resumed).chain(self.carried_to(to)) {
            out.push_file(f);
            total += self.file_len(f);
        }
        let n = self.nodes.get_mut(&to).filter(|n| matches!(n.stage, Stage::Asked { .. }))?;
        n.stage = Stage::Sent { deadline: now + self.config.stage_timeout, resends: BTreeMap::new(), out, total };
        self.event(SubmitEvent::Staging { job: self.job, node: to, done: 0, total });
        self.pump(to);
        Some(())
    }

    /// Staged file `file` (see [`staged`]).
    fn staged_file(&self, file: u32) -> Option<&(String, Bytes, Id)> {
        staged(&self.files, &self.cuts, alone::carried(&self.migration), file)
    }

    /// The length of staged file `file` (0 while it is being read).
    fn file_len(&self, file: u32) -> u64 {
        self.staged_file(file).map_or(0, |(_, data, _)| data.len() as u64)
    }

    /// Sends what is due to `to` until its window is full.
    fn pump(&mut self, to: NodeAddr) {
        let (window, chunk) = (self.config.stage_window as u64, self.config.chunk_size);
        loop {
            let (files, cuts, carried) = (&self.files, &self.cuts, alone::carried(&self.migration));
            let Some(Node { stage: Stage::Sent { out, .. }, .. }) = self.nodes.get_mut(&to) else { return };
            match out.next(window, chunk, |f| staged(files, cuts, carried, f).map_or(0, |(_, data, _)| data.len())) {
                None => return,
                Some(Piece::End) => {
                    self.send(to, JobMsg::StageEnd { job: self.wire, files: self.files.len() as u32 }, Bytes::new())
                }
                Some(Piece::Chunk { file, start, end }) => {
                    let Some((name, data, digest)) = self.staged_file(file).cloned() else { return };
                    let (offset, total) = (start as u64, data.len() as u64);
                    let msg = JobMsg::Stage { job: self.wire, file, name, offset, total, digest };
                    self.send(to, msg, data.slice(start..end));
                }
            }
        }
    }

    pub(super) fn try_start(&mut self, _now: Instant) {
        let ready = self.phase == Phase::Placing
            && self.unplaced.is_empty()
            && self.nodes.values().all(|n| n.offer.is_none() && (n.accepted.is_empty() || n.stage == Stage::Staged));
        if !ready {
            return;
        }
        self.phase = Phase::Running;
        // A node a rank moved off may take ranks again in a later placement.
        self.avoid.clear();
        self.toward = None;
        self.release_cut_files();
        let placed = self.ranks.iter().filter_map(|r| r.node.map(|n| (r.rank, n))).collect();
        self.event(SubmitEvent::Placed { job: self.job, ranks: placed });
        let holding: Vec<NodeAddr> =
            self.nodes.iter().filter(|(_, n)| !n.accepted.is_empty()).map(|(a, _)| *a).collect();
        for to in holding {
            self.send(to, JobMsg::Start { job: self.wire }, Bytes::new());
        }
        self.guard();
    }
}

/// Staged file `file`: one of the job's own `files`, a rank's file of the
/// cut resumed from, or an output file a rank moving alone `carried`;
/// `None` while it is being read.
fn staged<'a>(
    files: &'a [Option<(String, Bytes, Id)>],
    cuts: &'a cuts::Cuts,
    carried: &'a [(String, Bytes, Id)],
    file: u32,
) -> Option<&'a (String, Bytes, Id)> {
    let carried = || file.checked_sub(crate::job::CARRIED_FILES).and_then(|i| carried.get(i as usize));
    files.get(file as usize).and_then(Option::as_ref).or_else(|| cuts.file(file)).or_else(carried)
}
