//! The per-job [`Submission`] machine (see the parent module for its lifecycle).

use std::collections::VecDeque;
use std::fmt;

use super::*;
use crate::auth::JobAuth;
use crate::job::RejectReason;
use crate::job::outbox::{Outbox, Piece};

mod alone;
mod checkpoint;
mod collect;
mod cuts;
mod guard;
mod migrate;
mod place;
pub(super) mod restart;

pub use checkpoint::MAX_PENDING_CHECKPOINTS;
pub use guard::{Guarded, Replica};
mod stage;

/// What the application asks of one submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmissionCommand {
    /// Stop every rank and finish as [`Outcome::Killed`].
    Kill,
    /// Emit a [`SubmitEvent::Status`].
    Status,
}

#[derive(Debug)]
struct Query {
    name: String,
    attempts: u32,
    values: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    NotSent,
    /// The manifest is out; waiting for [`JobMsg::Have`].
    Asked {
        deadline: Instant,
    },
    /// Files on their way; `deadline` moves on with every acknowledgement.
    Sent {
        deadline: Instant,
        resends: BTreeMap<u32, u32>,
        out: Outbox,
        /// Bytes that travel to the node (resends included): the progress total.
        total: u64,
    },
    Staged,
}

impl Stage {
    /// When staging to this node counts as stalled.
    fn deadline(&self) -> Option<Instant> {
        match self {
            Stage::Asked { deadline } | Stage::Sent { deadline, .. } => Some(*deadline),
            Stage::NotSent | Stage::Staged => None,
        }
    }
}

#[derive(Debug)]
struct Node {
    /// Its process slots in all: what an offer may ask of it.
    slots: u32,
    /// Its free slots when it advertised (the line may be a moment old): the
    /// first key of placement, never a reason to pass a node over, since the
    /// node's own accept or reject decides.
    free_hint: u32,
    /// Its load average in thousandths when it advertised (0: not said).
    load_milli: u32,
    /// The job waits here ([`JobMsg::Want`] sent, no offer yet).
    wanted: bool,
    /// Slots the node holds for the job ([`JobMsg::Grant`]).
    granted: u32,
    /// Jobs waiting before this one there, as last told.
    ahead: u32,
    /// It answered the last want (with a grant, of any size).
    answered: bool,
    accepted: Vec<u32>,
    offer: Option<(Vec<u32>, Instant)>,
    /// Rejected or timed out: no more offers.
    closed: bool,
    stage: Stage,
    /// Output-file payload bytes received from it (what [`JobMsg::OutputAck`] reports).
    out_consumed: u64,
    /// Per rank: stdout + stderr bytes received from it, and how many of them
    /// were acknowledged ([`JobMsg::StreamAck`]).
    streamed: BTreeMap<u32, (u64, u64)>,
    /// It is shutting down ([`JobMsg::Leaving`]): never a deputy.
    leaving: bool,
}

impl Node {
    /// A node the job may be placed on: `slots` in all, `free_hint` free and
    /// `load_milli` as it advertised; nothing asked of it yet.
    fn candidate(slots: u32, free_hint: u32, load_milli: u32) -> Self {
        Node {
            slots,
            free_hint,
            load_milli,
            wanted: false,
            granted: 0,
            ahead: 0,
            answered: false,
            accepted: Vec::new(),
            offer: None,
            closed: false,
            stage: Stage::NotSent,
            out_consumed: 0,
            streamed: BTreeMap::new(),
            leaving: false,
        }
    }

    /// When its offer goes unanswered or its staging stalls, whichever is first.
    fn placement_deadline(&self) -> Option<Instant> {
        self.offer.as_ref().map(|(_, d)| *d).into_iter().chain(self.stage.deadline()).min()
    }

    /// Its offer went unanswered, or its staging stopped moving.
    fn stalled(&self, now: Instant) -> bool {
        self.placement_deadline().is_some_and(|d| d <= now)
    }
}

struct OutFile {
    hasher: Sha1,
    received: u64,
}

impl fmt::Debug for OutFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutFile").field("received", &self.received).finish_non_exhaustive()
    }
}

/// One job on the submitter's side, from resolution to results. Sans-IO: see the
/// parent module docs; drive it like any [`Machine`], plus
/// [`Submission::handle_query_done`] and [`Submission::handle_file_read`].
#[derive(Debug)]
pub struct Submission {
    config: SubmitConfig,
    addr: NodeAddr,
    job: JobId,
    /// The id the job's current run goes by on the network (in every
    /// [`JobMsg`], and so in its ranks' `P2PMP_JOB`): `job` until a restart
    /// (see `restart`), a new one for each restart.
    wire: JobId,
    /// Restarts so far.
    restarts: u32,
    /// Why each restart happened, in order.
    restart_reasons: Vec<String>,
    /// Nodes lost while holding ranks: never offered the job again.
    lost_nodes: BTreeSet<NodeAddr>,
    /// Per rank and stream: where the output of its current run starts in
    /// the job's output (the end of its earlier runs'), and where it ends.
    out_base: BTreeMap<(u32, Stream), u64>,
    out_end: BTreeMap<(u32, Stream), u64>,
    desc: JobDescription,
    phase: Phase,
    queries: Vec<Query>,
    /// Staged files by number: name, bytes, digest; `None` while being read.
    files: Vec<Option<(String, Bytes, Id)>>,
    nodes: BTreeMap<NodeAddr, Node>,
    unplaced: BTreeSet<u32>,
    ranks: Vec<RankInfo>,
    per_requirement: Vec<(String, usize)>,
    closed: usize,
    deadline: Option<Instant>,
    /// Earlier submissions go first (the submission time in ms, then the job id).
    priority: u64,
    /// When waiting for slots must end ([`JobDescription::queue_timeout`]).
    queue_deadline: Option<Instant>,
    /// The last reason reported for waiting (reported again only when it changes).
    waiting: Option<String>,
    /// The grants cover the job: offers go out at this instant at the latest
    /// ([`place::BID_GRACE`]), or once every node it waits at answered.
    bid_deadline: Option<Instant>,
    out_files: BTreeMap<(u32, String), OutFile>,
    /// Output files that arrived whole and matching their digest.
    out_ok: BTreeSet<(u32, String)>,
    /// Output files that did not: rank, name, what went wrong.
    out_bad: Vec<(u32, String, &'static str)>,
    actions: VecDeque<Action<JobMsg, SubmitEvent>>,
    ignored: u64,
    /// The submitter's credentials, sent with every offer ([`JobMsg::SignedOffer`]).
    auth: Option<JobAuth>,
    /// Why nodes refused the job in words (at most [`MAX_REFUSALS`], distinct).
    refusals: Vec<String>,
    /// The ranks' checkpoints and the checkpoint requests on their way.
    ckpt: checkpoint::Checkpoints,
    /// The cuts kept here for a restart, and the one being resumed from.
    cuts: cuts::Cuts,
    /// A rank being moved off its node (`migrate`).
    migration: Option<migrate::Migration>,
    /// Migrations so far (restarts that were not losses).
    migrations: u32,
    /// The nodes the next placement uses last (those ranks moved off).
    avoid: BTreeSet<NodeAddr>,
    /// The node the next placement gives a migrating rank (`migrate --to`).
    toward: Option<(u32, NodeAddr)>,
    /// Every move of a rank alone, in words, in order.
    moves: Vec<String>,
    /// Taken over from its dead submitting node (`guard`): its ranks can be
    /// placed anew only with every file it stages (see `placeable`).
    adopted: bool,
    /// Nodes shutting down that asked to move their ranks while this job,
    /// taken over, still looked for nodes to move them to.
    leaving_early: BTreeSet<NodeAddr>,
    /// Every node named a deputy and not since told it is one no more: each
    /// keeps a record of the job until told so, or told how it ended.
    told: BTreeSet<NodeAddr>,
}

/// Most refusal reasons a submission keeps for its error message.
const MAX_REFUSALS: usize = 8;

impl Submission {
    /// Offers go out with the submitter's credentials from now on.
    pub(super) fn set_auth(&mut self, auth: Option<JobAuth>) {
        self.auth = auth;
    }

    /// The submitter's credentials, when the job was submitted signed.
    pub fn auth(&self) -> Option<&JobAuth> {
        self.auth.as_ref()
    }

    /// A node refused the job saying `why`: kept for the error message.
    pub(super) fn refused(&mut self, why: &str) {
        if self.refusals.len() < MAX_REFUSALS && !self.refusals.iter().any(|r| r == why) {
            self.refusals.push(why.chars().take(300).collect());
        }
    }

    /// Starts submitting `desc` as job `job` at `priority` (earlier submissions
    /// first: the submission time in ms): emits the overlay queries
    /// ([`SubmitEvent::Query`], numbered from 0) and the file reads.
    pub fn new(
        config: SubmitConfig,
        addr: NodeAddr,
        (job, priority): (JobId, u64),
        desc: JobDescription,
        now: Instant,
    ) -> Self {
        let mut names: BTreeSet<String> = desc.requirements.iter().filter_map(Requirement::query_name).collect();
        names.insert(ANY_NAME.to_owned());
        let queries: Vec<Query> = names.into_iter().map(|name| Query { name, attempts: 1, values: None }).collect();
        let xml = Bytes::from(desc.to_xml());
        let mut files = vec![Some((crate::job::description::STAGED_JOB_FILE.to_owned(), xml.clone(), digest(&xml)))];
        files.extend(std::iter::repeat_n(None, 1 + desc.inputfiles.len()));
        let n = desc.processes;
        let valid = (1..=super::super::description::MAX_PROCESSES).contains(&n);
        // Nothing is allocated per rank for an invalid count; the job fails below.
        let ranks = if valid { n } else { 0 };
        let mut s = Submission {
            deadline: desc.timeout.map(|t| now + t),
            queue_deadline: desc.queue_timeout.map(|t| now + t),
            priority,
            waiting: None,
            bid_deadline: None,
            config,
            addr,
            job,
            wire: job,
            restarts: 0,
            restart_reasons: Vec::new(),
            lost_nodes: BTreeSet::new(),
            out_base: BTreeMap::new(),
            out_end: BTreeMap::new(),
            phase: Phase::Resolving,
            queries,
            files,
            nodes: BTreeMap::new(),
            unplaced: (0..ranks).collect(),
            ranks: (0..ranks).map(|rank| RankInfo { rank, node: None, started: false, exit: None }).collect(),
            per_requirement: Vec::new(),
            closed: 0,
            out_files: BTreeMap::new(),
            out_ok: BTreeSet::new(),
            out_bad: Vec::new(),
            actions: VecDeque::new(),
            ignored: 0,
            auth: None,
            refusals: Vec::new(),
            ckpt: checkpoint::Checkpoints::default(),
            cuts: cuts::Cuts::default(),
            migration: None,
            migrations: 0,
            avoid: BTreeSet::new(),
            toward: None,
            moves: Vec::new(),
            told: BTreeSet::new(),
            adopted: false,
            leaving_early: BTreeSet::new(),
            desc,
        };
        if !valid {
            s.fail(SubmitError::BadProcessCount(n));
            return s;
        }
        for (query, q) in s.queries.iter().enumerate() {
            let query = query as u32;
            s.actions.push_back(Action::Event(SubmitEvent::Query { job, query, name: q.name.clone() }));
        }
        let reads: Vec<(u32, String)> = s.desc.staged_paths().map(|(file, p)| (file, p.to_owned())).collect();
        for (file, path) in reads {
            s.event(SubmitEvent::ReadFile { job, file, path });
        }
        s
    }

    /// The job id.
    pub fn job(&self) -> JobId {
        self.job
    }

    /// The id the job's current run goes by on the network: the job id
    /// until the job restarts, then one per restart.
    pub fn wire(&self) -> JobId {
        self.wire
    }

    /// Why each restart happened, in order (empty when it never restarted).
    pub fn restart_reasons(&self) -> &[String] {
        &self.restart_reasons
    }

    /// Every rank that moved alone, in words, in order.
    pub fn moves(&self) -> &[String] {
        &self.moves
    }

    /// The job description.
    pub fn description(&self) -> &JobDescription {
        &self.desc
    }

    /// Where the job is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Every rank's placement and state.
    pub fn ranks(&self) -> &[RankInfo] {
        &self.ranks
    }

    /// Messages dropped as unexpected (wrong sender, wrong phase).
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    fn event(&mut self, e: SubmitEvent) {
        self.actions.push_back(Action::Event(e));
    }

    fn send(&mut self, to: NodeAddr, body: JobMsg, payload: Bytes) {
        let msg = Envelope::new(self.addr.id(), self.addr, 0, body).with_payload(payload);
        self.actions.push_back(Action::Send { to, msg });
    }

    fn finish(&mut self, outcome: Outcome) {
        if self.phase == Phase::Finished {
            return;
        }
        // The deputies hear first, so they keep the results before the
        // nodes of the job are done with it (see `crate::node::deputy`).
        let (job, end, history) = (self.job, JobEnd::from(&outcome), self.history());
        let ended = JobMsg::Ended { job, end, history };
        for d in std::mem::take(&mut self.told) {
            self.send(d, ended.clone(), Bytes::new());
        }
        self.leaving_early.clear();
        // A job whose ranks all exited is done on its nodes, however it ended.
        let over = matches!(outcome, Outcome::Done { .. }) || self.ranks.iter().all(|r| r.exit.is_some());
        self.release_nodes(!over);
        self.end_migration();
        self.end_checkpoints();
        self.end_cuts();
        self.phase = Phase::Finished;
        // A finished job is kept for its status only: its files' bytes go now.
        self.files = Vec::new();
        self.out_files = BTreeMap::new();
        for n in self.nodes.values_mut() {
            n.stage = Stage::NotSent;
            n.streamed = BTreeMap::new();
            n.wanted = false;
        }
        self.event(SubmitEvent::Finished { job: self.job, outcome });
    }

    /// The current run lets go of its nodes: those it waits at are told it no
    /// longer does; with `kill`, those holding its ranks or an offer stop
    /// them, otherwise those holding ranks are told the job is done.
    fn release_nodes(&mut self, kill: bool) {
        let job = self.wire;
        let waiting_at: Vec<NodeAddr> = self.nodes.iter().filter(|(_, n)| n.wanted).map(|(a, _)| *a).collect();
        for to in waiting_at {
            self.send(to, JobMsg::Unwant { job }, Bytes::new());
        }
        if kill {
            let holding: Vec<NodeAddr> = self
                .nodes
                .iter()
                .filter(|(_, n)| !n.accepted.is_empty() || n.offer.is_some())
                .map(|(a, _)| *a)
                .collect();
            for to in holding {
                self.send(to, JobMsg::Kill { job }, Bytes::new());
            }
        } else {
            let holding: Vec<NodeAddr> =
                self.nodes.iter().filter(|(_, n)| !n.accepted.is_empty()).map(|(a, _)| *a).collect();
            for to in holding {
                self.send(to, JobMsg::Done { job }, Bytes::new());
            }
        }
    }

    fn fail(&mut self, e: SubmitError) {
        self.finish(Outcome::Failed(e));
    }

    /// The overlay answered query `query` ([`SubmitEvent::Query`]).
    pub fn handle_query_done(&mut self, now: Instant, query: u32, result: &Result<Vec<String>, OverlayError>) {
        let i = query as usize;
        // A job taken over looks for nodes it could move ranks to.
        let learning = self.adopted && self.phase == Phase::Running;
        if i >= self.queries.len() || !(self.phase == Phase::Resolving || learning) || self.queries[i].values.is_some()
        {
            return;
        }
        match result {
            Ok(values) => self.queries[i].values = Some(values.clone()),
            // Not answered: nowhere more to move ranks to.
            Err(_) if learning && self.queries[i].attempts >= self.config.query_attempts => {
                self.queries[i].values = Some(Vec::new());
            }
            Err(error) if self.queries[i].attempts >= self.config.query_attempts => {
                let name = self.queries[i].name.clone();
                return self.fail(SubmitError::QueryFailed { name, error: *error });
            }
            Err(_) => {
                let q = &mut self.queries[i];
                q.attempts += 1;
                let name = q.name.clone();
                return self.event(SubmitEvent::Query { job: self.job, query, name });
            }
        }
        if self.queries.iter().all(|q| q.values.is_some()) {
            if learning {
                self.learn_candidates();
                self.learned(now);
            } else {
                self.resolve(now);
            }
        }
    }

    /// One handler per phase: a message that does not belong to the job's
    /// phase is ignored (and counted).
    fn on_message(&mut self, now: Instant, from: NodeAddr, body: JobMsg, payload: Bytes) -> Option<()> {
        match self.phase {
            Phase::Queued => match body {
                JobMsg::Grant { slots, ahead, .. } => self.on_grant(now, from, slots, ahead),
                _ => None,
            },
            Phase::Placing => self.while_placing(now, from, body),
            Phase::Running => self.while_running(now, from, body, payload),
            Phase::Resolving | Phase::Finished => None,
        }
    }

    fn lost(&mut self, node: NodeAddr, silent: Option<Duration>) {
        // A lost deputy keeps nothing to be told about.
        self.told.remove(&node);
        let ranks: Vec<u32> = self.nodes.get(&node).map(|n| n.accepted.clone()).unwrap_or_default();
        let ranks: Vec<u32> = ranks.into_iter().filter(|r| self.ranks[*r as usize].exit.is_none()).collect();
        if let Some(n) = self.nodes.get_mut(&node) {
            n.accepted.clear(); // it cannot be killed or told anything any more
        }
        self.lost_nodes.insert(node);
        let error = match silent {
            None => SubmitError::NodeLost { node, ranks },
            Some(d) => {
                SubmitError::NodeSilent { node, ranks, silent_ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX) }
            }
        };
        if self.restartable() {
            let from_cut = self.desc.restart == RestartPolicy::Checkpoint;
            self.restart(error.to_string(), from_cut);
        } else {
            self.fail(error);
        }
    }

    /// Nodes this job waits on: holding ranks that have not exited, or an offer.
    pub fn peers(&self) -> impl Iterator<Item = NodeAddr> + '_ {
        let live = self.phase != Phase::Finished;
        self.nodes
            .iter()
            .filter(move |(_, n)| {
                live && (n.wanted
                    || n.offer.is_some()
                    || n.accepted.iter().any(|r| self.ranks[*r as usize].exit.is_none()))
            })
            .map(|(a, _)| *a)
    }

    /// Nothing was heard from `node` for `silent` (a heartbeat timeout): a node
    /// holding live ranks fails the job naming it; one with an offer is dropped.
    pub fn handle_peer_silent(&mut self, now: Instant, node: NodeAddr, silent: Duration) {
        self.peer_gone(now, node, Some(silent));
    }

    fn peer_gone(&mut self, now: Instant, to: NodeAddr, silent: Option<Duration>) {
        if self.move_target_gone(now, to) {
            return;
        }
        let Some(n) = self.nodes.get(&to) else { return };
        let live = n.accepted.iter().any(|r| self.ranks[*r as usize].exit.is_none());
        match self.phase {
            Phase::Running if live => self.lost(to, silent),
            // Nothing runs yet: wait again without it.
            Phase::Placing if live || n.offer.is_some() => self.retreat(now, to, true),
            Phase::Queued | Phase::Placing => self.drop_candidate(now, to),
            _ => {}
        }
    }
}

impl Machine for Submission {
    type Body = JobMsg;
    type Command = SubmissionCommand;
    type Event = SubmitEvent;
    type CmdError = SubmitCmdError;

    fn addr(&self) -> NodeAddr {
        self.addr
    }

    fn handle_message(&mut self, now: Instant, msg: Envelope<JobMsg>) {
        if msg.body.job() != self.wire || self.on_message(now, msg.sender_addr, msg.body, msg.payload).is_none() {
            self.ignored += 1;
        }
    }

    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        self.peer_gone(now, to, None);
    }

    fn handle_command(&mut self, _now: Instant, cmd: SubmissionCommand) -> Result<(), SubmitCmdError> {
        match cmd {
            SubmissionCommand::Kill if self.phase == Phase::Finished => {
                return Err(SubmitCmdError::AlreadyOver(self.job));
            }
            SubmissionCommand::Kill => self.finish(Outcome::Killed),
            SubmissionCommand::Status => {
                self.event(SubmitEvent::Status { job: self.job, phase: self.phase, ranks: self.ranks.clone() })
            }
        }
        Ok(())
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Finished {
            return;
        }
        if self.deadline.is_some_and(|d| d <= now) {
            return self.fail(SubmitError::Timeout);
        }
        if self.queue_deadline.is_some_and(|d| d <= now) && self.phase <= Phase::Queued {
            let reason = self.waiting_reason().unwrap_or_default();
            let waited_ms = self.desc.queue_timeout.map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
            return self.fail(SubmitError::QueueTimeout { waited_ms, reason });
        }
        // An offer unanswered, or staging that stopped moving: that node is out,
        // and the job waits again (all or nothing).
        let stuck = self.nodes.iter().find(|(_, n)| n.stalled(now));
        if let (Phase::Placing, Some((a, _))) = (self.phase, stuck) {
            let a = *a;
            self.retreat(now, a, true);
        }
        if self.bid_deadline.is_some_and(|d| d <= now) {
            self.try_offer(now);
        }
        self.migration_timeout(now);
        self.move_timeout(now);
    }

    fn poll_action(&mut self) -> Option<Action<JobMsg, SubmitEvent>> {
        self.actions.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Finished {
            return None;
        }
        let offers = self.nodes.values().filter_map(|n| n.offer.as_ref().map(|(_, d)| *d));
        let placing = self.phase == Phase::Placing;
        let stages = self.nodes.values().filter_map(|n| n.stage.deadline().filter(|_| placing));
        let queue = self.queue_deadline.filter(|_| self.phase <= Phase::Queued);
        let migrating = self.migration_deadline().into_iter().chain(self.move_deadline());
        offers.chain(stages).chain(self.deadline).chain(queue).chain(self.bid_deadline).chain(migrating).min()
    }
}
