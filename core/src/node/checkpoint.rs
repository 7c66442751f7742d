//! Checkpoints at the daemon node, the three sides of `p2pjob checkpoint` and
//! of the checkpoint lines of `p2pjob status`:
//!
//! - **Holder.** A checkpoint request about a job held here goes to the
//!   submitter ([`crate::job::Submitter::request_checkpoint`]); the tool that
//!   asked follows it: the ranks it reached ([`ToolReply::CheckpointAsked`]),
//!   then the cut ([`ToolReply::CheckpointTaken`]) or why there is none.
//! - **Executor.** Its asks ([`crate::job::ExecEvent::AskCheckpoint`],
//!   [`crate::job::ExecEvent::AskMove`]) go to the ranks as
//!   [`LocalReply::CheckpointWanted`] and [`LocalReply::MoveWanted`], unasked
//!   ([`PUSH_ID`]).
//! - **Ranks.** A rank's reports ([`LocalRequest::Checkpointed`],
//!   [`LocalRequest::Recovered`]) on its control connection go to the
//!   executor, which keeps them and passes them to the job's holder.

use std::time::Instant;

use bytes::Bytes;

use super::control::ToolReply;
use super::held::JobMeta;
use super::{Client, ConnId, DaemonNode};
use crate::job::{JobId, SubmitEvent};
use crate::local::{LocalError, LocalReply, LocalRequest, PUSH_ID};
use crate::machine::NodeAddr;

impl DaemonNode {
    /// `p2pjob checkpoint` of `job`, held here, for `client`.
    pub(super) fn ask_checkpoint(&mut self, client: Client, job: JobId) {
        match self.submitter.request_checkpoint(job) {
            Ok(request) => {
                if let Some(meta) = self.jobs.get_mut(&job) {
                    meta.checkpoint_waiters.push((request, client));
                }
            }
            Err(e) => self.send_reply(client, ToolReply::Error { message: e.to_string() }, Bytes::new()),
        }
    }

    /// `p2pjob migrate` of `rank` of `job`, held here, for `client`.
    pub(super) fn ask_migrate(&mut self, now: Instant, client: Client, job: JobId, rank: u32, to: Option<NodeAddr>) {
        match self.submitter.migrate(now, job, rank, to) {
            Ok(request) => {
                if let Some(meta) = self.jobs.get_mut(&job) {
                    meta.migrate_waiters.push((request, client));
                }
            }
            Err(e) => self.send_reply(client, ToolReply::Error { message: e.to_string() }, Bytes::new()),
        }
    }

    /// A rank moves: the tools that asked for it are told.
    pub(super) fn on_migrated(&mut self, job: JobId, rank: u32, from: NodeAddr, to: Option<NodeAddr>, epoch: u64) {
        self.answer_migrations(job, ToolReply::Migrated { job, rank, from, to, epoch });
    }

    /// A rank moved alone: the tools that asked for it are told.
    pub(super) fn on_moved(&mut self, job: JobId, rank: u32, from: NodeAddr, to: NodeAddr, epoch: u64) {
        self.answer_migrations(job, ToolReply::Moved { job, rank, from, to, epoch });
    }

    /// Every tool waiting for a migration of `job` gets `reply`, its last.
    fn answer_migrations(&mut self, job: JobId, reply: ToolReply) {
        let Some(meta) = self.jobs.get_mut(&job) else { return };
        let clients: Vec<Client> = meta.migrate_waiters.drain(..).map(|(_, c)| c).collect();
        for client in clients {
            self.send_reply(client, reply.clone(), Bytes::new());
        }
    }

    /// The job restarted after a loss before a rank it was moving moved:
    /// the tools waiting for that are told.
    pub(super) fn orphaned_migrations(&mut self, job: JobId, reason: &str) {
        let message = format!("rank of job {job} not moved: the job restarted {reason}");
        self.answer_migrations(job, ToolReply::Error { message });
    }

    /// How a checkpoint request of a job held here moved on: the tools that
    /// asked are told, and so are those waiting for a migration it serves
    /// (the ranks it reached, or why it failed; its cut is not their answer).
    pub(super) fn on_checkpoint_event(&mut self, e: SubmitEvent) {
        let (job, request, reply, migrating) = match e {
            SubmitEvent::CheckpointAsked { job, request, ranks } => {
                let reply = ToolReply::CheckpointAsked { job, ranks };
                (job, request, reply.clone(), Some(reply))
            }
            SubmitEvent::CheckpointTaken { job, request, cut } => {
                (job, request, ToolReply::CheckpointTaken { job, cut }, None)
            }
            SubmitEvent::CheckpointFailed { job, request, reason } => {
                let message = format!("checkpoint of job {job} not taken: {reason}");
                let moved = format!("rank of job {job} not moved: its checkpoint was not taken: {reason}");
                (job, request, ToolReply::Error { message }, Some(ToolReply::Error { message: moved }))
            }
            _ => return,
        };
        if let Some(reply) = migrating {
            self.tell_waiters(job, request, reply, |m| &mut m.migrate_waiters);
        }
        self.tell_waiters(job, request, reply, |m| &mut m.checkpoint_waiters);
    }

    /// Sends `reply` to the tools in `waiters` of `job` that wait for
    /// checkpoint request `request`; a last reply ends their wait.
    fn tell_waiters(
        &mut self,
        job: JobId,
        request: u64,
        reply: ToolReply,
        waiters: impl Fn(&mut JobMeta) -> &mut Vec<(u64, Client)>,
    ) {
        let Some(meta) = self.jobs.get_mut(&job) else { return };
        let list = waiters(meta);
        let clients: Vec<Client> = list.iter().filter(|(r, _)| *r == request).map(|(_, c)| *c).collect();
        if reply.ends_request() {
            list.retain(|(r, _)| *r != request);
        }
        for client in clients {
            self.send_reply(client, reply.clone(), Bytes::new());
        }
    }

    /// The executor asks the rank on control connection `conn` for a checkpoint.
    pub(super) fn push_checkpoint_wanted(&mut self, conn: ConnId, request: u64) {
        self.reply(conn, PUSH_ID, LocalReply::CheckpointWanted { request });
    }

    /// The executor asks the rank on control connection `conn` to move
    /// alone after the cut answering `request`.
    pub(super) fn push_move_wanted(&mut self, conn: ConnId, request: u64) {
        self.reply(conn, PUSH_ID, LocalReply::MoveWanted { request });
    }

    /// A rank's checkpoint report on control connection `conn`. A connection
    /// that serves no rank running here (a rank of `p2pmp-launch`, a stray
    /// process) is answered with a refusal and nothing is kept.
    pub(super) fn on_rank_report(&mut self, conn: ConnId, request_id: u64, req: LocalRequest) {
        let kept = match req {
            LocalRequest::Checkpointed { ckpt, request } => self.exec.handle_checkpointed(conn, ckpt, request),
            LocalRequest::Recovered { recovery } => self.exec.handle_recovered(conn, recovery),
            _ => return,
        };
        let reply = match kept {
            Ok(_) => LocalReply::Noted,
            Err(_) => LocalReply::Failed { error: LocalError::Refused },
        };
        self.reply(conn, request_id, reply);
    }
}
