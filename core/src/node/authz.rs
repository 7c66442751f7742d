//! The node's authorisation checks: signed tool requests (signature, window,
//! replays), who may act on a job held here, and whether an offered job's
//! submitter may run jobs on this node (checked here, whoever forwarded it).

use std::time::Instant;

use bytes::Bytes;

use super::control::ToolRequest;
use super::{DaemonNode, NodeMsg};
use crate::auth::{AuthError, JobAuth, PublicKey};
use crate::job::{JobId, JobMsg, RejectReason};
use crate::machine::NodeAddr;

/// A tool request once its signature (if any) was checked.
#[derive(Debug)]
pub(super) struct Authenticated {
    /// The request itself (the inner one of a signed request).
    pub(super) req: ToolRequest,
    /// Who signed it.
    pub(super) key: Option<PublicKey>,
    /// A submit's job signature, by the same key.
    pub(super) job: Option<JobAuth>,
}

impl DaemonNode {
    /// Checks a tool request: a signed one's signature, timestamp window and
    /// nonce; an unsigned one about a job is refused when the policy wants
    /// signatures.
    pub(super) fn authenticate(&mut self, now: Instant, req: ToolRequest) -> Result<Authenticated, AuthError> {
        match req {
            ToolRequest::Signed { request, job } => {
                let inner = ToolRequest::open(&request)?;
                self.replay.check(self.wall_ms(now), request.key, request.timestamp_ms, request.nonce)?;
                let job = job.filter(|j| j.key == request.key);
                Ok(Authenticated { req: inner, key: Some(request.key), job })
            }
            req if req.about_a_job() && self.policy.requires_signature() => Err(AuthError::Unsigned),
            req => Ok(Authenticated { req, key: None, job: None }),
        }
    }

    /// Whether `key` may see or act on `job`, held here: its submitter's key or
    /// an admin's (anyone on an open node).
    pub(super) fn may_act(&self, job: JobId, key: Option<&PublicKey>) -> bool {
        let owner = self.jobs.get(&job).and_then(|m| m.owner.as_ref());
        self.policy.may_act(key, owner)
    }

    /// A job message for the executor: an offer passes only when this node's
    /// policy admits its submitter's credentials; otherwise the submitter is
    /// told why (and moves on to other nodes) and the refused job is returned.
    pub(super) fn admit(&mut self, from: NodeAddr, msg: JobMsg) -> Result<JobMsg, JobId> {
        let (job, ranks, size, digest, auth) = match msg {
            JobMsg::SignedOffer { job, ranks, size, digest, auth } => (job, ranks, size, digest, Some(auth)),
            JobMsg::Offer { job, ranks, size, digest } => (job, ranks, size, digest, None),
            other => return Ok(other),
        };
        match self.policy.admits(&self.addr.to_string(), &digest, auth.as_ref()) {
            Ok(()) => Ok(JobMsg::Offer { job, ranks, size, digest }),
            Err(refusal) => {
                tracing::info!(%job, %from, "offer refused: {refusal}");
                let reason = RejectReason::NotAllowed(refusal.to_string());
                self.send(from, NodeMsg::Job(JobMsg::Reject { job, ranks, reason }), Bytes::new());
                Err(job)
            }
        }
    }
}
