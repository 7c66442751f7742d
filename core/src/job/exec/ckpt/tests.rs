//! The executor's checkpoint side: links, asks, reports.

use super::super::tests::{addr, ckpt, drain, env, guard, job_id, staged, two_ranks_running as running};
use super::*;
use crate::job::Stream;
use crate::job::{RESUME_FILES, RejectReason};
use crate::machine::Machine;
use crate::wire::Envelope;
use std::time::Instant;

#[test]
fn a_connection_serves_the_running_rank_whose_key_it_registers_and_the_first_one_stays() {
    let (mut e, j, _) = running();
    assert_eq!(e.handle_rank_registered(7, Id::hash("not a process key")), None);
    assert_eq!(e.handle_rank_registered(7, process_key(j, 1)), Some((j, 1)));
    assert_eq!(e.handle_rank_registered(7, process_key(j, 1)), Some((j, 1)), "again on the same connection");
    assert_eq!(e.handle_rank_registered(8, process_key(j, 1)), None, "another process takes nothing over");
    assert_eq!(e.handle_rank_registered(7, process_key(j, 0)), None, "one connection, one rank");
    assert_eq!(e.handle_rank_registered(9, process_key(job_id(2), 0)), None, "a job not running here");
    e.handle_conn_closed(7);
    assert_eq!(e.handle_rank_registered(8, process_key(j, 1)), Some((j, 1)), "free again once closed");
}

#[test]
fn a_request_reaches_the_linked_ranks_and_their_reports_go_to_the_submitter() {
    let (mut e, j, now) = running();
    e.handle_rank_registered(4, process_key(j, 1));
    e.handle_message(now, env(JobMsg::Checkpoint { job: j, request: 3 }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert_eq!(evs, [ExecEvent::AskCheckpoint { conn: 4, job: j, rank: 1, request: 3 }]);
    assert_eq!(msgs, [JobMsg::CheckpointAsked { job: j, request: 3, ranks: vec![1] }]);

    assert_eq!(e.handle_checkpointed(4, ckpt(1), 3), Ok((j, 1)));
    let recovery = RecoveryInfo { epoch: 1, unix_ms: 5 };
    assert_eq!(e.handle_recovered(4, recovery), Ok((j, 1)));
    assert_eq!(e.handle_checkpointed(4, ckpt(2), 0), Ok((j, 1)));
    let (msgs, _) = drain(&mut e);
    assert_eq!(
        msgs,
        [
            JobMsg::Checkpointed { job: j, rank: 1, ckpt: ckpt(1), request: 3 },
            JobMsg::Recovered { job: j, rank: 1, recovery },
            JobMsg::Checkpointed { job: j, rank: 1, ckpt: ckpt(2), request: 0 },
        ]
    );
    let kept = e.checkpoints(j, 1).unwrap();
    assert_eq!((kept.last, &kept.recoveries[..]), (Some(ckpt(2)), &[recovery][..]));
    assert_eq!(e.handle_checkpointed(5, ckpt(1), 0), Err(ExecCmdError::NoRank { conn: 5 }));
}

#[test]
fn an_exited_rank_is_asked_no_more() {
    let (mut e, j, now) = running();
    e.handle_rank_registered(4, process_key(j, 0));
    e.handle_rank_registered(6, process_key(j, 1));
    e.handle_process_output(j, 0, Stream::Stdout, Bytes::from_static(b"bye")).unwrap();
    e.handle_process_exit(j, 0, 0).unwrap();
    drain(&mut e);
    assert_eq!(e.handle_checkpointed(4, ckpt(1), 0), Err(ExecCmdError::NoRank { conn: 4 }));
    e.handle_message(now, env(JobMsg::Checkpoint { job: j, request: 1 }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert_eq!(evs, [ExecEvent::AskCheckpoint { conn: 6, job: j, rank: 1, request: 1 }]);
    assert_eq!(msgs, [JobMsg::CheckpointAsked { job: j, request: 1, ranks: vec![1] }]);
    // A request from a node that is not the job's submitter is dropped.
    let stranger = Envelope::new(addr(9).id(), addr(9), 0, JobMsg::Checkpoint { job: j, request: 2 });
    let ignored = e.ignored();
    e.handle_message(now, stranger);
    assert_eq!((drain(&mut e).0.len(), e.ignored()), (0, ignored + 1));
}

const RESTARTING_XML: &str = "<p2pjob><executable>prog</executable><processes>2</processes>\
    <requirement>linux</requirement><checkpoint>1s</checkpoint><restart>checkpoint</restart></p2pjob>";

/// Offers `ranks` of a two-rank job that restarts from its checkpoints and
/// stages its files; with `resume`, the cut and `files` of it first.
fn offer_restarting(e: &mut Execution, now: Instant, job: JobId, ranks: Vec<u32>, resume: Option<(JobId, u64)>) {
    let xml = Bytes::from_static(RESTARTING_XML.as_bytes());
    let digest = crate::job::submit::digest;
    e.handle_message(now, env(JobMsg::Offer { job, ranks, size: 2, digest: digest(&xml) }, Bytes::new()));
    if let Some((from, epoch)) = resume {
        e.handle_message(now, env(JobMsg::Resume { job, from, epoch }, Bytes::new()));
    }
    let prog = Bytes::from_static(b"#!/bin/sh\necho hi\n");
    for (file, name, data) in [(0, "job.xml", xml), (1, "prog", prog)] {
        let (total, d) = (data.len() as u64, digest(&data));
        let body = JobMsg::Stage { job, file, name: name.into(), offset: 0, total, digest: d };
        e.handle_message(now, env(body, data));
    }
}

fn stage_resume_file(e: &mut Execution, now: Instant, job: JobId, file: u32, name: &str) {
    let data = Bytes::from_static(b"P2PCKPT\0 a cut");
    let (total, digest) = (data.len() as u64, crate::job::submit::digest(&data));
    e.handle_message(now, env(JobMsg::Stage { job, file, name: name.into(), offset: 0, total, digest }, data));
}

#[test]
fn a_job_that_restarts_from_checkpoints_ships_each_file_a_rank_reports_one_at_a_time() {
    let now = Instant::now();
    let mut e = Execution::new(super::super::ExecConfig::new(2, "n"), addr(5));
    let j = job_id(1);
    offer_restarting(&mut e, now, j, vec![0, 1], None);
    e.handle_message(now, env(JobMsg::StageEnd { job: j, files: 2 }, Bytes::new()));
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    let (_, evs) = drain(&mut e);
    let spawned = evs.iter().find_map(|ev| match ev {
        ExecEvent::SpawnProcess { env, .. } => Some(env.clone()),
        _ => None,
    });
    let spawned = spawned.expect("spawned");
    assert!(spawned.contains(&("P2PMP_CHECKPOINT_DIR".to_owned(), ".".to_owned())), "{spawned:?}");
    assert!(!spawned.iter().any(|(k, _)| k == "P2PMP_RESTART"), "a first run resumes from nothing");
    e.handle_rank_registered(4, process_key(j, 1));

    e.handle_checkpointed(4, ckpt(1), 0).unwrap();
    let (_, evs) = drain(&mut e);
    assert_eq!(evs, [ExecEvent::ReadOutputFile { job: j, rank: 1, name: "rank-1.1.ckpt".into() }]);
    // A cut taken while the last file is still read is not shipped.
    e.handle_checkpointed(4, ckpt(2), 0).unwrap();
    assert_eq!(drain(&mut e).1, []);
    let data = Bytes::from(vec![7u8; 1000]);
    e.handle_output_file(j, 1, "rank-1.1.ckpt", Ok(data.clone()));
    let (msgs, _) = drain(&mut e);
    let digest = crate::job::submit::digest(&data);
    assert_eq!(msgs, [JobMsg::CheckpointFile { job: j, rank: 1, epoch: 1, offset: 0, total: 1000, digest }]);
    // Sent whole: the next cut is shipped again; a file that cannot be read is not.
    e.handle_checkpointed(4, ckpt(3), 0).unwrap();
    assert_eq!(drain(&mut e).1, [ExecEvent::ReadOutputFile { job: j, rank: 1, name: "rank-1.3.ckpt".into() }]);
    e.handle_output_file(j, 1, "rank-1.3.ckpt", Err("gone".into()));
    assert_eq!(drain(&mut e).0, []);
}

#[test]
fn a_job_that_does_not_restart_from_checkpoints_ships_only_the_cut_of_each_request_asked_here() {
    let (mut e, j, now) = running();
    e.handle_rank_registered(4, process_key(j, 1));
    e.handle_checkpointed(4, ckpt(1), 0).unwrap();
    let (msgs, evs) = drain(&mut e);
    assert_eq!(evs, []);
    assert!(matches!(msgs[..], [JobMsg::Checkpointed { .. }]), "{msgs:?}");
    // A request number never asked here (a rank may say anything) ships nothing.
    e.handle_checkpointed(4, ckpt(2), 99).unwrap();
    assert_eq!(drain(&mut e).1, []);
    e.handle_message(now, env(JobMsg::Checkpoint { job: j, request: 1 }, Bytes::new()));
    drain(&mut e);
    e.handle_checkpointed(4, ckpt(3), 1).unwrap();
    assert_eq!(drain(&mut e).1, [ExecEvent::ReadOutputFile { job: j, rank: 1, name: "rank-1.3.ckpt".into() }]);
    // Later cuts still cover request 1 (ranks report the newest they covered): not shipped again.
    e.handle_output_file(j, 1, "rank-1.3.ckpt", Ok(Bytes::from_static(b"c")));
    drain(&mut e);
    e.handle_checkpointed(4, ckpt(4), 1).unwrap();
    assert_eq!(drain(&mut e).1, []);
}

#[test]
fn a_node_shutting_down_takes_no_offer() {
    let (mut e, _, now) = running();
    e.handle_leaving();
    drain(&mut e);
    let other = job_id(2);
    e.handle_message(now, env(JobMsg::Offer { job: other, ranks: vec![0], size: 1, digest: Id::ZERO }, Bytes::new()));
    let (msgs, _) = drain(&mut e);
    assert!(matches!(&msgs[..], [JobMsg::Reject { reason: RejectReason::Leaving, .. }]), "{msgs:?}");
}

#[test]
fn a_resumed_rank_waits_for_its_file_of_the_cut_and_starts_from_it() {
    let now = Instant::now();
    let mut e = Execution::new(super::super::ExecConfig::new(2, "n"), addr(5));
    let (j, from) = (job_id(1), job_id(9));
    offer_restarting(&mut e, now, j, vec![1], Some((from, 4)));
    // Files that are not rank 1's of cut 4 are not taken.
    stage_resume_file(&mut e, now, j, RESUME_FILES, "rank-0.4.ckpt");
    stage_resume_file(&mut e, now, j, RESUME_FILES + 1, "rank-1.3.ckpt");
    e.handle_message(now, env(JobMsg::StageEnd { job: j, files: 2 }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert!(msgs.contains(&JobMsg::Resend { job: j, file: RESUME_FILES + 1 }), "{msgs:?}");
    assert!(!msgs.contains(&JobMsg::Staged { job: j }));
    let written: Vec<&str> = evs
        .iter()
        .filter_map(|ev| match ev {
            ExecEvent::WriteFile { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(written, ["job.xml", "prog"], "neither wrong file was written");

    stage_resume_file(&mut e, now, j, RESUME_FILES + 1, "rank-1.4.ckpt");
    e.handle_message(now, env(JobMsg::StageEnd { job: j, files: 2 }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert!(msgs.contains(&JobMsg::Staged { job: j }), "{msgs:?}");
    assert!(!evs.iter().any(|ev| matches!(ev, ExecEvent::CacheStore { name, .. } if name.ends_with(".ckpt"))));
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    let env_of_rank_1 = drain(&mut e).1.into_iter().find_map(|ev| match ev {
        ExecEvent::SpawnProcess { rank: 1, env, .. } => Some(env),
        _ => None,
    });
    let env_of_rank_1 = env_of_rank_1.expect("rank 1 spawned");
    assert!(env_of_rank_1.contains(&("P2PMP_RESTART".to_owned(), "rank-1.4.ckpt".to_owned())));
    assert!(env_of_rank_1.contains(&("P2PMP_RESTART_JOB".to_owned(), from.to_string())));
}

#[test]
fn a_node_shutting_down_asks_the_submitters_of_its_running_ranks_to_move_them() {
    let (mut e, j, now) = running();
    drain(&mut e);
    assert_eq!(e.handle_leaving(), 1);
    assert_eq!(e.draining(), 1);
    assert_eq!(drain(&mut e).0, [JobMsg::Leaving { job: j }]);
    // Told they stay: nothing to wait for.
    e.handle_message(now, env(JobMsg::Staying { job: j }, Bytes::new()));
    assert_eq!(e.draining(), 0);
    // Asked again, then stopped by the submitter (the ranks moved): no longer waited for.
    assert_eq!(e.handle_leaving(), 1);
    e.handle_message(now, env(JobMsg::Kill { job: j }, Bytes::new()));
    e.handle_process_exit(j, 0, -9).unwrap();
    e.handle_process_exit(j, 1, -9).unwrap();
    assert_eq!(e.draining(), 0);
    // A job this node submitted itself is not asked about (its holder goes too).
    let mut own = Execution::new(super::super::ExecConfig::new(2, "n"), addr(0));
    staged(&mut own, now, j, vec![0, 1], false);
    own.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    assert_eq!(own.handle_leaving(), 0);
}

#[test]
fn a_node_shutting_down_that_hands_its_own_job_over_asks_the_deputy_to_move_its_ranks_once_adopted() {
    let now = Instant::now();
    let j = job_id(1);
    let mut own = Execution::new(super::super::ExecConfig::new(2, "n"), addr(0));
    staged(&mut own, now, j, vec![0, 1], false);
    own.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    let g = guard(j, vec![addr(7)]);
    own.handle_message(now, env(g, Bytes::new()));
    drain(&mut own);
    assert_eq!(own.handle_leaving(), 1, "waited for");
    assert_eq!(drain(&mut own).0, [], "nobody to ask until the deputy holds the job");
    let deputy = addr(7);
    own.handle_message(now, Envelope::new(deputy.id(), deputy, 0, JobMsg::Adopt { job: j }));
    let mut sent = Vec::new();
    while let Some(a) = own.poll_action() {
        if let crate::machine::Action::Send { to, msg } = a {
            sent.push((to, msg.body));
        }
    }
    assert_eq!(sent.last(), Some(&(deputy, JobMsg::Leaving { job: j })), "{sent:?}");
    assert_eq!(own.draining(), 1);
    own.handle_message(now, Envelope::new(deputy.id(), deputy, 0, JobMsg::Staying { job: j }));
    assert_eq!(own.draining(), 0);
}
