//! The daemon node's side of the `p2pjob` tool protocol: requests from a tool on
//! a local control connection, or forwarded by another node for a job held here.

use std::time::Instant;

use bytes::Bytes;

use super::authz::Authenticated;
use super::control::{NodeZones, ToolReply, ToolRequest};
use super::remote::Gathered;
use super::{Client, DaemonNode, NodeEvent, NodeMsg, Pending};
use crate::auth::{JobAuth, PublicKey};
use crate::can::CanNode;
use crate::job::{ANY_NAME, JobDescription, JobId, SubmitterCommand};
use crate::machine::{Machine, NodeAddr};
use crate::overlay::{OverlayCommand, OverlayError};

impl DaemonNode {
    /// Sends `reply` (with `payload`) to whoever asked.
    pub(super) fn send_reply(&mut self, client: Client, reply: ToolReply, payload: Bytes) {
        match client {
            Client::Local { conn, request_id } => self.event(NodeEvent::ToolReply { conn, request_id, reply, payload }),
            // A request this node forwarded to itself (see `remote`).
            Client::Remote { node, fwd } if node == self.addr => self.on_forwarded_reply(node, fwd, reply, payload),
            Client::Remote { node, fwd } => self.send(node, NodeMsg::ToolReply { fwd, reply }, payload),
        }
    }

    fn error(&mut self, client: Client, message: String) {
        self.send_reply(client, ToolReply::Error { message }, Bytes::new());
    }

    pub(super) fn on_tool(&mut self, now: Instant, client: Client, outer: ToolRequest) {
        // A request forwarded to the job's node goes on as it came (signed), so
        // that node checks the signature itself.
        let forwardable = outer.clone();
        let Authenticated { req, key, job: job_auth } = match self.authenticate(now, outer) {
            Ok(a) => a,
            Err(e) => return self.error(client, e.to_string()),
        };
        let job = match &req {
            ToolRequest::Watch { job }
            | ToolRequest::Kill { job }
            | ToolRequest::Output { job, .. }
            | ToolRequest::Checkpoint { job }
            | ToolRequest::Migrate { job, .. } => Some(*job),
            ToolRequest::Status { job } => *job,
            ToolRequest::Submit { .. }
            | ToolRequest::Nodes
            | ToolRequest::Lookup { .. }
            | ToolRequest::Query { .. }
            | ToolRequest::Ring
            | ToolRequest::Zones
            | ToolRequest::Signed { .. } => None,
        };
        let local = matches!(client, Client::Local { .. });
        match (job, local) {
            // About a job held elsewhere: the node holding it answers.
            (Some(job), true) if !self.jobs.contains_key(&job) => {
                return self.forward(now, client, job, forwardable);
            }
            (Some(job), false) if !self.jobs.contains_key(&job) => {
                if let (Client::Remote { node, fwd }, true) = (client, self.handed.contains(&job)) {
                    // Handed over as this node stops: ask where it is now.
                    return self.send(node, NodeMsg::Relocate { fwd }, Bytes::new());
                }
                return self.error(client, format!("no job {job} here"));
            }
            (Some(job), _) if !self.may_act(job, key.as_ref()) => {
                let who = key.map_or_else(|| "an unsigned request".to_owned(), |k| format!("key {k}"));
                return self.error(client, format!("job {job} belongs to another key: {who} may not see or act on it"));
            }
            _ => {}
        }
        match req {
            ToolRequest::Submit { nonce, xml, base_dir, watch } if local => {
                self.submit(now, client, Submit { nonce, xml: &xml, base_dir, watch, key, auth: job_auth })
            }
            ToolRequest::Watch { job } => self.attach(job, client, true, None),
            ToolRequest::Output { job, rank } => self.attach(job, client, false, rank),
            ToolRequest::Status { job: Some(job) } => {
                let jobs = self.status_of(job).into_iter().collect();
                self.send_reply(client, ToolReply::Jobs { jobs }, Bytes::new());
            }
            // A tool asks for the whole network; a node asks what is held here.
            ToolRequest::Status { job: None } if local => {
                let ids: Vec<JobId> = self.jobs.keys().copied().collect();
                let jobs = ids.into_iter().filter_map(|j| self.status_of(j)).collect();
                self.gather(now, client, ToolRequest::Status { job: None }, Gathered::Jobs(jobs));
            }
            ToolRequest::Status { job: None } => {
                let ids: Vec<JobId> = self.jobs.keys().copied().collect();
                let jobs = ids.into_iter().filter_map(|j| self.status_of(j)).collect();
                self.send_reply(client, ToolReply::Jobs { jobs }, Bytes::new());
            }
            ToolRequest::Checkpoint { job } => self.ask_checkpoint(client, job),
            ToolRequest::Migrate { job, rank, to } => self.ask_migrate(now, client, job, rank, to),
            ToolRequest::Kill { job } => match self.submitter.handle_command(now, SubmitterCommand::Kill(job)) {
                Ok(()) => self.send_reply(client, ToolReply::Killing { job }, Bytes::new()),
                Err(e) => self.error(client, e.to_string()),
            },
            ToolRequest::Nodes if local => {
                let Client::Local { conn, request_id } = client else { return };
                let token = self.token();
                if self.overlay(now, OverlayCommand::Query { token, name: ANY_NAME.to_owned() }) {
                    self.pending.insert(token, Pending::Nodes { conn, request_id });
                } else {
                    self.error(client, "not connected to an overlay".to_owned());
                }
            }
            ToolRequest::Lookup { name } if local => {
                let token = self.token();
                let key = crate::id::Id::hash(&name);
                self.diagnose(now, client, token, OverlayCommand::Lookup { token, key });
            }
            ToolRequest::Query { name } if local => {
                let token = self.token();
                self.diagnose(now, client, token, OverlayCommand::Query { token, name });
            }
            ToolRequest::Ring if local => match self.overlay.chord() {
                Some(c) => {
                    let (me, predecessor) = (c.me().addr, c.predecessor().map(|p| p.addr));
                    let successors = c.successor_list().iter().map(|p| p.addr).collect();
                    let fingers = c.fingers().iter().map(|(i, p)| (*i, p.addr)).collect();
                    self.send_reply(client, ToolReply::Ring { me, predecessor, successors, fingers }, Bytes::new());
                }
                None => self.error(client, "this node's overlay is CAN, which has no ring".to_owned()),
            },
            ToolRequest::Zones => match self.overlay.can().map(|c| (c.config().dims, own_zones(c))) {
                Some((dims, mine)) if local => {
                    let got = Gathered::Zones { dims: dims as u8, nodes: vec![mine] };
                    self.gather(now, client, ToolRequest::Zones, got);
                }
                Some((dims, mine)) => {
                    let reply = ToolReply::Zones { me: self.addr, dims: dims as u8, nodes: vec![mine] };
                    self.send_reply(client, reply, Bytes::new());
                }
                None => self.error(client, "this node's overlay is Chord, which has no zones".to_owned()),
            },
            ToolRequest::Submit { .. }
            | ToolRequest::Nodes
            | ToolRequest::Lookup { .. }
            | ToolRequest::Query { .. }
            | ToolRequest::Ring
            | ToolRequest::Signed { .. } => {
                self.error(client, "a node forwards only requests about a job".to_owned());
            }
        }
    }

    fn diagnose(&mut self, now: Instant, client: Client, token: crate::overlay::Token, cmd: OverlayCommand) {
        let Client::Local { conn, request_id } = client else { return };
        match self.overlay.handle_command(now, cmd) {
            Ok(()) => {
                self.pending.insert(token, Pending::Diagnose { conn, request_id });
            }
            Err(e) => self.error(client, format!("overlay refused: {e}")),
        }
    }

    fn submit(&mut self, now: Instant, client: Client, s: Submit<'_>) {
        let Submit { nonce, xml, base_dir, watch, key, auth } = s;
        let parsed = match JobDescription::parse(xml.as_bytes()) {
            Ok(p) => p,
            Err(e) => return self.error(client, format!("bad job file: {e}")),
        };
        let size = parsed.job.processes;
        match self.submitter.submit_signed(now, nonce, parsed.job, self.wall_ms(now), auth) {
            Ok((job, new)) => {
                self.hold(now, job, base_dir, size, key);
                self.send_reply(client, ToolReply::Submitted { job, new }, Bytes::new());
                if watch {
                    self.attach(job, client, true, None);
                }
            }
            Err(e) => self.error(client, e.to_string()),
        }
    }

    /// The answer to `p2pjob nodes`: every live `res:any` line, newest per node.
    pub(super) fn nodes_listed(&mut self, conn: u64, request_id: u64, result: Result<Vec<String>, OverlayError>) {
        let client = Client::Local { conn, request_id };
        match result {
            Ok(values) => {
                let nodes = newest_lines(values);
                self.send_reply(client, ToolReply::Nodes { nodes }, Bytes::new());
            }
            Err(e) => self.error(client, format!("overlay query failed: {e}")),
        }
    }
}

/// A submit request, checked.
struct Submit<'a> {
    nonce: u64,
    xml: &'a str,
    base_dir: String,
    watch: bool,
    /// Who signed the request: the job's owner.
    key: Option<PublicKey>,
    /// The job's signature, for the executors.
    auth: Option<JobAuth>,
}

/// What a CAN node tells of itself in a [`ToolReply::Zones`].
fn own_zones(c: &CanNode) -> NodeZones {
    let neighbours = c.neighbours().iter().map(|n| n.peer.addr).collect();
    NodeZones { node: c.me().addr, zones: c.zones().to_vec(), neighbours }
}

/// Of several `res:any` lines of one node (a replaced one not yet withdrawn
/// everywhere), the newest; unparsable lines are dropped. Sorted by address.
pub(super) fn newest_lines(values: Vec<String>) -> Vec<String> {
    let mut best: std::collections::BTreeMap<NodeAddr, (u64, String)> = std::collections::BTreeMap::new();
    for v in values {
        let Ok((addr, res)) = crate::job::Resources::parse_any_value(&v) else { continue };
        if best.get(&addr).is_none_or(|(g, _)| *g < res.generation) {
            best.insert(addr, (res.generation, v));
        }
    }
    best.into_values().map(|(_, v)| v).collect()
}
