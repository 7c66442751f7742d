//! Checkpoints on the submitter's side: what every rank reported (its last
//! checkpoint, its recoveries), and the checkpoint requests of `p2pjob
//! checkpoint` followed to their cut.
//!
//! A request is numbered (from 1 per job) and sent to every node holding a
//! running rank ([`JobMsg::Checkpoint`]). Once every one of them said which
//! ranks it reached ([`JobMsg::CheckpointAsked`]), the submission reports
//! [`SubmitEvent::CheckpointAsked`]; a request that reached no rank fails.
//! It is answered ([`SubmitEvent::CheckpointTaken`]) once every rank still
//! running has reported a checkpoint whose cut covers it: the ranks agree on
//! the cut, so reaching one rank is enough for all of them to take it. A job
//! that ends first fails its requests.

use super::*;
use crate::ckpt::{CheckpointInfo, CutInfo, RankCheckpoints, RecoveryInfo};

/// Most checkpoint requests of one job followed at once.
pub const MAX_PENDING_CHECKPOINTS: usize = 16;

/// One rank's reports.
#[derive(Debug, Default)]
struct RankReports {
    reported: RankCheckpoints,
    /// The newest checkpoint request its last cut covers.
    covers: u64,
}

/// A checkpoint request on its way.
#[derive(Debug)]
struct Asked {
    request: u64,
    /// Nodes that have not said which ranks they reached.
    waiting: BTreeSet<NodeAddr>,
    reached: BTreeSet<u32>,
    /// [`SubmitEvent::CheckpointAsked`] went out.
    told: bool,
}

/// A submission's checkpoint state.
#[derive(Debug, Default)]
pub(super) struct Checkpoints {
    ranks: BTreeMap<u32, RankReports>,
    last_request: u64,
    asked: Vec<Asked>,
}

impl Submission {
    /// What `p2pjob status` shows of the job beside its placement.
    pub(super) fn history(&self) -> JobHistory {
        let checkpoints = self.ckpt.ranks.iter().map(|(r, k)| (*r, k.reported.clone())).collect();
        JobHistory { restarts: self.restart_reasons.clone(), moves: self.moves.clone(), checkpoints }
    }

    /// Takes `h` as the job's history (a record of a job that ended elsewhere).
    pub(super) fn set_history(&mut self, h: JobHistory) {
        (self.restart_reasons, self.moves) = (h.restarts, h.moves);
        for (rank, reported) in h.checkpoints.into_iter().filter(|(r, _)| *r < self.desc.processes) {
            self.ckpt.ranks.insert(rank, RankReports { reported, covers: 0 });
        }
    }

    /// What `rank` reported of its checkpoints so far.
    pub fn checkpoints(&self, rank: u32) -> Option<&RankCheckpoints> {
        self.ckpt.ranks.get(&rank).map(|r| &r.reported)
    }

    /// Asks every running rank for a checkpoint at its next safe point: the
    /// request's number. Its progress comes as [`SubmitEvent::CheckpointAsked`],
    /// then [`SubmitEvent::CheckpointTaken`] or [`SubmitEvent::CheckpointFailed`].
    pub fn request_checkpoint(&mut self) -> Result<u64, SubmitCmdError> {
        self.ask_checkpoint(true)
    }

    /// As [`Submission::request_checkpoint`]; unless `ship`, the files of
    /// its cut stay on the ranks' nodes ([`JobMsg::CheckpointStay`]).
    pub(super) fn ask_checkpoint(&mut self, ship: bool) -> Result<u64, SubmitCmdError> {
        let job = self.job;
        let why = match self.phase {
            Phase::Finished => Some("it is over"),
            Phase::Running => None,
            _ => Some("it has not started yet"),
        };
        let nodes: BTreeSet<NodeAddr> = self.peers().collect();
        if let Some(why) = why.or(nodes.is_empty().then_some("every rank has exited")) {
            return Err(SubmitCmdError::NoRunningRank { job, why });
        }
        if self.ckpt.asked.len() >= MAX_PENDING_CHECKPOINTS {
            return Err(SubmitCmdError::TooManyCheckpoints { job, pending: self.ckpt.asked.len() });
        }
        self.ckpt.last_request += 1;
        let request = self.ckpt.last_request;
        let job = self.wire;
        let msg = if ship { JobMsg::Checkpoint { job, request } } else { JobMsg::CheckpointStay { job, request } };
        for &to in &nodes {
            self.send(to, msg.clone(), Bytes::new());
        }
        self.ckpt.asked.push(Asked { request, waiting: nodes, reached: BTreeSet::new(), told: false });
        Ok(request)
    }

    /// A checkpoint message from `from` while the job runs.
    pub(super) fn on_checkpoint_msg(&mut self, from: NodeAddr, body: JobMsg) -> Option<()> {
        match body {
            JobMsg::CheckpointAsked { request, ranks, .. } => {
                let holds: Vec<u32> = ranks.into_iter().filter(|&r| self.holds(from, r)).collect();
                let a = self.ckpt.asked.iter_mut().find(|a| a.request == request)?;
                if !a.waiting.remove(&from) {
                    return None;
                }
                a.reached.extend(holds);
            }
            JobMsg::Checkpointed { rank, ckpt, request, .. } if self.holds(from, rank) => {
                self.reported(rank, ckpt, request);
            }
            JobMsg::Recovered { rank, recovery, .. } if self.holds(from, rank) => self.recovered(rank, recovery),
            _ => return None,
        }
        self.settle_checkpoints();
        Some(())
    }

    fn reported(&mut self, rank: u32, ckpt: CheckpointInfo, request: u64) {
        let last_request = self.ckpt.last_request;
        let r = self.ckpt.ranks.entry(rank).or_default();
        r.reported.written(ckpt);
        // Requests are numbered here: a rank cannot have seen a later one.
        r.covers = r.covers.max(request.min(last_request));
    }

    fn recovered(&mut self, rank: u32, recovery: RecoveryInfo) {
        self.ckpt.ranks.entry(rank).or_default().reported.recovered(recovery);
    }

    /// Reports every request that moved on: asked of its ranks, then taken
    /// (or failed, having reached no rank).
    pub(super) fn settle_checkpoints(&mut self) {
        let job = self.job;
        let mut events = Vec::new();
        for a in self.ckpt.asked.iter_mut().filter(|a| a.waiting.is_empty() && !a.told) {
            a.told = true;
            let ranks = a.reached.iter().copied().collect();
            events.push(SubmitEvent::CheckpointAsked { job, request: a.request, ranks });
        }
        let covers = |rank: u32| self.ckpt.ranks.get(&rank).map_or(0, |r| r.covers);
        let live: Vec<u64> = self.ranks.iter().filter(|r| r.exit.is_none()).map(|r| covers(r.rank)).collect();
        let newest = self.ckpt.ranks.values().map(|r| r.covers).max().unwrap_or(0);
        // Taken: some rank wrote a file of a cut covering it, and every rank
        // still running did.
        let taken = |request: u64| newest >= request && live.iter().all(|&c| c >= request);
        let (done, rest): (Vec<Asked>, Vec<Asked>) = std::mem::take(&mut self.ckpt.asked)
            .into_iter()
            .partition(|a| a.told && (a.reached.is_empty() || taken(a.request)));
        self.ckpt.asked = rest;
        let mut taken = Vec::new();
        for Asked { request, reached, .. } in done {
            if reached.is_empty() {
                let reason = "it reached no rank: only ranks of a program linked with the p2pmp library, connected \
                              to their node, can be asked"
                    .to_owned();
                events.push(SubmitEvent::CheckpointFailed { job, request, reason });
                continue;
            }
            let files =
                self.ckpt.ranks.values().filter(|r| r.covers >= request).filter_map(|r| r.reported.last.as_ref());
            let cut = CutInfo::of(files);
            taken.push((request, cut.epoch));
            events.push(SubmitEvent::CheckpointTaken { job, request, cut });
        }
        for e in events {
            if let SubmitEvent::CheckpointFailed { request, .. } = &e {
                self.migration_failed(*request);
            }
            self.event(e);
        }
        for (request, epoch) in taken {
            self.migration_cut_taken(request, epoch);
        }
    }

    /// Request `request` is no longer followed (its failure is reported by
    /// the caller).
    pub(super) fn ckpt_forget(&mut self, request: u64) {
        self.ckpt.asked.retain(|a| a.request != request);
    }

    /// The job ends: every request still on its way fails.
    pub(super) fn end_checkpoints(&mut self) {
        self.fail_checkpoints("the job ended before the checkpoint was taken");
    }

    /// The job restarts from scratch: the requests on their way fail, and
    /// what the ranks reported is of a run that is gone.
    pub(super) fn restart_checkpoints(&mut self) {
        self.fail_checkpoints("the job restarted before the checkpoint was taken");
        self.ckpt.ranks.clear();
    }

    fn fail_checkpoints(&mut self, reason: &str) {
        let job = self.job;
        for a in std::mem::take(&mut self.ckpt.asked) {
            self.migration_failed(a.request);
            let reason = reason.to_owned();
            self.event(SubmitEvent::CheckpointFailed { job, request: a.request, reason });
        }
    }
}
