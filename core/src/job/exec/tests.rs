//! The executor alone, then wired to a real [`Submission`].

use super::*;
use crate::job::submit::{FileData, Outcome, Submission, SubmitConfig, SubmitEvent, digest};
use crate::job::{ANY_NAME, Resources, STREAM_WINDOW, StagedFile};

pub(super) fn addr(i: u32) -> NodeAddr {
    NodeAddr::loopback(i, 7000)
}

pub(super) fn job_id(n: u64) -> JobId {
    JobId::derive(addr(0), n, 1)
}

pub(super) fn env(body: JobMsg, payload: Bytes) -> Envelope<JobMsg> {
    Envelope::new(addr(0).id(), addr(0), 0, body).with_payload(payload)
}

/// The submitter (node 0) names `deputies` for job `j`, never restarted.
pub(super) fn guard(j: JobId, deputies: Vec<NodeAddr>) -> JobMsg {
    let past = crate::job::JobPast::default();
    JobMsg::Guard { job: j, id: j, restarts: 0, deputies, ranks: vec![], auth: None, past }
}

pub(super) fn drain(e: &mut Execution) -> (Vec<JobMsg>, Vec<ExecEvent>) {
    let (mut msgs, mut evs) = (Vec::new(), Vec::new());
    while let Some(a) = e.poll_action() {
        match a {
            Action::Send { msg, .. } => msgs.push(msg.body),
            Action::Event(ev) => evs.push(ev),
        }
    }
    (msgs, evs)
}

/// An executor running both ranks of job 1 (no control connection linked).
pub(super) fn two_ranks_running() -> (Execution, JobId, Instant) {
    let now = Instant::now();
    let mut e = Execution::new(ExecConfig::new(2, "n"), addr(5));
    let j = job_id(1);
    staged(&mut e, now, j, vec![0, 1], false);
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    drain(&mut e);
    (e, j, now)
}

/// A rank's report of its checkpoint of `epoch`.
pub(super) fn ckpt(epoch: u64) -> crate::ckpt::CheckpointInfo {
    crate::ckpt::CheckpointInfo { epoch, unix_ms: 1_000 + epoch, stored_bytes: 100, raw_bytes: 300 }
}

const XML: &str = "<p2pjob><executable>prog</executable><arguments>a b</arguments>\
    <outputfile>out.txt</outputfile><processes>2</processes><requirement>linux</requirement>\
    <env>OMP_NUM_THREADS=4</env></p2pjob>";

/// Offers `ranks` of a two-rank job and stages the job file and a program.
pub(super) fn staged(e: &mut Execution, now: Instant, job: JobId, ranks: Vec<u32>, corrupt: bool) -> Vec<JobMsg> {
    let xml = Bytes::from_static(XML.as_bytes());
    e.handle_message(now, env(JobMsg::Offer { job, ranks, size: 2, digest: digest(&xml) }, Bytes::new()));
    let prog = Bytes::from_static(b"#!/bin/sh\necho hi\n");
    for (file, name, data) in [(0, "job.xml", xml), (1, "prog", prog)] {
        let (total, d) = (data.len() as u64, digest(&data));
        let sent = if corrupt && file == 1 { Bytes::from_static(b"#!/bin/sh\necho HI\n") } else { data };
        let body = JobMsg::Stage { job, file, name: name.into(), offset: 0, total, digest: d };
        e.handle_message(now, env(body, sent));
    }
    e.handle_message(now, env(JobMsg::StageEnd { job, files: 2 }, Bytes::new()));
    drain(e).0
}

#[test]
fn offers_are_accepted_only_while_slots_are_free_and_never_twice() {
    let now = Instant::now();
    let mut e = Execution::new(ExecConfig::new(1, "127.0.0.1:9000"), addr(5));
    let j = job_id(1);
    let offer = |ranks: Vec<u32>| env(JobMsg::Offer { job: j, ranks, size: 2, digest: Id::ZERO }, Bytes::new());
    e.handle_message(now, offer(vec![0, 1]));
    assert!(matches!(drain(&mut e).0[..], [JobMsg::Reject { reason: RejectReason::NoSlot, .. }]));
    e.handle_message(now, offer(vec![0]));
    let (msgs, evs) = drain(&mut e);
    assert!(matches!(msgs[..], [JobMsg::Accept { .. }]));
    assert_eq!(evs, [ExecEvent::SlotsChanged { free: 0 }]);
    e.handle_message(now, offer(vec![0]));
    assert!(matches!(drain(&mut e).0[..], [JobMsg::Accept { .. }]), "a repeated offer is answered again");
    assert_eq!(e.free_slots(), 0);
    e.handle_message(
        now,
        env(JobMsg::Offer { job: job_id(2), ranks: vec![0], size: 1, digest: Id::ZERO }, Bytes::new()),
    );
    assert!(matches!(drain(&mut e).0[..], [JobMsg::Reject { .. }]));
    // Nonsense offers are dropped.
    e.handle_message(
        now,
        env(JobMsg::Offer { job: job_id(3), ranks: vec![4], size: 2, digest: Id::ZERO }, Bytes::new()),
    );
    assert_eq!(e.ignored(), 1);
    // Nobody starts it: the reservation is given back.
    e.handle_timeout(now + Duration::from_secs(301));
    assert_eq!(drain(&mut e).1, [ExecEvent::SlotsChanged { free: 1 }, ExecEvent::Cleanup { job: j }]);
}

#[test]
fn a_corrupt_transfer_is_re_requested_and_never_run() {
    let now = Instant::now();
    let mut e = Execution::new(ExecConfig::new(2, "127.0.0.1:9000"), addr(5));
    let j = job_id(1);
    let msgs = staged(&mut e, now, j, vec![0, 1], true);
    assert_eq!(msgs.last(), Some(&JobMsg::Resend { job: j, file: 1 }));
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert!(msgs.is_empty() && !evs.iter().any(|e| matches!(e, ExecEvent::SpawnProcess { .. })));
    // The resent file is right: staged, then started with the documented environment.
    let data = Bytes::from_static(b"#!/bin/sh\necho hi\n");
    let body = JobMsg::Stage {
        job: j,
        file: 1,
        name: "prog".into(),
        offset: 0,
        total: data.len() as u64,
        digest: digest(&data),
    };
    let prog_len = data.len() as u64;
    e.handle_message(now, env(body, data));
    e.handle_message(now, env(JobMsg::StageEnd { job: j, files: 2 }, Bytes::new()));
    // The acknowledgement counts every staged byte so far, the corrupt copy too.
    let consumed = XML.len() as u64 + 2 * prog_len;
    assert_eq!(drain(&mut e).0, [JobMsg::StageAck { job: j, consumed }, JobMsg::Staged { job: j }]);
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert_eq!(msgs, [JobMsg::Started { job: j, rank: 0 }, JobMsg::Started { job: j, rank: 1 }]);
    let ExecEvent::SpawnProcess { program, args, env: vars, rank: 1, .. } =
        &evs[0..2].iter().find(|e| matches!(e, ExecEvent::SpawnProcess { rank: 1, .. })).unwrap()
    else {
        unreachable!()
    };
    assert_eq!((program.as_str(), args.clone()), ("prog", vec!["a".to_owned(), "b".to_owned()]));
    let vars: BTreeMap<_, _> = vars.iter().cloned().collect();
    assert_eq!(vars["P2PMP_JOB"], j.to_string());
    assert_eq!(
        (vars["P2PMP_RANK"].as_str(), vars["P2PMP_SIZE"].as_str(), vars["P2PMP_NODE"].as_str()),
        ("1", "2", "127.0.0.1:9000")
    );
    assert!(!vars.contains_key("P2PMP_CHECKPOINT_MS"), "no interval asked for");
    assert_eq!(vars["OMP_NUM_THREADS"], "4", "the job file's variables");
    // Start again: nothing starts twice.
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    assert!(!drain(&mut e).1.iter().any(|e| matches!(e, ExecEvent::SpawnProcess { .. })));
}

#[test]
fn output_exit_and_output_files_go_back_then_kill_stops_the_rest() {
    let (mut e, j, now) = two_ranks_running();
    e.handle_process_output(j, 0, Stream::Stdout, Bytes::from_static(b"abc")).unwrap();
    e.handle_process_output(j, 0, Stream::Stdout, Bytes::from_static(b"de")).unwrap();
    let (msgs, _) = drain(&mut e);
    assert!(matches!(msgs[..], [JobMsg::Output { offset: 0, .. }, JobMsg::Output { offset: 3, .. }]));
    e.handle_process_exit(j, 0, 0).unwrap();
    let (msgs, evs) = drain(&mut e);
    assert!(msgs.is_empty(), "the exit waits for the output files");
    assert_eq!(evs, [ExecEvent::ReadOutputFile { job: j, rank: 0, name: "out.txt".into() }]);
    e.handle_output_file(j, 0, "out.txt", Ok(Bytes::from_static(b"42")));
    let (msgs, evs) = drain(&mut e);
    assert!(
        matches!(&msgs[..], [JobMsg::OutputFile { total: 2, .. }, JobMsg::Exit { rank: 0, code: 0, .. }]),
        "{msgs:?}"
    );
    assert_eq!(evs, [ExecEvent::SlotsChanged { free: 1 }]);
    assert!(e.handle_process_exit(j, 0, 0).is_err());
    e.handle_message(now, env(JobMsg::Kill { job: j }, Bytes::new()));
    assert_eq!(drain(&mut e).1, [ExecEvent::KillProcess { job: j, rank: 1 }]);
    e.handle_process_exit(j, 1, -9).unwrap();
    let (msgs, evs) = drain(&mut e);
    assert!(matches!(msgs[..], [JobMsg::Exit { rank: 1, code: -9, .. }]));
    assert_eq!(evs, [ExecEvent::SlotsChanged { free: 2 }, ExecEvent::Cleanup { job: j }]);
    assert_eq!(e.jobs().count(), 0);
}

#[test]
fn strangers_and_bad_file_names_are_ignored() {
    let now = Instant::now();
    let mut e = Execution::new(ExecConfig::new(2, "n"), addr(5));
    let j = job_id(1);
    e.handle_message(now, env(JobMsg::Offer { job: j, ranks: vec![0], size: 1, digest: Id::ZERO }, Bytes::new()));
    drain(&mut e);
    let stranger = Envelope::new(addr(9).id(), addr(9), 0, JobMsg::Kill { job: j });
    e.handle_message(now, stranger);
    let bad = JobMsg::Stage { job: j, file: 1, name: "../etc/passwd".into(), offset: 0, total: 1, digest: Id::ZERO };
    e.handle_message(now, env(bad, Bytes::from_static(b"x")));
    let over = JobMsg::Stage { job: j, file: 1, name: "f".into(), offset: 0, total: 1, digest: Id::ZERO };
    e.handle_message(now, env(over, Bytes::from_static(b"xx")));
    assert_eq!(e.ignored(), 3);
    assert!(drain(&mut e).1.is_empty());
}

/// A submitter and three executors, with a scripted overlay and instant processes;
/// output files many times the executors' window, so they come back only as the
/// submitter acknowledges them.
#[test]
fn submission_and_executors_run_a_job_end_to_end() {
    let mut now = Instant::now();
    let slots = [1u32, 2, 1];
    let exec_config = |slots| {
        let mut c = ExecConfig::new(slots, "ctl");
        (c.output_window, c.chunk_size) = (64, 16);
        c
    };
    let mut execs: Vec<Execution> = (0..3).map(|i| Execution::new(exec_config(slots[i]), addr(i as u32 + 1))).collect();
    let out_file = |rank: u32| Bytes::from((0..1000u32).map(|i| (i * 7 + rank) as u8).collect::<Vec<_>>());
    // Each rank prints two windows and a bit; its driver reads (feeds) only
    // what the credit allows, as jobd does.
    let stdout_of = |rank: u32| {
        Bytes::from((0..2 * STREAM_WINDOW as usize + 1000).map(|i| (i % 251) as u8 ^ rank as u8).collect::<Vec<_>>())
    };
    let mut feeding: BTreeMap<(usize, u32), (Bytes, u64)> = BTreeMap::new();
    let mut streams: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut files_ok = 0;
    let mut regs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, s) in slots.iter().enumerate() {
        let r = Resources {
            os: "linux".into(),
            arch: "x86_64".into(),
            cores: 2,
            mem_mb: 4096,
            slots: *s,
            ..Default::default()
        };
        for (name, value) in r.registrations(addr(i as u32 + 1)) {
            regs.entry(name).or_default().push(value);
        }
    }
    let mut desc = JobDescription::parse(XML.as_bytes()).unwrap().job;
    desc.processes = 4;
    let id = job_id(1);
    let mut sub = Submission::new(SubmitConfig::default(), addr(0), (id, 0), desc, now);
    let mut outcome = None;
    let mut files = BTreeMap::new();
    for _ in 0..100 {
        let mut moved = false;
        while let Some(a) = sub.poll_action() {
            moved = true;
            match a {
                Action::Send { to, msg } => {
                    let i = execs.iter().position(|e| e.addr() == to).unwrap();
                    execs[i].handle_message(now, msg);
                }
                Action::Event(SubmitEvent::Query { query, name, .. }) => {
                    let result = Ok(regs.get(&name).cloned().unwrap_or_default());
                    assert!(name == ANY_NAME || name.starts_with("res:tag:"));
                    sub.handle_query_done(now, query, &result);
                }
                Action::Event(SubmitEvent::ReadFile { file, .. }) => {
                    sub.handle_file_read(now, file, Ok(FileData::new(Bytes::from_static(b"ELF"))))
                }
                Action::Event(SubmitEvent::WriteFile { rank, offset, data, .. }) => {
                    let f: &mut Vec<u8> = files.entry(rank).or_default();
                    assert_eq!(offset, f.len() as u64);
                    f.extend_from_slice(&data);
                }
                Action::Event(SubmitEvent::OutputFileDone { ok, .. }) => files_ok += usize::from(ok),
                Action::Event(SubmitEvent::Output { rank, offset, data, .. }) => {
                    let s = streams.entry(rank).or_default();
                    assert_eq!(offset, s.len() as u64);
                    s.extend_from_slice(&data);
                }
                Action::Event(SubmitEvent::Finished { outcome: o, .. }) => outcome = Some(o),
                Action::Event(_) => {}
            }
        }
        for (i, e) in execs.iter_mut().enumerate() {
            while let Some(a) = e.poll_action() {
                moved = true;
                match a {
                    Action::Send { msg, .. } => sub.handle_message(now, msg),
                    Action::Event(ExecEvent::SpawnProcess { rank, .. }) => {
                        feeding.insert((i, rank), (stdout_of(rank), STREAM_WINDOW));
                    }
                    Action::Event(ExecEvent::OutputCredit { rank, bytes, .. }) => {
                        feeding.get_mut(&(i, rank)).expect("credit only for a running rank").1 += bytes;
                    }
                    Action::Event(ExecEvent::ReadOutputFile { job, rank, name }) => {
                        e.handle_output_file(job, rank, &name, Ok(out_file(rank)))
                    }
                    Action::Event(_) => {}
                }
            }
            for ((_, rank), (left, credit)) in feeding.iter_mut().filter(|((k, _), _)| *k == i) {
                while *credit > 0 && !left.is_empty() {
                    let n = left.len().min(64 << 10).min(*credit as usize);
                    e.handle_process_output(id, *rank, Stream::Stdout, left.split_to(n)).unwrap();
                    *credit -= n as u64;
                    moved = true;
                }
                if left.is_empty() && *credit != u64::MAX {
                    e.handle_process_exit(id, *rank, 0).unwrap();
                    *credit = u64::MAX; // exited
                }
            }
        }
        if !moved {
            now += Duration::from_millis(10);
        }
    }
    assert_eq!(streams, (0..4).map(|r| (r, stdout_of(r).to_vec())).collect::<BTreeMap<_, _>>());
    assert_eq!(outcome, Some(Outcome::Done { codes: vec![0; 4] }));
    assert_eq!(files, (0..4).map(|r| (r, out_file(r).to_vec())).collect::<BTreeMap<_, _>>());
    assert_eq!(files_ok, 4);
    assert!(execs.iter().all(|e| e.jobs().count() == 0 && e.free_slots() == e.config.slots));
}

fn offer_and_manifest(
    e: &mut Execution,
    now: Instant,
    job: JobId,
    files: &[StagedFile],
) -> (Vec<JobMsg>, Vec<ExecEvent>) {
    let xml_digest = files[0].digest;
    e.handle_message(now, env(JobMsg::Offer { job, ranks: vec![0], size: 2, digest: xml_digest }, Bytes::new()));
    e.handle_message(now, env(JobMsg::Manifest { job, files: files.to_vec() }, Bytes::new()));
    drain(e)
}

fn stage_file(
    e: &mut Execution,
    now: Instant,
    job: JobId,
    f: &StagedFile,
    data: &Bytes,
) -> (Vec<JobMsg>, Vec<ExecEvent>) {
    let body = JobMsg::Stage { job, file: f.file, name: f.name.clone(), offset: 0, total: f.total, digest: f.digest };
    e.handle_message(now, env(body, data.clone()));
    drain(e)
}

#[test]
fn a_verified_file_is_cached_and_a_later_job_takes_it_from_the_cache() {
    let now = Instant::now();
    let mut e = Execution::new(ExecConfig::new(4, "127.0.0.1:9000"), addr(5));
    let (xml, prog) = (Bytes::from_static(XML.as_bytes()), Bytes::from_static(b"#!/bin/sh\necho hi\n"));
    let entry = |file: u32, name: &str, data: &Bytes| StagedFile {
        file,
        name: name.into(),
        total: data.len() as u64,
        digest: digest(data),
    };
    let files = [entry(0, "job.xml", &xml), entry(1, "prog", &prog)];
    let prog_digest = files[1].digest;
    // Nothing is cached yet: the manifest is answered with nothing.
    let (msgs, _) = offer_and_manifest(&mut e, now, job_id(1), &files);
    assert_eq!(msgs.last(), Some(&JobMsg::Have { job: job_id(1), files: vec![] }));
    // Verified: the program (never the job file) is cached, after its bytes are written.
    let (_, evs) = stage_file(&mut e, now, job_id(1), &files[0], &xml);
    assert!(!evs.iter().any(|ev| matches!(ev, ExecEvent::CacheStore { .. })), "{evs:?}");
    let (_, evs) = stage_file(&mut e, now, job_id(1), &files[1], &prog);
    let store = ExecEvent::CacheStore { job: job_id(1), name: "prog".into(), digest: prog_digest, program: true };
    assert!(matches!(evs.as_slice(), [ExecEvent::WriteFile { .. }, s] if *s == store), "{evs:?}");
    // A later job takes the program from the cache.
    let (msgs, evs) = offer_and_manifest(&mut e, now, job_id(2), &files);
    assert_eq!(msgs.last(), Some(&JobMsg::Have { job: job_id(2), files: vec![1] }));
    assert!(evs.contains(&ExecEvent::CacheFetch {
        job: job_id(2),
        name: "prog".into(),
        digest: prog_digest,
        program: true
    }));
    // The job file is never taken from the cache: until it comes, staging is incomplete.
    e.handle_message(now, env(JobMsg::StageEnd { job: job_id(2), files: 2 }, Bytes::new()));
    assert_eq!(drain(&mut e).0, [JobMsg::Resend { job: job_id(2), file: 0 }]);
    stage_file(&mut e, now, job_id(2), &files[0], &xml);
    e.handle_message(now, env(JobMsg::StageEnd { job: job_id(2), files: 2 }, Bytes::new()));
    assert_eq!(drain(&mut e).0.last(), Some(&JobMsg::Staged { job: job_id(2) }));
    // A copy that fails its digest is never cached; a good one is not cached twice.
    let mut bad = files[1].clone();
    bad.digest = digest(&Bytes::from_static(b"other"));
    offer_and_manifest(&mut e, now, job_id(3), &[files[0].clone(), bad.clone()]);
    let (_, evs) = stage_file(&mut e, now, job_id(3), &bad, &prog);
    assert!(!evs.iter().any(|ev| matches!(ev, ExecEvent::CacheStore { .. })), "{evs:?}");
    offer_and_manifest(&mut e, now, job_id(4), &files[..1]);
    let (_, evs) = stage_file(&mut e, now, job_id(4), &files[1], &prog);
    assert!(!evs.iter().any(|ev| matches!(ev, ExecEvent::CacheStore { .. })), "{evs:?}");
}

/// Two running ranks of a two-rank job whose files go back under `window` in
/// `chunk`-byte chunks.
fn running(window: usize, chunk: usize) -> (Execution, JobId, Instant) {
    let now = Instant::now();
    let mut config = ExecConfig::new(2, "n");
    (config.output_window, config.chunk_size) = (window, chunk);
    let mut e = Execution::new(config, addr(5));
    let j = job_id(1);
    staged(&mut e, now, j, vec![0, 1], false);
    e.handle_message(now, env(JobMsg::Start { job: j }, Bytes::new()));
    drain(&mut e);
    (e, j, now)
}

#[test]
fn a_large_output_file_goes_back_window_by_window_and_the_exit_follows_it() {
    let (mut e, j, now) = running(10, 4);
    let data = Bytes::from((0..23u8).collect::<Vec<_>>());
    e.handle_process_exit(j, 0, 0).unwrap();
    drain(&mut e);
    e.handle_output_file(j, 0, "out.txt", Ok(data.clone()));
    let (msgs, evs) = drain(&mut e);
    let offsets: Vec<u64> = msgs
        .iter()
        .map(|m| match m {
            JobMsg::OutputFile { offset, total: 23, .. } => *offset,
            other => panic!("only file chunks within the window, got {other:?}"),
        })
        .collect();
    assert_eq!(offsets, [0, 4], "8 of 10 window bytes: a third chunk would not fit");
    assert!(evs.is_empty(), "the slot is freed with the exit, not before");
    e.handle_message(now, env(JobMsg::OutputAck { job: j, consumed: 4 }, Bytes::new()));
    assert!(matches!(drain(&mut e).0[..], [JobMsg::OutputFile { offset: 8, .. }]));
    // An ack beyond what was sent counts as everything sent (12 bytes), not more.
    e.handle_message(now, env(JobMsg::OutputAck { job: j, consumed: 1000 }, Bytes::new()));
    let (msgs, _) = drain(&mut e);
    assert!(matches!(msgs[..], [JobMsg::OutputFile { offset: 12, .. }, JobMsg::OutputFile { offset: 16, .. }]));
    // The last chunk, then the exit.
    e.handle_message(now, env(JobMsg::OutputAck { job: j, consumed: 20 }, Bytes::new()));
    let (msgs, evs) = drain(&mut e);
    assert!(
        matches!(msgs[..], [JobMsg::OutputFile { offset: 20, .. }, JobMsg::Exit { rank: 0, code: 0, .. }]),
        "{msgs:?}"
    );
    assert_eq!(evs, [ExecEvent::SlotsChanged { free: 1 }]);
    // A stray ack for another job changes nothing.
    e.handle_message(now, env(JobMsg::OutputAck { job: job_id(9), consumed: 5 }, Bytes::new()));
    assert_eq!(drain(&mut e), (vec![], vec![]));
}

proptest::proptest! {
    /// Whatever the files, window and acknowledgements: never more than the window
    /// (or one chunk) unacknowledged, every file arrives whole with its digest,
    /// each rank's exit after its last chunk, and every slot back at the end.
    #[test]
    fn output_files_respect_the_window_and_arrive_whole_before_each_exit(
        sizes in proptest::collection::vec(0usize..200, 2),
        window in 1usize..64,
        chunk in 1usize..32,
        acks in proptest::collection::vec(0u64..50, 0..100),
        first in 0u32..2,
    ) {
        let (mut e, j, now) = running(window, chunk);
        let files: Vec<Bytes> =
            sizes.iter().enumerate().map(|(r, n)| Bytes::from((0..*n).map(|i| (i * 31 + r) as u8).collect::<Vec<_>>())).collect();
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); 2];
        let mut exits = Vec::new();
        let (mut sent, mut consumed) = (0u64, 0u64);
        let mut acks = acks.into_iter();
        for rank in [first, 1 - first] {
            e.handle_process_exit(j, rank, 0).unwrap();
            e.handle_output_file(j, rank, "out.txt", Ok(files[rank as usize].clone()));
        }
        for _ in 0..10_000 {
            let (msgs, _) = drain(&mut e);
            for m in msgs {
                match m {
                    JobMsg::OutputFile { rank, offset, total, digest: d, .. } => {
                        let f = &files[rank as usize];
                        proptest::prop_assert!(!exits.contains(&rank), "a chunk after the exit of {}", rank);
                        proptest::prop_assert_eq!((offset, total, d), (got[rank as usize].len() as u64, f.len() as u64, digest(f)));
                        let end = (offset as usize + chunk).min(f.len());
                        got[rank as usize].extend_from_slice(&f[offset as usize..end]);
                        sent += (end - offset as usize) as u64;
                        proptest::prop_assert!(sent - consumed <= window.max(chunk) as u64);
                    }
                    JobMsg::Exit { rank, .. } => exits.push(rank),
                    other => proptest::prop_assert!(false, "unexpected {:?}", other),
                }
            }
            if exits.len() == 2 {
                break;
            }
            consumed = (consumed + acks.next().unwrap_or(u64::MAX / 4)).min(sent);
            e.handle_message(now, env(JobMsg::OutputAck { job: j, consumed }, Bytes::new()));
        }
        proptest::prop_assert_eq!(exits.len(), 2);
        proptest::prop_assert_eq!(got, files.iter().map(|f| f.to_vec()).collect::<Vec<_>>());
        proptest::prop_assert_eq!(e.free_slots(), 2);
    }
}

#[test]
fn a_kill_while_output_files_wait_for_the_window_lets_the_ranks_exit() {
    let (mut e, j, now) = running(4, 4);
    e.handle_process_exit(j, 0, 0).unwrap();
    e.handle_process_exit(j, 1, 3).unwrap();
    e.handle_output_file(j, 0, "out.txt", Ok(Bytes::from_static(b"0123456789")));
    let (msgs, _) = drain(&mut e);
    assert!(matches!(msgs[..], [JobMsg::OutputFile { offset: 0, .. }]), "{msgs:?}");
    // The submitter kills the job and will acknowledge nothing more: rank 0 exits
    // without the rest of its file, rank 1's file (read after the kill) is not sent.
    e.handle_message(now, env(JobMsg::Kill { job: j }, Bytes::new()));
    e.handle_output_file(j, 1, "out.txt", Ok(Bytes::from_static(b"abc")));
    let (msgs, evs) = drain(&mut e);
    assert!(
        matches!(msgs[..], [JobMsg::Exit { rank: 0, code: 0, .. }, JobMsg::Exit { rank: 1, code: 3, .. }]),
        "{msgs:?}"
    );
    assert_eq!(evs.last(), Some(&ExecEvent::Cleanup { job: j }));
    assert_eq!((e.jobs().count(), e.free_slots()), (0, 2));
}

#[test]
fn stream_acks_give_credit_only_for_output_sent_by_a_running_rank() {
    let (mut e, j, now) = running(1 << 20, 1 << 16);
    e.handle_process_output(j, 0, Stream::Stdout, Bytes::from(vec![1; 1000])).unwrap();
    e.handle_process_output(j, 0, Stream::Stderr, Bytes::from(vec![2; 500])).unwrap();
    drain(&mut e);
    let mut ack = |rank, consumed| {
        e.handle_message(now, env(JobMsg::StreamAck { job: j, rank, consumed }, Bytes::new()));
        drain(&mut e).1
    };
    assert_eq!(ack(0, 600), [ExecEvent::OutputCredit { job: j, rank: 0, bytes: 600 }]);
    assert_eq!(ack(0, 600), [], "a repeated ack gives nothing");
    assert_eq!(
        ack(0, 1 << 40),
        [ExecEvent::OutputCredit { job: j, rank: 0, bytes: 900 }],
        "never beyond what was sent"
    );
    assert_eq!(ack(1, 10), [], "rank 1 sent nothing");
    e.handle_process_exit(j, 0, 0).unwrap();
    drain(&mut e);
    let mut ack = |rank, consumed| {
        e.handle_message(now, env(JobMsg::StreamAck { job: j, rank, consumed }, Bytes::new()));
        drain(&mut e).1
    };
    assert_eq!(ack(0, 1 << 41), [], "an exited rank reads no more");
}

/// A message from submitter `from`.
fn from(at: NodeAddr, body: JobMsg) -> Envelope<JobMsg> {
    Envelope::new(at.id(), at, 0, body)
}

/// The grants in `msgs`: (job, slots, ahead).
fn grants(msgs: &[JobMsg]) -> Vec<(JobId, u32, u32)> {
    msgs.iter()
        .filter_map(|m| match m {
            JobMsg::Grant { job, slots, ahead } => Some((*job, *slots, *ahead)),
            _ => None,
        })
        .collect()
}

#[test]
fn free_slots_are_granted_earliest_job_first_and_taken_back_for_an_earlier_one() {
    let now = Instant::now();
    let mut e = Execution::new(ExecConfig::new(4, "n"), addr(5));
    let (a, b, c) = (job_id(1), job_id(2), job_id(3));
    let (sa, sb) = (addr(1), addr(2));
    // b (priority 20) wants 3: all 3 granted; then a (10, earlier) wants 3: it
    // gets 3 (b keeps 1, told so).
    e.handle_message(now, from(sb, JobMsg::Want { job: b, ranks: 3, priority: 20 }));
    assert_eq!(grants(&drain(&mut e).0), [(b, 3, 0)]);
    e.handle_message(now, from(sa, JobMsg::Want { job: a, ranks: 3, priority: 10 }));
    assert_eq!(grants(&drain(&mut e).0), [(a, 3, 0), (b, 1, 1)]);
    assert_eq!(e.waiting(), 2);
    // b offers 3 ranks anyway (its grant was older news): refused, the slots are a's.
    let offer = |job, ranks: Vec<u32>| JobMsg::Offer { job, ranks, size: 3, digest: digest(&xml3()) };
    e.handle_message(now, from(sb, offer(b, vec![0, 1, 2])));
    assert!(matches!(drain(&mut e).0[..], [JobMsg::Reject { reason: RejectReason::NoSlot, .. }]));
    // A job nobody queued cannot take granted slots either.
    e.handle_message(now, from(sb, offer(c, vec![0])));
    assert!(matches!(drain(&mut e).0[..], [JobMsg::Reject { .. }]));
    // a takes its 3: it waits no more; b keeps its 1 (nothing new to tell: its
    // place in line rides on its next grant).
    e.handle_message(now, from(sa, offer(a, vec![0, 1, 2])));
    let (msgs, _) = drain(&mut e);
    assert!(matches!(msgs[..], [JobMsg::Accept { .. }]), "{msgs:?}");
    assert_eq!(e.waiting(), 1);
    // a's ranks run and end: b is granted the freed slots as they come back.
    staged_more(&mut e, now, a, sa);
    for rank in 0..3 {
        e.handle_process_exit(a, rank, 0).unwrap();
        e.handle_output_file(a, rank, "out.txt", Err("none written".into()));
    }
    let (msgs, _) = drain(&mut e);
    assert_eq!(grants(&msgs).last(), Some(&(b, 3, 0)), "{msgs:?}");
    // b withdraws; a second submitter cannot withdraw a's or b's wait.
    e.handle_message(now, from(sa, JobMsg::Unwant { job: b }));
    assert_eq!(e.waiting(), 1);
    e.handle_message(now, from(sb, JobMsg::Unwant { job: b }));
    assert_eq!(e.waiting(), 0);
}

/// The job file of a three-rank job.
fn xml3() -> Bytes {
    Bytes::from(XML.replace("<processes>2</processes>", "<processes>3</processes>"))
}

/// Stages `job` (3 ranks accepted from `sub`) and starts it.
fn staged_more(e: &mut Execution, now: Instant, job: JobId, sub: NodeAddr) {
    let xml = xml3();
    let prog = Bytes::from_static(b"#!/bin/sh\n");
    for (file, name, data) in [(0, "job.xml", xml), (1, "prog", prog)] {
        let (total, d) = (data.len() as u64, digest(&data));
        let body = JobMsg::Stage { job, file, name: name.into(), offset: 0, total, digest: d };
        e.handle_message(now, Envelope::new(sub.id(), sub, 0, body).with_payload(data));
    }
    e.handle_message(now, from(sub, JobMsg::StageEnd { job, files: 2 }));
    e.handle_message(now, from(sub, JobMsg::Start { job }));
    drain(e);
}

#[test]
fn a_gone_submitter_s_waits_are_dropped_and_their_grants_go_to_others() {
    let now = Instant::now();
    let mut e = Execution::new(ExecConfig::new(2, "n"), addr(5));
    let (a, b) = (job_id(1), job_id(2));
    e.handle_message(now, from(addr(1), JobMsg::Want { job: a, ranks: 2, priority: 1 }));
    e.handle_message(now, from(addr(2), JobMsg::Want { job: b, ranks: 2, priority: 2 }));
    assert_eq!(grants(&drain(&mut e).0), [(a, 2, 0), (b, 0, 1)]);
    assert_eq!(e.jobs_of(addr(1)).collect::<Vec<_>>(), [a], "heartbeats list waiting jobs too");
    assert!(e.submitters().any(|s| s == addr(1)));
    e.handle_send_failed(now, addr(1));
    assert_eq!(grants(&drain(&mut e).0), [(b, 2, 0)]);
    // A kill of a job that only waits here ends its wait.
    e.handle_message(now, from(addr(2), JobMsg::Kill { job: b }));
    assert_eq!(e.waiting(), 0);
    // Nonsense is ignored.
    e.handle_message(now, from(addr(2), JobMsg::Want { job: b, ranks: 0, priority: 2 }));
    assert_eq!(e.waiting(), 0);
}

mod adopt;
mod signed;
