//! The daemon's composite machine ([`DaemonNode`]: overlay, submitter, executor,
//! local service) under a random sequence of inputs.
//!
//! A byte cursor picks each input: a frame of raw bytes decoded as a
//! [`NodeMsg`] envelope, a well-formed Chord message built from the bytes (often
//! the answer to a request the node really has outstanding, from the peer it asked),
//! a command of the I/O shell (a rank's or a tool's request, a rank's registration
//! under a process key of a job the node runs and its checkpoint reports, the answer to a file
//! read or a spawn the node asked for, host stats, leave), a failed send, or time
//! moving on. Messages the node addresses to itself come back at once, as the
//! adapters' `Driver` delivers them.
//!
//! After every input the node is drained and checked: it never panics; every
//! message it sends names it as the sender, survives the codec, and (overlay
//! traffic) is never addressed to itself; a drain ends; a due timer, once handled,
//! is not due again at the same instant; and its Chord node keeps its own
//! invariants ([`crate::chord::ChordNode::check_invariants`], or the CAN node's).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::chord::{ChordMsg, Entry, Peer, Step};
use crate::ckpt::{CheckpointInfo, RecoveryInfo};
use crate::id::Id;
use crate::job::{FileData, JobId, Resources, Stream};
use crate::local::LocalRequest;
use crate::machine::{Action, Machine, NodeAddr};
use crate::node::control::ToolRequest;
use crate::node::{DaemonConfig, DaemonNode, NodeCommand, NodeEvent, NodeMsg};
use crate::secure::PublicKey;
use crate::wire::{DEFAULT_MAX_FRAME, Envelope, decode_envelope};

/// Most actions one input may cause before the drain counts as endless.
const MAX_DRAIN: usize = 20_000;
/// Most rounds of `handle_timeout` at one instant before a timer counts as stuck.
const MAX_TIMER_ROUNDS: usize = 64;
/// Distinct peer addresses the inputs name (1 is the node itself).
const PEERS: u32 = 6;
/// Requests of the node the I/O shell has not answered yet, at most.
const MAX_ASKS: usize = 64;

const JOB_XML: &str = "<p2pjob><executable>prog</executable><inputfile>in</inputfile>\
    <outputfile>out</outputfile><processes>2</processes><requirement>linux</requirement></p2pjob>";

/// A cursor over the fuzz input; reads past the end give zeros.
struct Cursor<'a> {
    data: &'a [u8],
}

impl Cursor<'_> {
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(std::array::from_fn(|_| self.byte()))
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    fn addr(&mut self) -> NodeAddr {
        peer_addr(u32::from(self.byte()) % PEERS + 1)
    }

    /// A peer, now and then with an id that is not its address's.
    fn peer(&mut self) -> Peer {
        let b = self.byte();
        let p = Peer::from_addr(peer_addr(u32::from(b) % PEERS + 1));
        if b >= 0xf0 { Peer { id: p.id.wrapping_add(Id::pow2(u32::from(b & 0x0f))), addr: p.addr } } else { p }
    }

    fn peers(&mut self) -> Vec<Peer> {
        let n = self.byte() % 10;
        (0..n).map(|_| self.peer()).collect()
    }

    fn id(&mut self) -> Id {
        let b = self.byte();
        match b % 3 {
            0 => self.peer().id,
            1 => Id::pow2(u32::from(self.byte()) % 160),
            _ => Id::hash([b, self.byte()]),
        }
    }

    fn name(&mut self) -> String {
        const NAMES: [&str; 6] = ["res:any", "os=linux", "arch=x86_64", "a", "job:x", ""];
        NAMES[usize::from(self.byte()) % NAMES.len()].to_owned()
    }

    fn entry(&mut self) -> Entry {
        Entry { name: self.name(), value: format!("v{}", self.byte() % 4), ttl_ms: u64::from(self.byte()) * 500 }
    }

    fn entries(&mut self) -> Vec<Entry> {
        let n = self.byte() % 6;
        (0..n).map(|_| self.entry()).collect()
    }

    /// A well-formed Chord message of the variant the next byte picks.
    fn chord_msg(&mut self) -> ChordMsg {
        match self.byte() % ChordMsg::KINDS as u8 {
            0 => ChordMsg::FindSuccessor { key: self.id() },
            1 => ChordMsg::FindSuccessorReply(if self.byte() % 2 == 0 {
                Step::Done { owner: self.peer() }
            } else {
                Step::Next { candidates: self.peers() }
            }),
            2 => ChordMsg::GetPredecessor,
            3 => {
                let predecessor = (self.byte() % 4 != 0).then(|| self.peer());
                ChordMsg::Predecessor { predecessor, successors: self.peers() }
            }
            4 => ChordMsg::Notify,
            5 => ChordMsg::Ping,
            6 => ChordMsg::Pong,
            7 => ChordMsg::Register { entry: self.entry(), replicas: self.byte() % 4 },
            8 => ChordMsg::Query { name: self.name() },
            9 => ChordMsg::QueryResult { values: (0..self.byte() % 4).map(|i| format!("v{i}")).collect() },
            10 => ChordMsg::LeavingToPredecessor { successors: self.peers() },
            11 => ChordMsg::LeavingToSuccessor { predecessor: (self.byte() % 4 != 0).then(|| self.peer()) },
            12 => ChordMsg::KeyTransfer { entries: self.entries() },
            13 => ChordMsg::GetSuccessorList,
            14 => ChordMsg::SuccessorList { successors: self.peers() },
            15 => ChordMsg::GetFingers,
            16 => {
                let n = self.byte() % 8;
                ChordMsg::Fingers { fingers: (0..n).map(|_| (self.byte(), self.peer())).collect() }
            }
            17 => ChordMsg::NewPredecessor { predecessor: self.peer() },
            18 => ChordMsg::Registered,
            19 => ChordMsg::NotOwner,
            20 => ChordMsg::NotJoined,
            21 => ChordMsg::Handover { entries: self.entries(), hops: self.byte() % 10 },
            _ => ChordMsg::Pull { after: self.id() },
        }
    }

    fn tool_request(&mut self, jobs: &[JobId]) -> ToolRequest {
        let job = self.job(jobs);
        match self.byte() % 11 {
            0 => ToolRequest::Submit {
                nonce: self.u64(),
                xml: JOB_XML.to_owned(),
                base_dir: "/in".into(),
                watch: self.byte() % 2 == 0,
            },
            1 => ToolRequest::Watch { job },
            2 => ToolRequest::Status { job: (self.byte() % 2 == 0).then_some(job) },
            3 => ToolRequest::Kill { job },
            4 => ToolRequest::Nodes,
            5 => ToolRequest::Output { job, rank: (self.byte() % 2 == 0).then(|| u32::from(self.byte() % 3)) },
            6 => ToolRequest::Lookup { name: self.name() },
            7 => ToolRequest::Query { name: self.name() },
            8 => ToolRequest::Checkpoint { job },
            9 => ToolRequest::Migrate { job, rank: u32::from(self.byte() % 3), to: None },
            _ => ToolRequest::Ring,
        }
    }

    /// A job the node knows of, or one it does not.
    fn job(&mut self, jobs: &[JobId]) -> JobId {
        let b = usize::from(self.byte());
        jobs.get(b % (jobs.len() + 1)).copied().unwrap_or(JobId(Id::hash([b as u8])))
    }
}

fn peer_addr(n: u32) -> NodeAddr {
    NodeAddr::loopback(n, 7000)
}

/// The harness: the node, the shell's unanswered requests, and the clock.
struct Harness {
    node: DaemonNode,
    me: NodeAddr,
    now: Instant,
    /// Messages the node sent itself, delivered next.
    looped: VecDeque<Envelope<NodeMsg>>,
    /// Requests of the node the shell may answer (file reads, spawns, ...).
    asks: Vec<NodeEvent>,
    /// Jobs seen in the node's events.
    jobs: Vec<JobId>,
}

impl Harness {
    /// Drains the node and checks what it emitted, then services its due timers.
    fn settle(&mut self) {
        self.drain();
        for _ in 0..MAX_TIMER_ROUNDS {
            while let Some(env) = self.looped.pop_front() {
                self.node.handle_message(self.now, env);
                self.drain();
            }
            if self.node.poll_timeout().is_none_or(|t| t > self.now) {
                return self.check();
            }
            self.node.handle_timeout(self.now);
            self.drain();
        }
        panic!("a timer stays due at {:?} after {MAX_TIMER_ROUNDS} rounds", self.now);
    }

    fn drain(&mut self) {
        for _ in 0..MAX_DRAIN {
            match self.node.poll_action() {
                Some(Action::Send { to, msg }) => self.sent(to, msg),
                Some(Action::Event(e)) => self.event(e),
                None => return,
            }
        }
        panic!("the daemon node kept emitting actions");
    }

    fn sent(&mut self, to: NodeAddr, msg: Envelope<NodeMsg>) {
        assert_eq!((msg.sender, msg.sender_addr), (self.me.id(), self.me), "a message not from this node");
        if to == self.me {
            assert!(
                !matches!(msg.body, NodeMsg::Chord(_) | NodeMsg::Can(_)),
                "the overlay addressed itself over the network: {:?}",
                msg.body
            );
            // The Driver delivers a node's messages to itself at once.
            let back = crate::wire::round_trip(&msg, DEFAULT_MAX_FRAME).expect("a message the codec cannot carry");
            self.looped.push_back(back);
        } else {
            crate::wire::round_trip(&msg, DEFAULT_MAX_FRAME).expect("a message the codec cannot carry");
        }
    }

    fn event(&mut self, e: NodeEvent) {
        let job = match &e {
            NodeEvent::ReadFile { job, .. }
            | NodeEvent::Spawn { job, .. }
            | NodeEvent::Kill { job, .. }
            | NodeEvent::ReadOutputFile { job, .. }
            | NodeEvent::JobFinished { job, .. }
            | NodeEvent::OutputCredit { job, .. } => Some(*job),
            _ => None,
        };
        if let Some(job) = job.filter(|j| !self.jobs.contains(j)) {
            self.jobs.push(job);
        }
        let ask = matches!(
            e,
            NodeEvent::ReadFile { .. }
                | NodeEvent::Spawn { .. }
                | NodeEvent::Kill { .. }
                | NodeEvent::ReadOutputFile { .. }
                | NodeEvent::ReplayOutput { .. }
        );
        if ask && self.asks.len() < MAX_ASKS {
            self.asks.push(e);
        }
    }

    fn check(&self) {
        if let Some(chord) = self.node.chord() {
            chord.check_invariants();
        }
        if let Some(can) = self.node.overlay_node().can() {
            can.check_invariants();
        }
    }

    /// The shell's answer to one of the node's requests, if it needs one.
    fn answer(&mut self, k: usize, c: &mut Cursor<'_>) {
        if self.asks.is_empty() {
            return;
        }
        let ask = self.asks.remove(k % self.asks.len());
        let ok = c.byte() % 4 != 0;
        let cmds = match ask {
            NodeEvent::ReadFile { job, file, path } => {
                let data = if ok { Ok(FileData::new(Bytes::from(path))) } else { Err("no such file".into()) };
                vec![NodeCommand::FileRead { job, file, data }]
            }
            NodeEvent::Spawn { job, rank, .. } => {
                let data = Bytes::from_static(b"hello\n");
                let out = NodeCommand::ProcessOutput { job, rank, stream: Stream::Stdout, data };
                vec![out, NodeCommand::ProcessExited { job, rank, code: i32::from(c.byte() % 3) - 1 }]
            }
            NodeEvent::Kill { job, rank } => vec![NodeCommand::ProcessExited { job, rank, code: -9 }],
            NodeEvent::ReadOutputFile { job, rank, name, .. } => {
                let data = if ok { Ok(Bytes::from_static(b"result")) } else { Err("gone".into()) };
                vec![NodeCommand::OutputFileRead { job, rank, name, data }]
            }
            NodeEvent::ReplayOutput { replay, files } => {
                let mut cmds: Vec<NodeCommand> = files
                    .into_iter()
                    .filter(|_| ok)
                    .map(|f| {
                        let data = Bytes::from(vec![b'x'; usize::try_from(f.len.min(64)).unwrap_or(0)]);
                        NodeCommand::Replayed { replay, rank: f.rank, stream: f.stream, offset: 0, data }
                    })
                    .collect();
                cmds.push(NodeCommand::ReplayDone { replay });
                cmds
            }
            _ => Vec::new(),
        };
        for cmd in cmds {
            let _ = self.node.handle_command(self.now, cmd);
            self.settle();
        }
    }

    /// A command of the I/O shell, built from the input.
    fn command(&mut self, c: &mut Cursor<'_>) -> NodeCommand {
        let conn = u64::from(c.byte() % 4);
        let request_id = u64::from(c.byte());
        match c.byte() % 8 {
            0 => {
                // Often the process key of a rank of a job the node knows.
                let key = match c.byte() % 2 {
                    0 => crate::job::process_key(c.job(&self.jobs), u32::from(c.byte() % 3)),
                    _ => c.id(),
                };
                let addr = c.addr();
                let req = match c.byte() % 7 {
                    0 => LocalRequest::Register { key, addr },
                    1 => LocalRequest::Resolve { key },
                    2 => LocalRequest::Unregister { key, addr },
                    3 => {
                        let (epoch, unix_ms, bytes) = (u64::from(c.byte()), c.u64() >> 24, u64::from(c.byte()) << 10);
                        let ckpt = CheckpointInfo { epoch, unix_ms, stored_bytes: bytes, raw_bytes: bytes * 3 };
                        LocalRequest::Checkpointed { ckpt, request: u64::from(c.byte() % 4) }
                    }
                    4 => LocalRequest::RegisterKeyed { key, addr, public: PublicKey([c.byte(); 32]) },
                    5 => LocalRequest::ResolveKeyed { key },
                    _ => LocalRequest::Recovered { recovery: RecoveryInfo { epoch: u64::from(c.byte()), unix_ms: 1 } },
                };
                NodeCommand::Local { conn, request_id, req }
            }
            1..=3 => NodeCommand::Tool { conn, request_id, req: c.tool_request(&self.jobs) },
            4 => NodeCommand::ConnClosed { conn },
            5 => NodeCommand::HostStats {
                load_milli: u32::from(c.byte()) * 40,
                mem_free_mb: u64::from(c.byte()) * 64,
                unix_ms: c.u64() >> 20,
            },
            6 => {
                let job = c.job(&self.jobs);
                NodeCommand::ProcessExited { job, rank: u32::from(c.byte() % 3), code: 0 }
            }
            _ if c.byte() % 8 == 0 => NodeCommand::Leave,
            _ => NodeCommand::ConnClosed { conn },
        }
    }

    /// A well-formed Chord message from a peer: often the answer to a request
    /// the node has outstanding, from the peer it went to.
    fn chord_message(&mut self, c: &mut Cursor<'_>) -> Envelope<NodeMsg> {
        let outstanding = self.node.chord().map(|n| n.outstanding()).unwrap_or_default();
        let pick = c.byte();
        let (sender, rid) = match outstanding.get(usize::from(pick) % (outstanding.len() + 1)) {
            Some(&(rid, to)) if pick % 4 != 0 => (Peer::from_addr(to), rid),
            _ => (c.peer(), [0, u64::from(c.byte())][usize::from(pick % 2)]),
        };
        Envelope::new(sender.id, sender.addr, rid, NodeMsg::Chord(c.chord_msg()))
    }
}

/// See the module docs. The first byte sets the node up: bit 0 gives it a
/// bootstrap contact (it joins through the input's answers; else it makes a
/// ring alone), bit 1 runs CAN instead of Chord.
pub fn daemon_node(data: &[u8]) {
    let mut c = Cursor { data };
    let setup = c.byte();
    let t0 = Instant::now();
    let me = peer_addr(1);
    let res = Resources {
        os: "linux".into(),
        arch: "x86_64".into(),
        cores: 2,
        mem_mb: 4096,
        slots: 2,
        ..Resources::default()
    };
    let mut cfg = DaemonConfig::new(res, "127.0.0.1:9000", "/w", u64::from(setup));
    if setup & 1 != 0 {
        cfg.bootstrap = vec![peer_addr(2)];
    }
    if setup & 2 != 0 {
        cfg.can = Some(crate::can::CanConfig::default());
    }
    let node = DaemonNode::new(cfg, me, t0);
    let mut h = Harness { node, me, now: t0, looped: VecDeque::new(), asks: Vec::new(), jobs: Vec::new() };
    h.settle();
    while !c.is_empty() {
        match c.byte() % 8 {
            0 => {
                let len = usize::from(c.byte());
                if let Ok(env) = decode_envelope::<NodeMsg>(Bytes::copy_from_slice(c.take(len))) {
                    h.node.handle_message(h.now, env);
                }
            }
            1..=3 => {
                let env = h.chord_message(&mut c);
                h.node.handle_message(h.now, env);
            }
            4 => {
                let cmd = h.command(&mut c);
                let _ = h.node.handle_command(h.now, cmd);
            }
            5 => {
                let k = usize::from(c.byte());
                h.answer(k, &mut c);
            }
            6 => {
                let to = c.addr();
                h.node.handle_send_failed(h.now, to);
            }
            _ => {
                let b = u64::from(c.byte());
                h.now += Duration::from_millis(b * b * 10);
            }
        }
        h.settle();
    }
}
