//! Submission against a scripted overlay and scripted executors.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::job::RejectReason;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behave {
    Accept,
    Reject,
    /// Refuses every offer: its policy does not allow the submitter's key.
    NotAllowed,
    Silent,
    /// Asks for file 1 again `n` times before confirming staging.
    Corrupt(u32),
    /// Accepts, then never acknowledges a staged byte.
    Stuck,
    /// Accepts, then refuses the files announced (not the ones signed).
    RefuseFiles,
}

struct Harness {
    now: Instant,
    /// Registrations by name, as the overlay would answer.
    regs: BTreeMap<String, Vec<String>>,
    behave: BTreeMap<NodeAddr, Behave>,
    /// Every message the submission sent, in order.
    sent: Vec<(NodeAddr, JobMsg, Bytes)>,
    events: Vec<SubmitEvent>,
    /// Queries answered with an error this many times first.
    query_errors: u32,
    /// Exit code per rank once started (None: no exit yet).
    exit_code: Option<i32>,
    /// Size of every file read (0: a short text naming the path).
    file_size: usize,
    /// Stage payload bytes each executor has consumed.
    consumed: BTreeMap<NodeAddr, u64>,
    /// Files each executor claims to hold already.
    have: BTreeMap<NodeAddr, Vec<u32>>,
    /// What becomes of each rank's output file.
    output_file: FileFate,
    /// Each executor's slots (what it grants a waiting job).
    slots: BTreeMap<NodeAddr, u32>,
    /// The checkpoint files the submission keeps, by rank and epoch, as
    /// its driver would write them.
    cuts: BTreeMap<(u32, u64), Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileFate {
    Sent,
    /// Never written by the rank: the executor sends nothing.
    Missing,
    /// Sent with a digest that does not match its bytes.
    Corrupt,
    /// Written by rank 0 only (the others write no such file).
    Rank0Only,
}

fn reply(from: NodeAddr, body: JobMsg, payload: Bytes) -> Envelope<JobMsg> {
    Envelope::new(from.id(), from, 0, body).with_payload(payload)
}

fn addr(i: u32) -> NodeAddr {
    NodeAddr::loopback(i, 7000)
}

fn res(slots: u32, mem_mb: u64, tags: &[&str]) -> Resources {
    Resources {
        os: "linux".into(),
        arch: "x86_64".into(),
        cores: 4,
        mem_mb,
        slots,
        tags: tags.iter().map(|t| t.to_string()).collect(),
        extra: BTreeMap::new(),
        ..Resources::default()
    }
}

fn job(n: u32, reqs: &[&str]) -> JobDescription {
    let mut j = JobDescription::run("./ring", vec!["20000".into()], n);
    j.requirements = reqs.iter().map(|r| r.parse().unwrap()).collect();
    j.inputfiles = vec!["in/input1".into()];
    j.outputfiles = vec!["result.txt".into()];
    j
}

impl Harness {
    fn new(nodes: &[(NodeAddr, Resources, Behave)]) -> Self {
        let mut regs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (a, r, _) in nodes {
            for (name, value) in r.registrations(*a) {
                regs.entry(name).or_default().push(value);
            }
        }
        Harness {
            now: Instant::now(),
            regs,
            behave: nodes.iter().map(|(a, _, b)| (*a, *b)).collect(),
            sent: Vec::new(),
            events: Vec::new(),
            query_errors: 0,
            exit_code: Some(0),
            file_size: 0,
            consumed: BTreeMap::new(),
            have: BTreeMap::new(),
            output_file: FileFate::Sent,
            slots: nodes.iter().map(|(a, r, _)| (*a, r.slots_total.max(r.slots))).collect(),
            cuts: BTreeMap::new(),
        }
    }

    /// Drains the submission, answering overlay queries, file reads and messages,
    /// until nothing moves; then jumps time to the next timeout, up to `steps` times.
    fn run(&mut self, s: &mut Submission, steps: usize) {
        self.run_for(s, steps, true);
    }

    /// As [`Harness::run`], without jumping time: stops once nothing moves.
    fn settle(&mut self, s: &mut Submission) {
        self.run_for(s, 100, false);
    }

    fn run_for(&mut self, s: &mut Submission, steps: usize, jump: bool) {
        for _ in 0..steps {
            let mut inbox: Vec<Envelope<JobMsg>> = Vec::new();
            let mut overlay = Vec::new();
            let mut reads = Vec::new();
            let mut cut_reads = Vec::new();
            while let Some(a) = s.poll_action() {
                match a {
                    Action::Send { to, msg } => {
                        self.sent.push((to, msg.body.clone(), msg.payload.clone()));
                        inbox.extend(self.executor(to, msg.body, msg.payload.len()));
                    }
                    Action::Event(SubmitEvent::Query { query, name, .. }) => overlay.push((query, name)),
                    Action::Event(SubmitEvent::ReadFile { file, path, .. }) => reads.push((file, path)),
                    Action::Event(e) => {
                        self.keep_cut(&e);
                        if let SubmitEvent::ReadCheckpoint { rank, epoch, .. } = e {
                            cut_reads.push((rank, epoch));
                        }
                        self.events.push(e);
                    }
                }
            }
            let idle = inbox.is_empty() && overlay.is_empty() && reads.is_empty() && cut_reads.is_empty();
            for (rank, epoch) in cut_reads {
                let kept = self.cuts.get(&(rank, epoch)).cloned().ok_or_else(|| "no such file".to_owned());
                let data = kept.map(|b| FileData::new(Bytes::from(b)));
                s.handle_file_read(self.now, crate::job::RESUME_FILES + rank, data);
            }
            for (query, name) in overlay {
                let result = if self.query_errors > 0 {
                    self.query_errors -= 1;
                    Err(OverlayError::Timeout)
                } else {
                    Ok(self.regs.get(&name).cloned().unwrap_or_default())
                };
                s.handle_query_done(self.now, query, &result);
            }
            for (file, path) in reads {
                let data = match self.file_size {
                    0 => Bytes::from(format!("contents of {path}")),
                    n => Bytes::from(vec![file as u8; n]),
                };
                s.handle_file_read(self.now, file, Ok(FileData::new(data)));
            }
            for m in inbox {
                s.handle_message(self.now, m);
            }
            if idle && !jump {
                return;
            }
            if idle {
                match s.poll_timeout() {
                    Some(t) => {
                        self.now = self.now.max(t);
                        s.handle_timeout(self.now);
                    }
                    None => return,
                }
            }
        }
    }

    /// A scripted executor's answers to one message.
    fn executor(&mut self, at: NodeAddr, body: JobMsg, payload: usize) -> Vec<Envelope<JobMsg>> {
        let b = self.behave.get(&at).copied().unwrap_or(Behave::Silent);
        let r = |body| vec![reply(at, body, Bytes::new())];
        // A signed offer is answered as an offer (the signature is the node's to check).
        let body = match body {
            JobMsg::SignedOffer { job, ranks, size, digest, .. } => JobMsg::Offer { job, ranks, size, digest },
            other => other,
        };
        match (b, body) {
            (Behave::Silent, _) | (Behave::Stuck, JobMsg::Stage { .. }) => vec![],
            (_, JobMsg::Stage { job, .. }) => {
                let consumed = self.consumed.entry(at).or_default();
                *consumed += payload as u64;
                r(JobMsg::StageAck { job, consumed: *consumed })
            }
            (Behave::NotAllowed, JobMsg::Offer { job, ranks, .. }) => {
                let reason = RejectReason::NotAllowed(format!("node {at} does not allow key K"));
                r(JobMsg::Reject { job, ranks, reason })
            }
            (Behave::Reject, JobMsg::Offer { job, ranks, .. }) => {
                r(JobMsg::Reject { job, ranks, reason: RejectReason::Other("not today".into()) })
            }
            (_, JobMsg::Want { job, ranks, .. }) => {
                let slots = self.slots.get(&at).copied().unwrap_or(0).min(ranks);
                r(JobMsg::Grant { job, slots, ahead: 0 })
            }
            (_, JobMsg::Offer { job, ranks, .. }) => r(JobMsg::Accept { job, ranks }),
            (Behave::RefuseFiles, JobMsg::Manifest { job, .. }) => {
                let ranks = offered_to(&self.sent, at, job);
                let reason = RejectReason::NotAllowed(format!("node {at} refused the job's files: \"ring\" (file 1)"));
                r(JobMsg::Reject { job, ranks, reason })
            }
            (_, JobMsg::Manifest { job, .. }) => {
                r(JobMsg::Have { job, files: self.have.remove(&at).unwrap_or_default() })
            }
            (Behave::Corrupt(n), JobMsg::StageEnd { job, .. }) if n > 0 => {
                self.behave.insert(at, Behave::Corrupt(n - 1));
                r(JobMsg::Resend { job, file: 1 })
            }
            (_, JobMsg::StageEnd { job, .. }) => r(JobMsg::Staged { job }),
            (_, JobMsg::Start { job }) => {
                let ranks = offered_to(&self.sent, at, job);
                let mut out = Vec::new();
                for rank in ranks {
                    out.push(reply(at, JobMsg::Started { job, rank }, Bytes::new()));
                    let text = Bytes::from(format!("hello from {rank}\n"));
                    out.push(reply(at, JobMsg::Output { job, rank, stream: Stream::Stdout, offset: 0 }, text));
                    let data = Bytes::from(format!("result {rank}"));
                    let (total, mut digest) = (data.len() as u64, digest(&data));
                    if self.output_file == FileFate::Corrupt {
                        digest = crate::id::Id::hash("something else");
                    }
                    let name = "result.txt".to_owned();
                    let of = JobMsg::OutputFile { job, rank, name, offset: 0, total, digest };
                    let written = match self.output_file {
                        FileFate::Missing => false,
                        FileFate::Rank0Only => rank == 0,
                        FileFate::Sent | FileFate::Corrupt => true,
                    };
                    if written {
                        out.push(reply(at, of, data));
                    }
                    if let Some(code) = self.exit_code {
                        out.push(reply(at, JobMsg::Exit { job, rank, code }, Bytes::new()));
                    }
                }
                out
            }
            _ => vec![],
        }
    }

    /// Writes or removes a kept checkpoint file as the driver would.
    fn keep_cut(&mut self, e: &SubmitEvent) {
        match e {
            SubmitEvent::StoreCheckpoint { rank, epoch, offset, data, .. } => {
                let f = self.cuts.entry((*rank, *epoch)).or_default();
                f.truncate(*offset as usize);
                f.extend_from_slice(data);
            }
            SubmitEvent::DropCheckpoint { rank, epoch, .. } => {
                self.cuts.remove(&(*rank, *epoch));
            }
            _ => {}
        }
    }

    fn outcome(&self) -> Option<&Outcome> {
        self.events.iter().find_map(|e| match e {
            SubmitEvent::Finished { outcome, .. } => Some(outcome),
            _ => None,
        })
    }

    fn offers(&self) -> Vec<(NodeAddr, Vec<u32>)> {
        self.sent
            .iter()
            .filter_map(|(to, m, _)| match m {
                JobMsg::Offer { ranks, .. } | JobMsg::SignedOffer { ranks, .. } => Some((*to, ranks.clone())),
                _ => None,
            })
            .collect()
    }

    fn count(&self, pred: impl Fn(&JobMsg) -> bool) -> usize {
        self.sent.iter().filter(|(_, m, _)| pred(m)).count()
    }
}

/// Every rank of `job` offered to `at` so far.
fn offered_to(sent: &[(NodeAddr, JobMsg, Bytes)], at: NodeAddr, job: JobId) -> Vec<u32> {
    sent.iter()
        .filter_map(|(to, m, _)| match m {
            JobMsg::Offer { job: offered, ranks, .. } | JobMsg::SignedOffer { job: offered, ranks, .. }
                if *to == at && *offered == job =>
            {
                Some(ranks.clone())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

fn submission(h: &Harness, j: JobDescription) -> Submission {
    let id = JobId::derive(addr(0), 1, 7);
    Submission::new(SubmitConfig::default(), addr(0), (id, 0), j, h.now)
}

/// A two-rank job running on two one-slot nodes, its ranks not exiting.
fn running_on_two_nodes() -> (Harness, Submission) {
    let mut h =
        Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Accept), (addr(2), res(1, 8000, &[]), Behave::Accept)]);
    h.exit_code = None;
    let mut s = submission(&h, job(2, &["linux"]));
    h.run(&mut s, 20);
    assert_eq!(s.phase(), Phase::Running);
    (h, s)
}

#[test]
fn happy_path_places_on_least_loaded_matching_nodes_and_collects() {
    let mut h = Harness::new(&[
        (addr(1), res(1, 8000, &[]), Behave::Accept),
        (addr(2), res(4, 8000, &[]), Behave::Accept),
        (addr(3), res(8, 1000, &[]), Behave::Accept), // too little memory
        (addr(4), res(2, 8000, &[]), Behave::Accept),
    ]);
    let mut s = submission(&h, job(5, &["linux", "mem_mb>=4096"]));
    h.run(&mut s, 50);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0; 5] }), "{:?}", h.events);
    // The job waits at the three candidates; once every one granted, the ranks
    // go by most grant left, ties to the lowest address: node 2 (4 granted)
    // takes ranks 0, 1 and (tied with node 4 at 2) 2; node 4 takes 3; all tied
    // at 1, node 1 takes 4.
    assert_eq!(h.offers(), vec![(addr(1), vec![4]), (addr(2), vec![0, 1, 2]), (addr(4), vec![3])]);
    assert_eq!(h.count(|m| matches!(m, JobMsg::Want { .. })), 3);
    assert!(h.offers().iter().all(|(a, _)| *a != addr(3)));
    // Three files (job file, executable, input) staged to each of the three nodes.
    assert_eq!(h.count(|m| matches!(m, JobMsg::Stage { .. })), 9);
    assert_eq!(h.count(|m| matches!(m, JobMsg::Start { .. })), 3);
    assert_eq!(h.count(|m| matches!(m, JobMsg::Done { .. })), 3);
    let outputs = h.events.iter().filter(|e| matches!(e, SubmitEvent::Output { .. })).count();
    let files_ok = h.events.iter().filter(|e| matches!(e, SubmitEvent::OutputFileDone { ok: true, .. })).count();
    assert_eq!((outputs, files_ok), (5, 5));
    let placed = h.events.iter().find_map(|e| match e {
        SubmitEvent::Placed { ranks, .. } => Some(ranks.clone()),
        _ => None,
    });
    assert_eq!(placed.unwrap().len(), 5);
    // Staged files carry the digest of their bytes.
    for (_, m, payload) in &h.sent {
        if let JobMsg::Stage { digest: d, total, .. } = m {
            assert_eq!((digest(payload), payload.len() as u64), (*d, *total));
        }
    }
    assert_eq!(s.phase(), Phase::Finished);
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn a_refusal_gives_back_what_was_accepted_and_the_job_waits_again_elsewhere() {
    let mut h = Harness::new(&[
        (addr(1), res(1, 8000, &[]), Behave::Reject),
        (addr(2), res(1, 8000, &[]), Behave::Silent),
        (addr(3), res(1, 8000, &[]), Behave::Accept),
        (addr(4), res(1, 8000, &[]), Behave::Accept),
    ]);
    let mut s = submission(&h, job(2, &["linux"]));
    h.run(&mut s, 50);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0; 2] }), "{:?}", h.events);
    // Nodes 1 and 3 grant first (node 2 never answers): offers to both; node 1
    // refuses, so node 3's reservation is given back (all or nothing) and the
    // job waits again without node 1, until nodes 3 and 4 grant.
    let offers = h.offers();
    assert_eq!(offers, [(addr(1), vec![0]), (addr(3), vec![1]), (addr(3), vec![0]), (addr(4), vec![1])]);
    let kills: Vec<NodeAddr> =
        h.sent.iter().filter(|(_, m, _)| matches!(m, JobMsg::Kill { .. })).map(|(to, _, _)| *to).collect();
    assert!(kills.contains(&addr(3)), "{kills:?}");
    assert!(s.ranks().iter().all(|r| r.node == Some(addr(3)) || r.node == Some(addr(4))));
    assert!(!offers.iter().any(|(a, _)| *a == addr(2)), "a silent node is never offered anything");
}

#[test]
fn too_few_candidates_fail_with_counts() {
    let mut h = Harness::new(&[
        (addr(1), res(1, 8000, &["gpu"]), Behave::Accept),
        (addr(2), res(1, 2000, &["gpu"]), Behave::Accept),
        (addr(3), res(1, 8000, &[]), Behave::Accept),
    ]);
    let mut s = submission(&h, job(2, &["gpu", "mem_mb>=4096"]));
    h.run(&mut s, 10);
    let Some(Outcome::Failed(e @ SubmitError::NotEnoughCandidates { needed, slots, nodes, .. })) = h.outcome() else {
        panic!("{:?}", h.events)
    };
    assert_eq!((*needed, *slots, *nodes), (2, 1, 1));
    let text = e.to_string();
    assert!(text.contains("gpu: 2 node(s)") && text.contains("mem_mb>=4096: 2 node(s)"), "{text}");
    assert!(h.offers().is_empty(), "nothing is offered when the job cannot fit");
}

#[test]
fn a_job_refused_by_policy_moves_on_and_fails_with_every_reason_when_none_is_left() {
    let mut h =
        Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::NotAllowed), (addr(2), res(1, 8000, &[]), Behave::Accept)]);
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 10);
    let offered: Vec<NodeAddr> = h.offers().iter().map(|(to, _)| *to).collect();
    assert!(offered.contains(&addr(2)), "moved on to the node that takes it: {offered:?}");
    assert!(!matches!(h.outcome(), Some(Outcome::Failed(_))), "{:?}", h.outcome());

    let mut h = Harness::new(&[
        (addr(1), res(1, 8000, &[]), Behave::NotAllowed),
        (addr(2), res(1, 8000, &[]), Behave::NotAllowed),
    ]);
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 10);
    let Some(Outcome::Failed(e @ SubmitError::Refused { reasons, .. })) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    let text = e.to_string();
    for a in [addr(1), addr(2)] {
        assert!(text.contains(&format!("node {a} does not allow key K")), "{text}");
    }
}

#[test]
fn rejections_that_leave_too_few_fail_and_release_the_accepted() {
    let mut h =
        Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Accept), (addr(2), res(1, 8000, &[]), Behave::Reject)]);
    let mut s = submission(&h, job(2, &["linux"]));
    h.run(&mut s, 10);
    assert!(matches!(h.outcome(), Some(Outcome::Failed(SubmitError::NotEnoughCandidates { rejected: 1, .. }))));
    assert_eq!(h.sent.iter().filter(|(to, m, _)| *to == addr(1) && matches!(m, JobMsg::Kill { .. })).count(), 1);
}

#[test]
fn corrupt_staging_is_resent_then_given_up() {
    let mut h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Corrupt(2))]);
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 50);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0] }));
    assert_eq!(h.count(|m| matches!(m, JobMsg::Stage { file: 1, .. })), 3);

    let mut h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Corrupt(10))]);
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 50);
    assert_eq!(h.outcome(), Some(&Outcome::Failed(SubmitError::StagingFailed { node: addr(1), file: 1 })));
    assert_eq!(h.count(|m| matches!(m, JobMsg::Start { .. })), 0, "a corrupt transfer never runs");
}

#[test]
fn kill_while_running_stops_every_node() {
    let (mut h, mut s) = running_on_two_nodes();
    s.handle_command(h.now, SubmissionCommand::Kill).unwrap();
    h.run(&mut s, 5);
    assert_eq!(h.outcome(), Some(&Outcome::Killed));
    assert_eq!(h.count(|m| matches!(m, JobMsg::Kill { .. })), 2);
}

#[test]
fn losing_a_node_while_running_fails_and_the_timeout_kills() {
    let nodes = [(addr(1), res(1, 8000, &[]), Behave::Accept), (addr(2), res(1, 8000, &[]), Behave::Accept)];
    let mut h = Harness::new(&nodes);
    h.exit_code = None;
    let mut s = submission(&h, job(2, &["linux"]));
    h.run(&mut s, 20);
    s.handle_send_failed(h.now, addr(2));
    h.run(&mut s, 5);
    assert_eq!(h.outcome(), Some(&Outcome::Failed(SubmitError::NodeLost { node: addr(2), ranks: vec![1] })));
    assert_eq!(h.sent.iter().filter(|(to, m, _)| *to == addr(1) && matches!(m, JobMsg::Kill { .. })).count(), 1);

    let mut h = Harness::new(&nodes);
    h.exit_code = None;
    let mut j = job(2, &["linux"]);
    j.timeout = Some(Duration::from_secs(30));
    let mut s = submission(&h, j);
    let t0 = h.now;
    h.run(&mut s, 20);
    assert_eq!(h.outcome(), Some(&Outcome::Failed(SubmitError::Timeout)));
    assert_eq!(h.now, t0 + Duration::from_secs(30));
}

#[test]
fn failing_queries_are_retried_then_fail() {
    let mut h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Accept)]);
    h.query_errors = 2;
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 20);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0] }));

    let mut h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Accept)]);
    h.query_errors = 100;
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 20);
    assert!(matches!(h.outcome(), Some(Outcome::Failed(SubmitError::QueryFailed { .. }))), "{:?}", h.events);
}

#[test]
fn unexpected_messages_are_ignored() {
    let mut h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Silent)]);
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 1);
    let job = s.job();
    // Accept for ranks never offered, from a stranger, and for another job.
    s.handle_message(h.now, reply(addr(1), JobMsg::Accept { job, ranks: vec![5] }, Bytes::new()));
    s.handle_message(h.now, reply(addr(9), JobMsg::Accept { job, ranks: vec![0] }, Bytes::new()));
    let other = JobId::derive(addr(0), 2, 7);
    s.handle_message(h.now, reply(addr(1), JobMsg::Exit { job: other, rank: 0, code: 0 }, Bytes::new()));
    assert_eq!(s.ignored(), 3);
    assert!(s.ranks().iter().all(|r| r.node.is_none()));
}

#[test]
fn submitter_retry_with_the_same_request_id_starts_nothing_new() {
    let now = Instant::now();
    let mut sub = Submitter::new(SubmitConfig::default(), addr(0), 42);
    let (a, fresh) = sub.submit(now, 7, job(1, &["linux"]), 0).unwrap();
    assert!(fresh);
    let first: Vec<_> = std::iter::from_fn(|| sub.poll_action()).collect();
    assert!(!first.is_empty());
    let (b, fresh) = sub.submit(now, 7, job(1, &["linux"]), 0).unwrap();
    assert_eq!((a, fresh), (b, false));
    assert!(sub.poll_action().is_none(), "a retry emits nothing");
    assert_eq!(sub.submit(now, 7, job(2, &["linux"]), 0), Err(SubmitCmdError::RequestIdReused(7)));
    let (c, fresh) = sub.submit(now, 8, job(1, &["linux"]), 0).unwrap();
    assert!(fresh && c != a);
    // Same seed, same ids: job ids are replayable.
    let mut again = Submitter::new(SubmitConfig::default(), addr(0), 42);
    assert_eq!(again.submit(now, 1, job(1, &["linux"]), 0).unwrap().0, a);
    // Overlay answers name the job and its query; an answer for a job or query
    // that is not there is dropped.
    let (job, query) = first
        .iter()
        .find_map(|a| match a {
            Action::Event(SubmitEvent::Query { job, query, .. }) => Some((*job, *query)),
            _ => None,
        })
        .unwrap();
    assert_eq!(job, a);
    while sub.poll_action().is_some() {} // job c's queries and reads
    sub.handle_query_done(now, job, 99, &Ok(vec![]));
    sub.handle_query_done(now, JobId::derive(addr(5), 1, 1), query, &Ok(vec![]));
    assert!(sub.poll_action().is_none());
    sub.handle_query_done(now, job, query, &Err(OverlayError::Timeout));
    assert!(matches!(sub.poll_action(), Some(Action::Event(SubmitEvent::Query { .. }))), "a failed query is retried");
    assert_eq!(sub.handle_command(now, SubmitterCommand::Kill(a)), Ok(()));
    assert_eq!(sub.handle_command(now, SubmitterCommand::Kill(a)), Err(SubmitCmdError::AlreadyOver(a)), "killed once");
    assert!(sub.handle_command(now, SubmitterCommand::Kill(JobId::derive(addr(5), 1, 1))).is_err());
}

#[test]
fn a_job_without_processes_fails_at_once() {
    let mut h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Accept)]);
    let mut s = submission(&h, job(0, &["linux"]));
    h.run(&mut s, 5);
    assert_eq!(h.outcome(), Some(&Outcome::Failed(SubmitError::BadProcessCount(0))));
    assert!(h.sent.is_empty());
}

#[test]
fn process_keys_follow_design() {
    let j = JobId::derive(addr(0), 1, 2);
    assert_ne!(crate::job::process_key(j, 0), crate::job::process_key(j, 1));
    let mut bytes = j.0.as_bytes().to_vec();
    bytes.extend(3u32.to_be_bytes());
    assert_eq!(crate::job::process_key(j, 3), Id::hash(bytes));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Against a reference model: a job whose matching nodes have too few slots
    /// in all fails at once; otherwise it runs when the accepting matching nodes
    /// have enough slots (every rank on such a node, within its slots), and
    /// else it never runs: it waits (silent nodes never grant a slot), or fails
    /// once the nodes that refused it leave too few.
    #[test]
    fn placement_matches_the_reference_model(
        spec in proptest::collection::vec((0u32..4, prop::bool::ANY, 0u8..4), 1..8),
        n in 1u32..8,
    ) {
        let nodes: Vec<(NodeAddr, Resources, Behave)> = spec
            .iter()
            .enumerate()
            .map(|(i, (slots, gpu, b))| {
                let tags: &[&str] = if *gpu { &["gpu"] } else { &[] };
                let behave = match b { 0 => Behave::Reject, 1 => Behave::Silent, _ => Behave::Accept };
                (addr(i as u32 + 1), res(*slots, 8000, tags), behave)
            })
            .collect();
        let fits = |(_, r, _): &&(NodeAddr, Resources, Behave)| r.tags.contains("gpu");
        let slots_of = |b: Option<Behave>| -> u32 {
            nodes.iter().filter(fits).filter(|(_, _, x)| b.is_none_or(|b| *x == b)).map(|(_, r, _)| r.slots).sum()
        };
        let (good, all) = (slots_of(Some(Behave::Accept)), slots_of(None));
        let mut h = Harness::new(&nodes);
        let mut s = submission(&h, job(n, &["gpu", "cores>=2"]));
        h.run(&mut s, 200);
        if all < n {
            let at_once = matches!(h.outcome(), Some(Outcome::Failed(SubmitError::NotEnoughCandidates { rejected: 0, .. })));
            prop_assert!(at_once, "{:?}", h.outcome());
            prop_assert_eq!(h.count(|m| matches!(m, JobMsg::Want { .. })), 0);
        } else if good >= n {
            prop_assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0; n as usize] }));
            let mut per_node: BTreeMap<NodeAddr, u32> = BTreeMap::new();
            for r in s.ranks() {
                *per_node.entry(r.node.unwrap()).or_default() += 1;
            }
            for (a, k) in per_node {
                let (_, r, b) = nodes.iter().find(|(x, _, _)| *x == a).unwrap();
                prop_assert!(r.tags.contains("gpu") && *b == Behave::Accept && k <= r.slots);
            }
        } else {
            let dropped = matches!(h.outcome(), Some(Outcome::Failed(SubmitError::NotEnoughCandidates { rejected, .. })) if *rejected > 0);
            prop_assert!(dropped || (h.outcome().is_none() && s.phase() == Phase::Queued), "{:?}", h.outcome());
        }
        prop_assert_eq!(h.count(|m| matches!(m, JobMsg::Start { .. })) > 0, good >= n);
    }
}

#[test]
fn large_files_stage_within_the_window_and_arrive_once() {
    let nodes: Vec<_> = (1..=2).map(|i| (addr(i), res(1, 8000, &[]), Behave::Accept)).collect();
    let mut h = Harness::new(&nodes);
    h.file_size = 10 << 20;
    let mut s = submission(&h, job(2, &["linux"]));
    let cfg = SubmitConfig::default();
    // Step by step: after each round, no node may have more than a window unacknowledged.
    for _ in 0..400 {
        h.run(&mut s, 1);
        for (a, _, _) in &nodes {
            let sent: u64 = h
                .sent
                .iter()
                .filter(|(to, m, _)| to == a && matches!(m, JobMsg::Stage { .. }))
                .map(|(_, _, p)| p.len() as u64)
                .sum();
            let acked = h.consumed.get(a).copied().unwrap_or(0);
            assert!(sent - acked <= cfg.stage_window as u64, "{sent} sent, {acked} acknowledged");
        }
        if h.outcome().is_some() {
            break;
        }
    }
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0; 2] }));
    let job_file = h.sent.iter().find_map(|(_, m, p)| matches!(m, JobMsg::Stage { file: 0, .. }).then(|| p.len()));
    let per_node = 2 * (10u64 << 20) + job_file.unwrap() as u64;
    for (a, _, _) in &nodes {
        assert_eq!(h.consumed[a], per_node, "every byte once to {a}");
    }
}

#[test]
fn staging_that_stops_moving_loses_the_node() {
    let mut h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Stuck)]);
    h.file_size = 10 << 20;
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 50);
    let sent: usize =
        h.sent.iter().filter(|(_, m, _)| matches!(m, JobMsg::Stage { .. })).map(|(_, _, p)| p.len()).sum();
    assert!(sent <= SubmitConfig::default().stage_window, "{sent} bytes sent without an acknowledgement");
    // Dropped, the one node leaves too few slots: the job cannot run.
    let dropped = matches!(h.outcome(), Some(Outcome::Failed(SubmitError::NotEnoughCandidates { rejected: 1, .. })));
    assert!(dropped, "{:?}", h.outcome());
    assert_eq!(h.count(|m| matches!(m, JobMsg::Start { .. })), 0);
}

#[test]
fn files_the_node_has_are_not_staged_again_but_the_job_file_always_is() {
    let mut h = Harness::new(&[(addr(1), res(1, 8000, &[]), Behave::Accept)]);
    h.have.insert(addr(1), vec![0, 1]);
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 50);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0] }));
    let manifest = h.sent.iter().find_map(|(_, m, _)| match m {
        JobMsg::Manifest { files, .. } => Some(files.iter().map(|f| (f.file, f.name.clone())).collect::<Vec<_>>()),
        _ => None,
    });
    let want = vec![(0, "job.xml".to_owned()), (1, "ring".to_owned()), (2, "input1".to_owned())];
    assert_eq!(manifest, Some(want));
    let staged: BTreeSet<u32> = h
        .sent
        .iter()
        .filter_map(|(_, m, _)| match m {
            JobMsg::Stage { file, .. } => Some(*file),
            _ => None,
        })
        .collect();
    assert_eq!(staged, BTreeSet::from([0, 2]), "the executable is there already");
}

#[test]
fn a_rank_that_fails_stops_the_others_like_mpirun() {
    let mut h =
        Harness::new(&[(addr(1), res(2, 8000, &[]), Behave::Accept), (addr(2), res(2, 8000, &[]), Behave::Accept)]);
    h.exit_code = Some(3);
    let mut s = submission(&h, job(4, &["linux"]));
    h.run(&mut s, 50);
    let Some(Outcome::Failed(SubmitError::RankFailed { code: 3, .. })) = h.outcome() else {
        panic!("{:?}", h.outcome());
    };
    // Both nodes hold ranks that had not exited yet: both are told to stop.
    assert_eq!(h.count(|m| matches!(m, JobMsg::Kill { .. })), 2);
    assert_eq!(h.count(|m| matches!(m, JobMsg::Done { .. })), 0);
}

#[test]
fn output_is_acknowledged_per_rank_every_stream_ack_bytes_and_only_for_ranks_placed_there() {
    let (h, mut s) = running_on_two_nodes();
    let job = s.job();
    let rank_at = |at: NodeAddr| h.offers().iter().find(|(to, _)| *to == at).map(|(_, r)| r[0]).unwrap();
    let (mine, theirs) = (rank_at(addr(1)), rank_at(addr(2)));
    let acks = |s: &mut Submission| {
        std::iter::from_fn(|| s.poll_action())
            .filter_map(|a| match a {
                Action::Send { to, msg } => match msg.body {
                    JobMsg::StreamAck { rank, consumed, .. } => Some((to, rank, consumed)),
                    _ => None,
                },
                Action::Event(_) => None,
            })
            .collect::<Vec<_>>()
    };
    let already = format!("hello from {mine}\n").len() as u64;
    let chunk = Bytes::from(vec![b'x'; (STREAM_ACK_EVERY / 2) as usize]);
    let out = |rank, offset| JobMsg::Output { job, rank, stream: Stream::Stdout, offset };
    s.handle_message(h.now, reply(addr(1), out(mine, already), chunk.clone()));
    assert_eq!(acks(&mut s), vec![], "half of STREAM_ACK_EVERY: no ack yet");
    s.handle_message(h.now, reply(addr(1), out(mine, already + chunk.len() as u64), chunk.clone()));
    assert_eq!(acks(&mut s), vec![(addr(1), mine, already + STREAM_ACK_EVERY)]);
    // Made-up or misplaced ranks move nothing (and are not shown).
    for rank in [theirs, 999, u32::MAX] {
        s.handle_message(h.now, reply(addr(1), out(rank, 0), Bytes::from(vec![b'y'; STREAM_ACK_EVERY as usize])));
    }
    assert_eq!(acks(&mut s), vec![]);
}

#[test]
fn a_missing_or_corrupt_output_file_fails_the_job_naming_it() {
    for (fate, why) in [(FileFate::Missing, "missing"), (FileFate::Corrupt, "arrived corrupt")] {
        let mut h = Harness::new(&[(addr(1), res(2, 8000, &[]), Behave::Accept)]);
        h.output_file = fate;
        let mut s = submission(&h, job(2, &["linux"]));
        h.run(&mut s, 50);
        let files = match fate {
            // No rank wrote it: one entry for the file.
            FileFate::Missing => vec![(u32::MAX, "result.txt".to_owned(), why.to_owned())],
            _ => vec![(0, "result.txt".to_owned(), why.to_owned()), (1, "result.txt".to_owned(), why.to_owned())],
        };
        let want = SubmitError::OutputFiles { files };
        assert_eq!(h.outcome(), Some(&Outcome::Failed(want.clone())), "{fate:?}: {:?}", h.events);
        let text = want.to_string();
        assert!(
            text.contains("result.txt of rank 1 (arrived corrupt)")
                || text.contains("result.txt (missing: no rank wrote it)"),
            "{text}"
        );
        // The ranks are over: the executor cleans up either way.
        assert_eq!(s.phase(), Phase::Finished);
    }
}

#[test]
fn an_output_file_written_by_one_rank_of_many_is_enough() {
    let mut h = Harness::new(&[(addr(1), res(2, 8000, &[]), Behave::Accept)]);
    h.output_file = FileFate::Rank0Only;
    let mut s = submission(&h, job(2, &["linux"]));
    h.run(&mut s, 50);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
}

#[test]
fn a_silent_node_fails_the_job_naming_it_and_its_ranks() {
    let (mut h, mut s) = running_on_two_nodes();
    assert_eq!(s.peers().collect::<Vec<_>>(), vec![addr(1), addr(2)]);
    s.handle_peer_silent(h.now, addr(2), Duration::from_millis(10_500));
    h.run(&mut s, 5);
    let e = SubmitError::NodeSilent { node: addr(2), ranks: vec![1], silent_ms: 10_500 };
    assert!(e.to_string().contains("stopped answering (nothing heard for 10.5 s)"), "{e}");
    assert_eq!(h.outcome(), Some(&Outcome::Failed(e)));
    assert_eq!(h.sent.iter().filter(|(to, m, _)| *to == addr(1) && matches!(m, JobMsg::Kill { .. })).count(), 1);
    assert_eq!(s.peers().count(), 0, "a finished job waits on nobody");
}

#[test]
fn of_two_lines_of_one_node_the_newest_counts() {
    // Node 1 filled up: its newer line (gen 2) says no slot is free; the older
    // line, not withdrawn everywhere yet, still says 4.
    let full = Resources { slots: 0, slots_total: 4, generation: 2, ..res(4, 8000, &[]) };
    let stale = Resources { slots: 4, slots_total: 4, generation: 1, ..res(4, 8000, &[]) };
    let mut h = Harness::new(&[(addr(1), full, Behave::Accept), (addr(2), res(1, 8000, &[]), Behave::Accept)]);
    h.regs.get_mut(ANY_NAME).unwrap().push(stale.any_value(addr(1)));
    h.slots.insert(addr(1), 0); // really full: it grants nothing
    let mut s = submission(&h, job(1, &["linux"]));
    h.run(&mut s, 50);
    assert_eq!(h.offers(), vec![(addr(2), vec![0])]);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0] }));
    // A node that said it was full is still asked when the others cannot take
    // the job: its line may be a moment old, and its own answer decides.
    let full = Resources { slots: 0, slots_total: 4, generation: 2, ..res(4, 8000, &[]) };
    let mut h = Harness::new(&[(addr(1), full, Behave::Accept), (addr(2), res(1, 8000, &[]), Behave::Accept)]);
    let mut s = submission(&h, job(3, &["linux"]));
    h.run(&mut s, 50);
    assert_eq!(h.offers(), vec![(addr(1), vec![0, 1, 2])]);
    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0; 3] }));
}

/// The nodes holding the current run's ranks, from the last Placed event.
fn placed_nodes(h: &Harness) -> Vec<NodeAddr> {
    let ranks = h.events.iter().rev().find_map(|e| match e {
        SubmitEvent::Placed { ranks, .. } => Some(ranks.clone()),
        _ => None,
    });
    let mut nodes: Vec<NodeAddr> = ranks.unwrap_or_default().into_iter().map(|(_, n)| n).collect();
    nodes.dedup();
    nodes
}

#[test]
fn with_restart_scratch_a_lost_node_restarts_the_job_elsewhere_under_a_new_wire_id() {
    let nodes: Vec<_> = (1..=3).map(|i| (addr(i), res(1, 8000, &[]), Behave::Accept)).collect();
    let mut h = Harness::new(&nodes);
    h.exit_code = None;
    let mut j = job(2, &["linux"]);
    j.restart = RestartPolicy::Scratch;
    let mut s = submission(&h, j);
    let first = s.wire();
    h.run(&mut s, 20);
    assert_eq!(s.phase(), Phase::Running);
    let placed = placed_nodes(&h);
    assert_eq!(placed.len(), 2);
    let (lost, survivor) = (placed[1], placed[0]);
    let sent_before = h.sent.len();
    h.exit_code = Some(0);
    s.handle_send_failed(h.now, lost);
    h.run(&mut s, 30);

    assert_eq!(h.outcome(), Some(&Outcome::Done { codes: vec![0, 0] }), "{:?}", h.events);
    assert_ne!(s.wire(), first);
    assert_eq!(s.restart_reasons().len(), 1);
    assert!(s.restart_reasons()[0].contains(&lost.to_string()), "{:?}", s.restart_reasons());
    let restarting = h.events.iter().filter(|e| matches!(e, SubmitEvent::Restarting { attempt: 1, .. })).count();
    assert_eq!(restarting, 1);
    let after = &h.sent[sent_before..];
    // The survivor's rank of the first run is stopped, by its old wire id.
    assert!(after.iter().any(|(to, m, _)| *to == survivor && *m == JobMsg::Kill { job: first }));
    // The new run never goes to the lost node, and speaks only its new id.
    assert!(after.iter().all(|(to, _, _)| *to != lost), "{after:?}");
    // (How the job ended goes to its deputies by the job's own id.)
    let of_the_run = |m: &JobMsg| !matches!(m, JobMsg::Kill { .. } | JobMsg::Ended { .. });
    assert!(after.iter().filter(|(_, m, _)| of_the_run(m)).all(|(_, m, _)| m.job() == s.wire()));
    assert_eq!(placed_nodes(&h).len(), 2);
    assert!(!placed_nodes(&h).contains(&lost));
    // Each rank's output of the new run follows that of the first one.
    let offsets: Vec<(u32, u64)> = h
        .events
        .iter()
        .filter_map(|e| match e {
            SubmitEvent::Output { rank, offset, .. } => Some((*rank, *offset)),
            _ => None,
        })
        .collect();
    let line = "hello from 0\n".len() as u64;
    assert_eq!(offsets, vec![(0, 0), (1, 0), (0, line), (1, line)], "{offsets:?}");
    // A late message of the first run is not taken for the new one.
    let ignored = s.ignored();
    s.handle_message(h.now, reply(survivor, JobMsg::Exit { job: first, rank: 0, code: 3 }, Bytes::new()));
    assert_eq!(s.ignored(), ignored + 1);
}

#[test]
fn a_job_that_keeps_losing_nodes_fails_after_the_last_restart() {
    let nodes: Vec<_> = (1..=6).map(|i| (addr(i), res(1, 8000, &[]), Behave::Accept)).collect();
    let mut h = Harness::new(&nodes);
    h.exit_code = None;
    let mut j = job(1, &["linux"]);
    j.restart = RestartPolicy::Scratch;
    let mut s = submission(&h, j);
    h.run(&mut s, 20);
    let mut lost = Vec::new();
    for _ in 0..=MAX_RESTARTS {
        assert_eq!(s.phase(), Phase::Running, "{:?}", h.events);
        let node = placed_nodes(&h)[0];
        assert!(!lost.contains(&node), "a lost node was used again");
        lost.push(node);
        s.handle_send_failed(h.now, node);
        h.run(&mut s, 30);
    }
    assert_eq!(s.restart_reasons().len(), MAX_RESTARTS as usize);
    let last = *lost.last().unwrap();
    assert_eq!(h.outcome(), Some(&Outcome::Failed(SubmitError::NodeLost { node: last, ranks: vec![0] })));
}

mod ckpt;
mod cuts;
mod guard;
mod signed;
