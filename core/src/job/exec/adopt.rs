//! A running job whose submitter dies is not stopped at once when the
//! submitter named deputies ([`JobMsg::Guard`]): it waits up to
//! [`super::ExecConfig::adopt_timeout`] for a deputy's [`JobMsg::Adopt`],
//! its ranks running on (their output waits in their pipes, past the stream
//! window). Adopted, the job answers to the deputy: [`JobMsg::Adopted`] tells
//! where each rank's output goes on (what was in flight to the dead node is
//! lost, and its window given back), and the output files and exits of ranks
//! that ended go again, read afresh from the job directory. Only a deputy
//! the submitter named may adopt: no other node can take a job's results.
//! The first to ask has it (the second deputy asks only when it found the
//! first deputy lost, and the submitter lost or stopping: see
//! [`JobMsg::HandOver`]).

use std::collections::BTreeSet;
use std::time::Instant;

use bytes::Bytes;

use super::{ExecEvent, Execution, RankRun, output};
use crate::job::JobId;
use crate::job::msg::JobMsg;
use crate::machine::NodeAddr;

/// Most deputies a job names that an executor keeps.
pub(super) const MAX_DEPUTIES: usize = 4;

impl Execution {
    /// `job`'s submitter is gone: whether the job waits for its deputy
    /// (it has one and runs) rather than being dropped.
    pub(super) fn orphan(&mut self, now: Instant, job: JobId) -> bool {
        let timeout = self.config.adopt_timeout;
        let Some(j) = self.jobs.get_mut(&job) else { return false };
        if j.deputies.is_empty() || j.killed || j.staged.is_none() {
            return false;
        }
        if !j.orphaned {
            tracing::info!(%job, deputies = ?j.deputies, "the job's submitter is gone: waiting for a deputy");
            (j.orphaned, j.deadline) = (true, Some(now + timeout));
        }
        true
    }

    /// A message came from `node`: the jobs it submitted that wait for
    /// their deputy since a send to it failed wait no more (it is there).
    pub fn heard_from(&mut self, node: NodeAddr) {
        for j in self.jobs.values_mut().filter(|j| j.orphaned && j.submitter == node) {
            (j.orphaned, j.deadline) = (false, None);
        }
    }

    /// `from` takes `job` over.
    pub(super) fn on_adopt(&mut self, from: NodeAddr, job: JobId) -> Option<()> {
        let j = self.jobs.get_mut(&job).filter(|j| j.deputies.contains(&from) && !j.killed)?;
        // The deputies behind it may still take the job over, should it die
        // before it names its own.
        let behind = j.deputies.iter().skip_while(|d| **d != from).skip(1).copied().collect();
        (j.submitter, j.deputies, j.orphaned, j.deadline) = (from, behind, false, None);
        // Whatever was on its way to the old submitter starts over.
        j.outgoing = output::Outgoing::default();
        let names: BTreeSet<String> =
            j.staged.as_ref().map(|d| d.outputfiles.iter().cloned().collect()).unwrap_or_default();
        let (mut streamed, mut credit, mut collect) = (Vec::new(), Vec::new(), Vec::new());
        for (&rank, run) in j.ranks.iter_mut() {
            match *run {
                RankRun::Running { stdout, stderr } => {
                    let sent = stdout + stderr;
                    let acked = j.stream_acked.entry(rank).or_default();
                    credit.push((rank, sent - (*acked).min(sent)));
                    *acked = sent;
                    streamed.push((rank, sent));
                }
                RankRun::Exited(code) => {
                    *run = RankRun::Collecting(code);
                    j.reexit.insert(rank);
                    collect.push(rank);
                }
                RankRun::Collecting(_) => collect.push(rank),
                RankRun::Waiting => {}
            }
        }
        for &rank in &collect {
            j.pending_reads.insert(rank, names.clone());
        }
        tracing::info!(%job, submitter = %from, "the job was adopted");
        self.send(from, JobMsg::Adopted { job, streamed }, Bytes::new());
        if self.leaving && self.draining.contains(&job) {
            // Handed over by this node, stopping: its ranks here move now.
            self.send(from, JobMsg::Leaving { job }, Bytes::new());
        }
        for (rank, bytes) in credit.into_iter().filter(|(_, b)| *b > 0) {
            self.event(ExecEvent::OutputCredit { job, rank, bytes });
        }
        for rank in collect {
            for name in &names {
                self.event(ExecEvent::ReadOutputFile { job, rank, name: name.clone() });
            }
            self.maybe_exit(job, rank);
        }
        Some(())
    }
}
