//! Fuzz logic for what identity and authorisation decode from peers and
//! tools: the key text form, signed tool requests, job signatures.

use crate::auth::{JobAuth, Policy, PublicKey, ReplayGuard, SecretKey};
use crate::id::Id;
use crate::job::JobMsg;
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
/// offer's credentials are checked against an allow-list without panic, and
/// only a key on the list is admitted.
pub fn job_signature(data: &[u8]) {
    let Ok(msg) = postcard::from_bytes::<JobMsg>(data) else { return };
    let JobMsg::SignedOffer { digest, auth, .. } = msg else { return };
    let listed = SecretKey::from_seed([7; 32]).public();
    let policy = Policy::keys([listed], []);
    if policy.admits("n", &digest, Some(&auth)).is_ok() {
        assert_eq!(auth.key, listed, "a key not on the list was admitted");
        assert!(auth.verify(&digest).is_ok());
    }
    let _ = JobAuth { key: auth.key, signature: auth.signature }.verify(&Id::hash(data));
}
