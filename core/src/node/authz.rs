//! The node's authorisation checks: signed tool requests (signature, window,
//! replays), who may act on a job held here, and whether an offered job's
//! submitter may run jobs on this node (checked here, whoever forwarded it):
//! its signature, its key, and its freshness (within the window, and not
//! presented before by another node).

use std::time::Instant;

use bytes::Bytes;

use super::control::ToolRequest;
use super::{DaemonNode, NodeMsg};
use crate::auth::{AuthError, JobAuth, PublicKey, Refusal};
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
                let job = job.filter(|j| j.key == request.key).map(|j| *j);
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
    /// policy admits its submitter's credentials and a signed one is fresh;
    /// otherwise the submitter is told why (and moves on to other nodes) and
    /// the refused job is returned. A signed offer goes on signed: the
    /// executor holds the staged files to its manifest.
    pub(super) fn admit(&mut self, now: Instant, from: NodeAddr, msg: JobMsg) -> Result<JobMsg, JobId> {
        let (job, ranks, digest, auth) = match &msg {
            JobMsg::SignedOffer { job, ranks, digest, auth, .. } => (*job, ranks, digest, Some(auth)),
            JobMsg::Offer { job, ranks, digest, .. } => (*job, ranks, digest, None),
            _ => return Ok(msg),
        };
        let node = self.addr.to_string();
        let admitted = self.policy.admits(&node, digest, auth).and_then(|()| {
            let Some(a) = auth else { return Ok(()) };
            let m = &a.manifest;
            let fresh = self.job_replay.check_for(self.wall_ms(now), a.key, m.timestamp_ms, m.nonce, from);
            fresh.map_err(|error| Refusal::BadSignature { node, error })
        });
        match admitted {
            Ok(()) => Ok(msg),
            Err(refusal) => {
                let ranks = ranks.clone();
                tracing::info!(%job, %from, "offer refused: {refusal}");
                let reason = RejectReason::NotAllowed(refusal.to_string());
                self.send(from, NodeMsg::Job(JobMsg::Reject { job, ranks, reason }), Bytes::new());
                Err(job)
            }
        }
    }
}
