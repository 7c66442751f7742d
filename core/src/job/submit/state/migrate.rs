//! Moving a rank off its node. Either way the job takes a checkpoint now,
//! and its files travel to the node holding the job (executors ship the
//! files of every cut a request asked for).
//!
//! `p2pjob migrate JOB RANK` moves the rank alone: it leaves after that cut
//! and resumes on another node while the others go on (see `alone`). So
//! does the one rank of a node shutting down gracefully
//! ([`JobMsg::Leaving`]).
//! `p2pjob migrate JOB RANK --to NODE` names the node it goes to: one of the
//! candidates the job was placed among that holds no rank of it; when that
//! node does not take it, the rank goes elsewhere.
//!
//! A node shutting down with several ranks of the job has them moved alone
//! one after the other when as many other nodes could take one each. With
//! fewer, or while another migration is under way, its ranks move by
//! rolling the job back: once
//! the cut is kept whole the job is placed again, away from the node, and
//! every rank resumes from it (see `cuts`), so no work is lost beyond what
//! the ranks did while it travelled (or the node is told they stay,
//! [`JobMsg::Staying`], when no checkpoint can be taken of them). A rank
//! moving alone that cannot be placed alone after it left rolls the job back
//! the same way. A node that shuts down while a
//! migration is under way joins it: that restart places the job away from
//! both (so stopping several daemons at once moves every rank). A migration
//! does not count against the job's restarts after lost nodes.

use super::*;

/// A migration on its way.
#[derive(Debug)]
pub(super) struct Migration {
    pub(super) rank: u32,
    /// The node it moves off.
    pub(super) from: NodeAddr,
    /// The checkpoint request that takes its cut.
    pub(super) request: u64,
    /// That cut's epoch, once the ranks took it.
    pub(super) epoch: Option<u64>,
    /// The node is shutting down (else the user asked).
    pub(super) leaving: bool,
    /// Other nodes shutting down, whose ranks move with this migration.
    pub(super) also: BTreeSet<NodeAddr>,
    /// The node it moves to, when the user named one.
    pub(super) to: Option<NodeAddr>,
    /// When the rank stays after all, its cut not kept whole by then.
    pub(super) deadline: Instant,
    /// It moves alone, else the job rolls back to the cut.
    pub(super) alone: Option<super::alone::Alone>,
    /// Why a move alone turned into rolling the job back.
    pub(super) rolled: Option<String>,
    /// The rank's process left to move alone: the job cannot go on without
    /// rolling back once the move is given up.
    pub(super) left: bool,
    /// Every rank's file of its cut comes here (else only the moving rank's).
    pub(super) shipped: bool,
    /// The other live ranks of a node shutting down, to move alone after
    /// this one, in turn.
    pub(super) then: Vec<u32>,
    /// A checkpoint request asked of every rank, shipped, for a move alone
    /// turned into rolling back (its own request's cut ships only the
    /// moving rank's file).
    pub(super) again: Option<u64>,
}

impl Migration {
    /// Whether checkpoint request `request` takes this migration's cut.
    fn takes(&self, request: u64) -> bool {
        self.request == request || self.again == Some(request)
    }
}

/// How long a placement waits for the node a migrating rank is sent to.
pub(super) const TOWARD_GRACE: Duration = Duration::from_secs(2);

/// How long a migration waits for its cut to be taken and kept whole here.
pub(super) const MIGRATION_TIMEOUT: Duration = Duration::from_secs(120);

impl Submission {
    /// Moves `rank` off its node alone: asks for a checkpoint (its number is
    /// returned; its progress comes as for [`Submission::request_checkpoint`])
    /// and for the rank to leave at its cut, then places it on another node
    /// ([`SubmitEvent::Moved`]; see `alone`).
    /// `to`: the node the rank goes to (see the module docs).
    pub fn migrate(&mut self, now: Instant, rank: u32, to: Option<NodeAddr>) -> Result<u64, SubmitCmdError> {
        if !self.placeable() {
            return Err(SubmitCmdError::TakenOver { job: self.job });
        }
        self.start_migration(now, rank, (false, true), to)
    }

    /// Node `from` is shutting down with live ranks of the job: they move
    /// off it as for a migration, or the node is told they stay (then its
    /// stop is a loss, handled by the job's restart rule). Each moves alone,
    /// one after the other, when as many other nodes could take one each;
    /// otherwise, or when the node joins a migration under way, they move
    /// by rolling the job back.
    pub(super) fn on_leaving(&mut self, now: Instant, from: NodeAddr) -> Option<()> {
        let n = self.nodes.get(&from)?;
        let live: Vec<u32> = n.accepted.iter().copied().filter(|r| self.ranks[*r as usize].exit.is_none()).collect();
        self.leaving_deputy(from);
        if !self.placeable() {
            // Its files are not here to place the ranks anew.
            self.send(from, JobMsg::Staying { job: self.wire }, Bytes::new());
            return Some(());
        }
        if self.adopted && self.queries.iter().any(|q| q.values.is_none()) {
            // Taken over (maybe by this node leaving): first learn where
            // the ranks could go.
            self.leaving_early.insert(from);
            return Some(());
        }
        if let (Some(_), Some(m)) = (live.first(), self.migration.as_mut()) {
            // Other ranks to move than those moving alone: they all move
            // together, by rolling the job back.
            let queued = |r: &u32| *r == m.rank || m.then.contains(r);
            let more = if m.from == from { !live.iter().all(queued) } else { m.also.insert(from) };
            m.leaving |= m.from == from;
            if more && m.alone.is_some() {
                self.roll_back_move(None);
            }
            return Some(());
        }
        self.move_off_leaving(now, from, live);
        Some(())
    }

    /// A rank of the job is on its way to another node.
    pub fn moving(&self) -> bool {
        self.migration.is_some()
    }

    /// A job taken over is done looking for nodes to move ranks to: the
    /// nodes shutting down meanwhile have them moved now.
    pub(super) fn learned(&mut self, now: Instant) {
        for from in std::mem::take(&mut self.leaving_early) {
            self.on_leaving(now, from);
        }
    }

    /// Moves the first of `ranks`, on node `from` shutting down, the rest
    /// after it (see [`Submission::on_leaving`]); with none left to move,
    /// the node is told they stay.
    pub(super) fn move_off_leaving(&mut self, now: Instant, from: NodeAddr, ranks: Vec<u32>) {
        let live: Vec<u32> =
            ranks.into_iter().filter(|r| self.holds(from, *r) && self.ranks[*r as usize].exit.is_none()).collect();
        let Some((&first, rest)) = live.split_first() else { return };
        let alone = self.move_candidates(from) >= live.len();
        match self.start_migration(now, first, (true, alone), None) {
            Ok(_) => {
                if let Some(m) = self.migration.as_mut().filter(|m| m.alone.is_some()) {
                    m.then = rest.to_vec();
                }
            }
            Err(e) => {
                tracing::info!(job = %self.job, %from, "the ranks of a node shutting down stay: {e}");
                self.send(from, JobMsg::Staying { job: self.wire }, Bytes::new());
            }
        }
    }

    /// Moves `rank` (its node `leaving`, or the user asked) `alone` or by
    /// rolling the job back.
    fn start_migration(
        &mut self,
        now: Instant,
        rank: u32,
        (leaving, alone): (bool, bool),
        to: Option<NodeAddr>,
    ) -> Result<u64, SubmitCmdError> {
        let job = self.job;
        let Some(r) = self.ranks.get(rank as usize).copied() else {
            return Err(SubmitCmdError::NoRunningRank { job, why: "it has no such rank" });
        };
        if let Some(m) = &self.migration {
            return Err(SubmitCmdError::Migrating { job, rank: m.rank });
        }
        let from = match (r.node, r.exit, self.phase) {
            (Some(node), None, Phase::Running) => node,
            (_, Some(_), _) => return Err(SubmitCmdError::NoRunningRank { job, why: "that rank has exited" }),
            _ => return Err(SubmitCmdError::NoRunningRank { job, why: "it is not running" }),
        };
        if let Some(to) = to {
            self.check_target(rank, from, to)?;
        }
        // A node shutting down rolls the job back when no node could take its rank.
        let alone = alone && self.move_candidates(from) > 0;
        if !alone && !leaving {
            return Err(SubmitCmdError::NowhereToGo { job, rank });
        }
        // A user's move alone needs only the rank's own file; a node shutting
        // down ships the whole cut, since others may follow it and roll the
        // job back to it.
        let shipped = leaving || !alone;
        let request = self.ask_checkpoint(shipped)?;
        let deadline = now + MIGRATION_TIMEOUT;
        let also = BTreeSet::new();
        let how = if alone { "alone" } else { "by rolling the job back" };
        tracing::info!(%job, rank, %from, request, leaving, "moving a rank off its node {how}");
        let alone = alone.then(super::alone::Alone::default);
        if alone.is_some() {
            self.send(from, JobMsg::Move { job: self.wire, rank, request }, Bytes::new());
        }
        let (rolled, left) = (None, false);
        self.migration = Some(Migration {
            rank,
            from,
            request,
            epoch: None,
            leaving,
            also,
            to,
            deadline,
            alone,
            rolled,
            left,
            shipped,
            again: None,
            then: Vec::new(),
        });
        Ok(request)
    }

    /// Whether `rank`, on node `from`, may be moved to node `to`.
    fn check_target(&self, rank: u32, from: NodeAddr, to: NodeAddr) -> Result<(), SubmitCmdError> {
        let job = self.job;
        let why = if to == from {
            "the rank runs there"
        } else if self.lost_nodes.contains(&to) {
            "the job lost that node"
        } else {
            match self.nodes.get(&to) {
                None => "it does not meet the job's requirements (or was not in the network when the job was placed)",
                Some(n) if n.closed => "the job no longer asks it (it refused or did not answer)",
                Some(n) if !n.accepted.is_empty() => {
                    "it runs other ranks of the job (a rank moves alone to a node that does not)"
                }
                // Whether it has a slot now is its own answer to the next
                // placement (its free slots as advertised when the job was
                // placed may be stale: a rank just moved off it, say).
                Some(_) => return Ok(()),
            }
        };
        Err(SubmitCmdError::CannotMoveTo { job, rank, to, why })
    }

    /// Checkpoint request `request` was answered by the cut of `epoch`.
    pub(super) fn migration_cut_taken(&mut self, request: u64, epoch: u64) {
        if let Some(m) = self.migration.as_mut().filter(|m| m.takes(request)) {
            m.epoch = Some(epoch);
            self.maybe_migrate();
        }
    }

    /// Checkpoint request `request` will not be answered: a migration
    /// waiting for it ends (the tool that asked is told why).
    pub(super) fn migration_failed(&mut self, request: u64) {
        let Some(m) = self.migration.take_if(|m| m.takes(request)) else { return };
        // The nodes stop their ranks when they will: their loss takes its course.
        let leaving = m.leaving.then_some(m.from).into_iter().chain(m.also);
        for node in leaving {
            self.send(node, JobMsg::Staying { job: self.wire }, Bytes::new());
        }
    }

    /// When the migration under way gives up.
    pub(super) fn migration_deadline(&self) -> Option<Instant> {
        self.migration.as_ref().map(|m| m.deadline)
    }

    /// A migration whose cut was not kept whole in time ends: the rank
    /// stays (or, when it already left to move alone, the job rolls back).
    pub(super) fn migration_timeout(&mut self, now: Instant) {
        if self.migration.as_ref().is_some_and(|m| m.deadline <= now) {
            let secs = MIGRATION_TIMEOUT.as_secs();
            if self.migration.as_ref().is_some_and(|m| m.left) {
                // Its process is gone: the job cannot go on without it.
                return self.roll_back_now(format!("it was not running again within {secs} s"));
            }
            self.end_migration_with(format!("its checkpoint did not reach the job's node whole within {secs} s"));
        }
    }

    /// The job ended: a migration under way ends with it.
    pub(super) fn end_migration(&mut self) {
        self.end_migration_with("the job ended before the rank moved".to_owned());
    }

    fn end_migration_with(&mut self, reason: String) {
        let Some(request) = self.migration.as_ref().map(|m| m.request) else { return };
        // Its request may be taken already: the tool waiting for the move is told here.
        self.ckpt_forget(request);
        let job = self.job;
        self.event(SubmitEvent::CheckpointFailed { job, request, reason });
        self.migration_failed(request);
    }

    /// Once the migration's cut is kept whole here, the job moves (a rank
    /// moving alone moves once its own file is here: see `alone`).
    pub(super) fn maybe_migrate(&mut self) {
        if self.moving_alone() {
            return self.advance_alone();
        }
        let Some(m) = &self.migration else { return };
        let (Some(epoch), true) = (m.epoch, self.phase == Phase::Running) else { return };
        if self.newest_cut().is_none_or(|newest| newest < epoch) {
            return; // its files are still on their way (a newer cut will do too)
        }
        let Some(Migration { rank, from, leaving, also, to, rolled, .. }) = self.migration.take() else { return };
        self.migrations += 1;
        self.avoid = also.iter().copied().chain([from]).collect();
        let (job, epoch) = (self.job, self.newest_cut().unwrap_or(epoch));
        self.event(SubmitEvent::Migrated { job, rank, from, to, epoch });
        let why = if leaving { "its node is shutting down" } else { "p2pjob migrate" };
        let ranks = if leaving { "the ranks" } else { "rank" };
        let which = if leaving { String::new() } else { format!(" {rank}") };
        let toward = to.map_or_else(String::new, |t| format!(" to node {t}"));
        let mut reason = match rolled {
            None => format!("{ranks}{which} moved off node {from}{toward} ({why})"),
            Some(failed) => format!("rank {rank} could not move off node {from} alone ({failed}; {why})"),
        };
        if !also.is_empty() {
            let nodes: Vec<String> = also.iter().map(ToString::to_string).collect();
            reason.push_str(&format!("; and the ranks off node(s) {} (shutting down)", nodes.join(", ")));
        }
        self.restart(reason, true);
        // After `restart`, which forgets any earlier wish.
        self.toward = to.map(|t| (rank, t));
    }

    /// The rank a migration sends to a named node, placed there when that
    /// node granted a slot; otherwise the restart's reason says where it went.
    /// The wish holds for every offer round of that placement (a refusal
    /// elsewhere starts another), until the job runs.
    pub(super) fn place_toward(&mut self, offers: &mut BTreeMap<NodeAddr, Vec<u32>>) {
        let Some((rank, to)) = self.toward else { return };
        let granted = self.nodes.get(&to).is_some_and(|n| n.wanted && !n.closed && n.granted > 0);
        if granted && self.unplaced.remove(&rank) {
            offers.entry(to).or_default().push(rank);
            return;
        }
        let note = format!("; node {to} had no free slot for rank {rank}, which went to another node");
        let Some(reason) = self.restart_reasons.last_mut().filter(|r| !r.ends_with(&note)) else { return };
        reason.push_str(&note);
        // The restart's reason, amended: the tool following the job shows it again.
        let (job, attempt, reason) = (self.job, self.restarts, reason.clone());
        self.event(SubmitEvent::Restarting { job, attempt, reason });
    }

    /// Whether the node a migrating rank is sent to was asked for a slot and
    /// has not answered yet.
    pub(super) fn toward_pending(&self) -> bool {
        self.toward.is_some_and(|(_, to)| self.nodes.get(&to).is_some_and(|n| n.wanted && !n.closed && !n.answered))
    }
}
