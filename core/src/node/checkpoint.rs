//! Checkpoints at the daemon node, the three sides of `p2pjob checkpoint` and
//! of the checkpoint lines of `p2pjob status`:
//!
//! - **Holder.** A checkpoint request about a job held here goes to the
//!   submitter ([`crate::job::Submitter::request_checkpoint`]); the tool that
//!   asked follows it: the ranks it reached ([`ToolReply::CheckpointAsked`]),
//!   then the cut ([`ToolReply::CheckpointTaken`]) or why there is none.
//! - **Executor.** Its asks ([`crate::job::ExecEvent::AskCheckpoint`]) go to
//!   the ranks as [`LocalReply::CheckpointWanted`], unasked ([`PUSH_ID`]).
//! - **Ranks.** A rank's reports ([`LocalRequest::Checkpointed`],
//!   [`LocalRequest::Recovered`]) on its control connection go to the
//!   executor, which keeps them and passes them to the job's holder.

use bytes::Bytes;

use super::control::ToolReply;
use super::{Client, ConnId, DaemonNode};
use crate::job::{JobId, SubmitEvent};
use crate::local::{LocalError, LocalReply, LocalRequest, PUSH_ID};

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

    /// How a checkpoint request of a job held here moved on: the tools that
    /// asked are told.
    pub(super) fn on_checkpoint_event(&mut self, e: SubmitEvent) {
        let (job, request, reply) = match e {
            SubmitEvent::CheckpointAsked { job, request, ranks } => {
                (job, request, ToolReply::CheckpointAsked { job, ranks })
            }
            SubmitEvent::CheckpointTaken { job, request, cut } => {
                (job, request, ToolReply::CheckpointTaken { job, cut })
            }
            SubmitEvent::CheckpointFailed { job, request, reason } => {
                let message = format!("checkpoint of job {job} not taken: {reason}");
                (job, request, ToolReply::Error { message })
            }
            _ => return,
        };
        let Some(meta) = self.jobs.get_mut(&job) else { return };
        let clients: Vec<Client> =
            meta.checkpoint_waiters.iter().filter(|(r, _)| *r == request).map(|(_, c)| *c).collect();
        if reply.ends_request() {
            meta.checkpoint_waiters.retain(|(r, _)| *r != request);
        }
        for client in clients {
            self.send_reply(client, reply.clone(), Bytes::new());
        }
    }

    /// The executor asks the rank on control connection `conn` for a checkpoint.
    pub(super) fn push_checkpoint_wanted(&mut self, conn: ConnId, request: u64) {
        self.reply(conn, PUSH_ID, LocalReply::CheckpointWanted { request });
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
