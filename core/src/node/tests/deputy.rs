//! A job outlives its submitting node: the deputy takes it over, and any
//! node answers for it there.

use std::time::{Duration, Instant};

use super::ckpt::{local, placement};
use super::{net_with, resources, submitted, tool};
use crate::job::process_key;
use crate::job::{JobDescription, JobId};
use crate::local::LocalRequest;
use crate::machine::NodeAddr;
use crate::node::DaemonNode;
use crate::node::control::{JobPhase, ToolReply, ToolRequest};
use crate::node::sim_shell::SimShell;
use crate::sim::{NodeIdx, Sim};

#[test]
fn the_deputy_takes_over_a_job_whose_submitting_node_died_and_any_node_finds_it_there() {
    let t0 = Instant::now();
    // Node 0 submits and runs nothing; nodes 1 to 3 run a rank each.
    let (mut sim, n) = net_with(4, t0, |i| resources(u32::from(i > 0)));
    let mut shell = SimShell::new(Some(Duration::from_secs(30)));
    let xml = JobDescription::run("/bin/prog", vec![], 3).to_xml();
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml, base_dir: "/home".into(), watch: true });
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    assert!(started(&shell), "{:?}", shell.on(n[0], 1));
    let job = submitted(&shell, n[0], 1);
    let deputy = sim.node(n[0]).submitter().get(job).and_then(|s| s.deputy()).expect("a deputy");
    sim.crash(n[0]);

    // Asked of a node that is not the deputy, once the dead node is found out.
    let asker = *n[1..].iter().find(|&&i| sim.addr(i) != deputy).unwrap();
    shell.run(&mut sim, Duration::from_secs(15), |_| false);
    let got = watched_to_the_end(&mut sim, &mut shell, asker, job, Duration::from_secs(60));
    let exits = got.iter().filter(|r| matches!(r, ToolReply::Exited { code: 0, .. })).count();
    assert_eq!(exits, 3, "{got:?}");
    // What the ranks printed before the takeover too (the deputy kept a copy).
    let printed = got.iter().filter(|r| matches!(r, ToolReply::Output { .. })).count();
    assert_eq!(printed, 3, "{got:?}");
    tool(&mut sim, asker, 3, ToolRequest::Status { job: Some(job) });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(asker, 3));
    let Some(ToolReply::Jobs { jobs }) = shell.on(asker, 3).last().copied() else { panic!("{:?}", shell.on(asker, 3)) };
    // Held by the deputy, and, once it ended, by the deputy's own deputy
    // too, which may be the node asked.
    assert!([deputy, sim.addr(asker)].contains(&jobs[0].holder), "{:?}", jobs[0]);
    assert_eq!(jobs[0].phase, JobPhase::Done);
    // Every executor is done with it (the node asked may have answered
    // before the last of them heard the end).
    shell.run(&mut sim, Duration::from_secs(1), |_| false);
    for &i in &n[1..] {
        assert_eq!(sim.node(i).execution().jobs().count(), 0, "node {i}");
    }
}

#[test]
fn without_its_deputies_too_the_job_stops_on_every_node() {
    let t0 = Instant::now();
    let (mut sim, n) = net_with(4, t0, |i| resources(u32::from(i > 0)));
    let mut shell = SimShell::new(None);
    let xml = JobDescription::run("/bin/prog", vec![], 3).to_xml();
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml, base_dir: "/home".into(), watch: true });
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    let job = submitted(&shell, n[0], 1);
    let deputies = sim.node(n[0]).submitter().get(job).map(|s| s.deputies()).unwrap();
    assert_eq!(deputies.len(), 2);
    let gone: Vec<NodeIdx> = n.iter().copied().filter(|&i| i == n[0] || deputies.contains(&sim.addr(i))).collect();
    for &i in &gone {
        sim.crash(i);
    }
    // The node left waits for a deputy for the adoption timeout, then stops.
    shell.run(&mut sim, Duration::from_secs(50), |_| false);
    let left: usize = n.iter().filter(|i| !gone.contains(i)).map(|&i| sim.node(i).execution().jobs().count()).sum();
    assert_eq!(left, 1, "waiting for a deputy");
    shell.run(&mut sim, Duration::from_secs(30), |_| false);
    let left: usize = n.iter().filter(|i| !gone.contains(i)).map(|&i| sim.node(i).execution().jobs().count()).sum();
    assert_eq!(left, 0);
}

#[test]
fn the_second_deputy_takes_over_when_the_submitting_node_and_the_first_die_together() {
    let t0 = Instant::now();
    // Node 0 submits and runs nothing; three of nodes 1 to 4 run a rank each.
    let (mut sim, n) = net_with(5, t0, |i| resources(u32::from(i > 0)));
    let mut shell = SimShell::new(Some(Duration::from_secs(30)));
    let mut desc = JobDescription::run("/bin/prog", vec![], 3);
    desc.restart = crate::job::RestartPolicy::Scratch;
    let req = ToolRequest::Submit { nonce: 1, xml: desc.to_xml(), base_dir: "/home".into(), watch: true };
    tool(&mut sim, n[0], 1, req);
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    let job = submitted(&shell, n[0], 1);
    let deputies = sim.node(n[0]).submitter().get(job).map(|s| s.deputies()).unwrap();
    let at = |a| *n.iter().find(|&&i| sim.addr(i) == a).unwrap();
    let (first, second) = (at(deputies[0]), at(deputies[1]));
    // The deputies read the job's files back; then the submitting node and
    // the first deputy die at once, a rank with it.
    shell.run(&mut sim, Duration::from_secs(2), |_| false);
    sim.crash(n[0]);
    sim.crash(first);
    shell.run(&mut sim, Duration::from_secs(20), |_| false);
    let asker = *n[1..].iter().find(|&&i| i != first && i != second).unwrap();
    watched_to_the_end(&mut sim, &mut shell, asker, job, Duration::from_secs(90));
    let s = sim.node(second).submitter().get(job).expect("held by the second deputy");
    assert_eq!(s.restart_reasons().len(), 1, "{:?}", s.restart_reasons());
    assert!(
        s.restart_reasons()[0].contains(&format!("node {} holding rank(s)", deputies[0])),
        "{:?}",
        s.restart_reasons()
    );
    assert!(s.ranks().iter().all(|r| r.node.is_some_and(|a| a != deputies[0] && a != sim.addr(n[0]))));
}

#[test]
fn a_job_whose_submitting_node_ran_ranks_too_restarts_at_its_deputy_with_the_files_it_kept() {
    let t0 = Instant::now();
    // Four one-slot nodes; the three ranks go to the first three, the
    // submitting node among them.
    let (mut sim, n) = net_with(4, t0, |_| resources(1));
    let mut shell = SimShell::new(Some(Duration::from_secs(30)));
    let mut desc = JobDescription::run("/bin/prog", vec![], 3);
    desc.restart = crate::job::RestartPolicy::Scratch;
    let req = ToolRequest::Submit { nonce: 1, xml: desc.to_xml(), base_dir: "/home".into(), watch: true };
    tool(&mut sim, n[0], 1, req);
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    let job = submitted(&shell, n[0], 1);
    let s = sim.node(n[0]).submitter().get(job).unwrap();
    assert!(s.ranks().iter().any(|r| r.node == Some(sim.addr(n[0]))), "the submitting node runs a rank");
    assert!(s.ranks().iter().all(|r| r.node != Some(sim.addr(n[3]))));
    let deputy = s.deputy().expect("a deputy");
    let d = *n.iter().find(|&&i| sim.addr(i) == deputy).unwrap();
    // The deputy reads the job's files back, then the submitting node is
    // lost with its rank: the deputy restarts the job from scratch.
    shell.run(&mut sim, Duration::from_secs(2), |_| false);
    sim.crash(n[0]);
    shell.run(&mut sim, Duration::from_secs(5), |_| false);
    watched_to_the_end(&mut sim, &mut shell, d, job, Duration::from_secs(90));
    let s = sim.node(d).submitter().get(job).unwrap();
    assert_eq!(s.restart_reasons().len(), 1, "{:?}", s.restart_reasons());
    assert!(s.restart_reasons()[0].contains(&format!("node {} holding rank(s)", sim.addr(n[0]))));
    assert!(s.ranks().iter().any(|r| r.node == Some(sim.addr(n[3]))), "{:?}", s.ranks());
}

#[test]
fn an_ended_jobs_results_wait_at_its_deputy_when_its_submitting_node_dies() {
    let t0 = Instant::now();
    // Node 0 submits and runs nothing; nodes 1 to 3 run a rank each, which
    // prints a line and leaves an output file.
    let (mut sim, n) = net_with(4, t0, |i| resources(u32::from(i > 0)));
    let mut shell = SimShell::new(Some(Duration::from_secs(5)));
    shell.output_file = Some(bytes::Bytes::from_static(b"the answer\n"));
    let mut desc = JobDescription::run("/bin/prog", vec![], 3);
    desc.outputfiles.push("out.txt".into());
    tool(
        &mut sim,
        n[0],
        1,
        ToolRequest::Submit { nonce: 1, xml: desc.to_xml(), base_dir: "/home".into(), watch: true },
    );
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    let job = submitted(&shell, n[0], 1);
    let deputies = sim.node(n[0]).submitter().get(job).map(|s| s.deputies()).unwrap();
    assert_eq!(deputies.len(), 2);
    let d = *n.iter().find(|&&i| sim.addr(i) == deputies[0]).unwrap();
    shell.run(&mut sim, Duration::from_secs(60), |s| s.ended(n[0], 1));
    let at_home = shell.on(n[0], 1);
    assert!(matches!(at_home.last(), Some(ToolReply::Finished { phase: JobPhase::Done, .. })), "{at_home:?}");
    // The results are at the deputy too, before the submitting node dies.
    shell.run(&mut sim, Duration::from_secs(1), |_| false);
    assert_eq!(sim.node(d).submitter().get(job).map(|s| s.phase()), Some(crate::job::Phase::Finished));
    sim.crash(n[0]);

    // Any node finds them, once the dead node is found out.
    let asker = *n[1..].iter().find(|&&i| !deputies.contains(&sim.addr(i))).unwrap();
    shell.run(&mut sim, Duration::from_secs(15), |_| false);
    tool(&mut sim, asker, 2, ToolRequest::Watch { job });
    shell.run(&mut sim, Duration::from_secs(30), |s| s.ended(asker, 2));
    let got = shell.on(asker, 2);
    let Some(ToolReply::Finished { phase: JobPhase::Done, codes, .. }) = got.last() else { panic!("{got:?}") };
    assert_eq!(codes, &[0, 0, 0]);
    let printed = got.iter().filter(|r| matches!(r, ToolReply::Output { .. })).count();
    assert_eq!(printed, 3, "every rank's line, from the deputy's copy: {got:?}");
    tool(&mut sim, asker, 3, ToolRequest::Status { job: Some(job) });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(asker, 3));
    let Some(ToolReply::Jobs { jobs }) = shell.on(asker, 3).last().copied() else { panic!("{:?}", shell.on(asker, 3)) };
    assert!(deputies.contains(&jobs[0].holder) && jobs[0].phase == JobPhase::Done, "{:?}", jobs[0]);
    assert!(jobs[0].ranks.iter().all(|r| r.exit == Some(0) && r.node.is_some()), "{:?}", jobs[0].ranks);
    // The output files, copied whole to both deputies.
    for d in deputies {
        let d = *n.iter().find(|&&i| sim.addr(i) == d).unwrap();
        for rank in 0..3 {
            let path = format!("/w/node-{d}/adopted-{job}/out.txt.{rank}");
            assert_eq!(shell.files.get(&path).map(Vec::as_slice), Some(&b"the answer\n"[..]), "{path}");
        }
    }
}

#[test]
fn a_watch_from_another_node_follows_the_job_to_its_deputy_and_shows_each_line_once() {
    let t0 = Instant::now();
    let (mut sim, n) = net_with(4, t0, |i| resources(u32::from(i > 0)));
    let mut shell = SimShell::new(Some(Duration::from_secs(30)));
    let xml = JobDescription::run("/bin/prog", vec![], 3).to_xml();
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml, base_dir: "/home".into(), watch: true });
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    let job = submitted(&shell, n[0], 1);
    let deputies = sim.node(n[0]).submitter().get(job).map(|s| s.deputies()).unwrap();
    let asker = *n[1..].iter().find(|&&i| !deputies.contains(&sim.addr(i))).unwrap();
    // Following the job from a node that is not its deputy, every line so far.
    tool(&mut sim, asker, 2, ToolRequest::Watch { job });
    let lines = |s: &SimShell| s.on(asker, 2).iter().filter(|r| matches!(r, ToolReply::Output { .. })).count();
    shell.run(&mut sim, Duration::from_secs(10), |s| lines(s) == 3);
    assert_eq!(lines(&shell), 3, "{:?}", shell.on(asker, 2));
    // The node holding it dies: the watch finds the deputy that took the
    // job over (it looks again while only the dead node is registered) and
    // goes on there; the deputy's replay of the output is not shown twice.
    sim.crash(n[0]);
    shell.run(&mut sim, Duration::from_secs(90), |s| s.ended(asker, 2));
    let got = shell.on(asker, 2);
    assert!(matches!(got.last(), Some(ToolReply::Finished { phase: JobPhase::Done, .. })), "{got:?}");
    assert_eq!(lines(&shell), 3, "each line once: {got:?}");
    let payloads: Vec<&[u8]> = shell
        .replies
        .iter()
        .filter(|r| r.0 == asker && r.1 == 2 && matches!(r.2, ToolReply::Output { .. }))
        .map(|r| &r.3[..])
        .collect();
    for rank in 0..3 {
        let line = format!("hello from {rank}\n");
        assert_eq!(payloads.iter().filter(|p| **p == line.as_bytes()).count(), 1, "{payloads:?}");
    }
}

#[test]
fn the_second_deputy_takes_over_when_the_first_dies_just_after_taking_the_job_over() {
    let t0 = Instant::now();
    // Five one-slot nodes; the submitting node runs rank 0, so the first
    // deputy restarts the job as it takes it over (its old ranks are
    // stopped), and dies before the new run starts.
    let (mut sim, n) = net_with(5, t0, |_| resources(1));
    let mut shell = SimShell::new(Some(Duration::from_secs(30)));
    let mut desc = JobDescription::run("/bin/prog", vec![], 3);
    desc.restart = crate::job::RestartPolicy::Scratch;
    let req = ToolRequest::Submit { nonce: 1, xml: desc.to_xml(), base_dir: "/home".into(), watch: true };
    tool(&mut sim, n[0], 1, req);
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    let job = submitted(&shell, n[0], 1);
    let s = sim.node(n[0]).submitter().get(job).unwrap();
    assert_eq!(s.ranks()[0].node, Some(sim.addr(n[0])), "the submitting node runs rank 0");
    let deputies = s.deputies();
    let at = |a| *n.iter().find(|&&i| sim.addr(i) == a).unwrap();
    let (first, second) = (at(deputies[0]), at(deputies[1]));
    shell.run(&mut sim, Duration::from_secs(2), |_| false);
    sim.crash(n[0]);
    let restarting =
        |sim: &Sim<DaemonNode>| sim.node(first).submitter().get(job).is_some_and(|s| !s.restart_reasons().is_empty());
    for _ in 0..100_000 {
        if restarting(&sim) {
            break;
        }
        sim.step();
    }
    assert!(restarting(&sim), "the first deputy took the job over and restarts it");
    sim.crash(first);
    let asker = *n[1..].iter().find(|&&i| i != first && i != second).unwrap();
    shell.run(&mut sim, Duration::from_secs(20), |_| false);
    watched_to_the_end(&mut sim, &mut shell, asker, job, Duration::from_secs(90));
    let s = sim.node(second).submitter().get(job).expect("held by the second deputy");
    assert!(s.ranks().iter().all(|r| r.node.is_some_and(|a| a != sim.addr(first) && a != sim.addr(n[0]))));
}

#[test]
fn the_node_that_takes_a_job_over_from_a_deputy_that_restarted_it_shows_that_restart() {
    // As above, but the first deputy dies once the run it restarted has
    // started, and its own deputies were told of it: the node that takes
    // the job over from it goes on from that run, and `status` there gives
    // that restart's reason first (it may restart the job again, if a rank
    // ran on the first deputy).
    let mut shell = SimShell::new(Some(Duration::from_secs(30)));
    let (mut sim, n, [first, _], job) = three_ranks_on_five_nodes(&mut shell, true);
    sim.crash(n[0]);
    shell.run(&mut sim, Duration::from_secs(15), |_| false);
    let s = sim.node(first).submitter().get(job).expect("taken over by the first deputy");
    let running = !s.restart_reasons().is_empty() && s.phase() == crate::job::Phase::Running;
    assert!(running, "the first deputy restarted the job: {:?} {:?}", s.phase(), s.restart_reasons());
    let next = *n.iter().find(|&&i| sim.addr(i) == s.deputies()[0]).unwrap();
    let reason = s.restart_reasons()[0].clone();
    assert!(reason.contains(&format!("node {} holding rank(s)", sim.addr(n[0]))), "{reason}");
    sim.crash(first);
    shell.run(&mut sim, Duration::from_secs(20), |_| false);
    let asker = *n[1..].iter().find(|&&i| i != first && i != next).unwrap();
    watched_to_the_end(&mut sim, &mut shell, asker, job, Duration::from_secs(90));
    let s = sim.node(next).submitter().get(job).expect("held by the first deputy's deputy");
    assert_eq!(s.restart_reasons().first(), Some(&reason), "{:?}", s.restart_reasons());
}

/// `p2pjob watch` of `job` at node `at` (tool request 2), to its end within
/// `within`: the replies, the last saying the job is done.
fn watched_to_the_end(
    sim: &mut Sim<DaemonNode>,
    shell: &mut SimShell,
    at: NodeIdx,
    job: JobId,
    within: Duration,
) -> Vec<ToolReply> {
    tool(sim, at, 2, ToolRequest::Watch { job });
    shell.run(sim, within, |s| s.ended(at, 2));
    let got: Vec<ToolReply> = shell.on(at, 2).into_iter().cloned().collect();
    assert!(matches!(got.last(), Some(ToolReply::Finished { phase: JobPhase::Done, .. })), "{got:?}");
    got
}

/// Five one-slot nodes, a job of three ranks submitted at node 0, which
/// runs rank 0 (`at_home`; else no rank), started, and its deputies named
/// and done reading its files back: the network, node 0's first and second
/// deputies, the job.
fn three_ranks_on_five_nodes(
    shell: &mut SimShell,
    at_home: bool,
) -> (Sim<DaemonNode>, Vec<NodeIdx>, [NodeIdx; 2], JobId) {
    let (mut sim, n) = net_with(5, Instant::now(), |i| resources(u32::from(at_home || i > 0)));
    let mut desc = JobDescription::run("/bin/prog", vec![], 3);
    desc.restart = crate::job::RestartPolicy::Scratch;
    let req = ToolRequest::Submit { nonce: 1, xml: desc.to_xml(), base_dir: "/home".into(), watch: true };
    tool(&mut sim, n[0], 1, req);
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    let job = submitted(shell, n[0], 1);
    let s = sim.node(n[0]).submitter().get(job).unwrap();
    assert_eq!(s.ranks()[0].node == Some(sim.addr(n[0])), at_home, "the submitting node runs rank 0");
    let deputies = s.deputies();
    assert_eq!(deputies.len(), 2, "{deputies:?}");
    let at = |a| *n.iter().find(|&&i| sim.addr(i) == a).unwrap();
    let deputies = [at(deputies[0]), at(deputies[1])];
    shell.run(&mut sim, Duration::from_secs(2), |_| false);
    (sim, n, deputies, job)
}

#[test]
fn a_submitting_node_stopping_hands_its_job_to_its_deputy_at_once() {
    let mut shell = SimShell::new(Some(Duration::from_secs(60)));
    let (mut sim, n, [deputy, _], job) = three_ranks_on_five_nodes(&mut shell, true);
    let (first, stopping) = (sim.addr(deputy), sim.addr(n[0]));
    // Followed from a node that is not a deputy, and from the deputy,
    // before the node stops.
    let asker = *n[1..].iter().find(|&&i| i != deputy).unwrap();
    tool(&mut sim, asker, 2, ToolRequest::Watch { job });
    tool(&mut sim, deputy, 3, ToolRequest::Watch { job });
    let lines = |s: &SimShell, at| {
        s.on(at, 2 + u64::from(at == deputy)).iter().filter(|r| matches!(r, ToolReply::Output { .. })).count()
    };
    shell.run(&mut sim, Duration::from_secs(10), |s| lines(s, asker) == 3 && lines(s, deputy) == 3);
    assert_eq!(lines(&shell, asker), 3, "{:?}", shell.on(asker, 2));
    assert_eq!(lines(&shell, deputy), 3, "{:?}", shell.on(deputy, 3));

    sim.command(n[0], crate::node::NodeCommand::Leave).unwrap();
    // Well within the failure timeout: nothing was found lost.
    shell.run(&mut sim, Duration::from_millis(500), |_| false);
    assert!(sim.node(n[0]).submitter().get(job).is_none(), "forgotten where it was submitted");
    let held = sim.node(deputy).submitter().get(job).expect("held by the first deputy");
    assert!(held.restart_reasons().is_empty(), "its ranks run on: {:?}", held.restart_reasons());
    // The stopping node asked it to move its rank: it is nobody's deputy.
    assert!(!held.deputies().contains(&stopping), "{:?}", held.deputies());
    assert!(held.told_deputies().all(|d| d != stopping && d != first), "{:?}", held.deputies());
    // Its rank cannot be asked for a checkpoint: it stays, and nothing
    // keeps the node from stopping.
    assert_eq!(sim.node(n[0]).execution().draining(), 0);
    let told = shell.on(n[0], 1);
    let said = format!("job {job} goes on at its deputy (node ");
    assert!(
        told.iter().any(|r| matches!(r, ToolReply::Error { message } if message.contains(&said)
            && message.contains(&first.to_string()))),
        "{told:?}"
    );
    // The stopping node's rank cannot move (the simulated ranks never take a
    // checkpoint): the node stops it as it goes, and the job restarts at
    // the deputy by its rule, on the other nodes.
    shell.run(&mut sim, Duration::from_secs(5), |_| false);
    sim.crash(n[0]);
    // The watches from the other nodes followed the job to the deputy (on
    // the deputy itself too).
    shell.run(&mut sim, Duration::from_secs(120), |s| s.ended(asker, 2) && s.ended(deputy, 3));
    for got in [shell.on(asker, 2), shell.on(deputy, 3)] {
        assert!(matches!(got.last(), Some(ToolReply::Finished { phase: JobPhase::Done, .. })), "{got:?}");
        assert!(!got.iter().any(|r| matches!(r, ToolReply::Error { .. })), "{got:?}");
    }
    let s = sim.node(deputy).submitter().get(job).unwrap();
    assert_eq!(s.restart_reasons().len(), 1, "{:?}", s.restart_reasons());
    assert!(s.ranks().iter().all(|r| r.node.is_some_and(|a| a != stopping)));
}

#[test]
fn a_job_handed_over_to_a_dead_first_deputy_is_taken_over_by_the_second() {
    let mut shell = SimShell::new(Some(Duration::from_secs(60)));
    let (mut sim, n, [first, second], job) = three_ranks_on_five_nodes(&mut shell, true);
    // The first deputy dies unnoticed just as the submitting node stops.
    sim.crash(first);
    sim.command(n[0], crate::node::NodeCommand::Leave).unwrap();
    shell.run(&mut sim, Duration::from_millis(200), |_| false);
    assert!(sim.node(n[0]).submitter().get(job).is_none(), "forgotten where it was submitted");
    shell.run(&mut sim, Duration::from_secs(20), |_| false);
    let held = sim.node(second).submitter().get(job).expect("held by the second deputy");
    assert!(!held.restart_reasons().is_empty(), "the dead deputy's rank is restarted");
    watched_to_the_end(&mut sim, &mut shell, second, job, Duration::from_secs(120));
}

#[test]
fn a_job_with_a_rank_on_its_way_is_handed_over_once_the_move_settles_or_when_the_stop_presses() {
    // The submitting node runs a rank (so it has ranks to move off), or not
    // (it waits for the job alone).
    for (press, at_home) in [(false, true), (true, true), (false, false)] {
        // Ranks that never exit, nor take a checkpoint: the move waits for
        // its cut until it gives up.
        let mut shell = SimShell::new(None);
        let (mut sim, n, [deputy, _], job) = three_ranks_on_five_nodes(&mut shell, at_home);
        // Each rank registers on its node, so it can be asked for a cut.
        for (rank, at) in placement(&sim, n[0], &n, job).into_iter().enumerate() {
            let register =
                LocalRequest::Register { key: process_key(job, rank as u32), addr: NodeAddr::loopback(60, 4000) };
            local(&mut sim, at, rank as u32, 1, register);
        }
        let s = sim.node(n[0]).submitter().get(job).unwrap();
        let rank = s.ranks().iter().find(|r| r.node == Some(sim.addr(deputy))).unwrap().rank;
        tool(&mut sim, n[0], 2, ToolRequest::Migrate { job, rank, to: None });
        shell.run(&mut sim, Duration::from_millis(200), |_| false);
        assert!(sim.node(n[0]).submitter().get(job).unwrap().moving());
        sim.command(n[0], crate::node::NodeCommand::Leave).unwrap();
        shell.run(&mut sim, Duration::from_secs(1), |_| false);
        assert!(sim.node(n[0]).submitter().get(job).is_some(), "kept while its rank may be moving");
        assert!(sim.node(deputy).submitter().get(job).is_none());
        assert!(sim.node(n[0]).draining() >= 1, "the node waits before it leaves the overlay");
        if press {
            // The shell waited long enough: the job goes as it is.
            sim.command(n[0], crate::node::NodeCommand::Leave).unwrap();
            shell.run(&mut sim, Duration::from_millis(500), |_| false);
        } else {
            let gone = |sim: &Sim<DaemonNode>| sim.node(n[0]).submitter().get(job).is_none();
            shell.run(&mut sim, Duration::from_secs(180), |_| false);
            assert!(gone(&sim), "handed over once the move gave up");
            let asked = shell.on(n[0], 2);
            let failed = |r: &&ToolReply| matches!(r, ToolReply::Error { message } if message.contains("not moved: its checkpoint was not taken"));
            assert!(asked.last().is_some_and(failed), "the move failed: {asked:?}");
        }
        assert!(sim.node(n[0]).submitter().get(job).is_none(), "press {press}");
        assert!(sim.node(deputy).submitter().get(job).is_some(), "press {press}: held by the deputy");
    }
}

#[test]
fn a_job_whose_submitting_node_and_first_deputy_stop_together_goes_to_the_second_at_once() {
    let mut shell = SimShell::new(Some(Duration::from_secs(60)));
    let (mut sim, n, [first, second], job) = three_ranks_on_five_nodes(&mut shell, true);
    sim.command(n[0], crate::node::NodeCommand::Leave).unwrap();
    sim.command(first, crate::node::NodeCommand::Leave).unwrap();
    // Well within the failure timeout, and both still answering.
    shell.run(&mut sim, Duration::from_millis(500), |_| false);
    assert!(sim.node(n[0]).submitter().get(job).is_none(), "forgotten where it was submitted");
    assert!(sim.node(first).submitter().get(job).is_none(), "the first deputy, stopping, took nothing over");
    let held = sim.node(second).submitter().get(job).expect("held by the second deputy");
    assert!(held.restart_reasons().is_empty(), "its ranks run on: {:?}", held.restart_reasons());
}
