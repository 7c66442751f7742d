//! A job outlives its submitting node: the deputy takes it over, and any
//! node answers for it there.

use std::time::{Duration, Instant};

use super::{net_with, resources, submitted, tool};
use crate::job::JobDescription;
use crate::node::control::{JobPhase, ToolReply, ToolRequest};
use crate::node::sim_shell::SimShell;

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
    tool(&mut sim, asker, 2, ToolRequest::Watch { job });
    shell.run(&mut sim, Duration::from_secs(60), |s| s.ended(asker, 2));
    let got = shell.on(asker, 2);
    assert!(matches!(got.last(), Some(ToolReply::Finished { phase: JobPhase::Done, .. })), "{got:?}");
    let exits = got.iter().filter(|r| matches!(r, ToolReply::Exited { code: 0, .. })).count();
    assert_eq!(exits, 3, "{got:?}");
    // What the ranks printed before the takeover too (the deputy kept a copy).
    let printed = got.iter().filter(|r| matches!(r, ToolReply::Output { .. })).count();
    assert_eq!(printed, 3, "{got:?}");
    tool(&mut sim, asker, 3, ToolRequest::Status { job: Some(job) });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(asker, 3));
    let Some(ToolReply::Jobs { jobs }) = shell.on(asker, 3).last().copied() else { panic!("{:?}", shell.on(asker, 3)) };
    assert_eq!((jobs[0].holder, jobs[0].phase), (deputy, JobPhase::Done));
    // Every executor is done with it.
    for &i in &n[1..] {
        assert_eq!(sim.node(i).execution().jobs().count(), 0, "node {i}");
    }
}

#[test]
fn without_its_deputy_too_the_job_stops_on_every_node() {
    let t0 = Instant::now();
    let (mut sim, n) = net_with(4, t0, |i| resources(u32::from(i > 0)));
    let mut shell = SimShell::new(None);
    let xml = JobDescription::run("/bin/prog", vec![], 3).to_xml();
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml, base_dir: "/home".into(), watch: true });
    let started = |s: &SimShell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 3;
    shell.run(&mut sim, Duration::from_secs(60), started);
    let job = submitted(&shell, n[0], 1);
    let deputy = sim.node(n[0]).submitter().get(job).and_then(|s| s.deputy()).unwrap();
    let d = *n.iter().find(|&&i| sim.addr(i) == deputy).unwrap();
    sim.crash(n[0]);
    sim.crash(d);
    // The others wait for the deputy for the adoption timeout, then stop.
    shell.run(&mut sim, Duration::from_secs(50), |_| false);
    let left: usize = n[1..].iter().filter(|&&i| i != d).map(|&i| sim.node(i).execution().jobs().count()).sum();
    assert_eq!(left, 2, "waiting for the deputy");
    shell.run(&mut sim, Duration::from_secs(30), |_| false);
    let left: usize = n[1..].iter().filter(|&&i| i != d).map(|&i| sim.node(i).execution().jobs().count()).sum();
    assert_eq!(left, 0);
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
    tool(&mut sim, d, 2, ToolRequest::Watch { job });
    shell.run(&mut sim, Duration::from_secs(90), |s| s.ended(d, 2));
    let got = shell.on(d, 2);
    assert!(matches!(got.last(), Some(ToolReply::Finished { phase: JobPhase::Done, .. })), "{got:?}");
    let s = sim.node(d).submitter().get(job).unwrap();
    assert_eq!(s.restart_reasons().len(), 1, "{:?}", s.restart_reasons());
    assert!(s.restart_reasons()[0].contains(&format!("node {} holding rank(s)", sim.addr(n[0]))));
    assert!(s.ranks().iter().any(|r| r.node == Some(sim.addr(n[3]))), "{:?}", s.ranks());
}
