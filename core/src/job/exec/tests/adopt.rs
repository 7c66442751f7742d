//! A job whose submitter dies waits for its deputy, and only for it.

use super::*;

fn from(a: NodeAddr, body: JobMsg) -> Envelope<JobMsg> {
    Envelope::new(a.id(), a, 0, body)
}

/// Both ranks of job 1 running, the submitter (node 0) having named node 7
/// the deputy; rank 0 printed 10 bytes, rank 1 exited with its file sent.
fn guarded() -> (Execution, JobId, Instant) {
    let (mut e, j, now) = two_ranks_running();
    let g = guard(j, vec![addr(7)]);
    e.handle_message(now, env(g, Bytes::new()));
    e.handle_process_output(j, 0, Stream::Stdout, Bytes::from_static(b"0123456789")).unwrap();
    e.handle_process_exit(j, 1, 0).unwrap();
    e.handle_output_file(j, 1, "out.txt", Ok(Bytes::from_static(b"rank 1 result")));
    let (msgs, _) = drain(&mut e);
    assert!(msgs.contains(&JobMsg::Exit { job: j, rank: 1, code: 0 }), "{msgs:?}");
    assert_eq!(e.free_slots(), 1);
    (e, j, now)
}

/// What `e` sent, with to whom, and what it asked of its driver.
fn drain_to(e: &mut Execution) -> (Vec<(NodeAddr, JobMsg)>, Vec<ExecEvent>) {
    let (mut msgs, mut evs) = (Vec::new(), Vec::new());
    while let Some(a) = e.poll_action() {
        match a {
            Action::Send { to, msg } => msgs.push((to, msg.body)),
            Action::Event(ev) => evs.push(ev),
        }
    }
    (msgs, evs)
}

#[test]
fn a_job_whose_submitter_died_is_adopted_by_its_deputy_only_and_sends_it_what_ended() {
    let (mut e, j, now) = guarded();
    e.handle_send_failed(now, addr(0));
    let (msgs, evs) = drain_to(&mut e);
    assert!(msgs.is_empty() && evs.is_empty(), "the job waits for its deputy: {msgs:?} {evs:?}");
    // Another node cannot take the job's results.
    e.handle_message(now, from(addr(9), JobMsg::Adopt { job: j }));
    assert_eq!(drain_to(&mut e), (vec![], vec![]));
    e.handle_message(now, from(addr(7), JobMsg::Adopt { job: j }));
    let (msgs, evs) = drain_to(&mut e);
    assert_eq!(msgs, [(addr(7), JobMsg::Adopted { job: j, streamed: vec![(0, 10)] })]);
    // The output in flight to the dead node is given back to rank 0, and rank
    // 1's file is read again for the deputy.
    assert_eq!(
        evs,
        [
            ExecEvent::OutputCredit { job: j, rank: 0, bytes: 10 },
            ExecEvent::ReadOutputFile { job: j, rank: 1, name: "out.txt".into() }
        ]
    );
    e.handle_output_file(j, 1, "out.txt", Ok(Bytes::from_static(b"rank 1 result")));
    let (msgs, evs) = drain_to(&mut e);
    assert!(
        matches!(&msgs[..], [(a, JobMsg::OutputFile { rank: 1, total: 13, .. }), (b, JobMsg::Exit { rank: 1, code: 0, .. })]
        if *a == addr(7) && *b == addr(7)),
        "{msgs:?}"
    );
    assert!(evs.is_empty(), "rank 1's slot was freed once: {evs:?}");
    assert_eq!(e.free_slots(), 1);
    // From now on the deputy is the submitter: its Done ends the job here.
    e.handle_process_output(j, 0, Stream::Stdout, Bytes::from_static(b"more")).unwrap();
    let (msgs, _) = drain_to(&mut e);
    assert_eq!(msgs, [(addr(7), JobMsg::Output { job: j, rank: 0, stream: Stream::Stdout, offset: 10 })]);
    e.handle_message(now, from(addr(0), JobMsg::Done { job: j }));
    assert!(drain_to(&mut e).1.is_empty(), "the dead node no longer speaks for the job");
    e.handle_message(now, from(addr(7), JobMsg::Done { job: j }));
    assert!(drain_to(&mut e).1.contains(&ExecEvent::Cleanup { job: j }));
}

#[test]
fn a_job_whose_submitter_is_heard_again_waits_no_more() {
    let (mut e, j, now) = guarded();
    e.handle_send_failed(now, addr(0));
    e.heard_from(addr(9));
    e.heard_from(addr(0));
    e.handle_timeout(now + Duration::from_secs(3600));
    assert!(drain_to(&mut e).1.is_empty(), "the job runs on for its submitter");
    assert_eq!(e.jobs().collect::<Vec<_>>(), [j]);
}

#[test]
fn a_job_no_deputy_adopts_in_time_is_stopped_and_one_without_a_deputy_at_once() {
    let (mut e, j, now) = guarded();
    e.handle_send_failed(now, addr(0));
    e.handle_send_failed(now + Duration::from_secs(30), addr(0));
    e.handle_timeout(now + Duration::from_secs(59));
    assert!(drain_to(&mut e).1.is_empty(), "a second loss does not restart the wait, nor end it");
    e.handle_timeout(now + Duration::from_secs(60));
    let evs = drain_to(&mut e).1;
    assert!(evs.contains(&ExecEvent::KillProcess { job: j, rank: 0 }) && evs.contains(&ExecEvent::Cleanup { job: j }));

    let (mut e, j, now) = two_ranks_running();
    e.handle_send_failed(now, addr(0));
    assert!(drain_to(&mut e).1.contains(&ExecEvent::Cleanup { job: j }), "no deputy: stopped at once");
}

#[test]
fn the_second_deputy_adopts_the_job_when_the_first_dies_having_adopted_it() {
    let (mut e, j, now) = two_ranks_running();
    let g = guard(j, vec![addr(7), addr(8)]);
    e.handle_message(now, env(g, Bytes::new()));
    drain_to(&mut e);
    e.handle_send_failed(now, addr(0));
    e.handle_message(now, from(addr(7), JobMsg::Adopt { job: j }));
    assert!(matches!(&drain_to(&mut e).0[..], [(a, JobMsg::Adopted { .. })] if *a == addr(7)));
    // The first deputy dies before naming deputies of its own: the job waits
    // for the one behind it, and only for it.
    e.handle_send_failed(now, addr(7));
    assert!(drain_to(&mut e).1.is_empty(), "the job waits");
    e.handle_message(now, from(addr(7), JobMsg::Adopt { job: j }));
    e.handle_message(now, from(addr(0), JobMsg::Adopt { job: j }));
    assert_eq!(drain_to(&mut e), (vec![], vec![]));
    e.handle_message(now, from(addr(8), JobMsg::Adopt { job: j }));
    assert!(matches!(&drain_to(&mut e).0[..], [(a, JobMsg::Adopted { .. })] if *a == addr(8)));
}
