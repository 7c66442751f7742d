//! The deputy: named to every node of a running job, and taking the job over.

use super::*;

/// The [`JobMsg::Guard`]s naming a deputy sent so far: to whom, what they
/// said, the first deputy, the payload.
fn guards(h: &Harness) -> Vec<(NodeAddr, Guarded, NodeAddr, Bytes)> {
    h.sent
        .iter()
        .filter_map(|(to, m, p)| match m {
            JobMsg::Guard { job, id, restarts, deputies, ranks, auth, past } => {
                let (ranks, auth, past) = (ranks.clone(), auth.clone(), past.clone());
                let g = Guarded { job: *id, wire: *job, restarts: *restarts, ranks, auth, past };
                Some((*to, g, *deputies.first()?, p.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Drains `s` into what it sent and what it reported.
fn drain(s: &mut Submission) -> (Vec<(NodeAddr, JobMsg, Bytes)>, Vec<SubmitEvent>) {
    let (mut sent, mut events) = (Vec::new(), Vec::new());
    while let Some(a) = s.poll_action() {
        match a {
            Action::Send { to, msg } => sent.push((to, msg.body, msg.payload)),
            Action::Event(e) => events.push(e),
        }
    }
    (sent, events)
}

#[test]
fn a_started_job_names_the_node_of_its_lowest_other_rank_its_deputy_on_every_node() {
    let (h, s) = running_on_two_nodes();
    let rank0 = s.ranks()[0].node.unwrap();
    let told = guards(&h);
    let to: BTreeSet<NodeAddr> = told.iter().map(|(to, ..)| *to).collect();
    assert_eq!(to, [addr(1), addr(2)].into(), "every node holding ranks, once each");
    assert_eq!(told.len(), 2);
    // Both nodes: the node of rank 0 first, then the other.
    let rank1 = s.ranks()[1].node.unwrap();
    assert_eq!(s.deputies(), [rank0, rank1]);
    assert!(h.sent.iter().all(|(_, m, _)| !matches!(m, JobMsg::Guard { deputies, .. } if *deputies != [rank0, rank1])));
    for (_, g, deputy, xml) in &told {
        assert_eq!(*deputy, rank0);
        assert_eq!((g.job, g.wire, g.restarts), (s.job(), s.wire(), 0));
        let placed: Vec<(u32, NodeAddr)> = s.ranks().iter().map(|r| (r.rank, r.node.unwrap())).collect();
        assert_eq!(g.ranks, placed);
        // The job file goes along: the deputy needs it to hold the job.
        assert_eq!(&JobDescription::parse(xml).unwrap().job, s.description());
    }
}

#[test]
fn no_deputy_while_every_rank_runs_on_the_submitting_node() {
    let mut h = Harness::new(&[(addr(0), res(2, 8000, &[]), Behave::Accept)]);
    h.exit_code = None;
    let mut s = submission(&h, job(2, &["linux"]));
    h.run(&mut s, 20);
    assert_eq!(s.phase(), Phase::Running);
    assert_eq!(s.deputy(), None);
    assert!(guards(&h).is_empty());
}

#[test]
fn a_deputy_adopts_the_running_job_collects_it_to_the_end_and_names_its_own_deputy() {
    let (h, s) = running_on_two_nodes();
    let (_, g, deputy, xml) = guards(&h).remove(0);
    let desc = JobDescription::parse(&xml).unwrap().job;
    let mut d = Submission::adopt(SubmitConfig::default(), deputy, (g, desc), Replica::default(), h.now);
    assert_eq!((d.job(), d.wire(), d.phase()), (s.job(), s.wire(), Phase::Running));
    let (sent, events) = drain(&mut d);
    // Nothing is read again; the queries look for nodes to move ranks to.
    assert!(events.iter().all(|e| matches!(e, SubmitEvent::Query { .. })), "{events:?}");
    let adopt: BTreeSet<NodeAddr> = sent
        .iter()
        .filter(|(_, m, _)| matches!(m, JobMsg::Adopt { job } if *job == s.wire()))
        .map(|(t, ..)| *t)
        .collect();
    assert_eq!(adopt, [addr(1), addr(2)].into());
    // Its own deputy: the other node.
    let other = if deputy == addr(1) { addr(2) } else { addr(1) };
    assert!(sent.iter().any(|(_, m, _)| matches!(m, JobMsg::Guard { deputies, .. } if *deputies == [other])));

    // The executors answer; a rank's output goes on where it was.
    let wire = s.wire();
    let rank_on = |n: NodeAddr| s.ranks().iter().find(|r| r.node == Some(n)).unwrap().rank;
    for n in [addr(1), addr(2)] {
        let rank = rank_on(n);
        d.handle_message(h.now, reply(n, JobMsg::Adopted { job: wire, streamed: vec![(rank, 1000)] }, Bytes::new()));
        let out = JobMsg::Output { job: wire, rank, stream: Stream::Stdout, offset: 1000 };
        d.handle_message(h.now, reply(n, out, Bytes::from_static(b"late line\n")));
        let data = Bytes::from(format!("result {rank}"));
        let (total, digest) = (data.len() as u64, digest(&data));
        let file = JobMsg::OutputFile { job: wire, rank, name: "result.txt".into(), offset: 0, total, digest };
        d.handle_message(h.now, reply(n, file, data));
        d.handle_message(h.now, reply(n, JobMsg::Exit { job: wire, rank, code: 0 }, Bytes::new()));
    }
    let (sent, events) = drain(&mut d);
    let finished = events.iter().find_map(|e| match e {
        SubmitEvent::Finished { outcome, .. } => Some(outcome.clone()),
        _ => None,
    });
    assert_eq!(finished, Some(Outcome::Done { codes: vec![0, 0] }), "{events:?}");
    let lines = events.iter().filter(|e| matches!(e, SubmitEvent::Output { offset: 1000, .. })).count();
    let files = events.iter().filter(|e| matches!(e, SubmitEvent::OutputFileDone { ok: true, .. })).count();
    assert_eq!((lines, files), (2, 2));
    assert_eq!(sent.iter().filter(|(_, m, _)| matches!(m, JobMsg::Done { .. })).count(), 2);
    // Its deputy got a copy of the output files, and how the job ended
    // before any node was told it is done.
    let copies =
        sent.iter().filter(|(to, m, p)| *to == other && matches!(m, JobMsg::OutputFile { .. }) && !p.is_empty());
    assert_eq!(copies.count(), 2);
    let at = |pick: &dyn Fn(&(NodeAddr, JobMsg, Bytes)) -> bool| sent.iter().position(pick).unwrap();
    let ended = at(&|(to, m, _)| {
        *to == other
            && matches!(m, JobMsg::Ended { job, end: JobEnd::Done { codes }, .. } if *job == wire && *codes == [0, 0])
    });
    assert!(ended < at(&|(_, m, _)| matches!(m, JobMsg::Done { .. })), "{sent:?}");
}

#[test]
fn a_killed_job_tells_its_deputy_how_it_ended_before_its_nodes_stop_it() {
    let (mut h, mut s) = running_on_two_nodes();
    let deputy = s.deputy().unwrap();
    h.sent.clear();
    s.handle_command(h.now, SubmissionCommand::Kill).unwrap();
    let (sent, _) = drain(&mut s);
    let wire = s.wire();
    let ended = |m: &JobMsg| matches!(m, JobMsg::Ended { job, end: JobEnd::Killed, .. } if *job == wire);
    assert_eq!(sent.iter().position(|(to, m, _)| *to == deputy && ended(m)), Some(0), "{sent:?}");
    assert_eq!(sent.iter().filter(|(_, m, _)| matches!(m, JobMsg::Kill { .. })).count(), 2, "{sent:?}");
}

#[test]
fn the_record_a_deputy_keeps_of_an_ended_job_has_its_placement_and_exits_and_sends_nothing() {
    let (h, s) = running_on_two_nodes();
    let (_, g, deputy, xml) = guards(&h).remove(0);
    let desc = JobDescription::parse(&xml).unwrap().job;
    // What the submitting node tells of the job's history, for its status.
    let mut reported = crate::ckpt::RankCheckpoints::default();
    reported.written(crate::ckpt::CheckpointInfo { epoch: 4, unix_ms: 5, stored_bytes: 6, raw_bytes: 7 });
    let history = JobHistory {
        restarts: vec!["from checkpoint 3: node 1 lost".into()],
        moves: vec!["rank 1 moved".into()],
        checkpoints: vec![(1, reported.clone()), (9, reported.clone())],
    };
    let mut d = Submission::ended(SubmitConfig::default(), deputy, (g, desc), (&[0, 3], history.clone()), h.now);
    assert_eq!((d.job(), d.wire(), d.phase()), (s.job(), s.wire(), Phase::Finished));
    let kept: Vec<(Option<NodeAddr>, Option<i32>)> = d.ranks().iter().map(|r| (r.node, r.exit)).collect();
    let want: Vec<(Option<NodeAddr>, Option<i32>)> =
        s.ranks().iter().zip([0, 3]).map(|(r, c)| (r.node, Some(c))).collect();
    assert_eq!(kept, want);
    assert_eq!((d.restart_reasons(), d.moves()), (&history.restarts[..], &history.moves[..]));
    assert_eq!((d.checkpoints(0), d.checkpoints(1)), (None, Some(&reported)));
    assert_eq!(d.checkpoints(9), None, "a rank the job does not have");
    assert_eq!(drain(&mut d), (Vec::new(), Vec::new()));
    assert_eq!(d.poll_timeout(), None);
}

#[test]
fn an_adopted_job_without_its_files_never_places_ranks_anew() {
    let (h, s) = running_on_two_nodes();
    let (_, g, deputy, xml) = guards(&h).remove(0);
    let mut desc = JobDescription::parse(&xml).unwrap().job;
    desc.restart = crate::job::RestartPolicy::Scratch;
    let other = if deputy == addr(1) { addr(2) } else { addr(1) };
    let mut d = Submission::adopt(SubmitConfig::default(), deputy, (g, desc), Replica::default(), h.now);
    drain(&mut d);
    assert!(matches!(d.migrate(h.now, 0, None), Err(SubmitCmdError::TakenOver { .. })));
    // A node shutting down is told its ranks stay.
    d.handle_message(h.now, reply(other, JobMsg::Leaving { job: s.wire() }, Bytes::new()));
    let (sent, _) = drain(&mut d);
    let sent: Vec<(NodeAddr, JobMsg)> =
        sent.into_iter().filter(|(_, m, _)| !matches!(m, JobMsg::Guard { .. })).map(|(to, m, _)| (to, m)).collect();
    assert_eq!(sent, [(other, JobMsg::Staying { job: s.wire() })]);
    // A lost node fails the job, restart rule or not: nothing hangs waiting
    // for files that are not here.
    d.handle_send_failed(h.now, other);
    let (_, events) = drain(&mut d);
    let failed = events
        .iter()
        .any(|e| matches!(e, SubmitEvent::Finished { outcome: Outcome::Failed(SubmitError::NodeLost { .. }), .. }));
    assert!(failed, "{events:?}");
}

/// The staged files as the submission sent them: by number, name, bytes, digest.
fn staged_files(h: &Harness) -> Vec<(u32, (String, Bytes, crate::id::Id))> {
    let mut files: BTreeMap<u32, (String, Bytes, crate::id::Id)> = BTreeMap::new();
    for (_, m, p) in &h.sent {
        if let JobMsg::Stage { file, name, offset: 0, digest, .. } = m {
            files.insert(*file, (name.clone(), p.clone(), *digest));
        }
    }
    files.into_iter().collect()
}

#[test]
fn an_adopted_job_with_its_files_restarts_from_scratch_when_a_node_is_lost() {
    let (mut h, _) = running_on_two_nodes();
    let (_, g, deputy, xml) = guards(&h).remove(0);
    let mut desc = JobDescription::parse(&xml).unwrap().job;
    desc.restart = crate::job::RestartPolicy::Scratch;
    let files = staged_files(&h);
    assert_eq!(files.iter().map(|(f, _)| *f).collect::<Vec<_>>(), [0, 1, 2]);
    let other = if deputy == addr(1) { addr(2) } else { addr(1) };
    let kept = Replica { files, cuts: Vec::new() };
    let mut d = Submission::adopt(SubmitConfig::default(), deputy, (g, desc), kept, h.now);
    h.sent.clear();
    h.events.clear();
    // A third node to go to; the lost one is never offered the job again.
    h.behave.insert(addr(3), Behave::Accept);
    h.slots.insert(addr(3), 1);
    for (name, value) in res(1, 8000, &[]).registrations(addr(3)) {
        h.regs.entry(name).or_default().push(value);
    }
    h.settle(&mut d);
    h.exit_code = Some(0);
    d.handle_send_failed(h.now, other);
    h.run(&mut d, 40);
    assert!(h.events.iter().any(|e| matches!(e, SubmitEvent::Restarting { .. })), "{:?}", h.events);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    let offered: BTreeSet<NodeAddr> = h.offers().iter().map(|(a, _)| *a).collect();
    assert!(!offered.contains(&other) && offered.contains(&addr(3)), "{offered:?}");
    // The files staged to the new nodes are the ones the deputy kept.
    let staged: BTreeSet<String> = h
        .sent
        .iter()
        .filter_map(|(_, m, _)| if let JobMsg::Stage { name, .. } = m { Some(name.clone()) } else { None })
        .collect();
    assert_eq!(staged, ["job.xml", "ring", "input1"].map(String::from).into());
}

#[test]
fn a_job_taken_over_learns_from_its_queries_where_its_ranks_could_move() {
    let (mut h, s) = running_on_two_nodes();
    let (_, g, deputy, xml) = guards(&h).remove(0);
    let desc = JobDescription::parse(&xml).unwrap().job;
    let adopt = |g| {
        let kept = Replica { files: staged_files(&h), cuts: Vec::new() };
        Submission::adopt(SubmitConfig::default(), deputy, (g, desc.clone()), kept, h.now)
    };
    let (mut d, mut early) = (adopt(g.clone()), adopt(g));
    let other = if deputy == addr(1) { addr(2) } else { addr(1) };
    let rank = s.ranks().iter().find(|r| r.node == Some(other)).unwrap().rank;
    // Before its queries are answered it knows of no node to go to.
    assert!(matches!(early.migrate(h.now, rank, None), Err(SubmitCmdError::NowhereToGo { .. })));
    // A third node, free, meets the requirements: the rank moves there alone.
    h.behave.insert(addr(3), Behave::Accept);
    h.slots.insert(addr(3), 1);
    for (name, value) in res(1, 8000, &[]).registrations(addr(3)) {
        h.regs.entry(name).or_default().push(value);
    }
    h.sent.clear();
    h.settle(&mut d);
    assert_eq!(d.phase(), Phase::Running, "{:?}", h.events);
    assert!(d.migrate(h.now, rank, Some(addr(3))).is_ok());
    h.settle(&mut d);
    let asked = h.sent.iter().any(|(to, m, _)| *to == other && matches!(m, JobMsg::Move { .. }));
    assert!(asked, "{:?}", h.sent);
}

#[test]
fn a_node_stopping_while_a_job_taken_over_learns_has_its_ranks_moved_once_it_learned_and_is_nobodys_deputy() {
    let (h, _) = running_on_two_nodes();
    let (_, g, deputy, xml) = guards(&h).remove(0);
    let desc = JobDescription::parse(&xml).unwrap().job;
    let kept = Replica { files: staged_files(&h), cuts: Vec::new() };
    let mut d = Submission::adopt(SubmitConfig::default(), deputy, (g.clone(), desc), kept, h.now);
    let other = if deputy == addr(1) { addr(2) } else { addr(1) };
    assert_eq!(d.deputies(), [other]);
    let (_, events) = drain(&mut d);
    let queries: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            SubmitEvent::Query { query, .. } => Some(*query),
            _ => None,
        })
        .collect();
    assert!(!queries.is_empty(), "{events:?}");
    // The other node shuts down before the queries are answered: it is
    // nobody's deputy from now on (told so), and waits for an answer.
    d.handle_message(h.now, reply(other, JobMsg::Leaving { job: g.wire }, Bytes::new()));
    let (sent, _) = drain(&mut d);
    assert!(d.deputies().is_empty() && d.told_deputies().next().is_none());
    let no_deputy = |m: &JobMsg| matches!(m, JobMsg::Guard { deputies, .. } if deputies.is_empty());
    assert!(sent.iter().any(|(to, m, _)| *to == other && no_deputy(m)), "{sent:?}");
    assert!(sent.iter().all(|(_, m, _)| no_deputy(m)), "nothing else yet: {sent:?}");
    // No query is ever answered: no node could take its rank alone, so the
    // job is asked for a cut to roll back to, once it has given up asking.
    let failed = Err(OverlayError::Timeout);
    let asked = |m: &JobMsg| matches!(m, JobMsg::Checkpoint { .. });
    let mut answered = Vec::new();
    for _ in 0..SubmitConfig::default().query_attempts {
        assert!(answered.is_empty(), "answered before it learned: {answered:?}");
        for &q in &queries {
            d.handle_query_done(h.now, q, &failed);
        }
        answered.extend(drain(&mut d).0.into_iter().filter(|(to, m, _)| *to == other && asked(m)));
    }
    assert_eq!(answered.len(), 1, "once");
    assert!(d.moving());
    assert_eq!(d.phase(), Phase::Running, "the job runs on");
}
