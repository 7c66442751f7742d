//! Checkpoint requests and the ranks' reports, on the submitter's side.

use super::*;
use crate::ckpt::{CheckpointInfo, CutInfo, RecoveryInfo};

fn ckpt(epoch: u64, stored_bytes: u64) -> CheckpointInfo {
    CheckpointInfo { epoch, unix_ms: 1_000 * epoch + stored_bytes, stored_bytes, raw_bytes: 4 * stored_bytes }
}

/// The node each rank runs on.
fn node_of(s: &Submission, rank: u32) -> NodeAddr {
    s.ranks()[rank as usize].node.expect("placed")
}

/// Every action the submission has, split into messages and events.
fn drain(s: &mut Submission) -> (Vec<(NodeAddr, JobMsg)>, Vec<SubmitEvent>) {
    let (mut msgs, mut evs) = (Vec::new(), Vec::new());
    while let Some(a) = s.poll_action() {
        match a {
            Action::Send { to, msg } => msgs.push((to, msg.body)),
            Action::Event(e) => evs.push(e),
        }
    }
    (msgs, evs)
}

#[test]
fn a_request_goes_to_every_node_and_is_answered_once_every_running_rank_took_the_cut() {
    let (h, mut s) = running_on_two_nodes();
    let job = s.job();
    drain(&mut s);
    assert_eq!(s.request_checkpoint(), Ok(1));
    let (msgs, _) = drain(&mut s);
    let mut to: Vec<NodeAddr> = msgs.iter().map(|(to, _)| *to).collect();
    to.sort();
    assert_eq!(to, [addr(1), addr(2)]);
    assert!(msgs.iter().all(|(_, m)| *m == JobMsg::Checkpoint { job, request: 1 }));

    // Rank 0's node reached it; rank 1's did not (no control connection yet).
    let (n0, n1) = (node_of(&s, 0), node_of(&s, 1));
    s.handle_message(h.now, reply(n0, JobMsg::CheckpointAsked { job, request: 1, ranks: vec![0, 1] }, Bytes::new()));
    assert!(drain(&mut s).1.is_empty(), "a node still has to answer");
    s.handle_message(h.now, reply(n1, JobMsg::CheckpointAsked { job, request: 1, ranks: vec![] }, Bytes::new()));
    assert_eq!(
        drain(&mut s).1,
        [SubmitEvent::CheckpointAsked { job, request: 1, ranks: vec![0] }],
        "only the ranks a node holds count"
    );
    // Reaching one rank is enough: the ranks agree on the cut.
    s.handle_message(
        h.now,
        reply(n0, JobMsg::Checkpointed { job, rank: 0, ckpt: ckpt(1, 10), request: 1 }, Bytes::new()),
    );
    assert!(drain(&mut s).1.is_empty(), "rank 1 has not written its file");
    // A node does not speak for a rank it does not hold.
    s.handle_message(
        h.now,
        reply(n0, JobMsg::Checkpointed { job, rank: 1, ckpt: ckpt(1, 10), request: 1 }, Bytes::new()),
    );
    assert!(drain(&mut s).1.is_empty());
    s.handle_message(
        h.now,
        reply(n1, JobMsg::Checkpointed { job, rank: 1, ckpt: ckpt(1, 30), request: 1 }, Bytes::new()),
    );
    let cut = CutInfo { epoch: 1, unix_ms: 1_030, stored_bytes: 40, raw_bytes: 160, ranks: 2 };
    assert_eq!(drain(&mut s).1, [SubmitEvent::CheckpointTaken { job, request: 1, cut }]);
    assert_eq!(s.checkpoints(1).and_then(|c| c.last), Some(ckpt(1, 30)));

    let recovery = RecoveryInfo { epoch: 1, unix_ms: 7 };
    s.handle_message(h.now, reply(n1, JobMsg::Recovered { job, rank: 1, recovery }, Bytes::new()));
    assert_eq!(s.checkpoints(1).map(|c| c.recoveries.clone()), Some(vec![recovery]));
    assert_eq!(s.checkpoints(0).map(|c| c.recovered), Some(0));
}

#[test]
fn a_cut_taken_before_the_request_does_not_answer_it() {
    let (h, mut s) = running_on_two_nodes();
    let job = s.job();
    let (n0, n1) = (node_of(&s, 0), node_of(&s, 1));
    // A periodic checkpoint, and a rank claiming a request not made yet.
    s.handle_message(
        h.now,
        reply(n0, JobMsg::Checkpointed { job, rank: 0, ckpt: ckpt(1, 1), request: 5 }, Bytes::new()),
    );
    s.handle_message(
        h.now,
        reply(n1, JobMsg::Checkpointed { job, rank: 1, ckpt: ckpt(1, 1), request: 0 }, Bytes::new()),
    );
    drain(&mut s);
    assert_eq!(s.request_checkpoint(), Ok(1));
    for n in [n0, n1] {
        s.handle_message(h.now, reply(n, JobMsg::CheckpointAsked { job, request: 1, ranks: vec![0, 1] }, Bytes::new()));
    }
    let (_, evs) = drain(&mut s);
    assert!(matches!(evs[..], [SubmitEvent::CheckpointAsked { .. }]), "{evs:?}");
    for (n, rank) in [(n0, 0), (n1, 1)] {
        s.handle_message(
            h.now,
            reply(n, JobMsg::Checkpointed { job, rank, ckpt: ckpt(2, 1), request: 1 }, Bytes::new()),
        );
    }
    assert!(matches!(drain(&mut s).1[..], [SubmitEvent::CheckpointTaken { cut: CutInfo { epoch: 2, .. }, .. }]));
}

#[test]
fn a_request_that_reaches_no_rank_fails_and_one_open_when_the_job_ends_fails_too() {
    let (h, mut s) = running_on_two_nodes();
    let job = s.job();
    let (n0, n1) = (node_of(&s, 0), node_of(&s, 1));
    assert_eq!(s.request_checkpoint(), Ok(1));
    for n in [n0, n1] {
        s.handle_message(h.now, reply(n, JobMsg::CheckpointAsked { job, request: 1, ranks: vec![] }, Bytes::new()));
    }
    let (_, evs) = drain(&mut s);
    assert!(
        matches!(&evs[..], [SubmitEvent::CheckpointAsked { ranks, .. }, SubmitEvent::CheckpointFailed { request: 1, reason, .. }]
            if ranks.is_empty() && reason.contains("reached no rank")),
        "{evs:?}"
    );
    assert_eq!(s.request_checkpoint(), Ok(2));
    s.handle_command(h.now, SubmissionCommand::Kill).unwrap();
    let (_, evs) = drain(&mut s);
    assert!(
        matches!(&evs[..], [SubmitEvent::CheckpointFailed { request: 2, reason, .. }, SubmitEvent::Finished { .. }]
            if reason.contains("ended")),
        "{evs:?}"
    );
    assert_eq!(s.request_checkpoint(), Err(SubmitCmdError::NoRunningRank { job, why: "it is over" }));
}

#[test]
fn only_a_running_job_is_asked_and_requests_on_their_way_are_bounded() {
    let h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Accept)]);
    let mut s = submission(&h, job(1, &["linux"]));
    let job = s.job();
    assert_eq!(s.request_checkpoint(), Err(SubmitCmdError::NoRunningRank { job, why: "it has not started yet" }));
    let (_, mut s) = running_on_two_nodes();
    for request in 1..=MAX_PENDING_CHECKPOINTS as u64 {
        assert_eq!(s.request_checkpoint(), Ok(request));
    }
    let pending = MAX_PENDING_CHECKPOINTS;
    assert_eq!(s.request_checkpoint(), Err(SubmitCmdError::TooManyCheckpoints { job: s.job(), pending }));
    let mut submitter = Submitter::new(SubmitConfig::default(), addr(0), 1);
    assert_eq!(submitter.request_checkpoint(job), Err(SubmitCmdError::UnknownJob(job)));
}
