//! The jobs this node is deputy for: a job's submitting node names, among the
//! nodes running its ranks, the one that takes the job over if it dies
//! ([`JobMsg::Guard`], see [`crate::job::Guarded`]). The deputy keeps what it
//! was told (the placement and the job file) and watches the submitting node;
//! once that node is gone, it holds the job as if submitted here: it adopts
//! the executors, collects the rest of the output, output files and exits
//! (into `adopted-JOB` under the work directory), registers the job's key so
//! `p2pjob wait` or `status` from any node finds it here, and names a deputy
//! of its own. The ranks run on; what the dead node had collected is lost
//! with it (output printed before the takeover, and what was in flight).

use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;

use super::DaemonNode;
use crate::job::{Guarded, JobDescription, JobId};
use crate::machine::NodeAddr;

/// Most jobs one node is deputy for (one per rank it runs, at most).
const MAX_GUARDED: usize = 1024;

/// A job this node may take over.
#[derive(Debug)]
struct Deputy {
    /// The job's submitting node.
    holder: NodeAddr,
    job: Guarded,
    /// The job file.
    xml: Bytes,
}

/// The jobs this node is deputy for, by job id.
#[derive(Debug, Default)]
pub(super) struct Guards {
    jobs: BTreeMap<JobId, Deputy>,
}

impl Guards {
    /// The submitting nodes watched.
    pub(super) fn holders(&self) -> impl Iterator<Item = NodeAddr> + '_ {
        self.jobs.values().map(|d| d.holder)
    }
}

impl DaemonNode {
    /// `from`, which submitted job `g.wire` running here, names `deputy`.
    pub(super) fn on_guard(&mut self, from: NodeAddr, g: Guarded, deputy: NodeAddr, xml: Bytes) {
        if !self.exec.runs_for(g.wire, from) {
            return;
        }
        let guards = &mut self.guards.jobs;
        if deputy != self.addr {
            guards.remove(&g.job);
        } else if guards.len() < MAX_GUARDED || guards.contains_key(&g.job) {
            guards.insert(g.job, Deputy { holder: from, job: g, xml });
        }
    }

    /// Job `wire` ended (its submitter said so): nothing to take over.
    pub(super) fn unguard(&mut self, from: NodeAddr, wire: JobId) {
        self.guards.jobs.retain(|_, d| d.holder != from || d.job.wire != wire);
    }

    /// Node `gone` is lost: take over every job it submitted that this node
    /// is deputy for.
    pub(super) fn take_over(&mut self, now: Instant, gone: NodeAddr) {
        let mine: Vec<JobId> = self.guards.jobs.iter().filter(|(_, d)| d.holder == gone).map(|(k, _)| *k).collect();
        for id in mine {
            let Some(Deputy { job, xml, .. }) = self.guards.jobs.remove(&id) else { continue };
            let Ok(parsed) = JobDescription::parse(&xml) else { continue };
            let (size, owner) = (parsed.job.processes, job.owner);
            if !self.submitter.adopt(now, job, parsed.job) {
                continue;
            }
            tracing::warn!(%id, node = %gone, "took over a job whose submitting node was lost");
            let base_dir = format!("{}/adopted-{id}", self.work_dir.trim_end_matches('/'));
            self.hold(now, id, base_dir, size, owner);
        }
    }
}
