//! A signed job: its files held to the signature before anything is offered,
//! and a node refusing them while they arrive.

use super::*;
use crate::auth::{AuthError, FileMismatch, JobAuth, JobManifest, SecretKey, job_file_digest};

/// `j` signed with its files as the harness reads them (see [`Harness::run`]),
/// or with `changed` as the contents of the executable.
fn signed(j: &JobDescription, changed: Option<&[u8]>) -> JobAuth {
    let files = j
        .staged_sources("")
        .iter()
        .map(|src| {
            let read = format!("contents of {}", src.path);
            let data = match (src.file, changed) {
                (1, Some(c)) => c,
                _ => read.as_bytes(),
            };
            src.read_as(data.len() as u64, digest(data))
        })
        .collect();
    let manifest = JobManifest { job_file: job_file_digest(j), files, timestamp_ms: 1, nonce: 2 };
    JobAuth::sign(&SecretKey::from_seed([4; 32]), manifest)
}

fn submit_signed(h: &Harness, j: JobDescription, auth: JobAuth) -> (Submitter, JobId) {
    let mut sub = Submitter::new(SubmitConfig::default(), addr(0), 9);
    let (id, _) = sub.submit_signed(h.now, 1, j, 0, Some(auth)).unwrap();
    (sub, id)
}

/// Runs the one job of `sub` through the harness.
fn run(h: &mut Harness, sub: &mut Submitter, id: JobId, steps: usize) {
    let mut s = sub.jobs.remove(&id).unwrap();
    h.run(&mut s, steps);
    sub.jobs.insert(id, s);
}

#[test]
fn a_signed_job_whose_files_match_runs_with_signed_offers() {
    let mut h = Harness::new(&[(addr(1), res(2, 8000, &[]), Behave::Accept)]);
    let j = job(2, &["linux"]);
    let auth = signed(&j, None);
    let (mut sub, id) = submit_signed(&h, j, auth.clone());
    run(&mut h, &mut sub, id, 30);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0; 2] }), "{:?}", h.events);
    let signed_offers: Vec<&JobAuth> = h
        .sent
        .iter()
        .filter_map(|(_, m, _)| match m {
            JobMsg::SignedOffer { auth, .. } => Some(auth),
            _ => None,
        })
        .collect();
    assert_eq!(signed_offers, [&auth], "the offer carries the submitter's signature");
}

#[test]
fn a_file_changed_since_it_was_signed_fails_the_job_before_any_offer() {
    let mut h = Harness::new(&[(addr(1), res(2, 8000, &[]), Behave::Accept)]);
    let j = job(1, &["linux"]);
    let auth = signed(&j, Some(b"the program the user signed"));
    let (mut sub, id) = submit_signed(&h, j, auth);
    run(&mut h, &mut sub, id, 30);
    let Some(Outcome::Failed(e @ SubmitError::NotAsSigned { path, error })) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(path, "./ring");
    assert!(matches!(error, FileMismatch::Length { file: 1, .. } | FileMismatch::Digest { file: 1, .. }));
    assert!(e.to_string().contains("nothing was started"), "{e}");
    assert!(h.offers().is_empty(), "offered: {:?}", h.offers());
    assert_eq!(h.count(|m| matches!(m, JobMsg::Stage { .. })), 0);
}

#[test]
fn a_signature_that_does_not_cover_the_job_is_refused_at_submit() {
    let h = Harness::new(&[]);
    let j = job(1, &["linux"]);
    let mut sub = Submitter::new(SubmitConfig::default(), addr(0), 9);
    let other = signed(&job(2, &["linux"]), None);
    let got = sub.submit_signed(h.now, 1, j.clone(), 0, Some(other));
    assert_eq!(got, Err(SubmitCmdError::BadSignature(AuthError::OtherJobFile)));
    // Signed over the job file but listing a file fewer than it stages.
    let mut short = signed(&j, None).manifest;
    short.files.pop();
    let short = JobAuth::sign(&SecretKey::from_seed([4; 32]), short);
    let got = sub.submit_signed(h.now, 2, j, 0, Some(short));
    assert_eq!(got, Err(SubmitCmdError::NotAsSigned(FileMismatch::Count { count: 3, signed: 2 })));
    assert!(sub.jobs().next().is_none(), "nothing was taken");
}

#[test]
fn a_node_refusing_the_files_while_they_arrive_is_left_with_its_reason() {
    let mut h = Harness::new(&[
        (addr(1), res(1, 8000, &[]), Behave::RefuseFiles),
        (addr(2), res(1, 8000, &[]), Behave::RefuseFiles),
    ]);
    let j = job(1, &["linux"]);
    let (mut sub, id) = submit_signed(&h, j.clone(), signed(&j, None));
    run(&mut h, &mut sub, id, 30);
    let Some(Outcome::Failed(e @ SubmitError::Refused { reasons, .. })) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    for a in [addr(1), addr(2)] {
        assert!(e.to_string().contains(&format!("node {a} refused the job's files")), "{e}");
    }
    assert_eq!(h.count(|m| matches!(m, JobMsg::Start { .. })), 0);
    // One node refusing: the job runs on the other.
    let mut h = Harness::new(&[
        (addr(1), res(1, 8000, &[]), Behave::RefuseFiles),
        (addr(2), res(1, 8000, &[]), Behave::Accept),
    ]);
    let (mut sub, id) = submit_signed(&h, j.clone(), signed(&j, None));
    run(&mut h, &mut sub, id, 40);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0] }), "{:?}", h.events);
}
