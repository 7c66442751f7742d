//! Daemon nodes in the simulator: the I/O shell is played by the test, which
//! answers file reads and "runs" processes by reporting their output and exit.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::control::{JobPhase, ToolReply, ToolRequest};
use super::*;
use crate::job::Resources;
use crate::local::{LocalReply, LocalRequest};
use crate::sim::{NodeIdx, Sim, SimConfig};

fn resources(slots: u32) -> Resources {
    Resources { os: "linux".into(), arch: "x86_64".into(), cores: 2, mem_mb: 4096, slots, ..Resources::default() }
}

fn net(n: u32, t0: Instant) -> (Sim<DaemonNode>, Vec<NodeIdx>) {
    let mut sim = Sim::new(SimConfig { codec_roundtrip: true, ..SimConfig::default() }, t0);
    let first = NodeAddr::loopback(1, 7000);
    let mut idx = Vec::new();
    for i in 0..n {
        let addr = NodeAddr::loopback(1 + i, 7000);
        let mut cfg = DaemonConfig::new(resources(2), format!("127.0.0.1:{}", 9000 + i), "/w", u64::from(i));
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
    let (mut sim, n) = net(3, t0);
    assert!(n.iter().all(|i| sim.node(*i).chord().is_joined()));
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
}
