//! The I/O shell of every daemon node, played in memory for the simulator:
//! files kept in a map, processes that print one line and exit after
//! `run_time` (or never), tool replies and the replies to ranks recorded by
//! node and connection. Tests
//! and the queue benchmark drive whole networks of [`DaemonNode`]s with it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::control::ToolReply;
use super::{ConnId, DaemonNode, NodeCommand, NodeEvent};
use crate::job::{FileData, JobId, Stream};
use crate::local::LocalReply;
use crate::sim::{NodeIdx, Sim};

/// See the module docs.
#[derive(Debug, Default)]
pub struct SimShell {
    /// Files written, by path.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Tool replies: node, connection, reply, payload.
    pub replies: Vec<(NodeIdx, ConnId, ToolReply, Bytes)>,
    /// Replies to ranks (and what the node sent them unasked): node,
    /// connection, request id, reply.
    pub rank_replies: Vec<(NodeIdx, ConnId, u64, LocalReply)>,
    /// Directories removed.
    pub removed: Vec<String>,
    /// How long a process runs before it exits with code 0 (`None`: forever).
    pub run_time: Option<Duration>,
    /// Processes started so far.
    pub spawned: u64,
    /// What every output file a rank leaves holds (`None`: it left none).
    pub output_file: Option<Bytes>,
    /// Writes to paths ending so are lost, as on a full disk.
    pub lose_writes_to: Option<String>,
    /// Processes to end: when, node, job, rank.
    exits: BinaryHeap<Reverse<(Instant, NodeIdx, JobId, u32)>>,
}

impl SimShell {
    /// A shell whose processes run for `run_time` (`None`: until killed).
    pub fn new(run_time: Option<Duration>) -> Self {
        SimShell { run_time, ..SimShell::default() }
    }

    /// Plays the shell while the simulator runs, until `done` or `limit` of
    /// virtual time.
    pub fn run(&mut self, sim: &mut Sim<DaemonNode>, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        let end = sim.now() + limit;
        while sim.now() < end && !done(self) {
            let mut later = Vec::new();
            while let Some(ev) = sim.poll_event() {
                self.on_event(sim.now(), ev.node, ev.event, &mut later);
            }
            while let Some(Reverse((at, node, job, rank))) = self.exits.peek().copied() {
                if at > sim.now() {
                    break;
                }
                self.exits.pop();
                later.push((node, NodeCommand::ProcessExited { job, rank, code: 0 }));
            }
            let busy = !later.is_empty();
            for (node, cmd) in later {
                // A node that crashed meanwhile takes no more commands.
                if sim.alive().any(|i| i == node) {
                    let _ = sim.command(node, cmd);
                }
            }
            if busy {
                continue;
            }
            let next_exit = self.exits.peek().map(|Reverse(e)| e.0);
            match (sim.next_event_at(), next_exit) {
                (Some(t), Some(x)) if x < t => sim.run_until(x),
                (None, Some(x)) => sim.run_until(x),
                (None, None) => break,
                _ => {
                    sim.step();
                }
            }
        }
    }

    fn on_event(&mut self, now: Instant, node: NodeIdx, ev: NodeEvent, later: &mut Vec<(NodeIdx, NodeCommand)>) {
        match ev {
            NodeEvent::ReadFile { job, file, path } => {
                // A file a node wrote (a staged one, read back), or made up.
                let kept = self.files.get(&path).map(|f| Bytes::copy_from_slice(f));
                let data = Ok(FileData::new(kept.unwrap_or_else(|| Bytes::from(format!("contents of {path}")))));
                later.push((node, NodeCommand::FileRead { job, file, data }));
            }
            NodeEvent::Spawn { job, rank, .. } => {
                self.spawned += 1;
                let data = Bytes::from(format!("hello from {rank}\n"));
                later.push((node, NodeCommand::ProcessOutput { job, rank, stream: Stream::Stdout, data }));
                if let Some(d) = self.run_time {
                    self.exits.push(Reverse((now + d, node, job, rank)));
                }
            }
            NodeEvent::Kill { job, rank } => {
                later.push((node, NodeCommand::ProcessExited { job, rank, code: -9 }));
            }
            NodeEvent::WriteFile { path, .. } if self.lose_writes_to.as_ref().is_some_and(|s| path.ends_with(s)) => {}
            NodeEvent::WriteFile { path, offset, data } => {
                let f = self.files.entry(path).or_default();
                f.truncate(usize::try_from(offset).unwrap_or(usize::MAX));
                f.extend_from_slice(&data);
            }
            NodeEvent::ReadOutputFile { job, rank, name, .. } => {
                let data = self.output_file.clone().ok_or_else(|| "no such file".to_owned());
                later.push((node, NodeCommand::OutputFileRead { job, rank, name, data }));
            }
            NodeEvent::ReplayOutput { replay, files } => {
                for f in files {
                    let kept = self.files.get(&f.path).map_or(&[][..], Vec::as_slice);
                    let len = kept.len().min(usize::try_from(f.len).unwrap_or(usize::MAX));
                    let data = Bytes::copy_from_slice(&kept[..len]);
                    let (rank, stream) = (f.rank, f.stream);
                    later.push((node, NodeCommand::Replayed { replay, rank, stream, offset: 0, data }));
                }
                later.push((node, NodeCommand::ReplayDone { replay }));
            }
            NodeEvent::VerifyFiles { job, files } => {
                let bad = files
                    .into_iter()
                    .filter(|(path, len)| self.files.get(path).map(|f| f.len() as u64) != Some(*len))
                    .map(|(path, len)| format!("{path}: not {len} bytes"))
                    .collect();
                later.push((node, NodeCommand::FilesVerified { job, bad }));
            }
            NodeEvent::RemoveDir { path } => {
                let prefix = format!("{path}/");
                self.files.retain(|p, _| !p.starts_with(&prefix));
                self.removed.push(path);
            }
            NodeEvent::ToolReply { conn, reply, payload, .. } => self.replies.push((node, conn, reply, payload)),
            NodeEvent::Reply { conn, request_id, reply } => self.rank_replies.push((node, conn, request_id, reply)),
            _ => {}
        }
    }

    /// The replies on connection `conn` of node `node`.
    pub fn on(&self, node: NodeIdx, conn: ConnId) -> Vec<&ToolReply> {
        self.replies.iter().filter(|r| r.0 == node && r.1 == conn).map(|r| &r.2).collect()
    }

    /// Whether the request on (`node`, `conn`) got its last reply.
    pub fn ended(&self, node: NodeIdx, conn: ConnId) -> bool {
        self.on(node, conn).last().is_some_and(|r| r.ends_request())
    }
}
