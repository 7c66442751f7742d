//! The executor holds every staged file of a signed job to its manifest.

use super::*;
use crate::auth::{JobAuth, SecretKey};

const PROG: &[u8] = b"#!/bin/sh\necho hi\n";

fn entry(file: u32, name: &str, data: &[u8]) -> StagedFile {
    StagedFile { file, name: name.into(), total: data.len() as u64, digest: digest(data) }
}

/// The job file and the program of [`XML`] as their submitter signed them.
fn signed_files() -> (StagedFile, StagedFile, JobAuth) {
    let (xml, prog) = (entry(0, "job.xml", XML.as_bytes()), entry(1, "prog", PROG));
    let manifest = JobManifest { job_file: xml.digest, files: vec![prog.clone()], timestamp_ms: 7, nonce: 8 };
    (xml, prog, JobAuth::sign(&SecretKey::from_seed([3; 32]), manifest))
}

/// An executor that took a signed offer of both ranks of job 1.
fn offered() -> (Execution, JobId, Instant) {
    let now = Instant::now();
    let mut e = Execution::new(ExecConfig::new(2, "127.0.0.1:9000"), addr(5));
    let (xml, _, auth) = signed_files();
    let job = job_id(1);
    let offer = JobMsg::SignedOffer { job, ranks: vec![0, 1], size: 2, digest: xml.digest, auth };
    e.handle_message(now, env(offer, Bytes::new()));
    assert!(matches!(drain(&mut e).0[..], [JobMsg::Accept { .. }]));
    (e, job, now)
}

/// The refusal sent, if the job was turned down, and whether anything started.
fn refusal(msgs: &[JobMsg], evs: &[ExecEvent]) -> Option<String> {
    assert!(!evs.iter().any(|e| matches!(e, ExecEvent::SpawnProcess { .. })), "a rank started");
    msgs.iter().find_map(|m| match m {
        JobMsg::Reject { reason: RejectReason::NotAllowed(why), ranks, .. } => {
            assert_eq!(ranks, &[0, 1], "every rank held here is given up");
            Some(why.clone())
        }
        _ => None,
    })
}

#[test]
fn a_signed_job_whose_files_match_runs() {
    let (mut e, job, now) = offered();
    let (xml, prog, _) = signed_files();
    offer_and_manifest_only(&mut e, now, job, &[xml.clone(), prog.clone()]);
    stage_file(&mut e, now, job, &xml, &Bytes::from_static(XML.as_bytes()));
    stage_file(&mut e, now, job, &prog, &Bytes::from_static(PROG));
    e.handle_message(now, env(JobMsg::StageEnd { job, files: 2 }, Bytes::new()));
    assert_eq!(drain(&mut e).0.last(), Some(&JobMsg::Staged { job }));
    e.handle_message(now, env(JobMsg::Start { job }, Bytes::new()));
    let evs = drain(&mut e).1;
    assert_eq!(evs.iter().filter(|e| matches!(e, ExecEvent::SpawnProcess { .. })).count(), 2);
}

#[test]
fn a_swapped_executable_is_refused_naming_it_and_nothing_starts() {
    let (mut e, job, now) = offered();
    let (xml, prog, _) = signed_files();
    let evil = Bytes::from_static(b"#!/bin/sh\nrm -rf ~\n");
    // The manifest is sent honestly, the chunk carries other bytes and their digest.
    offer_and_manifest_only(&mut e, now, job, &[xml.clone(), prog.clone()]);
    stage_file(&mut e, now, job, &xml, &Bytes::from_static(XML.as_bytes()));
    let (msgs, evs) = stage_file(&mut e, now, job, &entry(1, "prog", &evil), &evil);
    let why = refusal(&msgs, &evs).expect("refused");
    assert!(why.contains(&format!("node {} refused the job's files", addr(5))), "{why}");
    assert!(why.contains("\"prog\" (file 1)") && why.contains("the submitter signed"), "{why}");
    assert!(evs.contains(&ExecEvent::Cleanup { job }) && e.free_slots() == 2, "{evs:?}");
    assert!(!evs.iter().any(|ev| matches!(ev, ExecEvent::WriteFile { .. })), "the swapped bytes were written");
    // What follows finds no job.
    e.handle_message(now, env(JobMsg::StageEnd { job, files: 2 }, Bytes::new()));
    e.handle_message(now, env(JobMsg::Start { job }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert!(refusal(&msgs, &evs).is_none() && msgs.is_empty());
}

#[test]
fn a_manifest_unlike_the_signed_one_is_refused_before_the_cache_is_used() {
    let (mut e, job, now) = offered();
    let (xml, prog, _) = signed_files();
    let other = StagedFile { digest: Id::hash(b"cached elsewhere"), ..prog.clone() };
    let (msgs, evs) = offer_and_manifest_only(&mut e, now, job, &[xml.clone(), other]);
    assert!(refusal(&msgs, &evs).is_some_and(|w| w.contains("has SHA-1")), "{msgs:?}");
    assert!(!evs.iter().any(|ev| matches!(ev, ExecEvent::CacheFetch { .. })));
    assert!(!msgs.iter().any(|m| matches!(m, JobMsg::Have { .. })));
    // A file more than signed is refused too.
    let (mut e, job, now) = offered();
    let extra = entry(2, "in.dat", b"data");
    let (msgs, evs) = offer_and_manifest_only(&mut e, now, job, &[xml, prog, extra]);
    assert!(refusal(&msgs, &evs).is_some_and(|w| w.contains("3 file(s) staged but the submitter signed 2")));
}

#[test]
fn fewer_files_than_signed_are_refused_at_the_end_of_staging() {
    let (mut e, job, now) = offered();
    let (xml, _, _) = signed_files();
    stage_file(&mut e, now, job, &xml, &Bytes::from_static(XML.as_bytes()));
    e.handle_message(now, env(JobMsg::StageEnd { job, files: 1 }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert!(refusal(&msgs, &evs).is_some_and(|w| w.contains("1 file(s) staged but the submitter signed 2")));
}

#[test]
fn a_signed_offer_again_with_another_manifest_is_ignored() {
    let (mut e, job, now) = offered();
    let (xml, prog, auth) = signed_files();
    let manifest = JobManifest { nonce: 9, ..auth.manifest };
    let other = JobAuth::sign(&SecretKey::from_seed([3; 32]), manifest);
    let offer = JobMsg::SignedOffer { job, ranks: vec![0, 1], size: 2, digest: xml.digest, auth: other };
    e.handle_message(now, env(offer, Bytes::new()));
    assert!(drain(&mut e).0.is_empty());
    // Unsigned, the same job is not the signed one either.
    e.handle_message(now, env(JobMsg::Offer { job, ranks: vec![0, 1], size: 2, digest: xml.digest }, Bytes::new()));
    assert!(drain(&mut e).0.is_empty());
    assert_eq!(e.ignored(), 2);
    // The signed manifest still holds.
    let (msgs, _) = offer_and_manifest_only(&mut e, now, job, &[xml, prog]);
    assert_eq!(msgs.last(), Some(&JobMsg::Have { job, files: vec![] }));
}

/// Sends `files` as the job's manifest.
fn offer_and_manifest_only(
    e: &mut Execution,
    now: Instant,
    job: JobId,
    files: &[StagedFile],
) -> (Vec<JobMsg>, Vec<ExecEvent>) {
    e.handle_message(now, env(JobMsg::Manifest { job, files: files.to_vec() }, Bytes::new()));
    drain(e)
}
