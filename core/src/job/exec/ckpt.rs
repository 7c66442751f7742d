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

use bytes::Bytes;

use super::{ExecCmdError, ExecEvent, Execution, RankRun};
use crate::ckpt::{CheckpointInfo, RankCheckpoints, RecoveryInfo};
use crate::id::Id;
use crate::job::msg::JobMsg;
use crate::job::{JobId, process_key};
use crate::machine::NodeAddr;

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
        Ok((job, rank))
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
    /// rank is asked, and the submitter told which.
    pub(super) fn on_checkpoint_request(&mut self, from: NodeAddr, job: JobId, request: u64) {
        let mut asks: Vec<(u32, u64)> =
            self.links.iter().filter(|(_, (j, _))| *j == job).map(|(&conn, &(_, rank))| (rank, conn)).collect();
        asks.sort_unstable();
        for &(rank, conn) in &asks {
            self.event(ExecEvent::AskCheckpoint { conn, job, rank, request });
        }
        let ranks = asks.into_iter().map(|(rank, _)| rank).collect();
        self.send(from, JobMsg::CheckpointAsked { job, request, ranks }, Bytes::new());
    }

    /// `rank` of `job` (every rank when `None`) exited or was dropped: its
    /// connection serves nothing any more.
    pub(super) fn unlink(&mut self, job: JobId, rank: Option<u32>) {
        self.links.retain(|_, (j, r)| !(*j == job && rank.is_none_or(|want| want == *r)));
    }
}

#[cfg(test)]
mod tests;
