//! The executor's side of the queue: jobs waiting for slots here, in priority
//! order (the submission time, then the job id), and the slots granted to each.
//!
//! Every free slot is granted to a waiting job, earliest first, up to the ranks
//! it needs; a job's grant is held for it until it offers ranks (which take the
//! grant), withdraws ([`JobMsg::Unwant`]), or an earlier job arrives and takes
//! the slots back. An offer is accepted only within the free slots not granted
//! to other jobs, so a stream of small later jobs cannot starve a large earlier
//! one: the earliest job waiting anywhere is the earliest at every node it
//! waits at, so it collects every slot it needs as they come free. Grants are
//! told to the submitter only when they change (with how many wait ahead of
//! it then: a job's place in line is as of its last grant).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::Execution;
use crate::job::JobId;
use crate::job::msg::JobMsg;
use crate::machine::NodeAddr;

/// Most jobs one node queues (more are ignored: their submitters see no grant).
pub(super) const MAX_WAITING: usize = 16_384;

/// One waiting job.
#[derive(Debug)]
struct Want {
    submitter: NodeAddr,
    ranks: u32,
    granted: u32,
    /// How many wait ahead, as last told.
    told_ahead: u32,
}

/// Waiting jobs by (priority, job id).
#[derive(Debug, Default)]
pub(super) struct Waiting {
    wants: BTreeMap<(u64, JobId), Want>,
    priority: BTreeMap<JobId, u64>,
}

impl Waiting {
    /// Slots granted to jobs other than `job`.
    pub(super) fn granted_to_others(&self, job: JobId) -> u32 {
        self.wants.iter().filter(|((_, j), _)| *j != job).map(|(_, w)| w.granted).sum()
    }

    /// The submitters of waiting jobs.
    pub(super) fn submitters(&self) -> impl Iterator<Item = NodeAddr> + '_ {
        self.wants.values().map(|w| w.submitter)
    }

    /// The waiting jobs of `submitter`.
    pub(super) fn jobs_of(&self, submitter: NodeAddr) -> impl Iterator<Item = JobId> + '_ {
        self.wants.iter().filter(move |(_, w)| w.submitter == submitter).map(|((_, j), _)| *j)
    }

    /// Jobs waiting here.
    pub(super) fn len(&self) -> usize {
        self.wants.len()
    }

    fn remove(&mut self, job: JobId) -> Option<Want> {
        let p = self.priority.remove(&job)?;
        self.wants.remove(&(p, job))
    }
}

impl Execution {
    /// A job wants `ranks` slots (here and elsewhere) at `priority`.
    pub(super) fn on_want(&mut self, from: NodeAddr, job: JobId, ranks: u32, priority: u64) -> Option<()> {
        let valid = (1..=super::super::description::MAX_PROCESSES).contains(&ranks);
        if !valid || self.jobs.contains_key(&job) {
            return None;
        }
        if let Some(p) = self.waiting.priority.get(&job) {
            // Another node cannot speak for this job.
            if self.waiting.wants.get(&(*p, job)).is_some_and(|w| w.submitter != from) {
                return None;
            }
        } else if self.waiting.len() >= MAX_WAITING {
            return None;
        }
        let granted = self.waiting.remove(job).map_or(0, |w| w.granted);
        self.waiting.priority.insert(job, priority);
        let want = Want { submitter: from, ranks, granted, told_ahead: u32::MAX };
        self.waiting.wants.insert((priority, job), want);
        self.regrant();
        Some(())
    }

    /// A job stops waiting here.
    pub(super) fn on_unwant(&mut self, from: NodeAddr, job: JobId) -> Option<()> {
        let p = *self.waiting.priority.get(&job)?;
        if self.waiting.wants.get(&(p, job))?.submitter != from {
            return None;
        }
        self.waiting.remove(job);
        self.regrant();
        Some(())
    }

    /// `job` took its slots (or went): it waits no more.
    pub(super) fn stop_waiting(&mut self, job: JobId) {
        if self.waiting.remove(job).is_some() {
            self.regrant();
        }
    }

    /// Every job of `submitter` waits no more (it is gone).
    pub(super) fn drop_waiting_of(&mut self, submitter: NodeAddr) {
        let before = self.waiting.len();
        let jobs: Vec<JobId> = self.waiting.jobs_of(submitter).collect();
        for j in jobs {
            self.waiting.remove(j);
        }
        if self.waiting.len() < before {
            self.regrant();
        }
    }

    /// Hands the free slots to the waiting jobs, earliest first, and tells each
    /// job whose grant changed (or that moved near the head).
    pub(super) fn regrant(&mut self) {
        let mut avail = self.free;
        let mut tell = Vec::new();
        for (ahead, ((_, job), w)) in self.waiting.wants.iter_mut().enumerate() {
            let grant = w.ranks.min(avail);
            avail -= grant;
            let ahead = u32::try_from(ahead).unwrap_or(u32::MAX);
            // A first answer always goes; later ones only when the grant changes
            // (the place in line rides along: a job moving up costs nothing).
            if grant != w.granted || w.told_ahead == u32::MAX {
                w.granted = grant;
                w.told_ahead = ahead;
                tell.push((w.submitter, JobMsg::Grant { job: *job, slots: grant, ahead }));
            }
        }
        for (to, msg) in tell {
            self.send(to, msg, Bytes::new());
        }
    }
}
