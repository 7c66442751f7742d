//! Cuts kept on the submitter's node and a restart that resumes from them
//! (`<restart>checkpoint</restart>`).

use super::*;
use crate::ckpt::{Codec, Header};
use crate::job::{CARRIED_FILES, RESUME_FILES};

/// `rank`'s checkpoint file of `epoch`, as the run `job` of a 2-rank job writes it.
fn ckpt_file(job: JobId, rank: u32, epoch: u64) -> Bytes {
    ckpt_file_of(job, (rank, 2), epoch)
}

/// `rank`'s checkpoint file of `epoch`, as the run `job` of a `size`-rank job writes it.
fn ckpt_file_of(job: JobId, (rank, size): (u32, u32), epoch: u64) -> Bytes {
    let stored = vec![rank as u8 ^ epoch as u8; 300 + rank as usize];
    let header = Header { codec: Codec::None, job, rank, size, epoch, raw_len: stored.len() as u64 };
    Bytes::from(crate::ckpt::encode_file(&header, &stored))
}

/// `from` ships `data` as `rank`'s file of `epoch` in two chunks, with
/// `digest` (the file's own unless told otherwise).
fn ship(h: &mut Harness, s: &mut Submission, from: NodeAddr, (rank, epoch): (u32, u64), data: Bytes, digest: Id) {
    let (job, total) = (s.wire(), data.len() as u64);
    // The rank's report comes first, as its node passes it on.
    let ckpt = crate::ckpt::CheckpointInfo { epoch, unix_ms: 1, stored_bytes: total, raw_bytes: total };
    s.handle_message(h.now, reply(from, JobMsg::Checkpointed { job, rank, ckpt, request: 0 }, Bytes::new()));
    let half = data.len() / 2;
    for (offset, piece) in [(0, data.slice(..half)), (half as u64, data.slice(half..))] {
        let m = JobMsg::CheckpointFile { job, rank, epoch, offset, total, digest };
        s.handle_message(h.now, reply(from, m, piece));
    }
    h.settle(s);
}

/// Ships every rank's good file of `epoch`.
fn ship_cut(h: &mut Harness, s: &mut Submission, epoch: u64) {
    let size = s.ranks().len() as u32;
    for rank in 0..size {
        let node = s.ranks()[rank as usize].node.expect("placed");
        let data = ckpt_file_of(s.wire(), (rank, size), epoch);
        let d = digest(&data);
        ship(h, s, node, (rank, epoch), data, d);
    }
}

/// A 2-rank job asking `<restart>checkpoint</restart>` and a checkpoint a
/// second, running on two of three one-slot nodes, its ranks not exiting.
fn running() -> (Harness, Submission) {
    running_on(3, RestartPolicy::Checkpoint, Some(Duration::from_secs(1)))
}

/// A 2-rank job with `restart` and `checkpoint`, running on two of `nodes`
/// one-slot nodes, its ranks not exiting.
fn running_on(nodes: u32, restart: RestartPolicy, checkpoint: Option<Duration>) -> (Harness, Submission) {
    let mut j = job(2, &["linux"]);
    (j.restart, j.checkpoint) = (restart, checkpoint);
    running_job_on(nodes, j)
}

/// Job `j` (2 ranks) running on two of `nodes` one-slot nodes, its ranks not exiting.
fn running_job_on(nodes: u32, j: JobDescription) -> (Harness, Submission) {
    let nodes: Vec<_> = (1..=nodes).map(|i| (addr(i), res(1, 8000, &[]), Behave::Accept)).collect();
    let mut h = Harness::new(&nodes);
    h.exit_code = None;
    let mut s = submission(&h, j);
    h.run(&mut s, 20);
    assert_eq!(s.phase(), Phase::Running);
    (h, s)
}

#[test]
fn shipped_files_are_kept_and_a_cut_counts_once_every_rank_s_file_arrived_whole() {
    let (mut h, mut s) = running();
    assert_eq!(s.newest_cut(), None);
    ship_cut(&mut h, &mut s, 1);
    assert_eq!(s.newest_cut(), Some(1));
    assert_eq!(h.cuts.keys().copied().collect::<Vec<_>>(), [(0, 1), (1, 1)]);
    assert_eq!(h.cuts[&(1, 1)], ckpt_file(s.wire(), 1, 1), "written whole, in order");
    // Epoch 2: rank 1's file arrives damaged; the cut is not complete and
    // the damaged file is removed.
    let n0 = s.ranks()[0].node.unwrap();
    let n1 = s.ranks()[1].node.unwrap();
    let good = ckpt_file(s.wire(), 0, 2);
    let d = digest(&good);
    ship(&mut h, &mut s, n0, (0, 2), good, d);
    let bad = ckpt_file(s.wire(), 1, 2);
    ship(&mut h, &mut s, n1, (1, 2), bad, Id::hash("not its digest"));
    assert_eq!(s.newest_cut(), Some(1));
    assert!(!h.cuts.contains_key(&(1, 2)), "the damaged file is dropped");
    // A node does not ship for a rank it does not hold.
    let file = ckpt_file(s.wire(), 1, 3);
    let d = digest(&file);
    ship(&mut h, &mut s, n0, (1, 3), file, d);
    assert!(!h.cuts.contains_key(&(1, 3)));
    // Epochs 3 and 4 complete: the two newest complete cuts stay, older files go.
    ship_cut(&mut h, &mut s, 3);
    ship_cut(&mut h, &mut s, 4);
    assert_eq!(s.newest_cut(), Some(4));
    assert_eq!(h.cuts.keys().copied().collect::<Vec<_>>(), [(0, 3), (0, 4), (1, 3), (1, 4)]);
    // A file of an epoch older than the newest cut is not taken.
    let old = ckpt_file(s.wire(), 0, 2);
    let d = digest(&old);
    ship(&mut h, &mut s, n0, (0, 2), old, d);
    assert!(!h.cuts.contains_key(&(0, 2)));
    // Every chunk moved the node's output window, taken or not (six files
    // of two chunks from rank 0's node, after its output file).
    let acked = h.sent.iter().filter(|(to, m, _)| *to == n0 && matches!(m, JobMsg::OutputAck { .. })).count();
    assert_eq!(acked, 1 + 2 * 6);
}

#[test]
fn a_lost_node_restarts_every_rank_from_the_newest_cut_kept_whole() {
    let (mut h, mut s) = running();
    let first = s.wire();
    ship_cut(&mut h, &mut s, 1);
    ship_cut(&mut h, &mut s, 2);
    let lost = s.ranks()[1].node.unwrap();
    let sent_before = h.sent.len();
    h.exit_code = Some(0);
    s.handle_send_failed(h.now, lost);
    h.run(&mut s, 30);

    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    assert_eq!(s.restart_reasons().len(), 1);
    let reason = &s.restart_reasons()[0];
    assert!(reason.starts_with("from checkpoint 2: node ") && reason.contains(&lost.to_string()), "{reason}");
    assert_eq!(s.resumed_from(), Some(2));
    // Each node of the new run hears the cut first, then gets the files of
    // its own ranks only, after the job's.
    let after = &h.sent[sent_before..];
    for rank in 0..2u32 {
        let node = s.ranks()[rank as usize].node.unwrap();
        assert_ne!(node, lost);
        let to_node: Vec<&JobMsg> = after.iter().filter(|(to, _, _)| *to == node).map(|(_, m, _)| m).collect();
        let resume = to_node.iter().position(|m| **m == JobMsg::Resume { job: s.wire(), from: first, epoch: 2 });
        let manifest = to_node.iter().position(|m| matches!(m, JobMsg::Manifest { .. }));
        assert!(resume.is_some() && resume < manifest, "{to_node:?}");
        let staged: Vec<(u32, String)> = to_node
            .iter()
            .filter_map(|m| match m {
                JobMsg::Stage { file, name, offset: 0, .. } if *file >= RESUME_FILES => Some((*file, name.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(staged, [(RESUME_FILES + rank, format!("rank-{rank}.2.ckpt"))]);
        let bytes: Vec<u8> = after
            .iter()
            .filter(|(to, m, _)| *to == node && matches!(m, JobMsg::Stage { file, .. } if *file == RESUME_FILES + rank))
            .flat_map(|(_, _, p)| p.to_vec())
            .collect();
        assert_eq!(bytes, ckpt_file(first, rank, 2), "rank {rank}'s file as kept");
    }
    assert!(h.events.iter().any(
        |e| matches!(e, SubmitEvent::Restarting { attempt: 1, reason, .. } if reason.starts_with("from checkpoint 2"))
    ));
}

#[test]
fn a_damaged_kept_cut_is_detected_and_the_one_before_it_used() {
    let (mut h, mut s) = running();
    ship_cut(&mut h, &mut s, 1);
    ship_cut(&mut h, &mut s, 2);
    // The kept copy of rank 0's newest file rots on disk.
    h.cuts.get_mut(&(0, 2)).unwrap()[crate::ckpt::HEADER_LEN + 7] ^= 1;
    let lost = s.ranks()[0].node.unwrap();
    h.exit_code = Some(0);
    s.handle_send_failed(h.now, lost);
    h.run(&mut s, 30);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    let reason = &s.restart_reasons()[0];
    assert!(reason.starts_with("from checkpoint 1: checkpoint 2 is damaged (rank 0's file "), "{reason}");
    assert_eq!(s.resumed_from(), Some(1));
    assert!(!h.cuts.contains_key(&(1, 2)), "the damaged cut is dropped whole");
}

#[test]
fn without_a_complete_cut_the_job_restarts_from_scratch_and_says_so() {
    let (mut h, mut s) = running();
    // Only rank 0's file of epoch 1 arrived.
    let n0 = s.ranks()[0].node.unwrap();
    let file = ckpt_file(s.wire(), 0, 1);
    let d = digest(&file);
    ship(&mut h, &mut s, n0, (0, 1), file, d);
    let lost = s.ranks()[1].node.unwrap();
    h.exit_code = Some(0);
    s.handle_send_failed(h.now, lost);
    h.run(&mut s, 30);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    let reason = &s.restart_reasons()[0];
    assert!(reason.starts_with("from scratch (no checkpoint was kept whole yet): node "), "{reason}");
    assert_eq!(s.resumed_from(), None);
    assert!(!h.sent.iter().any(|(_, m, _)| matches!(m, JobMsg::Resume { .. })));
    assert!(h.cuts.is_empty(), "the partial cut of the old run is dropped: {:?}", h.cuts.keys());
}

#[test]
fn a_job_that_restarts_from_scratch_does_so_with_a_cut_kept_and_keeps_the_new_run_s_cuts() {
    let (mut h, mut s) = running_on(3, RestartPolicy::Scratch, None);
    // A cut asked for (p2pjob checkpoint) is shipped and kept all the same.
    ship_cut(&mut h, &mut s, 3);
    assert_eq!(s.newest_cut(), Some(3));
    let lost = s.ranks()[0].node.unwrap();
    s.handle_send_failed(h.now, lost);
    h.run(&mut s, 30);
    assert!(s.restart_reasons()[0].starts_with("from scratch: node "), "{:?}", s.restart_reasons());
    assert_eq!(s.resumed_from(), None);
    assert!(h.cuts.is_empty(), "the old run's cut is dropped");
    // The new run counts its cuts from 1 again, and they are kept.
    ship_cut(&mut h, &mut s, 1);
    assert_eq!(s.newest_cut(), Some(1));
}

/// Answers checkpoint request `request` as the ranks would: each node says
/// it reached its rank, each rank reports its file of `epoch` covering it.
fn take_cut(h: &mut Harness, s: &mut Submission, request: u64, epoch: u64) {
    let job = s.wire();
    for rank in 0..s.ranks().len() as u32 {
        let node = s.ranks()[rank as usize].node.unwrap();
        let asked = JobMsg::CheckpointAsked { job, request, ranks: vec![rank] };
        s.handle_message(h.now, reply(node, asked, Bytes::new()));
        let ckpt = crate::ckpt::CheckpointInfo { epoch, unix_ms: 1, stored_bytes: 300, raw_bytes: 300 };
        s.handle_message(h.now, reply(node, JobMsg::Checkpointed { job, rank, ckpt, request }, Bytes::new()));
    }
    h.settle(s);
}

/// The node of `rank` says it left to move at the cut answering `request`,
/// with an engine saved at `epoch`.
fn left(h: &mut Harness, s: &mut Submission, from: NodeAddr, rank: u32, (request, epoch): (u64, u64)) {
    let mut engine = crate::ckpt::EngineHeader { job: s.wire(), epoch, next_ctx: 2 }.encode();
    engine.extend_from_slice(b"engine");
    s.handle_message(h.now, reply(from, JobMsg::Moved { job: s.wire(), rank, request }, Bytes::from(engine)));
}

#[test]
fn a_migrated_rank_moves_alone_and_the_others_go_on() {
    // <restart>fail</restart>: a migration needs no restart rule.
    let (mut h, mut s) = running_on(3, RestartPolicy::Fail, None);
    let (job, wire) = (s.job(), s.wire());
    let from = s.ranks()[1].node.unwrap();
    let stays = s.ranks()[0].node.unwrap();
    assert_eq!(s.migrate(h.now, 1, None), Ok(1));
    assert!(matches!(s.migrate(h.now, 0, None), Err(SubmitCmdError::Migrating { rank: 1, .. })));
    h.settle(&mut s);
    assert!(h.sent.iter().any(|(to, m, _)| *to == from && *m == JobMsg::Move { job: wire, rank: 1, request: 1 }));
    // Only the moving rank's file of the cut is needed here: the others stay.
    for node in [from, stays] {
        let stay = JobMsg::CheckpointStay { job: wire, request: 1 };
        assert!(h.sent.iter().any(|(to, m, _)| *to == node && *m == stay), "{:?}", h.sent);
    }
    assert!(!h.sent.iter().any(|(_, m, _)| matches!(m, JobMsg::Checkpoint { .. })));
    take_cut(&mut h, &mut s, 1, 1);
    ship_cut(&mut h, &mut s, 1);
    // The cut is here, but the rank has not left its process: nothing moves.
    assert_eq!(s.ranks()[1].node, Some(from));
    let before = h.sent.len();
    h.exit_code = Some(0);
    left(&mut h, &mut s, from, 1, (1, 1));
    h.run(&mut s, 30);
    let to = s.ranks()[1].node.unwrap();
    assert!(to != from && to != stays, "rank 1 went to the free node: {to}");
    assert!(h.events.contains(&SubmitEvent::Moved { job, rank: 1, from, to, epoch: 1 }), "{:?}", h.events);
    assert_eq!(s.moves(), [format!("rank 1 moved off node {from} to node {to}, from checkpoint 1")]);
    // Nothing rolled back: same run, no restart, rank 0's node told nothing
    // but the checkpoint; the node moved off is done with the job.
    assert_eq!((s.wire(), s.restart_reasons().len(), s.ranks()[0].node), (wire, 0, Some(stays)));
    let after = &h.sent[before..];
    // Rank 0's node, the job's deputy, is told only the new placement, and
    // gets its copy of the job's output.
    let told: Vec<&JobMsg> = after.iter().filter(|(n, _, _)| *n == stays).map(|(_, m, _)| m).collect();
    assert!(matches!(told[0], JobMsg::Guard { ranks, .. } if *ranks == [(0, stays), (1, to)]), "{told:?}");
    let copy = |m: &JobMsg| matches!(m, JobMsg::Output { rank: 1, .. } | JobMsg::OutputFile { rank: 1, .. });
    assert!(told[1..].iter().all(|m| copy(m)), "{told:?}");
    assert!(after.iter().any(|(n, m, _)| *n == from && *m == JobMsg::Done { job: wire }), "{after:?}");
    // The new node: one rank offered, told the cut and given the engine before the files.
    let to_new: Vec<&(NodeAddr, JobMsg, Bytes)> = after.iter().filter(|(n, _, _)| *n == to).collect();
    assert!(matches!(&to_new[0].1, JobMsg::Offer { ranks, .. } if *ranks == [1]), "{to_new:?}");
    let at = |want: &dyn Fn(&JobMsg) -> bool| to_new.iter().position(|(_, m, _)| want(m));
    let resume = at(&|m| *m == JobMsg::Resume { job: wire, from: wire, epoch: 1 });
    let engine = at(&|m| *m == JobMsg::ResumeEngine { job: wire, rank: 1 });
    let start = at(&|m| *m == JobMsg::Start { job: wire });
    assert!(resume.is_some() && resume < engine && engine < start, "{to_new:?}");
    assert!(to_new[engine.unwrap()].2.ends_with(b"engine"), "the engine the rank left with");
    let staged: Vec<u32> = to_new
        .iter()
        .filter_map(|(_, m, _)| match m {
            JobMsg::Stage { file, offset: 0, .. } if *file >= RESUME_FILES => Some(*file),
            _ => None,
        })
        .collect();
    assert_eq!(staged, [RESUME_FILES + 1], "only the moving rank's file");
    // The job ends as ever once rank 0 exits too.
    s.handle_message(h.now, reply(stays, JobMsg::Exit { job: wire, rank: 0, code: 0 }, Bytes::new()));
    h.settle(&mut s);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
}

/// The node of `rank` ships output file `name` of it, `data`, in two
/// chunks with `digest`.
fn ship_output(
    h: &mut Harness,
    s: &mut Submission,
    from: NodeAddr,
    (rank, name): (u32, &str),
    data: Bytes,
    digest: Id,
) {
    let (job, total, half) = (s.wire(), data.len() as u64, data.len() / 2);
    for (offset, piece) in [(0, data.slice(..half)), (half as u64, data.slice(half..))] {
        let m = JobMsg::OutputFile { job, rank, name: name.into(), offset, total, digest };
        s.handle_message(h.now, reply(from, m, piece));
    }
    h.settle(s);
}

#[test]
fn a_rank_moving_alone_takes_the_output_files_it_wrote_to_its_new_node() {
    let (mut h, mut s) = running_on(3, RestartPolicy::Fail, None);
    let wire = s.wire();
    let from = s.ranks()[1].node.unwrap();
    let request = s.migrate(h.now, 1, None).unwrap();
    take_cut(&mut h, &mut s, request, 1);
    ship_cut(&mut h, &mut s, 1);
    // Its node reads its output file as it leaves: it goes with the rank,
    // not to the job's results.
    let log = Bytes::from_static(b"iterations 1 to 1000\n");
    let writes = |h: &Harness| h.events.iter().filter(|e| matches!(e, SubmitEvent::WriteFile { .. })).count();
    let written = writes(&h);
    ship_output(&mut h, &mut s, from, (1, "result.txt"), log.clone(), digest(&log));
    assert_eq!(writes(&h), written, "{:?}", h.events);
    let before = h.sent.len();
    h.exit_code = Some(0);
    left(&mut h, &mut s, from, 1, (request, 1));
    h.run(&mut s, 30);
    let to = s.ranks()[1].node.unwrap();
    assert!(s.moves().len() == 1 && s.restart_reasons().is_empty(), "{:?}", h.events);
    let to_new: Vec<&(NodeAddr, JobMsg, Bytes)> = h.sent[before..].iter().filter(|(n, _, _)| *n == to).collect();
    let at = |want: &dyn Fn(&JobMsg) -> bool| to_new.iter().position(|(_, m, _)| want(m));
    let announced =
        StagedFile { file: CARRIED_FILES, name: "result.txt".into(), total: log.len() as u64, digest: digest(&log) };
    let carried = at(&|m| *m == JobMsg::CarriedFiles { job: wire, rank: 1, files: vec![announced.clone()] });
    let engine = at(&|m| matches!(m, JobMsg::ResumeEngine { .. }));
    let staged = at(&|m| matches!(m, JobMsg::Stage { file, offset: 0, .. } if *file == CARRIED_FILES));
    let start = at(&|m| *m == JobMsg::Start { job: wire });
    assert!(engine < carried && carried < staged && staged < start, "{to_new:?}");
    let bytes: Vec<u8> = to_new
        .iter()
        .filter(|(_, m, _)| matches!(m, JobMsg::Stage { file, .. } if *file == CARRIED_FILES))
        .flat_map(|(_, _, p)| p.to_vec())
        .collect();
    assert_eq!(bytes, log, "the file as the rank left it");
}

#[test]
fn a_rank_moving_alone_carries_an_input_it_rewrote_but_never_a_file_named_like_its_executable() {
    let mut j = job(2, &["linux"]);
    j.outputfiles.extend(["input1".to_owned(), "ring".to_owned()]);
    let (mut h, mut s) = running_job_on(3, j);
    let from = s.ranks()[1].node.unwrap();
    let request = s.migrate(h.now, 1, None).unwrap();
    take_cut(&mut h, &mut s, request, 1);
    ship_cut(&mut h, &mut s, 1);
    for name in ["input1", "ring"] {
        let data = Bytes::from(format!("{name} as rank 1 left it"));
        let d = digest(&data);
        ship_output(&mut h, &mut s, from, (1, name), data, d);
    }
    let before = h.sent.len();
    h.exit_code = Some(0);
    left(&mut h, &mut s, from, 1, (request, 1));
    h.run(&mut s, 30);
    let to = s.ranks()[1].node.unwrap();
    let announced: Vec<Vec<String>> = h.sent[before..]
        .iter()
        .filter_map(|(n, m, _)| match m {
            JobMsg::CarriedFiles { files, .. } if *n == to => Some(files.iter().map(|f| f.name.clone()).collect()),
            _ => None,
        })
        .collect();
    assert_eq!(announced, [["input1"]], "the input it rewrote, staged after the job's own; not the executable");
    assert_eq!(s.moves().len(), 1, "{:?}", h.events);
}

#[test]
fn a_damaged_output_file_of_a_rank_moving_alone_rolls_the_job_back() {
    let (mut h, mut s) = running_on(3, RestartPolicy::Fail, None);
    let from = s.ranks()[1].node.unwrap();
    let request = s.migrate(h.now, 1, None).unwrap();
    take_cut(&mut h, &mut s, request, 1);
    ship_cut(&mut h, &mut s, 1);
    // Every rank's file of the migration's cut is here: the job rolls back
    // to it at once, and the rank's engine arriving after changes nothing.
    h.exit_code = Some(0);
    let log = Bytes::from_static(b"iterations 1 to 1000\n");
    ship_output(&mut h, &mut s, from, (1, "result.txt"), log, Id::ZERO);
    left(&mut h, &mut s, from, 1, (request, 1));
    h.run(&mut s, 30);
    let reason = s.restart_reasons();
    assert!(reason.len() == 1 && reason[0].contains("output file result.txt of rank 1 arrived damaged"), "{reason:?}");
    assert!(s.moves().is_empty());
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
}

#[test]
fn a_migration_counts_against_no_restart_after_a_loss() {
    let (mut h, mut s) = running();
    for round in 1..=MAX_RESTARTS as u64 + 1 {
        assert_eq!(s.phase(), Phase::Running, "round {round}: {:?}", h.events);
        // Both nodes shutting down: their ranks move by rolling the job back.
        for rank in 0..2 {
            let leaving = s.ranks()[rank].node.unwrap();
            s.handle_message(h.now, reply(leaving, JobMsg::Leaving { job: s.wire() }, Bytes::new()));
        }
        h.settle(&mut s);
        take_cut(&mut h, &mut s, round, round);
        ship_cut(&mut h, &mut s, round);
        h.run(&mut s, 30);
        assert_eq!(s.restart_reasons().len() as u64, round);
    }
    // Still one restart after a loss left (3 nodes: the one moved off last is free again).
    let lost = s.ranks()[1].node.unwrap();
    s.handle_send_failed(h.now, lost);
    h.run(&mut s, 30);
    assert!(s.restart_reasons().last().unwrap().contains(&lost.to_string()), "{:?}", s.restart_reasons());
    assert_eq!(s.phase(), Phase::Running, "{:?}", h.outcome());
}

#[test]
fn a_node_shutting_down_has_its_ranks_moved_or_is_told_they_stay() {
    // Its one rank moves alone, and the node is done with the job.
    let (mut h, mut s) = running();
    let (job, wire) = (s.job(), s.wire());
    let leaving = s.ranks()[0].node.unwrap();
    s.handle_message(h.now, reply(leaving, JobMsg::Leaving { job: wire }, Bytes::new()));
    h.settle(&mut s);
    assert!(h.sent.iter().any(|(to, m, _)| *to == leaving && *m == JobMsg::Move { job: wire, rank: 0, request: 1 }));
    take_cut(&mut h, &mut s, 1, 1);
    ship_cut(&mut h, &mut s, 1);
    left(&mut h, &mut s, leaving, 0, (1, 1));
    h.run(&mut s, 30);
    let to = s.ranks()[0].node.unwrap();
    assert!(h.events.contains(&SubmitEvent::Moved { job, rank: 0, from: leaving, to, epoch: 1 }), "{:?}", h.events);
    assert!(h.sent.iter().any(|(to, m, _)| *to == leaving && *m == JobMsg::Done { job: wire }));
    let want = format!("rank 0 moved off node {leaving} to node {to}, from checkpoint 1 (its node is shutting down)");
    assert_eq!(s.moves(), [want]);
    assert!(s.restart_reasons().is_empty());

    // Ranks that cannot be asked for a checkpoint stay: the node is told so.
    let (mut h, mut s) = running();
    let leaving = s.ranks()[1].node.unwrap();
    let job = s.wire();
    s.handle_message(h.now, reply(leaving, JobMsg::Leaving { job }, Bytes::new()));
    for rank in 0..2usize {
        let node = s.ranks()[rank].node.unwrap();
        s.handle_message(h.now, reply(node, JobMsg::CheckpointAsked { job, request: 1, ranks: vec![] }, Bytes::new()));
    }
    h.settle(&mut s);
    assert!(h.sent.iter().any(|(to, m, _)| *to == leaving && *m == JobMsg::Staying { job }), "{:?}", h.sent);
    assert_eq!(s.phase(), Phase::Running);
}

#[test]
fn a_node_shutting_down_with_two_ranks_has_them_moved_alone_in_turn() {
    // A two-slot node runs two ranks of three; two more nodes are free.
    let mut nodes = vec![(addr(1), res(2, 8000, &[]), Behave::Accept)];
    nodes.extend((2..=4).map(|i| (addr(i), res(1, 8000, &[]), Behave::Accept)));
    let mut h = Harness::new(&nodes);
    h.exit_code = None;
    let mut s = submission(&h, job(3, &["linux"]));
    h.run(&mut s, 20);
    assert_eq!(s.phase(), Phase::Running);
    let (id, wire) = (s.job(), s.wire());
    let leaving = addr(1);
    let two: Vec<u32> = (0..3).filter(|r| s.ranks()[*r as usize].node == Some(leaving)).collect();
    assert_eq!(two.len(), 2, "{:?}", s.ranks());
    s.handle_message(h.now, reply(leaving, JobMsg::Leaving { job: wire }, Bytes::new()));
    h.settle(&mut s);
    for (request, rank) in (1..).zip(two.iter().copied()) {
        let mv = JobMsg::Move { job: wire, rank, request };
        assert!(h.sent.iter().any(|(to, m, _)| *to == leaving && *m == mv), "rank {rank}: {:?}", h.sent);
        take_cut(&mut h, &mut s, request, request);
        ship_cut(&mut h, &mut s, request);
        left(&mut h, &mut s, leaving, rank, (request, request));
        // No time passes: the next move must not run out its own.
        h.settle(&mut s);
        let to = s.ranks()[rank as usize].node.unwrap();
        let moved = SubmitEvent::Moved { job: id, rank, from: leaving, to, epoch: request };
        assert!(h.events.contains(&moved), "rank {rank}: {:?}", h.events);
    }
    // Nothing rolled back; the node is done with the job once both left,
    // and each rank went to a node of its own.
    assert!(s.restart_reasons().is_empty(), "{:?}", s.restart_reasons());
    assert_eq!((s.wire(), s.moves().len()), (wire, 2));
    assert!(h.sent.iter().any(|(to, m, _)| *to == leaving && *m == JobMsg::Done { job: wire }));
    let mut placed: Vec<NodeAddr> = s.ranks().iter().map(|r| r.node.unwrap()).collect();
    placed.sort();
    placed.dedup();
    assert_eq!(placed.len(), 3, "{:?}", s.ranks());
    assert!(!placed.contains(&leaving));

    // With one free node for two ranks, they move by rolling the job back.
    let nodes = [(addr(1), res(2, 8000, &[]), Behave::Accept), (addr(2), res(1, 8000, &[]), Behave::Accept)];
    let mut h = Harness::new(&nodes);
    h.exit_code = None;
    let mut s = submission(&h, job(2, &["linux"]));
    h.run(&mut s, 20);
    let wire = s.wire();
    let leaving = s.ranks()[0].node.unwrap();
    assert_eq!(s.ranks()[1].node, Some(leaving), "{:?}", s.ranks());
    s.handle_message(h.now, reply(leaving, JobMsg::Leaving { job: wire }, Bytes::new()));
    h.settle(&mut s);
    assert!(!h.sent.iter().any(|(_, m, _)| matches!(m, JobMsg::Move { .. })), "{:?}", h.sent);
    assert!(h.sent.iter().any(|(_, m, _)| matches!(m, JobMsg::Checkpoint { request: 1, .. })), "{:?}", h.sent);
}

#[test]
fn a_file_of_a_cut_its_rank_never_reported_is_not_kept() {
    let (mut h, mut s) = running();
    let n0 = s.ranks()[0].node.unwrap();
    let (job, data) = (s.wire(), ckpt_file(s.wire(), 0, 7));
    let (total, digest) = (data.len() as u64, digest(&data));
    let file = JobMsg::CheckpointFile { job, rank: 0, epoch: 7, offset: 0, total, digest };
    s.handle_message(h.now, reply(n0, file, data));
    h.settle(&mut s);
    assert!(h.cuts.is_empty(), "{:?}", h.cuts.keys());
    // Made-up epochs, reported and shipped, keep at most a few partial cuts on disk.
    for epoch in 1..=10 {
        let data = ckpt_file(s.wire(), 0, epoch);
        let d = super::digest(&data);
        ship(&mut h, &mut s, n0, (0, epoch), data, d);
    }
    assert_eq!(h.cuts.keys().copied().collect::<Vec<_>>(), [(0, 8), (0, 9), (0, 10)]);
}

#[test]
fn a_resumed_run_s_cuts_are_its_own_not_the_partial_ones_of_the_run_before() {
    let (mut h, mut s) = running();
    ship_cut(&mut h, &mut s, 1);
    // Cut 2 reaches the job's node from rank 0 only, then rank 1's node dies.
    let n0 = s.ranks()[0].node.unwrap();
    let part = ckpt_file(s.wire(), 0, 2);
    let d = digest(&part);
    ship(&mut h, &mut s, n0, (0, 2), part, d);
    let lost = s.ranks()[1].node.unwrap();
    s.handle_send_failed(h.now, lost);
    h.run(&mut s, 30);
    assert_eq!(s.resumed_from(), Some(1));
    assert!(!h.cuts.contains_key(&(0, 2)), "the old run's part of cut 2 is dropped");
    // The resumed run takes cut 2 itself: it is complete only with both of its files.
    let n0 = s.ranks()[0].node.unwrap();
    let mine = ckpt_file(s.wire(), 0, 2);
    let d = digest(&mine);
    ship(&mut h, &mut s, n0, (0, 2), mine, d);
    assert_eq!(s.newest_cut(), Some(1));
    ship_cut(&mut h, &mut s, 2);
    assert_eq!(s.newest_cut(), Some(2));
}

#[test]
fn a_migration_whose_cut_never_arrives_gives_up_and_a_rank_that_leaves_after_all_rolls_the_job_back() {
    let (mut h, mut s) = running();
    let (wire, from) = (s.wire(), s.ranks()[1].node.unwrap());
    let request = s.migrate(h.now, 1, None).unwrap();
    take_cut(&mut h, &mut s, request, 1);
    // No file ever comes: the deadline passes (the harness jumps to it).
    h.run(&mut s, 10);
    let failed = h.events.iter().any(|e| {
        matches!(e, SubmitEvent::CheckpointFailed { request: r, reason, .. }
            if *r == request && reason.contains("did not reach the job's node whole"))
    });
    assert!(failed, "{:?}", h.events);
    assert!(!h.events.iter().any(|e| matches!(e, SubmitEvent::Migrated { .. })));
    assert_eq!(s.phase(), Phase::Running);
    // The rank, asked all the same, leaves late: it is gone, so the job
    // rolls back rather than wait for it forever.
    left(&mut h, &mut s, from, 1, (request, 1));
    h.settle(&mut s);
    assert_ne!(s.wire(), wire);
    let reason = s.restart_reasons().first().cloned().unwrap_or_default();
    assert!(reason.contains(&format!("rank 1 left node {from} to move after its move was given up")), "{reason}");
}

#[test]
fn a_rank_that_leaves_at_a_later_cut_resumes_from_that_one() {
    let (mut h, mut s) = running_on(3, RestartPolicy::Fail, None);
    let (job, from) = (s.job(), s.ranks()[1].node.unwrap());
    let request = s.migrate(h.now, 1, None).unwrap();
    take_cut(&mut h, &mut s, request, 1);
    ship_cut(&mut h, &mut s, 1);
    // It was asked after the cut answering the move: it leaves after the
    // next, whose file comes after its engine.
    left(&mut h, &mut s, from, 1, (request, 2));
    h.settle(&mut s);
    assert_eq!(s.ranks()[1].node, Some(from), "not before its file of cut 2");
    take_cut(&mut h, &mut s, request, 2);
    ship_cut(&mut h, &mut s, 2);
    h.run(&mut s, 30);
    let to = s.ranks()[1].node.unwrap();
    assert!(h.events.contains(&SubmitEvent::Moved { job, rank: 1, from, to, epoch: 2 }), "{:?}", h.events);
    assert!(h.sent.iter().any(|(n, m, _)| *n == to && matches!(m, JobMsg::Resume { epoch: 2, .. })));
}

#[test]
fn a_node_lost_while_the_rank_is_staged_there_is_passed_over() {
    let (mut h, mut s) = running_on(4, RestartPolicy::Fail, None);
    let (job, from) = (s.job(), s.ranks()[1].node.unwrap());
    let request = s.migrate(h.now, 1, None).unwrap();
    take_cut(&mut h, &mut s, request, 1);
    ship_cut(&mut h, &mut s, 1);
    // The first node offered takes the rank, then says nothing more and goes.
    let used: Vec<NodeAddr> = s.ranks().iter().filter_map(|r| r.node).collect();
    let first = (1..=4).map(addr).filter(|a| !used.contains(a)).min().unwrap();
    h.behave.insert(first, Behave::Silent);
    left(&mut h, &mut s, from, 1, (request, 1));
    h.settle(&mut s);
    s.handle_message(h.now, reply(first, JobMsg::Accept { job: s.wire(), ranks: vec![1] }, Bytes::new()));
    h.settle(&mut s);
    assert_eq!(s.ranks()[1].node, Some(first));
    s.handle_send_failed(h.now, first);
    h.run(&mut s, 30);
    let to = s.ranks()[1].node.unwrap();
    assert!(to != first && !used.contains(&to), "{to}");
    assert!(h.events.contains(&SubmitEvent::Moved { job, rank: 1, from, to, epoch: 1 }), "{:?}", h.events);
    assert!(s.restart_reasons().is_empty(), "not a loss of the job: {:?}", s.restart_reasons());
}

#[test]
fn a_rank_with_nowhere_to_go_is_not_asked_to_move_and_one_refused_everywhere_comes_back() {
    // Two nodes, one rank on each: no node could take either alone.
    let (h, mut s) = running_on(2, RestartPolicy::Fail, None);
    let e = s.migrate(h.now, 1, None).unwrap_err();
    assert!(matches!(e, SubmitCmdError::NowhereToGo { rank: 1, .. }), "{e}");
    assert!(!h.sent.iter().any(|(_, m, _)| matches!(m, JobMsg::Move { .. })));
    // Three: the free one refuses the rank once it left; it goes back to
    // the node it left (done with the job meanwhile) rather than the job
    // rolling back.
    let (mut h, mut s) = running_on(3, RestartPolicy::Fail, None);
    let (job, from) = (s.job(), s.ranks()[1].node.unwrap());
    let used: Vec<NodeAddr> = s.ranks().iter().filter_map(|r| r.node).collect();
    let free = (1..=3).map(addr).find(|a| !used.contains(a)).unwrap();
    h.behave.insert(free, Behave::Reject);
    let request = s.migrate(h.now, 1, None).unwrap();
    take_cut(&mut h, &mut s, request, 1);
    ship_cut(&mut h, &mut s, 1);
    left(&mut h, &mut s, from, 1, (1, 1));
    h.run(&mut s, 30);
    assert!(h.events.contains(&SubmitEvent::Moved { job, rank: 1, from, to: from, epoch: 1 }), "{:?}", h.events);
    let offered: Vec<NodeAddr> = h.offers().iter().filter(|(_, r)| *r == [1]).map(|(n, _)| *n).collect();
    assert_eq!(offered, [from, free, from]);
    assert!(s.restart_reasons().is_empty());
}

#[test]
fn a_rank_whose_file_arrives_damaged_rolls_the_job_back_to_the_cut_before() {
    let (mut h, mut s) = running_on(3, RestartPolicy::Fail, None);
    let from = s.ranks()[1].node.unwrap();
    ship_cut(&mut h, &mut s, 1);
    let request = s.migrate(h.now, 1, None).unwrap();
    take_cut(&mut h, &mut s, request, 2);
    ship_cut(&mut h, &mut s, 2);
    // The kept copy of the rank's file rots before it is read back.
    h.cuts.get_mut(&(1, 2)).unwrap()[crate::ckpt::HEADER_LEN + 7] ^= 1;
    h.exit_code = Some(0);
    left(&mut h, &mut s, from, 1, (1, 2));
    h.run(&mut s, 30);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    let reason = &s.restart_reasons()[0];
    assert!(reason.starts_with("from checkpoint 1: ") && reason.contains("could not move off node"), "{reason}");
    assert_eq!(s.resumed_from(), Some(1));
    // The tool that asked is answered as for any migration rolling the job
    // back (with the newest cut kept whole when it rolled back: that the
    // cut is damaged is found when it is read).
    let answered = |e: &SubmitEvent| matches!(e, SubmitEvent::Migrated { rank: 1, from: f, .. } if *f == from);
    assert!(h.events.iter().any(answered), "{:?}", h.events);
}

#[test]
fn a_rank_gone_to_move_is_not_left_waited_for_when_the_cut_never_arrives() {
    let (mut h, mut s) = running_on(3, RestartPolicy::Fail, None);
    let wire = s.wire();
    let (a, b) = (s.ranks()[0].node.unwrap(), s.ranks()[1].node.unwrap());
    // Both nodes shut down: the first one's rank was asked to move alone,
    // and leaves; the second turns the move into rolling the job back.
    for node in [a, b] {
        s.handle_message(h.now, reply(node, JobMsg::Leaving { job: wire }, Bytes::new()));
    }
    left(&mut h, &mut s, a, 0, (1, 1));
    take_cut(&mut h, &mut s, 1, 1);
    // No file ever comes: at the deadline the job rolls back all the same
    // (from scratch: no cut is kept), rather than wait for rank 0 forever.
    h.run(&mut s, 10);
    let reason = s.restart_reasons().first().cloned().unwrap_or_default();
    assert!(
        reason.contains(&format!("rank 0 could not move off node {a} alone (it was not running again")),
        "{reason}"
    );
    assert_ne!(s.wire(), wire);
}

#[test]
fn a_rank_migrated_to_a_named_node_resumes_there() {
    let (mut h, mut s) = running_on(4, RestartPolicy::Fail, None);
    let from = s.ranks()[1].node.unwrap();
    let other = s.ranks()[0].node.unwrap();
    let used: Vec<NodeAddr> = s.ranks().iter().filter_map(|r| r.node).collect();
    // The free node placement would pick last: the highest address.
    let to = (1..=4).map(addr).filter(|a| !used.contains(a)).max().unwrap();
    let job = s.job();
    for (bad, why) in [
        (from, "the rank runs there"),
        (addr(9), "does not meet the job's requirements"),
        (other, "it runs other ranks of the job"),
    ] {
        let e = s.migrate(h.now, 1, Some(bad)).unwrap_err();
        assert!(matches!(e, SubmitCmdError::CannotMoveTo { rank: 1, .. }), "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    let request = s.migrate(h.now, 1, Some(to)).unwrap();
    take_cut(&mut h, &mut s, request, 1);
    ship_cut(&mut h, &mut s, 1);
    left(&mut h, &mut s, from, 1, (1, 1));
    h.run(&mut s, 30);
    assert!(h.events.contains(&SubmitEvent::Moved { job, rank: 1, from, to, epoch: 1 }), "{:?}", h.events);
    assert_eq!(s.ranks()[1].node, Some(to), "rank 1 went where it was sent");
    assert!(s.restart_reasons().is_empty());
}

#[test]
fn a_named_node_that_does_not_answer_leaves_the_rank_to_another() {
    let (mut h, mut s) = running_on(4, RestartPolicy::Fail, None);
    let from = s.ranks()[1].node.unwrap();
    let used: Vec<NodeAddr> = s.ranks().iter().filter_map(|r| r.node).collect();
    let to = (1..=4).map(addr).filter(|a| !used.contains(a)).max().unwrap();
    let request = s.migrate(h.now, 1, Some(to)).unwrap();
    h.behave.insert(to, Behave::Silent);
    take_cut(&mut h, &mut s, request, 1);
    ship_cut(&mut h, &mut s, 1);
    left(&mut h, &mut s, from, 1, (1, 1));
    h.run(&mut s, 30);
    let went = s.ranks()[1].node.unwrap();
    assert!(!used.contains(&went) && went != to, "{went}");
    // Rank 1 was offered to its first node, then to the one named, then to the other.
    let offered: Vec<NodeAddr> = h.offers().iter().filter(|(_, r)| *r == [1]).map(|(n, _)| *n).collect();
    assert_eq!(offered, [from, to, went]);
    assert!(h.sent.iter().any(|(n, m, _)| *n == to && matches!(m, JobMsg::Kill { .. })), "the silent node let go");
    assert!(h.events.contains(&SubmitEvent::Moved { job: s.job(), rank: 1, from, to: went, epoch: 1 }));
    assert!(s.restart_reasons().is_empty());
}

#[test]
fn two_nodes_shutting_down_at_once_have_every_rank_moved_by_one_restart() {
    let (mut h, mut s) = running_on(4, RestartPolicy::Fail, None);
    let job = s.wire();
    let (a, b) = (s.ranks()[0].node.unwrap(), s.ranks()[1].node.unwrap());
    for node in [a, b] {
        s.handle_message(h.now, reply(node, JobMsg::Leaving { job }, Bytes::new()));
    }
    h.settle(&mut s);
    take_cut(&mut h, &mut s, 1, 1);
    h.exit_code = Some(0);
    ship_cut(&mut h, &mut s, 1);
    h.run(&mut s, 30);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    assert_eq!(s.restart_reasons().len(), 1, "one restart: {:?}", s.restart_reasons());
    let reason = &s.restart_reasons()[0];
    assert!(reason.contains(&format!("off node(s) {b} (shutting down)")), "{reason}");
    assert!(s.ranks().iter().all(|r| r.node.is_some_and(|n| n != a && n != b)), "both moved off: {:?}", s.ranks());
    assert!(!h.sent.iter().any(|(_, m, _)| matches!(m, JobMsg::Staying { .. })), "nobody told to stay");
}

#[test]
fn a_node_shutting_down_during_a_move_alone_has_the_job_roll_back_to_a_cut_asked_of_every_rank() {
    let (mut h, mut s) = running_on(3, RestartPolicy::Fail, None);
    let (wire, from, other) = (s.wire(), s.ranks()[1].node.unwrap(), s.ranks()[0].node.unwrap());
    let request = s.migrate(h.now, 1, None).unwrap();
    h.settle(&mut s);
    // Rank 0's node shuts down before rank 1 left: only rank 1's file of the
    // move's cut was to come, so a cut every rank ships is asked for.
    s.handle_message(h.now, reply(other, JobMsg::Leaving { job: wire }, Bytes::new()));
    h.settle(&mut s);
    let again = JobMsg::Checkpoint { job: wire, request: request + 1 };
    assert!(h.sent.iter().any(|(to, m, _)| *to == other && *m == again), "{:?}", h.sent);
    // Rank 1 leaves at the move's cut all the same; the job waits for the
    // cut asked again, then rolls back to it away from both nodes.
    left(&mut h, &mut s, from, 1, (request, 1));
    h.settle(&mut s);
    assert_eq!(s.wire(), wire, "not before the cut is here");
    take_cut(&mut h, &mut s, request + 1, 2);
    h.exit_code = Some(0);
    ship_cut(&mut h, &mut s, 2);
    h.run(&mut s, 30);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    let reason = &s.restart_reasons()[0];
    assert!(
        reason.starts_with("from checkpoint 2: rank 1 moved off node ") && reason.contains("(shutting down)"),
        "{reason}"
    );
}

#[test]
fn the_deputy_keeps_a_copy_of_every_cut_file_kept_and_restarts_from_the_newest_when_it_takes_over() {
    let (mut h, mut s) = running();
    let deputy = s.deputy().expect("a deputy");
    for epoch in 1..=3 {
        ship_cut(&mut h, &mut s, epoch);
    }
    // The deputy's copy: the chunks in order, less what was dropped; the
    // same files as kept here (the two newest cuts).
    let mut copies: BTreeMap<(u32, u64), Vec<u8>> = BTreeMap::new();
    for (to, m, p) in h.sent.iter().filter(|(to, ..)| *to == deputy) {
        match m {
            JobMsg::CheckpointFile { rank, epoch, offset, .. } => {
                let f = copies.entry((*rank, *epoch)).or_default();
                assert_eq!(f.len() as u64, *offset, "chunks to {to} in order");
                f.extend_from_slice(p);
            }
            JobMsg::CutDropped { rank, epoch, .. } => assert!(copies.remove(&(*rank, *epoch)).is_some()),
            _ => {}
        }
    }
    assert_eq!(copies, h.cuts);
    assert_eq!(copies.keys().copied().collect::<Vec<_>>(), [(0, 2), (0, 3), (1, 2), (1, 3)]);

    // Taken over with those cuts (and the job's files), a lost node restarts
    // the job from the newest.
    let xml = h.sent.iter().find_map(|(_, m, p)| matches!(m, JobMsg::Guard { .. }).then(|| p.clone())).unwrap();
    let desc = JobDescription::parse(&xml).unwrap().job;
    let mut files: BTreeMap<u32, (String, Bytes, Id)> = BTreeMap::new();
    for (_, m, p) in &h.sent {
        if let JobMsg::Stage { file, name, offset: 0, digest, .. } = m {
            files.insert(*file, (name.clone(), p.clone(), *digest));
        }
    }
    let wire = s.wire();
    let cuts = [2, 3].map(|e| (e, wire, BTreeSet::from([0, 1]))).to_vec();
    // Told of a restart and a move before (and of more migrations than
    // restarts: another node's count, taken for no more than the restarts).
    let (before, moved) = ("from scratch: node 9 was lost".to_string(), "rank 1 moved".to_string());
    let past = JobPast { restarts: vec![before.clone()], moves: vec![moved.clone()], migrations: 7 };
    let g = Guarded {
        job: s.job(),
        wire,
        restarts: 1,
        ranks: s.ranks().iter().map(|r| (r.rank, r.node.unwrap())).collect(),
        auth: None,
        past,
    };
    let kept = Replica { files: files.into_iter().collect(), cuts };
    let mut d = Submission::adopt(SubmitConfig::default(), deputy, (g, desc), kept, h.now);
    assert_eq!((d.restart_reasons(), d.moves()), (&[before.clone()][..], &[moved][..]));
    h.events.clear();
    h.settle(&mut d);
    let lost = s.ranks().iter().filter_map(|r| r.node).find(|n| *n != deputy).unwrap();
    h.exit_code = Some(0);
    d.handle_send_failed(h.now, lost);
    h.run(&mut d, 40);
    let restarting = h.events.iter().find_map(|e| match e {
        SubmitEvent::Restarting { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert!(restarting.as_ref().is_some_and(|r| r.starts_with("from checkpoint 3: ")), "{restarting:?}");
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    assert_eq!(d.restart_reasons().len(), 2, "after the one told of: {:?}", d.restart_reasons());
    assert_eq!(d.restart_reasons()[0], before);
}
