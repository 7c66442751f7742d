//! The job's deputies: whenever the job starts (again) or a rank moves, every
//! node holding ranks is told the placement and which of them take the job
//! over if this node dies ([`JobMsg::Guard`], with the job file): the first,
//! or the second when the first died too. Each keeps a copy of what this
//! node keeps (output, output files, cuts, and at the end how the job
//! ended), so a cut is kept on three nodes beside the rank's own when the
//! job spans enough of them. The deputy that takes over
//! builds the job anew from it ([`Submission::adopt`]), claims the executors
//! ([`JobMsg::Adopt`]), which answer with where each rank's output goes on
//! ([`JobMsg::Adopted`]) and send again what the old node would have got:
//! output files and exits of ranks that ended. The ranks run on untouched.

use super::*;

/// How many nodes of a job keep copies of what its submitting node keeps,
/// and take the job over in turn.
pub(super) const DEPUTIES: usize = 2;

/// What a deputy was told of the job it may take over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guarded {
    /// The job's id.
    pub job: JobId,
    /// Its current run's wire id.
    pub wire: JobId,
    /// Restarts so far.
    pub restarts: u32,
    /// Every rank's node.
    pub ranks: Vec<(u32, NodeAddr)>,
    /// The job's signature, if it was signed.
    pub auth: Option<JobAuth>,
    /// Its restarts and moves so far.
    pub past: JobPast,
}

/// What a deputy kept of a job beside its placement, for taking it over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replica {
    /// Staged files by number: name, bytes, digest.
    pub files: Vec<(u32, (String, Bytes, Id))>,
    /// Cuts kept whole: epoch, the run that wrote it, its ranks.
    pub cuts: Vec<(u64, JobId, BTreeSet<u32>)>,
}

impl Submission {
    /// The nodes that take the job over if this one dies, in order of
    /// succession: those of the lowest ranks that are not this one and are
    /// not shutting down, at most [`DEPUTIES`] (none while every rank runs
    /// here).
    pub fn deputies(&self) -> Vec<NodeAddr> {
        let mut d: Vec<NodeAddr> = Vec::with_capacity(DEPUTIES);
        if self.phase != Phase::Running {
            return d;
        }
        let leaving = |n: &NodeAddr| self.nodes.get(n).is_some_and(|n| n.leaving);
        for n in self.ranks.iter().filter_map(|r| r.node) {
            if d.len() == DEPUTIES {
                break;
            }
            if n != self.addr && !d.contains(&n) && !leaving(&n) {
                d.push(n);
            }
        }
        d
    }

    /// The deputies as last told ([`JobMsg::Guard`]), in address order
    /// (not of succession): those that would take the job over now.
    pub fn told_deputies(&self) -> impl Iterator<Item = NodeAddr> + '_ {
        self.told.iter().copied()
    }

    /// Node `node` is shutting down: it is a deputy no more (the others
    /// are told so when that changes who is).
    pub(super) fn leaving_deputy(&mut self, node: NodeAddr) {
        let before = self.deputies();
        let Some(n) = self.nodes.get_mut(&node) else { return };
        n.leaving = true;
        if self.deputies() != before {
            self.guard();
        }
    }

    /// The first of the [`Submission::deputies`].
    pub fn deputy(&self) -> Option<NodeAddr> {
        self.deputies().first().copied()
    }

    /// Sends `body` (with `payload`) to every deputy: a copy of something
    /// kept here.
    pub(super) fn copy_to_deputies(&mut self, body: &JobMsg, payload: &Bytes) {
        for d in self.deputies() {
            self.send(d, body.clone(), payload.clone());
        }
    }

    /// Tells every node holding ranks the placement and the deputies, and
    /// the nodes named deputies before that they are no more (when so):
    /// nothing while there never were any.
    pub(super) fn guard(&mut self) {
        let deputies = self.deputies();
        if deputies.is_empty() && self.told.is_empty() {
            return;
        }
        let ranks: Vec<(u32, NodeAddr)> = self.ranks.iter().filter_map(|r| r.node.map(|n| (r.rank, n))).collect();
        let Some((_, xml, _)) = self.files.first().cloned().flatten() else { return };
        let mut holding: BTreeSet<NodeAddr> = ranks.iter().map(|(_, n)| *n).collect();
        holding.append(&mut self.told);
        self.told = deputies.iter().copied().collect();
        let (job, id, restarts) = (self.wire, self.job, self.restarts);
        let past =
            JobPast { restarts: self.restart_reasons.clone(), moves: self.moves.clone(), migrations: self.migrations };
        for to in holding {
            let (deputies, ranks, auth, past) = (deputies.clone(), ranks.clone(), self.auth.clone(), past.clone());
            let msg = JobMsg::Guard { job, id, restarts, deputies, ranks, auth, past };
            self.send(to, msg, xml.clone());
        }
    }

    /// Takes over job `g` (its description `desc`), running on its nodes,
    /// whose submitting node died: every executor is claimed and the job is
    /// collected from here on, as if submitted here. This node becomes the
    /// next deputy's submitter in turn. With every staged file in `kept`
    /// the job can be placed anew (a restart, a move), otherwise not; a
    /// restart resumes from the newest of its cuts.
    pub fn adopt(
        config: SubmitConfig,
        addr: NodeAddr,
        (g, desc): (Guarded, JobDescription),
        kept: Replica,
        now: Instant,
    ) -> Self {
        let mut s = Submission::new(config, addr, (g.job, 0), desc, now);
        s.set_auth(g.auth);
        // Nothing is read again: the job runs. The queries only look for
        // nodes its ranks could move to.
        let queries = s.actions.iter().filter(|a| matches!(a, Action::Event(SubmitEvent::Query { .. }))).cloned();
        s.actions = queries.collect();
        s.cuts.adopt(kept.cuts);
        for (i, f) in kept.files {
            if let Some(slot) = s.files.get_mut(i as usize).filter(|_| i > 0) {
                *slot = Some(f);
            }
        }
        if s.phase == Phase::Finished {
            return s;
        }
        (s.wire, s.restarts, s.phase, s.adopted) = (g.wire, g.restarts, Phase::Running, true);
        // Another node's count: never more migrations than restarts.
        let migrations = g.past.migrations.min(g.restarts);
        (s.restart_reasons, s.moves, s.migrations) = (g.past.restarts, g.past.moves, migrations);
        s.unplaced.clear();
        s.queue_deadline = None;
        for &(rank, node) in &g.ranks {
            let Some(r) = s.ranks.get_mut(rank as usize) else { continue };
            (r.node, r.started) = (Some(node), true);
            let n = s.nodes.entry(node).or_insert_with(|| Node {
                answered: true,
                stage: Stage::Staged,
                ..Node::candidate(0, 0, 0)
            });
            n.accepted.push(rank);
        }
        let nodes: Vec<NodeAddr> = s.nodes.keys().copied().collect();
        for to in nodes {
            s.send(to, JobMsg::Adopt { job: g.wire }, Bytes::new());
        }
        s.guard();
        s
    }

    /// What the deputy keeps of job `g` (its description `desc`) once it
    /// ended at its submitting node, for `status` and `wait` asked here: its
    /// last placement and its ranks' exit `codes` (none unless every rank
    /// exited), its `history`. Nothing is sent: the job is over.
    pub fn ended(
        config: SubmitConfig,
        addr: NodeAddr,
        (g, desc): (Guarded, JobDescription),
        (codes, history): (&[i32], JobHistory),
        now: Instant,
    ) -> Self {
        let mut s = Submission::new(config, addr, (g.job, 0), desc, now);
        s.set_auth(g.auth);
        s.set_history(history);
        s.actions.clear();
        (s.wire, s.restarts, s.phase, s.adopted) = (g.wire, g.restarts, Phase::Finished, true);
        (s.files, s.unplaced, s.queue_deadline) = (Vec::new(), BTreeSet::new(), None);
        for &(rank, node) in &g.ranks {
            let Some(r) = s.ranks.get_mut(rank as usize) else { continue };
            (r.node, r.started, r.exit) = (Some(node), true, codes.get(rank as usize).copied());
        }
        s
    }

    /// Whether the job's ranks can be placed anew: always, unless it was
    /// taken over without every file it stages.
    pub(super) fn placeable(&self) -> bool {
        !self.adopted || self.files.iter().all(Option::is_some)
    }

    /// An executor took the adoption: its ranks' output goes on from `streamed`.
    pub(super) fn on_adopted(&mut self, from: NodeAddr, streamed: Vec<(u32, u64)>) -> Option<()> {
        let n = self.nodes.get_mut(&from)?;
        for (rank, sent) in streamed {
            if n.accepted.contains(&rank) {
                n.streamed.insert(rank, (sent, sent));
            }
        }
        Some(())
    }
}
