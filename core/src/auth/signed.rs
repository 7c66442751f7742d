//! What gets signed: a tool request (its encoded bytes, a timestamp and a
//! nonce), and a job (its [`JobManifest`]). Each signature covers a domain tag
//! first, so a signature of one kind is never taken for the other.

use serde::{Deserialize, Serialize};

use super::{AuthError, JobManifest, PublicKey, SecretKey, Signature};
use crate::id::Id;

/// The domain tag of a signed tool request.
const REQUEST_DOMAIN: &[u8] = b"p2pmp tool request v1\0";

/// Most bytes of a signed request's body (a job file plus paths fits easily).
pub const MAX_SIGNED_BODY: usize = 4 << 20;

/// A tool request signed by its sender. `body` is the encoded request, kept as
/// the exact bytes signed, so nothing is re-encoded before the check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedRequest {
    /// Who signed.
    pub key: PublicKey,
    /// The signer's wall clock, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// Random; a (key, nonce) pair is taken once within the window.
    pub nonce: u64,
    /// Over [`SignedRequest::signed_bytes`].
    pub signature: Signature,
    /// The encoded request.
    pub body: Vec<u8>,
}

impl SignedRequest {
    /// Signs `body` with `secret`, stamped `timestamp_ms`, with `nonce`.
    pub fn sign(secret: &SecretKey, timestamp_ms: u64, nonce: u64, body: Vec<u8>) -> Self {
        let signature = secret.sign(&Self::signed_bytes(timestamp_ms, nonce, &body));
        SignedRequest { key: secret.public(), timestamp_ms, nonce, signature, body }
    }

    /// The canonical bytes a request signature covers: the domain tag, the
    /// timestamp and the nonce (8 bytes big-endian each), the body's length
    /// (8 bytes big-endian) and the body.
    pub fn signed_bytes(timestamp_ms: u64, nonce: u64, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(REQUEST_DOMAIN.len() + 24 + body.len());
        m.extend_from_slice(REQUEST_DOMAIN);
        m.extend_from_slice(&timestamp_ms.to_be_bytes());
        m.extend_from_slice(&nonce.to_be_bytes());
        m.extend_from_slice(&(body.len() as u64).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// Whether the signature holds (the window and replays are the
    /// [`super::ReplayGuard`]'s business).
    pub fn verify(&self) -> Result<(), AuthError> {
        if self.body.len() > MAX_SIGNED_BODY {
            return Err(AuthError::TooLarge(self.body.len()));
        }
        let bytes = Self::signed_bytes(self.timestamp_ms, self.nonce, &self.body);
        self.key.verify(&bytes, &self.signature).map_err(AuthError::Signature)
    }
}

/// A job's credentials: its submitter's key and signature over the job
/// manifest (the job file, every staged file, a timestamp and a nonce). The
/// submitting node and every executor check it themselves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobAuth {
    /// The submitter's key.
    pub key: PublicKey,
    /// What is signed.
    pub manifest: JobManifest,
    /// Over [`JobManifest::signed_bytes`].
    pub signature: Signature,
}

impl JobAuth {
    /// Signs `manifest` with `secret`.
    pub fn sign(secret: &SecretKey, manifest: JobManifest) -> Self {
        let signature = secret.sign(&manifest.signed_bytes());
        JobAuth { key: secret.public(), manifest, signature }
    }

    /// Whether this is a well-formed manifest, signed by `key`, of the job
    /// file with SHA-1 `digest` (freshness is the executor's
    /// [`super::ReplayGuard`]'s business).
    pub fn verify(&self, digest: &Id) -> Result<(), AuthError> {
        self.manifest.check_shape()?;
        self.key.verify(&self.manifest.signed_bytes(), &self.signature).map_err(AuthError::Signature)?;
        match self.manifest.job_file == *digest {
            true => Ok(()),
            false => Err(AuthError::OtherJobFile),
        }
    }
}
