//! Requests about jobs held by other nodes. A tool may ask any node about any
//! job: the node finds the job's holder through the overlay (the job's key,
//! [`job_key_name`]), forwards the request there as [`NodeMsg::Tool`] and passes
//! the answers back to the tool. `Status` without a job gathers the jobs of
//! every node (`res:any` lists them) within [`GATHER_TIMEOUT`], and `Zones`
//! their CAN zones.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::control::{JobStatus, NodeZones, ToolReply, ToolRequest, job_key_name};
use super::tool::newest_lines;
use super::{Client, ConnId, DaemonNode, NodeEvent, NodeMsg, Pending, Timer};
use crate::job::{ANY_NAME, JobId, Stream};
use crate::machine::NodeAddr;
use crate::overlay::{OverlayCommand, OverlayError};

/// How long a forwarded request that is not a stream may go unanswered.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a network-wide status waits for the nodes' answers.
const GATHER_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a request whose job's nodes were all lost looks for the job again.
const RELOCATE_EVERY: Duration = Duration::from_millis(500);
/// Most lost nodes one forwarded request remembers.
const MAX_GONE: usize = 8;
/// Most output streams one forwarded request keeps track of.
const MAX_RELAYED: usize = 2 * crate::job::description::MAX_PROCESSES as usize;

/// An answer of every node being gathered.
#[derive(Debug)]
struct Gather {
    waiting: BTreeSet<NodeAddr>,
    got: Gathered,
}

/// What a gather collected so far.
#[derive(Debug)]
pub(super) enum Gathered {
    /// Every node's jobs (`Status` without a job).
    Jobs(Vec<JobStatus>),
    /// Every CAN node's zones (`Zones`), each as the node told it.
    Zones { dims: u8, nodes: Vec<NodeZones> },
}

impl Gathered {
    /// Takes what node `from` answered, if it is the kind asked for.
    fn add(&mut self, from: NodeAddr, reply: ToolReply) {
        match (self, reply) {
            (Gathered::Jobs(jobs), ToolReply::Jobs { jobs: more }) => jobs.extend(more),
            // A node tells only of itself, in the same space.
            (Gathered::Zones { dims, nodes }, ToolReply::Zones { dims: d, nodes: more, .. }) if *dims == d => {
                nodes.extend(more.into_iter().filter(|z| z.node == from).take(1));
            }
            _ => {}
        }
    }

    /// The answer to the tool.
    fn reply(self, me: NodeAddr) -> ToolReply {
        match self {
            Gathered::Jobs(mut jobs) => {
                jobs.sort_by_key(|j| j.job);
                jobs.dedup_by_key(|j| j.job);
                ToolReply::Jobs { jobs }
            }
            Gathered::Zones { dims, mut nodes } => {
                nodes.sort_by_key(|z| z.node);
                nodes.dedup_by_key(|z| z.node);
                ToolReply::Zones { me, dims, nodes }
            }
        }
    }
}

/// A local tool's request that another node answers.
#[derive(Debug)]
struct Forward {
    conn: ConnId,
    request_id: u64,
    /// What it is about (`None` for a gather).
    job: Option<JobId>,
    req: ToolRequest,
    /// The node answering, once found.
    to: Option<NodeAddr>,
    /// Other nodes registered under the job's key, tried in turn if `to` is
    /// lost (a job's deputy that took it over registers beside the dead node
    /// until that one's registration expires).
    others: Vec<NodeAddr>,
    /// Nodes registered under the job's key found lost; once every one is,
    /// the key is looked up again until `relocate_until`, for a deputy may
    /// be taking the job over (it finds the loss by silence, too).
    gone: Vec<NodeAddr>,
    relocate_until: Option<Instant>,
    /// Where each rank's output relayed so far ends: a node taking over
    /// replays the output from its first byte, and what was relayed already
    /// is not relayed twice.
    relayed: BTreeMap<(u32, Stream), u64>,
    deadline: Option<Instant>,
    gather: Option<Gather>,
}

/// Forwarded requests by number (`fwd` on the wire).
#[derive(Debug, Default)]
pub(super) struct Forwards {
    next: u64,
    live: BTreeMap<u64, Forward>,
}

impl DaemonNode {
    fn new_forward(&mut self, client: Client, job: Option<JobId>, req: ToolRequest) -> Option<u64> {
        let Client::Local { conn, request_id } = client else { return None };
        self.forwards.next += 1;
        let fwd = self.forwards.next;
        let (others, gone) = (Vec::new(), Vec::new());
        let (relocate_until, relayed) = (None, BTreeMap::new());
        let f = Forward {
            conn,
            request_id,
            job,
            req,
            to: None,
            others,
            gone,
            relocate_until,
            relayed,
            deadline: None,
            gather: None,
        };
        self.forwards.live.insert(fwd, f);
        Some(fwd)
    }

    fn answer(&mut self, fwd: u64, reply: ToolReply, payload: Bytes) {
        let Some(f) = self.forwards.live.get(&fwd) else { return };
        let (conn, request_id) = (f.conn, f.request_id);
        if reply.ends_request() {
            self.forwards.live.remove(&fwd);
        }
        self.event(NodeEvent::ToolReply { conn, request_id, reply, payload });
    }

    fn fail_forward(&mut self, fwd: u64, message: String) {
        self.answer(fwd, ToolReply::Error { message }, Bytes::new());
    }

    fn arm_forward_timer(&mut self) {
        match self.forwards.live.values().filter_map(|f| f.deadline).min() {
            Some(t) => self.timers.set(Timer::Forward, t),
            None => self.timers.clear(Timer::Forward),
        }
    }

    /// `req` is about `job`, which is held elsewhere: find its node.
    pub(super) fn forward(&mut self, now: Instant, client: Client, job: JobId, req: ToolRequest) {
        let Some(fwd) = self.new_forward(client, Some(job), req) else { return };
        let token = self.token();
        if self.overlay(now, OverlayCommand::Query { token, name: job_key_name(job) }) {
            self.pending.insert(token, Pending::Locate { fwd });
        } else {
            self.fail_forward(fwd, "not connected to an overlay".to_owned());
        }
    }

    /// The job's key was looked up: send the request to its node.
    pub(super) fn located(&mut self, now: Instant, fwd: u64, result: Result<Vec<String>, OverlayError>) {
        let Some(f) = self.forwards.live.get(&fwd) else { return };
        let job = f.job.map(|j| j.to_string()).unwrap_or_default();
        let mut holders: Vec<NodeAddr> = match result {
            Ok(values) => values
                .iter()
                .filter_map(|v| v.parse::<NodeAddr>().ok())
                // This node itself when it took the job over meanwhile.
                .filter(|a| {
                    (*a != self.addr || f.job.is_some_and(|j| self.jobs.contains_key(&j))) && !f.gone.contains(a)
                })
                .collect(),
            Err(e) => return self.fail_forward(fwd, format!("cannot find job {job}: overlay query failed: {e}")),
        };
        holders.dedup();
        if holders.is_empty() && f.relocate_until.is_some_and(|u| now < u) {
            // Only lost nodes hold it yet: look again in a moment.
            if let Some(f) = self.forwards.live.get_mut(&fwd) {
                f.deadline = Some(now + RELOCATE_EVERY);
            }
            return self.arm_forward_timer();
        }
        if let (None, Some(lost)) = (holders.first(), f.gone.last()) {
            let message = format!("node {lost} holding job {job} is unreachable, and no node took the job over");
            return self.fail_forward(fwd, message);
        }
        let Some(to) = holders.first().copied() else {
            let keep = self.retention.as_secs();
            let message = format!("no job {job} in the network (a finished job is kept for {keep} s after it ends)");
            return self.fail_forward(fwd, message);
        };
        let Some(f) = self.forwards.live.get_mut(&fwd) else { return };
        (f.to, f.others) = (Some(to), holders.split_off(1));
        let stream = f.req.streams();
        // A stream may run for as long as its job: heartbeats watch its node.
        f.deadline = (!stream).then(|| now + REQUEST_TIMEOUT);
        let req = f.req.clone();
        self.send_forward(now, to, fwd, req);
        self.arm_forward_timer();
    }

    /// Sends forwarded request `fwd` to node `to`, which may be this one
    /// (it took the job over): then it is answered here as if it came from
    /// another node, and the answers come back through
    /// [`DaemonNode::on_forwarded_reply`] (so output relayed before is not
    /// shown twice).
    fn send_forward(&mut self, now: Instant, to: NodeAddr, fwd: u64, req: ToolRequest) {
        if to == self.addr {
            self.on_tool(now, Client::Remote { node: to, fwd }, req);
        } else {
            self.send(to, NodeMsg::Tool { fwd, req }, Bytes::new());
        }
    }

    /// A request forwarded by node `from`.
    pub(super) fn on_forwarded(&mut self, now: Instant, from: NodeAddr, fwd: u64, req: ToolRequest) {
        self.on_tool(now, Client::Remote { node: from, fwd }, req);
    }

    /// An answer to a request this node forwarded.
    pub(super) fn on_forwarded_reply(&mut self, from: NodeAddr, fwd: u64, reply: ToolReply, payload: Bytes) {
        let Some(f) = self.forwards.live.get_mut(&fwd) else { return };
        if let Some(g) = &mut f.gather {
            if g.waiting.remove(&from) {
                g.got.add(from, reply);
                if g.waiting.is_empty() {
                    self.gathered(fwd);
                }
            }
            return;
        }
        if f.to != Some(from) {
            return;
        }
        let (reply, payload) = match reply {
            ToolReply::Output { job, rank, stream, offset }
                if f.relayed.len() < MAX_RELAYED || f.relayed.contains_key(&(rank, stream)) =>
            {
                let relayed = f.relayed.entry((rank, stream)).or_default();
                let end = offset + payload.len() as u64;
                if end <= *relayed {
                    return;
                }
                let skip = relayed.saturating_sub(offset);
                *relayed = end;
                let new = payload.slice(usize::try_from(skip).unwrap_or(usize::MAX).min(payload.len())..);
                (ToolReply::Output { job, rank, stream, offset: offset + skip }, new)
            }
            other => (other, payload),
        };
        self.answer(fwd, reply, payload);
    }

    /// Nodes answering forwarded requests (heartbeats watch them).
    pub(super) fn forward_targets(&self) -> impl Iterator<Item = NodeAddr> + '_ {
        self.forwards.live.values().filter_map(|f| f.to).filter(|to| *to != self.addr)
    }

    /// Node `peer` is gone: requests it was answering go to the next node
    /// registered under their job's key, or, when there is none, look for
    /// one for a while (a deputy taking the job over); gathers stop waiting
    /// for it.
    pub(super) fn forward_target_gone(&mut self, now: Instant, peer: NodeAddr, silent: Option<Duration>) {
        let hit: Vec<u64> = self.forwards.live.iter().filter(|(_, f)| f.to == Some(peer)).map(|(k, _)| *k).collect();
        let why = match silent {
            Some(d) => format!("stopped answering (nothing heard for {:.1} s)", d.as_secs_f64()),
            None => "is unreachable".to_owned(),
        };
        for fwd in hit {
            self.reroute(now, fwd, peer, &why);
        }
        let waiting: Vec<u64> = self
            .forwards
            .live
            .iter()
            .filter(|(_, f)| f.gather.as_ref().is_some_and(|g| g.waiting.contains(&peer)))
            .map(|(k, _)| *k)
            .collect();
        for fwd in waiting {
            if let Some(g) = self.forwards.live.get_mut(&fwd).and_then(|f| f.gather.as_mut()) {
                g.waiting.remove(&peer);
                if g.waiting.is_empty() {
                    self.gathered(fwd);
                }
            }
        }
    }

    /// Node `from`, answering forwarded request `fwd`, holds its job no
    /// more (it stopped and handed the job to a deputy): the request goes
    /// where the job is now, as when `from` is lost.
    pub(super) fn relocate(&mut self, now: Instant, from: NodeAddr, fwd: u64) {
        if self.forwards.live.get(&fwd).is_some_and(|f| f.to == Some(from) && f.gather.is_none()) {
            self.reroute(now, fwd, from, "handed it over as it stopped");
        }
    }

    /// Request `fwd` goes to the next node registered under its job's key,
    /// or, when there is none, looks for one for a while (a deputy taking
    /// the job over); else it fails: node `peer` holding the job `why`.
    fn reroute(&mut self, now: Instant, fwd: u64, peer: NodeAddr, why: &str) {
        // The submitting node's deputies find it lost, then one another.
        let grace = 3 * self.liveness.detection();
        let Some(f) = self.forwards.live.get_mut(&fwd) else { return };
        if f.gone.len() < MAX_GONE {
            f.gone.push(peer);
        }
        if !f.others.is_empty() {
            let to = f.others.remove(0);
            f.to = Some(to);
            let req = f.req.clone();
            return self.send_forward(now, to, fwd, req);
        }
        if f.job.is_some() && f.gather.is_none() && *f.relocate_until.get_or_insert(now + grace) > now {
            (f.to, f.deadline) = (None, Some(now + RELOCATE_EVERY));
            return self.arm_forward_timer();
        }
        let job = f.job.map(|j| j.to_string()).unwrap_or_default();
        self.fail_forward(fwd, format!("node {peer} holding job {job} {why}"));
    }

    /// The tool on `conn` went away: its requests are cancelled where they went.
    pub(super) fn cancel_forwards_of(&mut self, conn: ConnId) {
        let mine: Vec<u64> = self.forwards.live.iter().filter(|(_, f)| f.conn == conn).map(|(k, _)| *k).collect();
        for fwd in mine {
            match self.forwards.live.remove(&fwd) {
                Some(Forward { to: Some(to), gather: None, .. }) if to == self.addr => {
                    self.drop_client(Client::Remote { node: to, fwd });
                }
                Some(Forward { to: Some(to), gather: None, .. }) => {
                    self.send(to, NodeMsg::ToolCancel { fwd }, Bytes::new());
                }
                _ => {}
            }
        }
        self.arm_forward_timer();
    }

    pub(super) fn forwards_expired(&mut self, now: Instant) {
        let due: Vec<u64> =
            self.forwards.live.iter().filter(|(_, f)| f.deadline.is_some_and(|d| d <= now)).map(|(k, _)| *k).collect();
        for fwd in due {
            let Some(f) = self.forwards.live.get_mut(&fwd) else { continue };
            if f.gather.is_some() {
                self.gathered(fwd);
            } else if let (None, Some(job)) = (f.to, f.job.filter(|_| f.relocate_until.is_some())) {
                // Look for the job's node again.
                f.deadline = None;
                let token = self.token();
                if self.overlay(now, OverlayCommand::Query { token, name: job_key_name(job) }) {
                    self.pending.insert(token, Pending::Locate { fwd });
                } else {
                    self.fail_forward(fwd, "not connected to an overlay".to_owned());
                }
            } else {
                let to = f.to.map(|t| t.to_string()).unwrap_or_default();
                let job = f.job.map(|j| j.to_string()).unwrap_or_default();
                self.fail_forward(fwd, format!("node {to} holding job {job} did not answer in time"));
            }
        }
        self.arm_forward_timer();
    }

    /// A request about every node (`Status` without a job, `Zones`): this
    /// node's own answer is `got`; ask each other node of the network.
    pub(super) fn gather(&mut self, now: Instant, client: Client, req: ToolRequest, got: Gathered) {
        let Some(fwd) = self.new_forward(client, None, req) else { return };
        if let Some(f) = self.forwards.live.get_mut(&fwd) {
            f.gather = Some(Gather { waiting: BTreeSet::new(), got });
        }
        let token = self.token();
        if self.overlay(now, OverlayCommand::Query { token, name: ANY_NAME.to_owned() }) {
            self.pending.insert(token, Pending::Gather { fwd });
        } else {
            self.gathered(fwd);
        }
    }

    /// The network's nodes are known: ask each of them.
    pub(super) fn gather_nodes(&mut self, now: Instant, fwd: u64, result: Result<Vec<String>, OverlayError>) {
        let nodes: BTreeSet<NodeAddr> = newest_lines(result.unwrap_or_default())
            .iter()
            .filter_map(|v| crate::job::Resources::parse_any_value(v).ok().map(|(a, _)| a))
            .filter(|a| *a != self.addr)
            .collect();
        let Some(f) = self.forwards.live.get_mut(&fwd) else { return };
        let req = f.req.clone();
        let Some(g) = f.gather.as_mut() else { return };
        g.waiting = nodes.clone();
        if nodes.is_empty() {
            return self.gathered(fwd);
        }
        for to in nodes {
            self.send(to, NodeMsg::Tool { fwd, req: req.clone() }, Bytes::new());
        }
        if let Some(f) = self.forwards.live.get_mut(&fwd) {
            f.deadline = Some(now + GATHER_TIMEOUT);
        }
        self.arm_forward_timer();
    }

    /// A gather is complete (or out of time): answer with what came.
    fn gathered(&mut self, fwd: u64) {
        let Some(g) = self.forwards.live.get_mut(&fwd).and_then(|f| f.gather.take()) else { return };
        let reply = g.got.reply(self.addr);
        self.answer(fwd, reply, Bytes::new());
    }
}
