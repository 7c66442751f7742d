//! The queue across daemon nodes in the simulator: a busy network makes jobs
//! wait, not fail; placement is all or nothing; earlier jobs start first; a
//! dead submitter leaves no reservation behind.

use std::time::{Duration, Instant};

use super::{net_of, net_with, resources, submitted, tool};
use crate::job::JobDescription;
use crate::node::control::{JobPhase, ToolReply, ToolRequest};
use crate::node::sim_shell::SimShell;

fn job_xml(ranks: u32) -> String {
    JobDescription::run("/bin/prog", vec![], ranks).to_xml()
}

fn finished(shell: &SimShell, node: usize, conn: u64) -> Option<JobPhase> {
    shell.on(node, conn).iter().rev().find_map(|r| match r {
        ToolReply::Finished { phase, .. } => Some(*phase),
        _ => None,
    })
}

#[test]
fn a_hundred_jobs_of_four_ranks_on_sixteen_slots_all_run_and_earlier_ones_first() {
    let t0 = Instant::now();
    let (mut sim, n) = net_of(4, 4, t0);
    let mut shell = SimShell::new(Some(Duration::from_millis(500)));
    // 100 jobs of 4 ranks, 10 ms apart, through the four nodes in turn.
    for i in 0..100u64 {
        let req = ToolRequest::Submit { nonce: i, xml: job_xml(4), base_dir: "/h".into(), watch: true };
        tool(&mut sim, n[i as usize % 4], i + 1, req);
        shell.run(&mut sim, Duration::from_millis(10), |_| false);
    }
    let all_done = |s: &SimShell| (0..100u64).all(|i| finished(s, n[i as usize % 4], i + 1).is_some());
    shell.run(&mut sim, Duration::from_secs(300), all_done);
    let phases: Vec<Option<JobPhase>> = (0..100u64).map(|i| finished(&shell, n[i as usize % 4], i + 1)).collect();
    assert!(phases.iter().all(|p| *p == Some(JobPhase::Done)), "{phases:?}");
    // Some waited: at most four run at once.
    let queued = (0..100u64)
        .filter(|i| shell.on(n[*i as usize % 4], i + 1).iter().any(|r| matches!(r, ToolReply::Queued { .. })))
        .count();
    assert!(queued >= 90, "only {queued} jobs were ever told they wait");
    // Earlier first: a job submitted 300 ms (a few round trips) before another starts before it.
    let placed_at = |i: u64| {
        shell
            .replies
            .iter()
            .position(|r| r.0 == n[i as usize % 4] && r.1 == i + 1 && matches!(r.2, ToolReply::Placed { .. }))
    };
    let order: Vec<usize> = (0..100u64).map(|i| placed_at(i).expect("placed")).collect();
    for a in 0..100 {
        for b in a + 30..100 {
            assert!(order[a] < order[b], "job {a} started after job {b}, submitted 300 ms later");
        }
    }
    // Nothing is left waiting or reserved anywhere.
    for &i in &n {
        assert_eq!((sim.node(i).execution().waiting(), sim.node(i).execution().free_slots()), (0, 4));
    }
}

#[test]
fn two_jobs_that_each_need_most_of_the_slots_both_run() {
    let t0 = Instant::now();
    let (mut sim, n) = net_of(2, 2, t0);
    let mut shell = SimShell::new(Some(Duration::from_secs(2)));
    // Each needs 3 of the 4 slots, submitted at once from either node: half each
    // would deadlock them; all or nothing runs one, then the other.
    for (i, &node) in n.iter().enumerate() {
        let req = ToolRequest::Submit { nonce: 1, xml: job_xml(3), base_dir: "/h".into(), watch: true };
        tool(&mut sim, node, i as u64 + 1, req);
    }
    let both = |s: &SimShell| finished(s, n[0], 1).is_some() && finished(s, n[1], 2).is_some();
    shell.run(&mut sim, Duration::from_secs(60), both);
    assert_eq!((finished(&shell, n[0], 1), finished(&shell, n[1], 2)), (Some(JobPhase::Done), Some(JobPhase::Done)));
}

#[test]
fn a_job_waiting_when_its_submitter_dies_leaves_no_reservation_and_the_rest_run() {
    let t0 = Instant::now();
    // Node 0 submits but runs nothing (it lacks the "worker" tag).
    let (mut sim, n) = net_with(3, t0, |i| {
        let mut r = resources(2);
        if i > 0 {
            r.tags.insert("worker".into());
        }
        r
    });
    let mut shell = SimShell::new(Some(Duration::from_secs(5)));
    let workers = |ranks: u32| {
        let mut j = JobDescription::run("/bin/prog", vec![], ranks);
        j.requirements = vec!["worker".parse().unwrap()];
        j.to_xml()
    };
    // Node 1 fills every worker slot for 5 s; node 0's job waits behind it.
    let big = ToolRequest::Submit { nonce: 1, xml: workers(4), base_dir: "/h".into(), watch: true };
    tool(&mut sim, n[1], 1, big);
    shell.run(&mut sim, Duration::from_secs(1), |_| false);
    let waiting = ToolRequest::Submit { nonce: 2, xml: workers(4), base_dir: "/h".into(), watch: true };
    tool(&mut sim, n[0], 2, waiting);
    shell.run(&mut sim, Duration::from_millis(500), |_| false);
    assert!(shell.on(n[0], 2).iter().any(|r| matches!(r, ToolReply::Queued { .. })), "{:?}", shell.on(n[0], 2));
    let waits: usize = n[1..].iter().map(|&i| sim.node(i).execution().waiting()).sum();
    assert_eq!(waits, 2, "the job waits at both other nodes");
    // Its submitter dies: the others stop holding anything for it.
    sim.crash(n[0]);
    shell.run(&mut sim, Duration::from_secs(30), |s| finished(s, n[1], 1).is_some());
    assert_eq!(finished(&shell, n[1], 1), Some(JobPhase::Done));
    shell.run(&mut sim, Duration::from_secs(15), |_| false);
    for &i in &n[1..] {
        let e = sim.node(i).execution();
        assert_eq!((e.waiting(), e.free_slots(), e.jobs().count()), (0, 2, 0), "node {i}");
    }
    // A job that can never run (more ranks than the network has slots) fails at once.
    tool(&mut sim, n[2], 3, ToolRequest::Submit { nonce: 3, xml: workers(5), base_dir: "/h".into(), watch: true });
    shell.run(&mut sim, Duration::from_secs(10), |s| s.ended(n[2], 3));
    let Some(ToolReply::Finished { phase: JobPhase::Failed, error: Some(e), .. }) = shell.on(n[2], 3).last().copied()
    else {
        panic!("{:?}", shell.on(n[2], 3));
    };
    assert!(e.contains("needs 5 process slot(s)") && e.contains("have 4 in all"), "{e}");
}

#[test]
fn a_waiting_job_costs_no_messages_and_its_queue_timeout_ends_it() {
    let t0 = Instant::now();
    let (mut sim, n) = net_of(4, 1, t0);
    let mut shell = SimShell::new(None); // ranks run until killed
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml: job_xml(4), base_dir: "/h".into(), watch: true });
    shell.run(&mut sim, Duration::from_secs(5), |_| false);
    // Idle network with one running job: the baseline traffic.
    let window = Duration::from_secs(60);
    let before = sim.stats().sent;
    shell.run(&mut sim, window, |_| false);
    let baseline = sim.stats().sent - before;
    // 50 jobs waiting behind it (from every node), with a 10 minute queue timeout.
    let mut xml = JobDescription::run("/bin/prog", vec![], 2);
    xml.queue_timeout = Some(Duration::from_secs(600));
    for i in 0..50u64 {
        let req = ToolRequest::Submit { nonce: 10 + i, xml: xml.to_xml(), base_dir: "/h".into(), watch: true };
        tool(&mut sim, n[i as usize % 4], 10 + i, req);
    }
    shell.run(&mut sim, Duration::from_secs(5), |_| false);
    let before = sim.stats().sent;
    shell.run(&mut sim, window, |_| false);
    let waiting = sim.stats().sent - before;
    let per_job_s = (waiting as f64 - baseline as f64) / 50.0 / window.as_secs_f64();
    eprintln!(
        "messages in {window:?}: {baseline} with nothing waiting, {waiting} with 50 jobs waiting: {per_job_s:.3} per job per s"
    );
    // What is left is the refresh of each job's key in the overlay (every 40 s)
    // and the heartbeats between the nodes it waits at and its submitter.
    assert!(per_job_s < 0.25, "a waiting job polls: {per_job_s:.3} messages per s");
    let status = |s: &SimShell| s.ended(n[1], 99);
    tool(&mut sim, n[1], 99, ToolRequest::Status { job: Some(submitted(&shell, n[1], 11)) });
    shell.run(&mut sim, Duration::from_secs(10), status);
    let Some(ToolReply::Jobs { jobs }) = shell.on(n[1], 99).last().copied() else { panic!() };
    assert_eq!(jobs[0].phase, JobPhase::Queued);
    let why = jobs[0].waiting.clone().unwrap_or_default();
    assert!(why.starts_with("waiting for 2 slot(s) on nodes matching cores>=1; 0 held for it"), "{why}");
    // The queue timeout ends them, each with its reason.
    shell.run(&mut sim, Duration::from_secs(600), |s| (0..50u64).all(|i| s.ended(n[i as usize % 4], 10 + i)));
    let Some(ToolReply::Finished { phase: JobPhase::Failed, error: Some(e), .. }) = shell.on(n[1], 11).last().copied()
    else {
        panic!("{:?}", shell.on(n[1], 11));
    };
    assert!(e.starts_with("waited 600.0 s for free slots (waiting for 2 slot(s)"), "{e}");
    shell.run(&mut sim, Duration::from_secs(1), |_| false);
    for &i in &n {
        assert_eq!(sim.node(i).execution().waiting(), 0);
    }
}
