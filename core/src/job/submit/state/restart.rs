//! Restarting a job whose node was lost (`<restart>scratch</restart>`, or
//! `checkpoint`: then from the newest cut kept, see `cuts`): the
//! ranks still running are stopped, and the whole job is placed again, on
//! nodes other than those lost, under a new wire id (so nothing of the old
//! run, a late message, a stale registration of a rank's address, a
//! heartbeat of an executor still winding it down, is taken for the new
//! one). Its output goes on after what the earlier runs wrote; output files
//! come from the run that finishes.

use super::*;

/// Most restarts of one job: a job that keeps losing nodes fails with the
/// last loss after this many.
pub const MAX_RESTARTS: u32 = 3;

impl Submission {
    /// Whether losing ranks now restarts the job rather than failing it.
    pub(super) fn restartable(&self) -> bool {
        let losses = self.restarts.saturating_sub(self.migrations);
        self.placeable()
            && self.desc.restart != RestartPolicy::Fail
            && losses < MAX_RESTARTS
            && self.phase == Phase::Running
    }

    /// Stops what is left of the current run and starts the job again from
    /// its queries; `why` is the loss, kept and reported. `from_cut`: from
    /// the newest cut kept whole, if any.
    pub(super) fn restart(&mut self, why: String, from_cut: bool) {
        self.migration = None;
        self.toward = None;
        // The ranks of nodes shutting down stop with this run.
        self.leaving_early.clear();
        self.release_nodes(true);
        self.restart_checkpoints();
        self.restarts = self.restarts.saturating_add(1);
        self.wire = JobId(Id::hash_parts([&self.job.0.as_bytes()[..], b"restart", &self.restarts.to_be_bytes()]));
        self.nodes.clear();
        self.closed = 0;
        self.refusals.clear();
        self.waiting = None;
        self.bid_deadline = None;
        self.unplaced = (0..self.desc.processes).collect();
        for r in &mut self.ranks {
            (r.node, r.started, r.exit) = (None, false, None);
        }
        self.out_files.clear();
        self.out_ok.clear();
        self.out_bad.clear();
        self.out_base = self.out_end.clone();
        self.phase = Phase::Resolving;
        let job = self.job;
        for (query, q) in self.queries.iter_mut().enumerate() {
            (q.values, q.attempts) = (None, 1);
            let e = SubmitEvent::Query { job, query: query as u32, name: q.name.clone() };
            self.actions.push_back(Action::Event(e));
        }
        // From the newest cut kept whole, or from scratch (see `cuts`).
        self.restart_from_cut(why, from_cut);
    }

    /// The restart is settled (`how` says from where, and why): kept and reported.
    pub(super) fn announce_restart(&mut self, how: String) {
        self.restart_reasons.push(how.clone());
        let (job, attempt) = (self.job, self.restarts);
        self.event(SubmitEvent::Restarting { job, attempt, reason: how });
    }
}
