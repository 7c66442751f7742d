//! Checkpoints on the executor's side: which control connection serves which
//! running rank, checkpoint requests passed on to the ranks, and the ranks'
//! reports kept and passed on to the submitter.
//!
//! - **Link.** A rank holds one control connection to its node for its whole
//!   life and registers its process key over it; when that key is the process
//!   key of a rank running here ([`super::super::process_key`]) and the rank has
//!   no connection yet, the connection serves that rank until it closes or the
//!   rank exits (the first one stays: another process registering the same
//!   key takes nothing over).
//! - **Request.** [`JobMsg::Checkpoint`] becomes one
//!   [`ExecEvent::AskCheckpoint`] per linked rank of the job, and
//!   [`JobMsg::CheckpointAsked`] names them to the submitter.
//! - **Reports.** A linked rank's checkpoints and recoveries are kept per rank
//!   ([`RankCheckpoints`]) and go to the submitter as [`JobMsg::Checkpointed`]
//!   and [`JobMsg::Recovered`].
//! - **Shipping.** For a job that restarts from its checkpoints
//!   (`<restart>checkpoint</restart>`), and for the cut answering each
//!   checkpoint request passed on here (`p2pjob checkpoint`, a node
//!   shutting down; of a move alone, [`JobMsg::CheckpointStay`], only the
//!   moving rank's, see `moving`), a
//!   file a rank reports is read from the job directory (ranks write them
//!   there: `P2PMP_CHECKPOINT_DIR=.`) and sent to the submitter as
//!   [`JobMsg::CheckpointFile`] chunks, beside the output files and under
//!   their window, so the node holding the job keeps the cut.
//! - **Resume.** After [`JobMsg::Resume`], each rank placed here needs its
//!   checkpoint file of that cut (staged as [`RESUME_FILES`] + rank, named
//!   [`ckpt::file_name`]) before the job counts as staged; it starts with
//!   `P2PMP_RESTART` naming that file and `P2PMP_RESTART_JOB` the run that
//!   wrote it.

use bytes::Bytes;

use super::{ExecCmdError, ExecEvent, ExecJob, Execution, RankRun};
use crate::ckpt::{self, CheckpointInfo, MAX_SHIPPED_FILE, RankCheckpoints, RecoveryInfo};
use crate::id::Id;
use crate::job::msg::JobMsg;
use crate::job::{JobId, RESUME_FILES, RestartPolicy, process_key};
use crate::machine::NodeAddr;

/// Whether staged file `file`, named `name` and `total` bytes long, is the
/// checkpoint file a rank placed here resumes from.
pub(super) fn is_resume_file(j: &ExecJob, file: u32, name: &str, total: u64) -> bool {
    let Some((_, epoch)) = j.resume else { return false };
    let Some(rank) = crate::job::resume_rank(file) else { return false };
    j.ranks.contains_key(&rank) && total <= MAX_SHIPPED_FILE && name == ckpt::file_name(rank, epoch)
}

/// The staged file numbers of the checkpoint files the ranks placed here
/// resume from (none when they start afresh).
pub(super) fn resume_files(j: &ExecJob) -> impl Iterator<Item = u32> + '_ {
    j.ranks.keys().filter(|_| j.resume.is_some()).map(|rank| RESUME_FILES + rank)
}

/// The environment that makes `rank` resume from its file of cut `resume`.
pub(super) fn resume_env(resume: Option<(JobId, u64)>, rank: u32) -> Vec<(String, String)> {
    let Some((from, epoch)) = resume else { return Vec::new() };
    vec![("P2PMP_RESTART".to_owned(), ckpt::file_name(rank, epoch)), ("P2PMP_RESTART_JOB".to_owned(), from.to_string())]
}

impl Execution {
    /// A process registered `key` on control connection `conn`: when it is
    /// the process key of a rank running here that has no connection yet,
    /// `conn` serves that rank from now on. The rank it serves, if any.
    pub fn handle_rank_registered(&mut self, conn: u64, key: Id) -> Option<(JobId, u32)> {
        if let Some(&(job, rank)) = self.links.get(&conn) {
            return (process_key(job, rank) == key).then_some((job, rank));
        }
        let (job, rank) = self.jobs.iter().find_map(|(&job, j)| {
            j.ranks
                .iter()
                .filter(|(_, r)| matches!(r, RankRun::Running { .. }))
                .map(|(&rank, _)| (job, rank))
                .find(|&(job, rank)| process_key(job, rank) == key)
        })?;
        if self.links.values().any(|l| *l == (job, rank)) {
            return None;
        }
        self.links.insert(conn, (job, rank));
        Some((job, rank))
    }

    /// Control connection `conn` closed: it serves no rank any more.
    pub fn handle_conn_closed(&mut self, conn: u64) {
        self.links.remove(&conn);
    }

    /// The rank `conn` serves wrote checkpoint `ckpt`, covering checkpoint
    /// requests up to `request`: kept and passed on to the submitter.
    pub fn handle_checkpointed(
        &mut self,
        conn: u64,
        ckpt: CheckpointInfo,
        request: u64,
    ) -> Result<(JobId, u32), ExecCmdError> {
        let (job, rank, to) = self.report_of(conn, |r| r.written(ckpt))?;
        self.send(to, JobMsg::Checkpointed { job, rank, ckpt, request }, Bytes::new());
        self.ship_checkpoint(job, rank, ckpt.epoch, request);
        Ok((job, rank))
    }

    /// Reads `rank`'s checkpoint file of `epoch` to send it to the
    /// submitter: the files of a job that restarts from its checkpoints,
    /// and the first file answering each checkpoint request this node passed
    /// on to be shipped (`p2pjob checkpoint`, a node shutting down; of a
    /// [`JobMsg::CheckpointStay`] only the file of a rank moving at it,
    /// see `moving`; a rank reports the newest request
    /// its cut covers with every later cut too, and may report any number:
    /// only requests asked here, each once, count). A periodic cut taken
    /// while the rank's last file is still read or sent is not shipped (the
    /// submitter keeps the cuts that arrive whole); an asked-for one is.
    fn ship_checkpoint(&mut self, job: JobId, rank: u32, epoch: u64, request: u64) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let restarts = j.staged.as_ref().is_some_and(|d| d.restart == RestartPolicy::Checkpoint);
        let busy = j.ckpt_reads.keys().any(|(r, _)| *r == rank) || j.outgoing.shipping_checkpoint(rank);
        let for_move = super::moving::ships_for_move(j, rank, request);
        let shipped = j.shipped.entry(rank).or_default();
        let asked_for = for_move || (request > *shipped && request <= j.asked);
        if asked_for {
            *shipped = request;
        }
        if !(asked_for || (restarts && !busy)) || j.killed {
            return;
        }
        let name = ckpt::file_name(rank, epoch);
        j.ckpt_reads.insert((rank, name.clone()), epoch);
        self.event(ExecEvent::ReadOutputFile { job, rank, name });
    }

    /// The rank `conn` serves resumed from a checkpoint: kept and passed on.
    pub fn handle_recovered(&mut self, conn: u64, recovery: RecoveryInfo) -> Result<(JobId, u32), ExecCmdError> {
        let (job, rank, to) = self.report_of(conn, |r| r.recovered(recovery))?;
        self.send(to, JobMsg::Recovered { job, rank, recovery }, Bytes::new());
        Ok((job, rank))
    }

    /// Applies `f` to the checkpoints of the rank `conn` serves: that rank,
    /// and its job's submitter.
    fn report_of(
        &mut self,
        conn: u64,
        f: impl FnOnce(&mut RankCheckpoints),
    ) -> Result<(JobId, u32, NodeAddr), ExecCmdError> {
        let &(job, rank) = self.links.get(&conn).ok_or(ExecCmdError::NoRank { conn })?;
        let j = self.jobs.get_mut(&job).ok_or(ExecCmdError::NoRank { conn })?;
        f(j.checkpoints.entry(rank).or_default());
        Ok((job, rank, j.submitter))
    }

    /// What `rank` of `job` reported of its checkpoints here.
    pub fn checkpoints(&self, job: JobId, rank: u32) -> Option<&RankCheckpoints> {
        self.jobs.get(&job)?.checkpoints.get(&rank)
    }

    /// The submitter asks for checkpoint `request` of `job`: every linked
    /// rank is asked, and the submitter told which. `ship`: the files of
    /// the cut answering it go to the submitter.
    pub(super) fn on_checkpoint_request(&mut self, from: NodeAddr, job: JobId, request: u64, ship: bool) {
        if let Some(j) = self.jobs.get_mut(&job).filter(|_| ship) {
            j.asked = j.asked.max(request);
        }
        let mut asks: Vec<(u32, u64)> =
            self.links.iter().filter(|(_, (j, _))| *j == job).map(|(&conn, &(_, rank))| (rank, conn)).collect();
        asks.sort_unstable();
        for &(rank, conn) in &asks {
            self.event(ExecEvent::AskCheckpoint { conn, job, rank, request });
        }
        let ranks = asks.into_iter().map(|(rank, _)| rank).collect();
        self.send(from, JobMsg::CheckpointAsked { job, request, ranks }, Bytes::new());
    }

    /// The node is shutting down gracefully: every submitter (other than
    /// this node) with ranks running here is asked to move them
    /// ([`JobMsg::Leaving`]); so is the deputy of a job this node submitted
    /// and hands over, once it adopts the job. The number of jobs that may
    /// still move.
    pub fn handle_leaving(&mut self) -> usize {
        self.leaving = true;
        let me = self.addr;
        let running: Vec<(JobId, NodeAddr)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.submitter != me || !j.deputies.is_empty())
            .filter(|(_, j)| j.ranks.values().any(|r| matches!(r, RankRun::Running { .. })))
            .map(|(job, j)| (*job, j.submitter))
            .collect();
        for (job, to) in running {
            self.draining.insert(job);
            if to != me {
                self.send(to, JobMsg::Leaving { job }, Bytes::new());
            }
        }
        self.draining.len()
    }

    /// Jobs that may still move their ranks off this node before it stops
    /// (asked by [`Execution::handle_leaving`]; a job stays once its submitter
    /// says so, or stops them, or it ends).
    pub fn draining(&self) -> usize {
        self.draining.len()
    }

    /// `rank` of `job` (every rank when `None`) exited or was dropped: its
    /// connection serves nothing any more.
    pub(super) fn unlink(&mut self, job: JobId, rank: Option<u32>) {
        self.links.retain(|_, (j, r)| !(*j == job && rank.is_none_or(|want| want == *r)));
    }
}

#[cfg(test)]
mod tests;
