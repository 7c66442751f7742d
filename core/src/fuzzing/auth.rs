//! Fuzz logic for what identity and authorisation decode from peers and
//! tools: the key text form, signed tool requests, job signatures.

use crate::auth::{AuthError, FileMismatch, MAX_MANIFEST_FILES, Policy, PublicKey, ReplayGuard, SecretKey};
use crate::id::Id;
use crate::job::{JobMsg, StagedFile};
use crate::machine::NodeAddr;
use crate::node::control::ToolRequest;

/// Any text through the strict key parser: no panic, and what it accepts it
/// writes back as exactly the same text.
pub fn key_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(k) = PublicKey::parse(text) {
        assert_eq!(k.to_string(), text, "a parsed key does not print back the same");
    }
}

/// A tool request's bytes (as a control connection carries them): a signed
/// one is opened (signature checked, body decoded) and put through a replay
/// guard twice; no panic, a request opened is never itself signed, and the
/// second take of the same request is refused.
pub fn signed_request(data: &[u8]) {
    let Ok(ToolRequest::Signed { request, job }) = postcard::from_bytes::<ToolRequest>(data) else { return };
    if let Some(j) = job {
        let _ = j.verify(&Id::hash(data));
    }
    if let Ok(inner) = ToolRequest::open(&request) {
        assert!(!matches!(inner, ToolRequest::Signed { .. }), "a signed request opened to a signed one");
        let mut guard = ReplayGuard::default();
        let now = request.timestamp_ms;
        if guard.check(now, request.key, request.timestamp_ms, request.nonce).is_ok() {
            assert!(guard.check(now, request.key, request.timestamp_ms, request.nonce).is_err(), "replay taken");
        }
    }
}

/// A job message's bytes through the executor's admission check: a signed
/// offer's credentials (its manifest decoded with its bound on files) are
/// checked against an allow-list without panic, and only a key on the list is
/// admitted; an admitted signature is taken once per holder by a job replay
/// guard, and the manifest judges staged files (its own, and one altered)
/// without panic, naming the altered one.
pub fn job_signature(data: &[u8]) {
    let Ok(msg) = postcard::from_bytes::<JobMsg>(data) else { return };
    let JobMsg::SignedOffer { job, digest, auth, .. } = msg else { return };
    assert!(auth.manifest.files.len() <= MAX_MANIFEST_FILES, "a manifest over the bound decoded");
    let listed = SecretKey::from_seed([7; 32]).public();
    let policy = Policy::keys([listed], []);
    if policy.admits("n", &digest, Some(&auth)).is_ok() {
        assert_eq!(auth.key, listed, "a key not on the list was admitted");
        assert!(auth.verify(&digest).is_ok());
        let m = &auth.manifest;
        let mut guard = ReplayGuard::default();
        let (a, b) = (NodeAddr::loopback(1, 7000), NodeAddr::loopback(2, 7000));
        if guard.check_for(m.timestamp_ms, auth.key, m.timestamp_ms, m.nonce, (a, job)).is_ok() {
            assert!(guard.check_for(m.timestamp_ms, auth.key, m.timestamp_ms, m.nonce, (a, job)).is_ok());
            let other = guard.check_for(m.timestamp_ms, auth.key, m.timestamp_ms, m.nonce, (b, job));
            assert_eq!(other, Err(AuthError::Replayed), "another node's replay was taken");
        }
        assert_eq!(m.check_count(m.staged_count()), Ok(()));
        for f in &m.files {
            assert_eq!(m.check(f), Ok(()), "a signed file does not match itself");
            let altered = StagedFile { total: f.total ^ 1, ..f.clone() };
            assert!(matches!(m.check(&altered), Err(FileMismatch::Length { file, .. }) if file == f.file));
        }
    }
    let _ = auth.verify(&Id::hash(data));
}
