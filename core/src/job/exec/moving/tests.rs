//! The executor's side of a rank that moves alone: the node it leaves and
//! the node it moves to.

use std::time::Instant;

use super::super::tests::{addr, ckpt, drain, env, job_id, two_ranks_running};
use super::*;
use crate::job::{CARRIED_FILES, process_key};
use crate::machine::Machine;

/// An executor running both ranks of job 1, rank 1 linked on connection 4.
fn running() -> (Execution, JobId, Instant) {
    let (mut e, j, now) = two_ranks_running();
    e.handle_rank_registered(4, process_key(j, 1));
    (e, j, now)
}

#[test]
fn a_rank_that_leaves_to_move_ships_its_checkpoint_then_its_engine_instead_of_an_exit() {
    let (mut e, j, now) = running();
    e.handle_rank_registered(6, process_key(j, 0));
    e.handle_message(now, env(JobMsg::CheckpointStay { job: j, request: 2 }, Bytes::new()));
    e.handle_message(now, env(JobMsg::Move { job: j, rank: 1, request: 2 }, Bytes::new()));
    let (_, evs) = drain(&mut e);
    assert!(evs.contains(&ExecEvent::AskMove { conn: 4, job: j, rank: 1, request: 2 }), "{evs:?}");
    // Both ranks take the cut; only the moving one's file is read to go.
    e.handle_checkpointed(6, ckpt(3), 2).unwrap();
    e.handle_checkpointed(4, ckpt(3), 2).unwrap();
    let (_, evs) = drain(&mut e);
    assert_eq!(evs, [ExecEvent::ReadOutputFile { job: j, rank: 1, name: "rank-1.3.ckpt".into() }]);
    let free = e.free_slots();
    // It leaves while its checkpoint file is still being read: its engine
    // is read, and its output file, which it takes along.
    e.handle_process_exit(j, 1, MOVED_EXIT).unwrap();
    let (msgs, evs) = drain(&mut e);
    assert_eq!(msgs, []);
    let read = |name: &str| ExecEvent::ReadOutputFile { job: j, rank: 1, name: name.into() };
    assert_eq!(evs, [read("rank-1.engine"), read("out.txt")]);
    e.handle_output_file(j, 1, "rank-1.engine", Ok(Bytes::from_static(b"ENGINE")));
    e.handle_output_file(j, 1, "out.txt", Ok(Bytes::from_static(b"so far")));
    let out = sent(&mut e);
    assert!(matches!(&out[..], [(JobMsg::OutputFile { rank: 1, name, .. }, _)] if name == "out.txt"), "{out:?}");
    e.handle_output_file(j, 1, "rank-1.3.ckpt", Ok(Bytes::from_static(b"CUT")));
    let out = sent(&mut e);
    assert!(matches!(out[0].0, JobMsg::CheckpointFile { rank: 1, epoch: 3, .. }), "{out:?}");
    assert_eq!(out[1], (JobMsg::Moved { job: j, rank: 1, request: 2 }, Bytes::from_static(b"ENGINE")));
    assert_eq!(out.len(), 2, "no exit: {out:?}");
    assert_eq!(e.free_slots(), free + 1, "its slot is free");
}

/// Every message sent so far, with its payload.
fn sent(e: &mut Execution) -> Vec<(JobMsg, Bytes)> {
    std::iter::from_fn(|| e.poll_action())
        .filter_map(|a| match a {
            crate::machine::Action::Send { msg, .. } => Some((msg.body, msg.payload)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_exit_is_an_exit_unless_the_rank_was_asked_to_move_and_left_for_it() {
    // Exit 75 of a rank never asked to move: an ordinary exit.
    let (mut e, j, _) = running();
    e.handle_process_exit(j, 1, MOVED_EXIT).unwrap();
    let (msgs, _) = drain(&mut e);
    assert!(!msgs.iter().any(|m| matches!(m, JobMsg::Moved { .. })), "{msgs:?}");
    e.handle_output_file(j, 1, "out.txt", Err("none".into()));
    assert_eq!(drain(&mut e).0, [JobMsg::Exit { job: j, rank: 1, code: MOVED_EXIT }]);
    // Asked to move but crashed: an exit too.
    let (mut e, j, now) = running();
    e.handle_message(now, env(JobMsg::Move { job: j, rank: 1, request: 1 }, Bytes::new()));
    e.handle_process_exit(j, 1, -9).unwrap();
    e.handle_output_file(j, 1, "out.txt", Err("none".into()));
    assert_eq!(drain(&mut e).0, [JobMsg::Exit { job: j, rank: 1, code: -9 }]);
    // Asked to move, left, its engine unreadable: the submitter is told with nothing.
    let (mut e, j, now) = running();
    e.handle_message(now, env(JobMsg::Move { job: j, rank: 1, request: 1 }, Bytes::new()));
    e.handle_process_exit(j, 1, MOVED_EXIT).unwrap();
    e.handle_output_file(j, 1, "rank-1.engine", Err("gone".into()));
    e.handle_output_file(j, 1, "out.txt", Err("none".into()));
    assert_eq!(sent(&mut e), [(JobMsg::Moved { job: j, rank: 1, request: 1 }, Bytes::new())]);
    // A move asked of a rank not running here is dropped.
    let ignored = e.ignored();
    e.handle_message(now, env(JobMsg::Move { job: j, rank: 1, request: 1 }, Bytes::new()));
    assert_eq!(e.ignored(), ignored + 1);
}

#[test]
fn a_rank_taking_a_moved_rank_s_place_starts_with_its_engine_and_the_output_files_it_carries() {
    let now = Instant::now();
    let mut e = Execution::new(super::super::ExecConfig::new(2, "n"), addr(5));
    let j = job_id(1);
    let xml = Bytes::from_static(
        b"<p2pjob><executable>prog</executable><processes>2</processes><requirement>linux</requirement></p2pjob>",
    );
    let digest = crate::job::submit::digest;
    e.handle_message(now, env(JobMsg::Offer { job: j, ranks: vec![1], size: 2, digest: digest(&xml) }, Bytes::new()));
    // An engine before the cut is named is not taken.
    let engine = Bytes::from_static(b"ENGINE");
    let ignored = e.ignored();
    e.handle_message(now, env(JobMsg::ResumeEngine { job: j, rank: 1 }, engine.clone()));
    assert_eq!(e.ignored(), ignored + 1);
    e.handle_message(now, env(JobMsg::Resume { job: j, from: j, epoch: 3 }, Bytes::new()));
    e.handle_message(now, env(JobMsg::ResumeEngine { job: j, rank: 0 }, engine.clone()));
    assert_eq!(e.ignored(), ignored + 2, "not a rank placed here");
    e.handle_message(now, env(JobMsg::ResumeEngine { job: j, rank: 1 }, engine.clone()));
    let (_, evs) = drain(&mut e);
    let write = ExecEvent::WriteFile { job: j, name: "rank-1.engine".into(), offset: 0, data: engine };
    assert!(evs.contains(&write), "{evs:?}");
    // The output file it had written comes too; a name outside the job
    // directory is not taken.
    let log = Bytes::from_static(b"iteration 1000\n");
    let carried = StagedFile { file: CARRIED_FILES, name: "out.txt".into(), total: 15, digest: digest(&log) };
    let outside = StagedFile { name: "../out.txt".into(), ..carried.clone() };
    e.handle_message(now, env(JobMsg::CarriedFiles { job: j, rank: 1, files: vec![outside] }, Bytes::new()));
    assert_eq!(e.ignored(), ignored + 3);
    e.handle_message(now, env(JobMsg::CarriedFiles { job: j, rank: 1, files: vec![carried] }, Bytes::new()));
    let prog = Bytes::from_static(b"#!/bin/sh\n");
    let cut = Bytes::from_static(b"P2PCKPT\0 a cut");
    let files = [(0, "job.xml", xml), (1, "prog", prog), (crate::job::RESUME_FILES + 1, "rank-1.3.ckpt", cut)];
    let stage = |file, name: &str, data: Bytes| {
        let (total, d) = (data.len() as u64, digest(&data));
        env(JobMsg::Stage { job: j, file, name: name.into(), offset: 0, total, digest: d }, data)
    };
    for (file, name, data) in files {
        e.handle_message(now, stage(file, name, data));
    }
    // Not staged without the file it carries.
    e.handle_message(now, env(JobMsg::StageEnd { job: j, files: 2 }, Bytes::new()));
    let (msgs, _) = drain(&mut e);
    assert!(msgs.contains(&JobMsg::Resend { job: j, file: CARRIED_FILES }), "{msgs:?}");
    assert!(!msgs.contains(&JobMsg::Staged { job: j }), "{msgs:?}");
    e.handle_message(now, stage(CARRIED_FILES, "out.txt", log.clone()));
    let (_, evs) = drain(&mut e);
    assert!(evs.contains(&ExecEvent::WriteFile { job: j, name: "out.txt".into(), offset: 0, data: log }), "{evs:?}");
    e.handle_message(now, env(JobMsg::StageEnd { job: j, files: 2 }, Bytes::new()));
    assert!(drain(&mut e).0.contains(&JobMsg::Staged { job: j }));
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    let spawned = drain(&mut e).1.into_iter().find_map(|ev| match ev {
        ExecEvent::SpawnProcess { rank: 1, env, .. } => Some(env),
        _ => None,
    });
    let spawned = spawned.expect("rank 1 spawned");
    for var in [("P2PMP_RESUME_ENGINE", "rank-1.engine"), ("P2PMP_RESTART", "rank-1.3.ckpt")] {
        assert!(spawned.contains(&(var.0.to_owned(), var.1.to_owned())), "{spawned:?}");
    }
}

#[test]
fn a_rank_that_leaves_before_its_report_arrives_still_ships_its_file_after() {
    let (mut e, j, now) = running();
    e.handle_message(now, env(JobMsg::CheckpointStay { job: j, request: 1 }, Bytes::new()));
    e.handle_message(now, env(JobMsg::Move { job: j, rank: 1, request: 1 }, Bytes::new()));
    drain(&mut e);
    e.handle_process_exit(j, 1, MOVED_EXIT).unwrap();
    e.handle_output_file(j, 1, "rank-1.engine", Ok(Bytes::from_static(b"ENGINE")));
    assert_eq!(drain(&mut e).0, [], "not before its output file is answered");
    e.handle_output_file(j, 1, "out.txt", Err("none".into()));
    let (msgs, _) = drain(&mut e);
    assert_eq!(msgs, [JobMsg::Moved { job: j, rank: 1, request: 1 }]);
    // Its report of the cut it left at comes after the exit: that file
    // still goes (the rank's connection is still linked), and Moved is not
    // sent twice.
    e.handle_checkpointed(4, ckpt(2), 1).unwrap();
    let (msgs, evs) = drain(&mut e);
    assert!(matches!(msgs[..], [JobMsg::Checkpointed { .. }]), "{msgs:?}");
    assert_eq!(evs, [ExecEvent::ReadOutputFile { job: j, rank: 1, name: "rank-1.2.ckpt".into() }]);
    e.handle_output_file(j, 1, "rank-1.2.ckpt", Ok(Bytes::from_static(b"CUT")));
    let (msgs, _) = drain(&mut e);
    assert!(matches!(msgs[..], [JobMsg::CheckpointFile { rank: 1, epoch: 2, .. }]), "{msgs:?}");
}
