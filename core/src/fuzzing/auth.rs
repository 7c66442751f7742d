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
    let JobMsg::SignedOffer { digest, auth, .. } = msg else { return };
    assert!(auth.manifest.files.len() <= MAX_MANIFEST_FILES, "a manifest over the bound decoded");
    let listed = SecretKey::from_seed([7; 32]).public();
    let policy = Policy::keys([listed], []);
    if policy.admits("n", &digest, Some(&auth)).is_ok() {
        assert_eq!(auth.key, listed, "a key not on the list was admitted");
        assert!(auth.verify(&digest).is_ok());
        let m = &auth.manifest;
        let mut guard = ReplayGuard::default();
        let (a, b) = (NodeAddr::loopback(1, 7000), NodeAddr::loopback(2, 7000));
        if guard.check_for(m.timestamp_ms, auth.key, m.timestamp_ms, m.nonce, a).is_ok() {
            assert!(guard.check_for(m.timestamp_ms, auth.key, m.timestamp_ms, m.nonce, a).is_ok());
            let other = guard.check_for(m.timestamp_ms, auth.key, m.timestamp_ms, m.nonce, b);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{JobAuth, JobManifest};
    use crate::job::JobId;

    /// A signed offer by the key the `job_signature` target allows, over a
    /// job file and two staged files: it reaches the target's deepest checks.
    fn signed_offer() -> Vec<u8> {
        let file = |file, name: &str, data: &[u8]| StagedFile {
            file,
            name: name.into(),
            total: data.len() as u64,
            digest: Id::hash(data),
        };
        let files = vec![file(1, "prog", b"ELF"), file(2, "in.dat", b"data")];
        let job_file = Id::hash(b"<p2pjob/>");
        let manifest = JobManifest { job_file, files, timestamp_ms: 1_700_000_000_000, nonce: 5 };
        let auth = JobAuth::sign(&SecretKey::from_seed([7; 32]), manifest);
        let job = JobId::derive(NodeAddr::loopback(1, 7000), 1, 1);
        postcard::to_allocvec(&JobMsg::SignedOffer { job, ranks: vec![0, 1], size: 2, digest: job_file, auth }).unwrap()
    }

    /// A signed submit with its job signature, as `p2pjob` sends it.
    fn signed_submit() -> Vec<u8> {
        let xml = crate::job::JobDescription::run("/bin/true", vec![], 1).to_xml();
        let submit = ToolRequest::Submit { nonce: 1, xml, base_dir: "/tmp".into(), watch: false };
        let staged = submit.staged_sources().iter().map(|s| s.read_as(3, Id::hash(b"ELF"))).collect();
        postcard::to_allocvec(&submit.sign(&SecretKey::from_seed([7; 32]), 1_700_000_000_000, 9, staged)).unwrap()
    }

    /// The seeds reach past decoding; `P2PMP_WRITE_SEEDS=1` writes them to
    /// fuzz/corpus/job_signature/ and fuzz/corpus/signed_request/.
    #[test]
    fn the_seeds_decode_and_pass_their_checks() {
        let offer = signed_offer();
        let Ok(JobMsg::SignedOffer { digest, auth, .. }) = postcard::from_bytes::<JobMsg>(&offer) else { panic!() };
        assert_eq!(auth.verify(&digest), Ok(()));
        job_signature(&offer);
        let submit = signed_submit();
        let Ok(ToolRequest::Signed { request, job: Some(_) }) = postcard::from_bytes::<ToolRequest>(&submit) else {
            panic!()
        };
        assert!(ToolRequest::open(&request).is_ok());
        signed_request(&submit);
        if std::env::var_os("P2PMP_WRITE_SEEDS").is_some() {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
            std::fs::write(root.join("job_signature/offer"), offer).unwrap();
            std::fs::write(root.join("signed_request/submit_with_job"), submit).unwrap();
        }
    }
}
