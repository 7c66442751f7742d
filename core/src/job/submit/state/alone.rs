//! A rank that moves alone (`p2pjob migrate JOB RANK`, or the one rank of
//! a node shutting down): the other ranks go on, nothing rolls back.
//!
//! 1. **Ask**, only when some other candidate of the job runs none of its
//!    ranks (else `migrate` fails at once, and a node shutting down rolls
//!    the job back). The rank's node is told that the rank moves at the cut
//!    answering the migration's checkpoint request ([`JobMsg::Move`]; for
//!    `migrate` the other ranks' files of that cut stay where they are,
//!    [`JobMsg::CheckpointStay`]). After the first cut it is quiet at, the
//!    rank saves its engine and leaves; its node ships its file of that cut
//!    and its output files (kept here to go with it, not as results: its
//!    last run writes those), and sends [`JobMsg::Moved`] with the engine
//!    instead of an exit.
//! 2. **Leave.** Once the engine is here and the rank's file of the cut the
//!    engine names arrived whole, the rank is no longer its old node's (that
//!    node is done with the job if it runs no other live rank of it), and
//!    the file is read back and checked as for a restart.
//! 3. **Place.** The rank is offered alone ([`JobMsg::Offer`] of one rank) to
//!    a candidate of the job that holds none of it: the node named by
//!    `--to` first, then the most free, least loaded, the node it left last
//!    (never one shutting down). A refusal, silence or loss moves on to the
//!    next. The node is staged like a node of a restarted job
//!    ([`JobMsg::Resume`], the job's files, the rank's checkpoint file) and
//!    gets the engine ([`JobMsg::ResumeEngine`]) and the output files
//!    ([`JobMsg::CarriedFiles`]); then it starts the rank,
//!    which re-registers its process key: its peers look it up again and
//!    resend what it never acknowledged.
//! 4. **Moved** ([`SubmitEvent::Moved`]) once the rank runs there.
//!
//! When the move cannot end that way (its engine or a file lost or damaged,
//! no node takes it, another node shuts down meanwhile, the deadline), the
//! whole job rolls back instead, as nodes shutting down together do: to the
//! migration's cut once every rank's file of it is here (a cut is asked
//! again of every rank when only the moving rank's file was to come and it
//! has not left; once it left, that cut is waited for [`LEFT_GRACE`] at
//! most, since the rank may have left before it), else at once to the
//! newest cut kept whole, since the rank's process is gone and the others
//! would wait for it. A rank that leaves when no move
//! of it is under way any more (given up meanwhile) rolls the job back too.

use super::*;
use crate::job::CARRIED_FILES;

/// How long a job rolling back waits for the cut it asked of every rank
/// once the moving rank left anyway.
const LEFT_GRACE: Duration = Duration::from_secs(10);

/// A rank moving alone, once asked.
#[derive(Debug, Default)]
pub(super) struct Alone {
    /// The engine it left with ([`JobMsg::Moved`]), and the cut it saved it at.
    engine: Option<(Bytes, u64)>,
    /// The cut it resumes from, once it left its node.
    epoch: Option<u64>,
    /// The node it is offered to, or staged at.
    target: Option<NodeAddr>,
    /// Nodes offered the rank so far.
    tried: BTreeSet<NodeAddr>,
    /// The output files it had written when it left, on their way here: by
    /// name, the bytes so far, the length and digest they must have.
    arriving: BTreeMap<String, (Vec<u8>, u64, Id)>,
    /// Those arrived whole: staged to its new node as [`CARRIED_FILES`] +
    /// their index.
    carried: Vec<(String, Bytes, Id)>,
}

/// The output files the rank moving alone in `migration` carries, arrived
/// whole (none when no rank moves alone).
pub(super) fn carried(migration: &Option<migrate::Migration>) -> &[(String, Bytes, Id)] {
    migration.as_ref().and_then(|m| m.alone.as_ref()).map_or(&[], |a| &a.carried)
}

impl Submission {
    /// Whether a rank is moving alone.
    pub(super) fn moving_alone(&self) -> bool {
        self.migration.as_ref().is_some_and(|m| m.alone.is_some())
    }

    /// How many nodes other than `from` could take a rank alone: candidates
    /// of the job, not lost, running none of its ranks.
    pub(super) fn move_candidates(&self, from: NodeAddr) -> usize {
        let idle = |n: &Node| n.accepted.iter().all(|r| self.ranks[*r as usize].exit.is_some()) && n.offer.is_none();
        let free =
            |(addr, n): &(&NodeAddr, &Node)| **addr != from && idle(n) && !n.closed && !self.lost_nodes.contains(addr);
        self.nodes.iter().filter(free).count()
    }

    fn alone(&mut self) -> Option<&mut Alone> {
        self.migration.as_mut()?.alone.as_mut()
    }

    /// Node `from` says `rank` left its process to move at the cut
    /// answering checkpoint request `request`, with `engine`. A rank that
    /// left when no move of it is under way (its move was given up, the
    /// node asked it long ago) is gone all the same: the job rolls back.
    pub(super) fn on_moved(
        &mut self,
        now: Instant,
        from: NodeAddr,
        (rank, request): (u32, u64),
        engine: Bytes,
    ) -> Option<()> {
        let ours = |m: &migrate::Migration| m.rank == rank && m.from == from && m.request == request;
        if !self.migration.as_ref().is_some_and(ours) {
            let alive = self.holds(from, rank) && self.ranks[rank as usize].exit.is_none();
            if alive && self.phase == Phase::Running {
                self.migration = None;
                self.migrations += 1;
                self.avoid = BTreeSet::from([from]);
                self.restart(format!("rank {rank} left node {from} to move after its move was given up"), true);
            }
            return alive.then_some(());
        }
        let wire = self.wire;
        let m = self.migration.as_mut().filter(|m| !m.left)?;
        // Its process is gone, whatever comes next.
        m.left = true;
        let Some(a) = m.alone.as_mut() else {
            // The job rolls back: to the cut asked of every rank if that one
            // is here soon (the rank may have left before taking it), else
            // to the newest kept whole.
            m.deadline = m.deadline.min(now + LEFT_GRACE);
            return Some(());
        };
        let saved = Some(&engine[..]).filter(|e| e.len() as u64 <= crate::ckpt::MAX_ENGINE_FILE);
        let Some((header, _)) = saved.and_then(crate::ckpt::EngineHeader::decode).filter(|(h, _)| h.job == wire) else {
            self.roll_back_move(Some(format!("node {from} could not carry the engine it saved")));
            return Some(());
        };
        a.engine = Some((engine.clone(), header.epoch));
        self.advance_alone();
        Some(())
    }

    /// The staged file numbers of the output files the rank moving alone
    /// carries, when it is placed at `to` (else none).
    pub(super) fn carried_to(&self, to: NodeAddr) -> std::ops::Range<u32> {
        let a = self.migration.as_ref().and_then(|m| m.alone.as_ref()).filter(|a| a.target == Some(to));
        CARRIED_FILES..CARRIED_FILES + a.map_or(0, |a| a.carried.len() as u32)
    }

    /// Whether output-file chunks of `rank` from `from` are the files of a
    /// rank moving alone that is leaving that node: they go with it, not to
    /// the job's results (its last run there writes those).
    pub(super) fn carries(&self, from: NodeAddr, rank: u32) -> bool {
        let m = self.migration.as_ref().filter(|m| m.rank == rank && m.from == from && !m.left);
        m.is_some_and(|m| m.alone.as_ref().is_some_and(|a| a.epoch.is_none()))
    }

    /// A chunk of output file `name` that the moving rank carries (see
    /// [`Submission::carries`]): kept when it continues the file, checked
    /// once whole. A damaged file rolls the job back: the rank would lose
    /// what it wrote.
    pub(super) fn on_carried_chunk(&mut self, name: String, head: (u64, u64, Id), payload: Bytes) -> Option<()> {
        let (offset, total, digest) = head;
        // Only the job's output files, each at most once; one named like an
        // input file replaces it there (it is staged after), but never the
        // job file or the executable.
        let own = self.files.iter().take(2).flatten().any(|(n, _, _)| *n == name);
        let outputs = self.desc.outputfiles.len();
        if !self.desc.outputfiles.contains(&name) || own || total > crate::ckpt::MAX_SHIPPED_FILE {
            return None;
        }
        let rank = self.migration.as_ref()?.rank;
        let a = self.alone()?;
        if offset == 0 && !a.arriving.contains_key(&name) {
            if a.arriving.len() + a.carried.len() >= outputs || a.carried.iter().any(|(n, _, _)| *n == name) {
                return None;
            }
            a.arriving.insert(name.clone(), (Vec::new(), total, digest));
        }
        let (data, want, digest) = a.arriving.get_mut(&name).filter(|(d, _, _)| d.len() as u64 == offset)?;
        data.extend_from_slice(&payload);
        if (data.len() as u64) < *want {
            return Some(());
        }
        let (want, digest) = (*want, *digest);
        let (data, _, _) = a.arriving.remove(&name)?;
        let whole = data.len() as u64 == want && Id::from_bytes(Sha1::digest(&data).into()) == digest;
        if !whole {
            self.roll_back_move(Some(format!("output file {name} of rank {rank} arrived damaged")));
            return Some(());
        }
        a.carried.push((name, Bytes::from(data), digest));
        Some(())
    }

    /// Once the rank left with its engine and its checkpoint file of the
    /// cut answering the move is here whole: it leaves its node, and that
    /// file is read back.
    pub(super) fn advance_alone(&mut self) {
        let Some(m) = &self.migration else { return };
        let (rank, from) = (m.rank, m.from);
        let Some(a) = m.alone.as_ref().filter(|a| a.epoch.is_none()) else { return };
        let Some(epoch) = a.engine.as_ref().map(|(_, epoch)| *epoch) else { return };
        if !self.cuts.holds(self.wire, rank, epoch) {
            return; // its file of that cut is still on its way
        }
        // Its output files went out before its engine: one not whole now never is.
        if let Some(name) = a.arriving.keys().next() {
            let why = format!("output file {name} of rank {rank} came cut short");
            return self.roll_back_move(Some(why));
        }
        if let Some(a) = self.alone() {
            a.epoch = Some(epoch);
        }
        (self.ranks[rank as usize].node, self.ranks[rank as usize].started) = (None, false);
        // Its output goes on after what its old process wrote.
        for stream in [Stream::Stdout, Stream::Stderr] {
            let end = self.out_end.get(&(rank, stream)).copied().unwrap_or(0);
            self.out_base.insert((rank, stream), end);
        }
        let wire = self.wire;
        let ranks = &self.ranks;
        if let Some(n) = self.nodes.get_mut(&from) {
            n.accepted.retain(|r| *r != rank);
            if n.accepted.iter().all(|r| ranks[*r as usize].exit.is_some()) {
                // Done with the job (its other ranks, if any, exited): it may
                // take a rank of it again, this one even.
                n.accepted.clear();
                (n.stage, n.out_consumed, n.streamed) = (Stage::NotSent, 0, BTreeMap::new());
                self.send(from, JobMsg::Done { job: wire }, Bytes::new());
            }
        }
        self.read_moved_rank(rank, epoch, format!("rank {rank} moves off node {from}"));
    }

    /// The rank's checkpoint file was read back: checked (`damage` says
    /// what is wrong with it), it is offered to a node.
    pub(super) fn moved_file_read(&mut self, now: Instant, damage: Option<String>) {
        match damage {
            Some(damage) => self.roll_back_move(Some(damage)),
            None => self.offer_moved(now),
        }
    }

    /// Offers the moving rank to the next node (see the module docs), or
    /// rolls the job back when none is left.
    fn offer_moved(&mut self, now: Instant) {
        use std::cmp::Reverse;
        let Some(m) = &self.migration else { return };
        let (rank, from, to, leaving) = (m.rank, m.from, m.to, m.leaving);
        let Some(a) = &m.alone else { return };
        // The node it left only last, and never one shutting down.
        let free = |(addr, n): (&NodeAddr, &Node)| {
            let free = !n.closed && n.accepted.is_empty() && n.offer.is_none() && n.stage == Stage::NotSent;
            let shutting_down = leaving && *addr == from;
            free && !shutting_down && !a.tried.contains(addr) && !self.lost_nodes.contains(addr)
        };
        let mut order: Vec<(bool, bool, Reverse<u32>, u32, NodeAddr)> = self
            .nodes
            .iter()
            .filter(|n| free(*n))
            .map(|(addr, n)| (*addr == from, Some(*addr) != to, Reverse(n.free_hint), n.load_milli / 250, *addr))
            .collect();
        order.sort();
        let Some(&(_, _, _, _, target)) = order.first() else {
            return self.roll_back_move(Some(format!("no other node of the job's candidates took rank {rank}")));
        };
        if let Some(a) = self.alone() {
            a.target = Some(target);
            a.tried.insert(target);
        }
        if let Some(n) = self.nodes.get_mut(&target) {
            n.offer = Some((vec![rank], now + self.config.offer_timeout));
        }
        let (job, size) = (self.wire, self.desc.processes);
        let digest = self.files[0].as_ref().map(|f| f.2).unwrap_or_default();
        let msg = match &self.auth {
            Some(auth) => JobMsg::SignedOffer { job, ranks: vec![rank], size, digest, auth: auth.clone() },
            None => JobMsg::Offer { job, ranks: vec![rank], size, digest },
        };
        self.send(target, msg, Bytes::new());
    }

    /// A placement message from the node the moving rank is offered to.
    pub(super) fn while_moving(&mut self, now: Instant, from: NodeAddr, body: JobMsg) -> Option<()> {
        let target = self.migration.as_ref()?.alone.as_ref()?.target.filter(|t| *t == from)?;
        let rank = self.migration.as_ref()?.rank;
        match body {
            JobMsg::Accept { ranks, .. } => {
                let n = self.nodes.get_mut(&target)?;
                if n.offer.as_ref().map(|(r, _)| r) != Some(&ranks) {
                    return None;
                }
                (n.offer, n.accepted) = (None, ranks);
                self.ranks[rank as usize].node = Some(target);
                self.stage_node(now, target);
                let (engine, _) = self.migration.as_ref()?.alone.as_ref()?.engine.clone()?;
                self.send(target, JobMsg::ResumeEngine { job: self.wire, rank }, engine);
                let files: Vec<StagedFile> = carried(&self.migration)
                    .iter()
                    .zip(CARRIED_FILES..)
                    .map(|((name, data, digest), file)| StagedFile {
                        file,
                        name: name.clone(),
                        total: data.len() as u64,
                        digest: *digest,
                    })
                    .collect();
                if !files.is_empty() {
                    self.send(target, JobMsg::CarriedFiles { job: self.wire, rank, files }, Bytes::new());
                }
            }
            JobMsg::Reject { ranks, reason, .. } => {
                self.refusal(target, &ranks, &reason)?;
                self.drop_move_target(now, false);
            }
            JobMsg::Staged { .. } => {
                let n = self.nodes.get_mut(&target)?;
                if !matches!(n.stage, Stage::Sent { .. }) {
                    return None;
                }
                n.stage = Stage::Staged;
                self.send(target, JobMsg::Start { job: self.wire }, Bytes::new());
            }
            // The files travel as to any node being staged.
            body => return self.while_placing(now, from, body),
        }
        Some(())
    }

    /// The node the rank was offered to refused, or stopped answering or
    /// taking its files: it is given up (told to drop the job, unless it
    /// refused), and the next is tried.
    fn drop_move_target(&mut self, now: Instant, tell: bool) {
        let Some(target) = self.alone().and_then(|a| a.target.take()) else { return };
        let rank = self.migration.as_ref().map_or(0, |m| m.rank);
        if let Some(n) = self.nodes.get_mut(&target) {
            (n.offer, n.accepted, n.stage) = (None, Vec::new(), Stage::NotSent);
        }
        self.ranks[rank as usize].node = None;
        if tell {
            self.send(target, JobMsg::Kill { job: self.wire }, Bytes::new());
        }
        self.offer_moved(now);
    }

    /// Node `node` is gone or silent: whether it was the node the moving
    /// rank was offered to, not yet started there (then the next is tried).
    pub(super) fn move_target_gone(&mut self, now: Instant, node: NodeAddr) -> bool {
        let Some(m) = &self.migration else { return false };
        let target = m.alone.as_ref().and_then(|a| a.target);
        if target != Some(node) || self.ranks[m.rank as usize].started && self.holds(node, m.rank) {
            return false;
        }
        self.drop_move_target(now, false);
        true
    }

    /// The moving rank's offer or staging stalled: the next node.
    pub(super) fn move_timeout(&mut self, now: Instant) {
        let Some(target) = self.migration.as_ref().and_then(|m| m.alone.as_ref()).and_then(|a| a.target) else {
            return;
        };
        if self.nodes.get(&target).is_some_and(|n| n.stalled(now)) {
            self.drop_move_target(now, true);
        }
    }

    /// When the moving rank's offer or staging counts as stalled.
    pub(super) fn move_deadline(&self) -> Option<Instant> {
        let target = self.migration.as_ref()?.alone.as_ref()?.target?;
        self.nodes.get(&target)?.placement_deadline()
    }

    /// `rank` started on `node`: when it is the moving rank on its new
    /// node, the move is over, and the next rank of a node shutting down
    /// with several moves (see `migrate`).
    pub(super) fn moved_rank_started(&mut self, now: Instant, rank: u32, node: NodeAddr) {
        let Some(m) = self.migration.as_ref().filter(|m| m.rank == rank) else { return };
        let Some(epoch) = m.alone.as_ref().filter(|a| a.target == Some(node)).and_then(|a| a.epoch) else { return };
        let (from, leaving) = (m.from, m.leaving);
        let next = self.migration.take().map(|m| m.then).unwrap_or_default();
        self.release_cut_files();
        let job = self.job;
        let why = if leaving { " (its node is shutting down)" } else { "" };
        self.moves.push(format!("rank {rank} moved off node {from} to node {node}, from checkpoint {epoch}{why}"));
        self.event(SubmitEvent::Moved { job, rank, from, to: node, epoch });
        self.guard();
        if leaving {
            self.move_off_leaving(now, from, next);
        }
    }

    /// The rank does not move alone (`why` says what went wrong, if
    /// anything did): the whole job goes back to the migration's cut, once
    /// it is kept whole here (or, when only the rank's file of it comes
    /// here, to the newest cut kept whole now).
    pub(super) fn roll_back_move(&mut self, why: Option<String>) {
        let Some(m) = self.migration.as_ref() else { return };
        if !m.shipped {
            // Only the rank's own file of its cut comes here: a cut every
            // rank ships is asked for, unless the rank is gone already.
            let request = if m.left { None } else { self.ask_checkpoint(true).ok() };
            let Some(request) = request else {
                return self.roll_back_now(why.unwrap_or_else(|| "the job rolls back".to_owned()));
            };
            if let Some(m) = self.migration.as_mut() {
                (m.again, m.shipped) = (Some(request), true);
            }
        }
        // A read of its file back is of no use now.
        self.abandon_resume();
        let Some(m) = self.migration.as_mut() else { return };
        m.rolled = why;
        let target = m.alone.take().and_then(|a| a.target);
        // A node offered the rank lets go of it.
        if let Some(target) = target {
            if let Some(n) = self.nodes.get_mut(&target) {
                (n.offer, n.accepted, n.stage) = (None, Vec::new(), Stage::NotSent);
            }
            self.send(target, JobMsg::Kill { job: self.wire }, Bytes::new());
        }
        self.maybe_migrate();
    }

    /// The rank left and the job cannot wait for its cut any longer: it
    /// goes back to the newest cut kept whole, whichever that is. The
    /// migration is answered as one that rolls the job back to its own cut
    /// is ([`SubmitEvent::Migrated`]), unless no cut is kept (the restart
    /// from scratch answers it).
    pub(super) fn roll_back_now(&mut self, why: String) {
        let Some(m) = self.migration.take() else { return };
        let (rank, from) = (m.rank, m.from);
        if let Some(epoch) = self.newest_cut() {
            self.event(SubmitEvent::Migrated { job: self.job, rank, from, to: m.to, epoch });
        }
        self.migrations += 1;
        self.avoid = m.also.iter().copied().chain([from]).collect();
        self.restart(format!("rank {rank} could not move off node {from} alone ({why})"), true);
    }
}
