//! Daemon nodes in the simulator: the I/O shell is played by the test, which
//! answers file reads and "runs" processes by reporting their output and exit.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::control::{JobPhase, ToolReply, ToolRequest};
use super::*;
use crate::job::Resources;
use crate::local::{LocalReply, LocalRequest};
use crate::sim::{NodeIdx, Sim, SimConfig};

mod authz;
mod ckpt;
mod deputy;
mod queue;

pub(super) fn resources(slots: u32) -> Resources {
    Resources { os: "linux".into(), arch: "x86_64".into(), cores: 2, mem_mb: 4096, slots, ..Resources::default() }
}

fn net(n: u32, t0: Instant) -> (Sim<DaemonNode>, Vec<NodeIdx>) {
    net_of(n, 2, t0)
}

/// `n` daemon nodes of `slots` slots each, joined (20 virtual seconds).
pub(super) fn net_of(n: u32, slots: u32, t0: Instant) -> (Sim<DaemonNode>, Vec<NodeIdx>) {
    net_with(n, t0, |_| resources(slots))
}

/// `n` daemon nodes, node `i` with resources `res(i)`, joined (20 virtual seconds).
pub(super) fn net_with(n: u32, t0: Instant, res: impl Fn(u32) -> Resources) -> (Sim<DaemonNode>, Vec<NodeIdx>) {
    net_over(n, t0, res, None)
}

/// [`net_with`] over CAN with `can`, or over Chord.
fn net_over(
    n: u32,
    t0: Instant,
    res: impl Fn(u32) -> Resources,
    can: Option<crate::can::CanConfig>,
) -> (Sim<DaemonNode>, Vec<NodeIdx>) {
    let mut sim = Sim::new(SimConfig { codec_roundtrip: true, ..SimConfig::default() }, t0);
    let first = NodeAddr::loopback(1, 7000);
    let mut idx = Vec::new();
    for i in 0..n {
        let addr = NodeAddr::loopback(1 + i, 7000);
        // Each node its own work directory, as each daemon has.
        let mut cfg =
            DaemonConfig::new(res(i), format!("127.0.0.1:{}", 9000 + i), format!("/w/node-{i}"), u64::from(i));
        cfg.can = can.clone();
        if i > 0 {
            cfg.bootstrap = vec![first];
        }
        idx.push(sim.add_node(DaemonNode::new(cfg, addr, t0)));
    }
    sim.run_for(Duration::from_secs(20));
    (sim, idx)
}

/// Plays the I/O shell until `done` or the time limit; returns the tool replies seen.
fn shell(sim: &mut Sim<DaemonNode>, limit: Duration, mut done: impl FnMut(&[ToolReply]) -> bool) -> Vec<ToolReply> {
    let end = sim.now() + limit;
    let mut replies = Vec::new();
    let mut spawned = Vec::new();
    while sim.now() < end && !done(&replies) {
        while let Some(ev) = sim.poll_event() {
            match ev.event {
                NodeEvent::ReadFile { job, file, path } => {
                    let data = Ok(FileData::new(Bytes::from(format!("contents of {path}"))));
                    sim.command(ev.node, NodeCommand::FileRead { job, file, data }).unwrap();
                }
                NodeEvent::Spawn { job, rank, dir, program, env, .. } => {
                    assert_eq!(program, format!("{dir}/prog"));
                    assert!(env.iter().any(|(k, v)| k == "P2PMP_RANK" && *v == rank.to_string()));
                    spawned.push((ev.node, job, rank));
                }
                NodeEvent::ToolReply { reply, .. } => replies.push(reply),
                _ => {}
            }
        }
        for (node, job, rank) in std::mem::take(&mut spawned) {
            let data = Bytes::from(format!("hello from {rank}\n"));
            sim.command(node, NodeCommand::ProcessOutput { job, rank, stream: Stream::Stdout, data }).unwrap();
            sim.command(node, NodeCommand::ProcessExited { job, rank, code: 0 }).unwrap();
        }
        if !sim.step() {
            break;
        }
    }
    replies
}

#[test]
fn a_job_runs_across_three_daemons_and_reports_to_its_watcher() {
    let t0 = Instant::now();
    let (sim, n) = net(3, t0);
    a_job_runs_across(sim, n);
}

#[test]
fn a_job_runs_across_three_can_daemons() {
    let t0 = Instant::now();
    let can = crate::can::CanConfig { dims: 2, ..crate::can::CanConfig::default() };
    let (sim, n) = net_over(3, t0, |_| resources(2), Some(can));
    assert!(n.iter().all(|i| sim.node(*i).overlay_node().can().is_some()));
    a_job_runs_across(sim, n);
}

/// A three-rank job submitted at the first of three daemons runs one rank on each.
fn a_job_runs_across(mut sim: Sim<DaemonNode>, n: Vec<NodeIdx>) {
    assert!(n.iter().all(|i| sim.node(*i).overlay_node().is_joined()));
    let xml = crate::job::JobDescription::run("/bin/prog", vec!["1".into()], 3).to_xml();
    let req = ToolRequest::Submit { nonce: 7, xml, base_dir: "/home".into(), watch: true };
    sim.command(n[0], NodeCommand::Tool { conn: 1, request_id: 1, req }).unwrap();
    let finished = |r: &[ToolReply]| r.iter().any(|r| matches!(r, ToolReply::Finished { .. }));
    let replies = shell(&mut sim, Duration::from_secs(60), finished);
    let Some(ToolReply::Placed { ranks, .. }) = replies.iter().find(|r| matches!(r, ToolReply::Placed { .. })) else {
        panic!("never placed: {replies:?}");
    };
    let mut nodes: Vec<NodeAddr> = ranks.iter().map(|(_, a)| *a).collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "one rank per node: {ranks:?}");
    let outputs = replies.iter().filter(|r| matches!(r, ToolReply::Output { .. })).count();
    assert_eq!(outputs, 3);
    assert!(
        matches!(replies.last(), Some(ToolReply::Finished { phase: JobPhase::Done, codes, .. }) if codes == &[0, 0, 0]),
        "{replies:?}"
    );
}

#[test]
fn a_rank_registers_and_another_resolves_through_the_overlay() {
    let t0 = Instant::now();
    let (mut sim, n) = net(3, t0);
    let key = crate::id::Id::hash("some process");
    let addr = NodeAddr::loopback(50, 4000);
    sim.command(n[0], NodeCommand::Local { conn: 1, request_id: 1, req: LocalRequest::Register { key, addr } })
        .unwrap();
    sim.run_for(Duration::from_secs(2));
    sim.command(n[2], NodeCommand::Local { conn: 5, request_id: 9, req: LocalRequest::Resolve { key } }).unwrap();
    let end = sim.now() + Duration::from_secs(10);
    let mut got = None;
    while sim.now() < end && got.is_none() {
        while let Some(ev) = sim.poll_event() {
            if let NodeEvent::Reply { conn: 5, request_id: 9, reply } = ev.event {
                got = Some(reply);
            }
        }
        sim.step();
    }
    assert_eq!(got, Some(LocalReply::Resolved { key, addrs: vec![addr] }));
}

#[test]
fn unknown_jobs_and_bad_job_files_are_answered_with_errors() {
    let t0 = Instant::now();
    let (mut sim, n) = net(1, t0);
    let req = ToolRequest::Submit { nonce: 1, xml: "<p2pjob>".into(), base_dir: String::new(), watch: true };
    sim.command(n[0], NodeCommand::Tool { conn: 1, request_id: 1, req }).unwrap();
    let job = crate::job::JobId(crate::id::Id::hash("nope"));
    sim.command(n[0], NodeCommand::Tool { conn: 1, request_id: 2, req: ToolRequest::Kill { job } }).unwrap();
    let mut errors = Vec::new();
    while let Some(ev) = sim.poll_event() {
        if let NodeEvent::ToolReply { reply: ToolReply::Error { message }, .. } = ev.event {
            errors.push(message);
        }
    }
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("line 1"), "{}", errors[0]);
}

/// postcard encodes variants by index: these pin the union body and the tool protocol.
#[test]
fn golden_bytes_pin_the_union_body_and_the_tool_protocol() {
    let job = crate::job::JobId(crate::id::Id::ZERO);
    let body = postcard::to_allocvec(&NodeMsg::Job(JobMsg::Done { job })).unwrap();
    let mut want = vec![1u8, 15];
    want.extend([0u8; 20]);
    assert_eq!(body, want);
    assert_eq!(postcard::to_allocvec(&ToolRequest::Nodes).unwrap(), [4]);
    assert_eq!(postcard::to_allocvec(&ToolRequest::Status { job: None }).unwrap(), [2, 0]);
    let fin = ToolReply::Finished { job, phase: JobPhase::Killed, codes: vec![], error: None };
    let mut want = vec![10u8];
    want.extend([0u8; 20]);
    want.extend([5, 0, 0]);
    assert_eq!(postcard::to_allocvec(&fin).unwrap(), want);
    assert!(for_executor(&JobMsg::Kill { job }) && !for_executor(&JobMsg::Exit { job, rank: 0, code: 0 }));
    // Appended variants keep their places.
    assert_eq!(postcard::to_allocvec(&NodeMsg::Heartbeat { running: vec![] }).unwrap(), [2, 0]);
    let fwd = NodeMsg::Tool { fwd: 3, req: ToolRequest::Status { job: None } };
    assert_eq!(postcard::to_allocvec(&fwd).unwrap(), [3, 3, 2, 0]);
    let back = NodeMsg::ToolReply { fwd: 3, reply: ToolReply::OutputEnd { job } };
    let mut want = vec![4u8, 3, 11];
    want.extend([0u8; 20]);
    assert_eq!(postcard::to_allocvec(&back).unwrap(), want);
    assert_eq!(postcard::to_allocvec(&NodeMsg::ToolCancel { fwd: 3 }).unwrap(), [5, 3]);
    assert_eq!(postcard::to_allocvec(&NodeMsg::Relocate { fwd: 3 }).unwrap(), [7, 3]);
    assert_eq!(postcard::to_allocvec(&ToolRequest::Lookup { name: "a".into() }).unwrap(), [6, 1, b'a']);
    assert_eq!(postcard::to_allocvec(&ToolRequest::Query { name: "a".into() }).unwrap(), [7, 1, b'a']);
    assert_eq!(postcard::to_allocvec(&ToolReply::Values { values: vec![] }).unwrap(), [13, 0]);
    assert_eq!(postcard::to_allocvec(&ToolRequest::Ring).unwrap(), [8]);
    let a = NodeAddr("127.0.0.1:7".parse().unwrap());
    let ring = ToolReply::Ring { me: a, predecessor: None, successors: vec![], fingers: vec![(3, a)] };
    assert_eq!(postcard::to_allocvec(&ring).unwrap(), [15, 0, 127, 0, 0, 1, 7, 0, 0, 1, 3, 0, 127, 0, 0, 1, 7]);
    let staging = ToolReply::Staging { job, node: a, done: 1, total: 2 };
    let mut want = vec![16u8];
    want.extend([0u8; 20]);
    want.extend([0, 127, 0, 0, 1, 7, 1, 2]);
    assert_eq!(postcard::to_allocvec(&staging).unwrap(), want);
    let fetching = ToolReply::Fetching { job, rank: 1, name: "f".into(), done: 1, total: 2 };
    let mut want = vec![17u8];
    want.extend([0u8; 20]);
    want.extend([1, 1, b'f', 1, 2]);
    assert_eq!(postcard::to_allocvec(&fetching).unwrap(), want);
    assert!(!staging.ends_request() && !fetching.ends_request() && ring.ends_request());
}

#[test]
fn golden_bytes_pin_the_zones_request_and_reply() {
    use super::control::NodeZones;
    assert_eq!(postcard::to_allocvec(&ToolRequest::Zones).unwrap(), [9]);
    let a = NodeAddr("127.0.0.1:7".parse().unwrap());
    let b = NodeAddr("127.0.0.1:8".parse().unwrap());
    let (lo, hi) = crate::can::Zone::root(2).halves().unwrap();
    let nodes = vec![NodeZones { node: a, zones: vec![lo, hi], neighbours: vec![b] }];
    let zones = ToolReply::Zones { me: a, dims: 2, nodes };
    #[rustfmt::skip]
    let want = [18, 0, 127, 0, 0, 1, 7, 2, // variant, me, dims
        1, 0, 127, 0, 0, 1, 7, // one node: its address
        2, 1, 2, 0, 0, 1, 2, 128, 128, 128, 128, 8, 0, // two zones: depth 1, corner (0,0) and (2^31,0)
        1, 0, 127, 0, 0, 1, 8]; // one neighbour
    assert_eq!(postcard::to_allocvec(&zones).unwrap(), want);
    assert!(zones.ends_request());
    let fwd = NodeMsg::Tool { fwd: 3, req: ToolRequest::Zones };
    assert_eq!(postcard::to_allocvec(&fwd).unwrap(), [3, 3, 9]);
    // Malformed zones are refused, not taken: a corner off the split grid, too many dimensions.
    let mut bad = want;
    bad[20] = 129;
    assert!(postcard::from_bytes::<ToolReply>(&bad).is_err());
    let mut nine = vec![18, 0, 127, 0, 0, 1, 7, 2, 1, 0, 127, 0, 0, 1, 7, 1, 0, 9];
    nine.extend([0; 9]);
    nine.push(0);
    assert!(postcard::from_bytes::<ToolReply>(&nine).is_err());
    // Every truncation of a good reply is an error, never a panic.
    for n in 0..want.len() {
        assert!(postcard::from_bytes::<ToolReply>(&want[..n]).is_err(), "{n} bytes");
    }
}

#[test]
fn a_can_node_tells_the_zones_of_the_whole_network() {
    let t0 = Instant::now();
    let can = crate::can::CanConfig { dims: 2, ..crate::can::CanConfig::default() };
    let (mut sim, n) = net_over(4, t0, |_| resources(2), Some(can));
    let mut shell = Shell::new(None);
    tool(&mut sim, n[2], 1, ToolRequest::Zones);
    shell.run(&mut sim, Duration::from_secs(10), |s| s.ended(n[2], 1));
    let got = shell.on(n[2], 1);
    let Some(ToolReply::Zones { me, dims, nodes }) = got.last().copied() else { panic!("{got:?}") };
    assert_eq!((*me, *dims), (sim.addr(n[2]), 2));
    let mut want: Vec<NodeAddr> = n.iter().map(|i| sim.addr(*i)).collect();
    want.sort();
    assert_eq!(nodes.iter().map(|z| z.node).collect::<Vec<_>>(), want, "every node, sorted");
    // Each node tells the zones it owns and the neighbours it knows: together
    // they tile the space, and neighbourhood is mutual.
    for (z, i) in nodes.iter().zip(want.iter().map(|a| n.iter().find(|i| sim.addr(**i) == *a).unwrap())) {
        assert_eq!(z.zones, sim.node(*i).overlay_node().can().unwrap().zones());
    }
    let all: Vec<crate::can::Zone> = nodes.iter().flat_map(|z| z.zones.iter().copied()).collect();
    assert!(crate::can::volumes_sum_to_one(&all), "{all:?}");
    for z in nodes {
        assert!(!z.neighbours.is_empty() && !z.neighbours.contains(&z.node), "{z:?}");
        for other in &z.neighbours {
            let o = nodes.iter().find(|y| y.node == *other).unwrap();
            assert!(o.neighbours.contains(&z.node), "{z:?} / {o:?}");
        }
    }
    // A Chord node has no zones, and says so.
    let (mut sim, n) = net(2, t0);
    tool(&mut sim, n[0], 1, ToolRequest::Zones);
    shell.run(&mut sim, Duration::from_secs(5), |s| s.ended(n[0], 1));
    let got = shell.on(n[0], 1);
    assert!(matches!(got.last(), Some(ToolReply::Error { message }) if message.contains("Chord")), "{got:?}");
}

use super::sim_shell::SimShell as Shell;

pub(super) fn tool(sim: &mut Sim<DaemonNode>, node: NodeIdx, conn: ConnId, req: ToolRequest) {
    sim.command(node, NodeCommand::Tool { conn, request_id: conn, req }).unwrap();
}

pub(super) fn submitted(shell: &Shell, node: NodeIdx, conn: ConnId) -> crate::job::JobId {
    shell
        .on(node, conn)
        .iter()
        .find_map(|r| match r {
            ToolReply::Submitted { job, .. } => Some(*job),
            _ => None,
        })
        .expect("submitted")
}

#[test]
fn any_node_answers_for_a_job_held_by_another_and_replays_its_output() {
    let t0 = Instant::now();
    let (mut sim, n) = net(3, t0);
    let mut shell = Shell::new(Some(Duration::ZERO));
    let xml = crate::job::JobDescription::run("/bin/prog", vec![], 3).to_xml();
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml, base_dir: "/home".into(), watch: true });
    shell.run(&mut sim, Duration::from_secs(60), |s| s.ended(n[0], 1));
    let job = submitted(&shell, n[0], 1);
    // Status from another node: forwarded to the holder.
    tool(&mut sim, n[2], 2, ToolRequest::Status { job: Some(job) });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(n[2], 2));
    let Some(ToolReply::Jobs { jobs }) = shell.on(n[2], 2).last().copied() else { panic!("{:?}", shell.on(n[2], 2)) };
    assert_eq!((jobs.len(), jobs[0].holder, jobs[0].phase), (1, sim.addr(n[0]), JobPhase::Done));
    // A watch attached after the end replays every rank's output, then the end.
    tool(&mut sim, n[1], 3, ToolRequest::Watch { job });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(n[1], 3));
    let got = shell.on(n[1], 3);
    let outputs: Vec<u32> =
        got.iter().filter_map(|r| if let ToolReply::Output { rank, .. } = r { Some(*rank) } else { None }).collect();
    assert_eq!(outputs, vec![0, 1, 2], "{got:?}");
    assert!(matches!(got.last(), Some(ToolReply::Finished { phase: JobPhase::Done, .. })), "{got:?}");
    // Output of one rank, from a third node, with its bytes.
    tool(&mut sim, n[2], 4, ToolRequest::Output { job, rank: Some(1) });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(n[2], 4));
    let bytes: Vec<&Bytes> = shell
        .replies
        .iter()
        .filter(|r| r.0 == n[2] && r.1 == 4 && matches!(r.2, ToolReply::Output { .. }))
        .map(|r| &r.3)
        .collect();
    assert_eq!(bytes, vec![&Bytes::from("hello from 1\n")]);
    assert!(matches!(shell.on(n[2], 4).last(), Some(ToolReply::OutputEnd { .. })));
    // Every node's jobs, asked of one.
    tool(&mut sim, n[1], 5, ToolRequest::Status { job: None });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(n[1], 5));
    assert!(
        matches!(shell.on(n[1], 5).last(), Some(ToolReply::Jobs { jobs }) if jobs.len() == 1 && jobs[0].job == job)
    );
    // A rank the job does not have, and a kill of the job now over: both said so.
    tool(&mut sim, n[2], 7, ToolRequest::Output { job, rank: Some(7) });
    tool(&mut sim, n[2], 8, ToolRequest::Kill { job });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(n[2], 7) && s.ended(n[2], 8));
    let said = |conn| match shell.on(n[2], conn).last() {
        Some(ToolReply::Error { message }) => message.clone(),
        other => panic!("{other:?}"),
    };
    assert!(said(7).contains("has 3 rank(s): no rank 7"), "{}", said(7));
    assert!(said(8).contains("has already ended: nothing to kill"), "{}", said(8));
    // A job nobody holds.
    let nope = crate::job::JobId(crate::id::Id::hash("nope"));
    tool(&mut sim, n[2], 6, ToolRequest::Kill { job: nope });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(n[2], 6));
    assert!(matches!(shell.on(n[2], 6).last(), Some(ToolReply::Error { message }) if message.contains("no job")));
}

#[test]
fn a_finished_job_is_forgotten_with_its_logs_and_key_after_the_retention() {
    let t0 = Instant::now();
    let (mut sim, n) = net(2, t0);
    let mut shell = Shell::new(Some(Duration::ZERO));
    let xml = crate::job::JobDescription::run("/bin/prog", vec![], 2).to_xml();
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml, base_dir: "/home".into(), watch: true });
    shell.run(&mut sim, Duration::from_secs(60), |s| s.ended(n[0], 1));
    let job = submitted(&shell, n[0], 1);
    assert_eq!(sim.node(n[0]).held_jobs(), 1);
    assert!(shell.files.keys().any(|p| p.contains(&format!("out-{job}"))), "logs kept: {:?}", shell.files.keys());
    // The default retention is an hour: just short of it the job is still there ...
    sim.run_for(Duration::from_secs(3590));
    assert_eq!(sim.node(n[0]).held_jobs(), 1);
    sim.run_for(Duration::from_secs(20));
    shell.run(&mut sim, Duration::from_secs(1), |_| false);
    // ... and then gone, with its logs and its key.
    assert_eq!(sim.node(n[0]).held_jobs(), 0);
    assert!(shell.removed.iter().any(|p| p.ends_with(&format!("out-{job}"))), "{:?}", shell.removed);
    assert!(!shell.files.keys().any(|p| p.contains(&format!("out-{job}"))));
    assert_eq!(sim.node(n[0]).submitter().jobs().count(), 0);
    tool(&mut sim, n[1], 2, ToolRequest::Status { job: Some(job) });
    shell.run(&mut sim, Duration::from_secs(20), |s| s.ended(n[1], 2));
    assert!(matches!(shell.on(n[1], 2).last(), Some(ToolReply::Error { message }) if message.contains("no job")));
}

#[test]
fn a_silent_executor_fails_the_job_within_the_failure_timeout_naming_it() {
    let t0 = Instant::now();
    let (mut sim, n) = net(2, t0);
    let mut shell = Shell::new(None); // ranks never exit
    let xml = crate::job::JobDescription::run("/bin/prog", vec![], 4).to_xml();
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml, base_dir: "/home".into(), watch: true });
    let started = |s: &Shell| s.on(n[0], 1).iter().filter(|r| matches!(r, ToolReply::Started { .. })).count() == 4;
    shell.run(&mut sim, Duration::from_secs(60), started);
    assert!(started(&shell));
    sim.partition(n[0], n[1]);
    let cut = sim.now();
    shell.run(&mut sim, Duration::from_secs(60), |s| s.ended(n[0], 1));
    let took = sim.now() - cut;
    let Some(ToolReply::Finished { phase: JobPhase::Failed, error: Some(e), .. }) = shell.on(n[0], 1).last().copied()
    else {
        panic!("{:?}", shell.on(n[0], 1));
    };
    assert!(e.contains(&format!("node {} holding rank(s)", sim.addr(n[1]))) && e.contains("stopped answering"), "{e}");
    // The default failure timeout is 10 s, checked every 1 s heartbeat.
    assert!(took > Duration::from_secs(10) && took <= Duration::from_secs(12), "{took:?}");
    // The executor, cut off too, is the job's deputy: it takes the job over,
    // finds the ranks on the node cut off lost in turn, and stops its own.
    shell.run(&mut sim, Duration::from_secs(15), |_| false);
    assert_eq!(sim.node(n[1]).execution().jobs().count(), 0);
    let adopted = sim.node(n[1]).submitter().jobs().map(|s| s.phase()).collect::<Vec<_>>();
    assert_eq!(adopted, [crate::job::Phase::Finished]);
}

#[test]
fn an_output_file_that_could_not_be_written_whole_fails_the_job_naming_it() {
    let t0 = Instant::now();
    let (mut sim, n) = net(2, t0);
    let mut shell = Shell::new(Some(Duration::from_millis(10)));
    shell.output_file = Some(Bytes::from(vec![7u8; 100 << 10]));
    shell.lose_writes_to = Some("out.txt.1".into());
    let mut desc = crate::job::JobDescription::run("/bin/prog", vec![], 2);
    desc.outputfiles.push("out.txt".into());
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml: desc.to_xml(), base_dir: "/h".into(), watch: true });
    shell.run(&mut sim, Duration::from_secs(60), |s| s.ended(n[0], 1));
    let got = shell.on(n[0], 1);
    let Some(ToolReply::Finished { phase: JobPhase::Failed, error: Some(e), .. }) = got.last() else {
        panic!("a lost output file must fail the job: {got:?}")
    };
    assert!(e.contains("/h/out.txt.1") && !e.contains("out.txt.0"), "{e}");
    assert_eq!(shell.files.get("/h/out.txt.0").map(Vec::len), Some(100 << 10), "the other file is whole");
}

#[test]
fn a_watch_shows_staging_and_output_files_coming_back_and_a_node_tells_its_ring() {
    let t0 = Instant::now();
    let (mut sim, n) = net(2, t0);
    let mut shell = Shell::new(Some(Duration::from_millis(10)));
    shell.output_file = Some(Bytes::from(vec![7u8; 300 << 10]));
    let mut desc = crate::job::JobDescription::run("/bin/prog", vec![], 4);
    desc.outputfiles.push("out.txt".into());
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml: desc.to_xml(), base_dir: "/h".into(), watch: true });
    shell.run(&mut sim, Duration::from_secs(60), |s| s.ended(n[0], 1));
    let got = shell.on(n[0], 1);
    assert!(matches!(got.last(), Some(ToolReply::Finished { phase: JobPhase::Done, .. })), "{got:?}");
    // Per node, staging starts at 0 and ends with everything that travelled there.
    let mut staged: BTreeMap<NodeAddr, Vec<(u64, u64)>> = BTreeMap::new();
    for r in &got {
        if let ToolReply::Staging { node, done, total, .. } = r {
            staged.entry(*node).or_default().push((*done, *total));
        }
    }
    assert_eq!(staged.len(), 2, "both nodes hold ranks: {got:?}");
    for steps in staged.values() {
        let (first, last) = (steps[0], steps[steps.len() - 1]);
        assert!(first.0 == 0 && last.1 > 0 && last.0 == last.1, "{steps:?}");
    }
    // Every rank's output file comes back in chunks, up to its whole length.
    for rank in 0..4 {
        let steps: Vec<(u64, u64)> = got
            .iter()
            .filter_map(|r| match r {
                ToolReply::Fetching { rank: r, name, done, total, .. } if *r == rank && name == "out.txt" => {
                    Some((*done, *total))
                }
                _ => None,
            })
            .collect();
        assert!(steps.len() >= 2 && steps.windows(2).all(|w| w[0].0 < w[1].0), "rank {rank}: {steps:?}");
        assert_eq!(steps.last(), Some(&(300 << 10, 300 << 10)));
    }
    // The ring as the node sees it.
    tool(&mut sim, n[1], 2, ToolRequest::Ring);
    shell.run(&mut sim, Duration::from_secs(5), |s| s.ended(n[1], 2));
    let Some(ToolReply::Ring { me, predecessor, successors, fingers }) = shell.on(n[1], 2).last().copied() else {
        panic!("{:?}", shell.on(n[1], 2))
    };
    assert_eq!((*me, *predecessor, successors.first()), (sim.addr(n[1]), Some(sim.addr(n[0])), Some(&sim.addr(n[0]))));
    assert!(fingers.iter().all(|(_, a)| *a == sim.addr(n[0])) && !fingers.is_empty(), "{fingers:?}");
}
