//! The per-job [`Submission`] machine (see the parent module for its lifecycle).

use std::collections::VecDeque;
use std::fmt;

use super::*;
use crate::job::RejectReason;
use crate::job::outbox::{Outbox, Piece};

#[path = "submit_place.rs"]
mod place;

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
    token: Token,
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
/// [`Submission::handle_overlay_event`] and [`Submission::handle_file_read`].
#[derive(Debug)]
pub struct Submission {
    config: SubmitConfig,
    addr: NodeAddr,
    job: JobId,
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
}

impl Submission {
    /// Starts submitting `desc` as job `job` at `priority` (earlier submissions
    /// first: the submission time in ms): emits the overlay queries (tokens from
    /// `token_base` up) and the file reads.
    pub fn new(
        config: SubmitConfig,
        addr: NodeAddr,
        (job, priority): (JobId, u64),
        desc: JobDescription,
        now: Instant,
        token_base: Token,
    ) -> Self {
        let mut names: BTreeSet<String> = desc.requirements.iter().filter_map(Requirement::query_name).collect();
        names.insert(ANY_NAME.to_owned());
        let queries: Vec<Query> = names
            .into_iter()
            .enumerate()
            .map(|(i, name)| Query { name, token: token_base + i as u64, attempts: 1, values: None })
            .collect();
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
            desc,
        };
        if !valid {
            s.fail(SubmitError::BadProcessCount(n));
            return s;
        }
        for q in &s.queries {
            let cmd = OverlayCommand::Query { token: q.token, name: q.name.clone() };
            s.actions.push_back(Action::Event(SubmitEvent::Overlay(cmd)));
        }
        let paths: Vec<String> = std::iter::once(&s.desc.executable).chain(&s.desc.inputfiles).cloned().collect();
        for (i, path) in paths.into_iter().enumerate() {
            s.event(SubmitEvent::ReadFile { job, file: 1 + i as u32, path });
        }
        s
    }

    /// The job id.
    pub fn job(&self) -> JobId {
        self.job
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

    /// Counts `len` bytes of `rank`'s output from `from`, acknowledged every
    /// [`STREAM_ACK_EVERY`] bytes so the executor reads the rank's pipes on.
    fn ack_stream(&mut self, from: NodeAddr, rank: u32, len: usize) {
        // Only ranks placed there: a peer's made-up ranks must not grow the map.
        let Some(n) = self.nodes.get_mut(&from).filter(|n| n.accepted.contains(&rank)) else { return };
        let (got, acked) = n.streamed.entry(rank).or_default();
        *got += len as u64;
        if *got - *acked >= STREAM_ACK_EVERY {
            *acked = *got;
            let msg = JobMsg::StreamAck { job: self.job, rank, consumed: *got };
            self.send(from, msg, Bytes::new());
        }
    }

    fn send(&mut self, to: NodeAddr, body: JobMsg, payload: Bytes) {
        let msg = Envelope::new(self.addr.id(), self.addr, 0, body).with_payload(payload);
        self.actions.push_back(Action::Send { to, msg });
    }

    fn finish(&mut self, outcome: Outcome) {
        if self.phase == Phase::Finished {
            return;
        }
        let waiting_at: Vec<NodeAddr> = self.nodes.iter().filter(|(_, n)| n.wanted).map(|(a, _)| *a).collect();
        for to in waiting_at {
            self.send(to, JobMsg::Unwant { job: self.job }, Bytes::new());
        }
        if !matches!(outcome, Outcome::Done { .. }) {
            let holding: Vec<NodeAddr> = self
                .nodes
                .iter()
                .filter(|(_, n)| !n.accepted.is_empty() || n.offer.is_some())
                .map(|(a, _)| *a)
                .collect();
            for to in holding {
                self.send(to, JobMsg::Kill { job: self.job }, Bytes::new());
            }
        }
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

    fn fail(&mut self, e: SubmitError) {
        self.finish(Outcome::Failed(e));
    }

    /// An overlay event; returns whether it answered one of this job's queries.
    pub fn handle_overlay_event(&mut self, now: Instant, ev: &OverlayEvent) -> bool {
        let OverlayEvent::QueryDone { token, result, .. } = ev else { return false };
        let Some(i) = self.queries.iter().position(|q| q.token == *token) else { return false };
        if self.phase != Phase::Resolving || self.queries[i].values.is_some() {
            return true;
        }
        match result {
            Ok(values) => self.queries[i].values = Some(values.clone()),
            Err(error) if self.queries[i].attempts >= self.config.query_attempts => {
                let name = self.queries[i].name.clone();
                self.fail(SubmitError::QueryFailed { name, error: *error });
                return true;
            }
            Err(_) => {
                let q = &mut self.queries[i];
                q.attempts += 1;
                let cmd = OverlayCommand::Query { token: q.token, name: q.name.clone() };
                self.event(SubmitEvent::Overlay(cmd));
                return true;
            }
        }
        if self.queries.iter().all(|q| q.values.is_some()) {
            self.resolve(now);
        }
        true
    }

    /// The driver read (or failed to read) staged file number `file`.
    pub fn handle_file_read(&mut self, now: Instant, file: u32, data: Result<FileData, String>) {
        let i = file as usize;
        if self.phase == Phase::Finished || i == 0 || i >= self.files.len() || self.files[i].is_some() {
            return;
        }
        let path = if i == 1 { self.desc.executable.clone() } else { self.desc.inputfiles[i - 2].clone() };
        match data {
            Ok(FileData { bytes, digest }) => {
                let name = crate::job::description::staged_name(&path).to_owned();
                self.files[i] = Some((name, bytes, digest));
            }
            Err(reason) => return self.fail(SubmitError::FileRead { path, reason }),
        }
        let waiting: Vec<NodeAddr> = self
            .nodes
            .iter()
            .filter(|(_, n)| !n.accepted.is_empty() && n.stage == Stage::NotSent)
            .map(|(a, _)| *a)
            .collect();
        for a in waiting {
            self.stage_node(now, a);
        }
    }

    /// Once every file is read, tells `to` what is coming; [`JobMsg::Have`] starts the transfer.
    fn stage_node(&mut self, now: Instant, to: NodeAddr) {
        let Some(files) = self
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.as_ref().map(|(name, data, digest)| StagedFile {
                    file: i as u32,
                    name: name.clone(),
                    total: data.len() as u64,
                    digest: *digest,
                })
            })
            .collect::<Option<Vec<_>>>()
        else {
            return;
        };
        if let Some(n) = self.nodes.get_mut(&to) {
            n.stage = Stage::Asked { deadline: now + self.config.stage_timeout };
        }
        self.send(to, JobMsg::Manifest { job: self.job, files }, Bytes::new());
    }

    /// `to` holds `have` already: every other file goes out, as far as the window allows.
    fn on_have(&mut self, now: Instant, to: NodeAddr, have: &[u32]) -> Option<()> {
        let mut out = Outbox::default();
        let mut total = 0;
        // The job file always travels: the executor reads its arguments from it.
        for f in (0..self.files.len() as u32).filter(|f| *f == 0 || !have.contains(f)) {
            out.push_file(f);
            total += self.file_len(f);
        }
        let n = self.nodes.get_mut(&to).filter(|n| matches!(n.stage, Stage::Asked { .. }))?;
        n.stage = Stage::Sent { deadline: now + self.config.stage_timeout, resends: BTreeMap::new(), out, total };
        self.event(SubmitEvent::Staging { job: self.job, node: to, done: 0, total });
        self.pump(to);
        Some(())
    }

    /// The length of staged file `file` (0 while it is being read).
    fn file_len(&self, file: u32) -> u64 {
        self.files.get(file as usize).and_then(Option::as_ref).map_or(0, |(_, data, _)| data.len() as u64)
    }

    /// Sends what is due to `to` until its window is full.
    fn pump(&mut self, to: NodeAddr) {
        let (window, chunk) = (self.config.stage_window as u64, self.config.chunk_size);
        loop {
            let Some(Node { stage: Stage::Sent { out, .. }, .. }) = self.nodes.get_mut(&to) else { return };
            let files = &self.files;
            let len = |f: u32| files.get(f as usize).and_then(Option::as_ref).map_or(0, |(_, data, _)| data.len());
            match out.next(window, chunk, len) {
                None => return,
                Some(Piece::End) => {
                    self.send(to, JobMsg::StageEnd { job: self.job, files: self.files.len() as u32 }, Bytes::new())
                }
                Some(Piece::Chunk { file, start, end }) => {
                    let Some((name, data, digest)) = self.files.get(file as usize).cloned().flatten() else { return };
                    let (offset, total) = (start as u64, data.len() as u64);
                    let msg = JobMsg::Stage { job: self.job, file, name, offset, total, digest };
                    self.send(to, msg, data.slice(start..end));
                }
            }
        }
    }

    fn try_start(&mut self, _now: Instant) {
        let ready = self.phase == Phase::Placing
            && self.unplaced.is_empty()
            && self.nodes.values().all(|n| n.offer.is_none() && (n.accepted.is_empty() || n.stage == Stage::Staged));
        if !ready {
            return;
        }
        self.phase = Phase::Running;
        let placed = self.ranks.iter().filter_map(|r| r.node.map(|n| (r.rank, n))).collect();
        self.event(SubmitEvent::Placed { job: self.job, ranks: placed });
        let holding: Vec<NodeAddr> =
            self.nodes.iter().filter(|(_, n)| !n.accepted.is_empty()).map(|(a, _)| *a).collect();
        for to in holding {
            self.send(to, JobMsg::Start { job: self.job }, Bytes::new());
        }
    }

    fn holds(&self, from: NodeAddr, rank: u32) -> bool {
        self.ranks.get(rank as usize).is_some_and(|r| r.node == Some(from))
    }

    fn on_message(&mut self, now: Instant, from: NodeAddr, body: JobMsg, payload: Bytes) -> Option<()> {
        let job = self.job;
        match body {
            JobMsg::Accept { ranks, .. } if self.phase == Phase::Placing => {
                let n = self.nodes.get_mut(&from)?;
                if n.offer.as_ref().map(|(r, _)| r) != Some(&ranks) {
                    return None;
                }
                n.offer = None;
                n.accepted.extend(&ranks);
                let first = n.stage == Stage::NotSent;
                for r in ranks {
                    self.ranks[r as usize].node = Some(from);
                }
                if first {
                    self.stage_node(now, from);
                }
                self.try_start(now);
            }
            JobMsg::Reject { ranks, reason, .. } if self.phase == Phase::Placing => {
                let n = self.nodes.get(&from)?;
                if n.offer.as_ref().map(|(r, _)| r) != Some(&ranks) {
                    return None;
                }
                // Busy (a grant taken back for an earlier job): wait again, there too.
                self.retreat(now, from, reason != RejectReason::NoSlot);
            }
            JobMsg::Grant { slots, ahead, .. } => return self.on_grant(now, from, slots, ahead),
            JobMsg::Resend { file, .. } if self.phase == Phase::Placing => {
                let max = self.config.max_resends;
                let deadline = now + self.config.stage_timeout;
                let len = self.file_len(file);
                let n = self.nodes.get_mut(&from)?;
                let Stage::Sent { resends, deadline: d, out, total } = &mut n.stage else { return None };
                if file as usize >= self.files.len() {
                    return None;
                }
                *total += len;
                let count = resends.entry(file).or_insert(0);
                *count += 1;
                if *count > max {
                    self.fail(SubmitError::StagingFailed { node: from, file });
                    return Some(());
                }
                *d = deadline;
                out.push_file(file);
                self.pump(from);
            }
            JobMsg::Have { files, .. } if self.phase == Phase::Placing => return self.on_have(now, from, &files),
            JobMsg::StageAck { consumed, .. } if self.phase == Phase::Placing => {
                let stage_timeout = self.config.stage_timeout;
                let Stage::Sent { deadline, out, total, .. } = &mut self.nodes.get_mut(&from)?.stage else {
                    return None;
                };
                if out.ack(consumed) {
                    *deadline = now + stage_timeout;
                    let (done, total) = (out.acked(), *total);
                    self.event(SubmitEvent::Staging { job, node: from, done, total });
                }
                self.pump(from);
            }
            JobMsg::Staged { .. } if self.phase == Phase::Placing => {
                let n = self.nodes.get_mut(&from)?;
                if !matches!(n.stage, Stage::Sent { .. }) {
                    return None;
                }
                n.stage = Stage::Staged;
                self.try_start(now);
            }
            JobMsg::Started { rank, .. } if self.phase == Phase::Running && self.holds(from, rank) => {
                self.ranks[rank as usize].started = true;
                self.event(SubmitEvent::Started { job, rank, node: from });
            }
            JobMsg::Output { rank, stream, offset, .. } if self.phase == Phase::Running => {
                self.ack_stream(from, rank, payload.len());
                if !self.holds(from, rank) {
                    return None;
                }
                self.event(SubmitEvent::Output { job, rank, stream, offset, data: payload });
            }
            JobMsg::OutputFile { rank, name, offset, total, digest: want, .. } if self.phase == Phase::Running => {
                // Every chunk from a node moves its window, whether it is used or not.
                let n = self.nodes.get_mut(&from).filter(|n| !n.accepted.is_empty())?;
                n.out_consumed += payload.len() as u64;
                let consumed = n.out_consumed;
                self.send(from, JobMsg::OutputAck { job, consumed }, Bytes::new());
                if !self.holds(from, rank) || !self.desc.outputfiles.contains(&name) {
                    return None;
                }
                let key = (rank, name.clone());
                let f = self.out_files.entry(key.clone()).or_insert(OutFile { hasher: Sha1::new(), received: 0 });
                if offset != f.received {
                    return None;
                }
                f.hasher.update(&payload);
                f.received += payload.len() as u64;
                let complete = f.received >= total;
                self.event(SubmitEvent::WriteFile { job, rank, name: name.clone(), offset, total, data: payload });
                if complete {
                    let f = self.out_files.remove(&key)?;
                    let ok = f.received == total && Id::from_bytes(f.hasher.finalize().into()) == want;
                    if ok {
                        self.out_ok.insert((rank, name.clone()));
                    } else {
                        self.out_bad.push((rank, name.clone(), "arrived corrupt"));
                    }
                    self.event(SubmitEvent::OutputFileDone { job, rank, name, ok });
                }
            }
            JobMsg::Exit { rank, code, .. } if self.phase == Phase::Running && self.holds(from, rank) => {
                if self.ranks[rank as usize].exit.is_some() {
                    return None;
                }
                self.ranks[rank as usize].exit = Some(code);
                // Its files came before its exit: what is not here now never comes.
                for name in &self.desc.outputfiles {
                    let key = (rank, name.clone());
                    if !self.out_ok.contains(&key) && !self.out_bad.iter().any(|(r, n, _)| (*r, n) == (rank, name)) {
                        let why = if self.out_files.remove(&key).is_some() { "cut short" } else { "missing" };
                        self.out_bad.push((rank, name.clone(), why));
                    }
                }
                self.event(SubmitEvent::Exited { job, rank, code });
                if code != 0 && self.ranks.iter().any(|r| r.exit.is_none()) {
                    // An MPI_Abort or a crash: the others would wait for it forever.
                    self.fail(SubmitError::RankFailed { rank, code });
                    return Some(());
                }
                if self.ranks.iter().all(|r| r.exit.is_some()) {
                    let holding: Vec<NodeAddr> =
                        self.nodes.iter().filter(|(_, n)| !n.accepted.is_empty()).map(|(a, _)| *a).collect();
                    for to in holding {
                        self.send(to, JobMsg::Done { job }, Bytes::new());
                    }
                    if !self.out_bad.is_empty() {
                        let files = self.out_bad.iter().map(|(r, n, why)| (*r, n.clone(), (*why).to_owned())).collect();
                        self.fail(SubmitError::OutputFiles { files });
                        return Some(());
                    }
                    let codes = self.ranks.iter().map(|r| r.exit.unwrap_or_default()).collect();
                    self.finish(Outcome::Done { codes });
                }
            }
            _ => return None,
        }
        Some(())
    }

    fn lost(&mut self, node: NodeAddr, silent: Option<Duration>) {
        let ranks: Vec<u32> = self.nodes.get(&node).map(|n| n.accepted.clone()).unwrap_or_default();
        let ranks: Vec<u32> = ranks.into_iter().filter(|r| self.ranks[*r as usize].exit.is_none()).collect();
        if let Some(n) = self.nodes.get_mut(&node) {
            n.accepted.clear(); // it cannot be killed or told anything any more
        }
        self.fail(match silent {
            None => SubmitError::NodeLost { node, ranks },
            Some(d) => {
                SubmitError::NodeSilent { node, ranks, silent_ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX) }
            }
        });
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
        if msg.body.job() != self.job || self.on_message(now, msg.sender_addr, msg.body, msg.payload).is_none() {
            self.ignored += 1;
        }
    }

    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        self.peer_gone(now, to, None);
    }

    fn handle_command(&mut self, _now: Instant, cmd: SubmissionCommand) -> Result<(), SubmitCmdError> {
        match cmd {
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
        let stuck = self.nodes.iter().find(|(_, n)| {
            n.offer.as_ref().is_some_and(|(_, d)| *d <= now) || n.stage.deadline().is_some_and(|d| d <= now)
        });
        if let (Phase::Placing, Some((a, _))) = (self.phase, stuck) {
            let a = *a;
            self.retreat(now, a, true);
        }
        if self.bid_deadline.is_some_and(|d| d <= now) {
            self.try_offer(now);
        }
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
        offers.chain(stages).chain(self.deadline).chain(queue).chain(self.bid_deadline).min()
    }
}
