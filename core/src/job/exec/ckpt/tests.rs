//! The executor's checkpoint side: links, asks, reports.

use super::super::tests::{addr, drain, env, job_id, staged};
use super::*;
use crate::job::Stream;
use crate::machine::Machine;
use crate::wire::Envelope;
use std::time::Instant;

/// An executor running both ranks of job 1.
fn running() -> (Execution, JobId, Instant) {
    let now = Instant::now();
    let mut e = Execution::new(super::super::ExecConfig::new(2, "n"), addr(5));
    let j = job_id(1);
    staged(&mut e, now, j, vec![0, 1], false);
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    drain(&mut e);
    (e, j, now)
}

fn ckpt(epoch: u64) -> CheckpointInfo {
    CheckpointInfo { epoch, unix_ms: 1_000 + epoch, stored_bytes: 100, raw_bytes: 300 }
}

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
