//! `p2pjob checkpoint` and the checkpoint lines of `p2pjob status` across
//! daemon nodes in the simulator: the test plays the ranks on their control
//! connections (register, take the pushed request, report).

use std::time::{Duration, Instant};

use super::{net_of, submitted, tool};
use crate::ckpt::{CheckpointInfo, CutInfo};
use crate::job::{JobDescription, JobId, process_key};
use crate::local::{LocalReply, LocalRequest, PUSH_ID};
use crate::machine::NodeAddr;
use crate::node::control::{ToolReply, ToolRequest};
use crate::node::sim_shell::SimShell;
use crate::node::{DaemonNode, NodeCommand};
use crate::sim::{NodeIdx, Sim};

/// A rank's control connection: its number is 100 + rank.
fn conn_of(rank: u32) -> u64 {
    100 + u64::from(rank)
}

pub(super) fn local(sim: &mut Sim<DaemonNode>, node: NodeIdx, rank: u32, request_id: u64, req: LocalRequest) {
    sim.command(node, NodeCommand::Local { conn: conn_of(rank), request_id, req }).unwrap();
}

/// The node running each rank of `job`, as its holder placed them.
pub(super) fn placement(sim: &Sim<DaemonNode>, holder: NodeIdx, n: &[NodeIdx], job: JobId) -> Vec<NodeIdx> {
    let ranks = sim.node(holder).submitter().get(job).expect("held").ranks().to_vec();
    let at = |a: NodeAddr| *n.iter().find(|&&i| sim.addr(i) == a).expect("a node of the net");
    ranks.iter().map(|r| at(r.node.expect("placed"))).collect()
}

fn ckpt(epoch: u64, rank: u32) -> CheckpointInfo {
    CheckpointInfo { epoch, unix_ms: 5_000 + u64::from(rank), stored_bytes: 100 + u64::from(rank), raw_bytes: 400 }
}

#[test]
fn a_checkpoint_asked_of_any_node_reaches_every_rank_and_status_shows_each_ranks_file() {
    let t0 = Instant::now();
    let (mut sim, n) = net_of(2, 1, t0);
    let mut shell = SimShell::new(None);
    let xml = JobDescription::run("/bin/prog", vec![], 2).to_xml();
    tool(&mut sim, n[0], 1, ToolRequest::Submit { nonce: 1, xml, base_dir: "/h".into(), watch: false });
    shell.run(&mut sim, Duration::from_secs(30), |s| s.spawned == 2);
    let job = submitted(&shell, n[0], 1);
    let at = placement(&sim, n[0], &n, job);
    assert_ne!(at[0], at[1], "one rank per one-slot node");
    // Each rank registers its process key on its own control connection.
    for rank in 0..2 {
        let register = LocalRequest::Register { key: process_key(job, rank), addr: NodeAddr::loopback(60, 4000) };
        local(&mut sim, at[rank as usize], rank, 1, register);
    }
    // Asked of the node that does not hold the job: forwarded to the holder.
    tool(&mut sim, n[1], 2, ToolRequest::Checkpoint { job });
    let pushed = |s: &SimShell| {
        s.rank_replies
            .iter()
            .filter(|(_, _, id, r)| *id == PUSH_ID && *r == LocalReply::CheckpointWanted { request: 1 })
            .map(|(node, conn, _, _)| (*node, *conn))
            .collect::<Vec<_>>()
    };
    shell.run(&mut sim, Duration::from_secs(10), |s| pushed(s).len() == 2 && !s.on(n[1], 2).is_empty());
    let mut got = pushed(&shell);
    got.sort();
    let mut want = vec![(at[0], conn_of(0)), (at[1], conn_of(1))];
    want.sort();
    assert_eq!(got, want, "each rank asked once, on its own connection");
    assert_eq!(shell.on(n[1], 2), [&ToolReply::CheckpointAsked { job, ranks: vec![0, 1] }]);
    // The ranks take the cut and report it.
    for rank in 0..2 {
        local(&mut sim, at[rank as usize], rank, 2, LocalRequest::Checkpointed { ckpt: ckpt(1, rank), request: 1 });
    }
    shell.run(&mut sim, Duration::from_secs(10), |s| s.ended(n[1], 2));
    let cut = CutInfo { epoch: 1, unix_ms: 5_001, stored_bytes: 201, raw_bytes: 800, ranks: 2 };
    assert_eq!(shell.on(n[1], 2).last(), Some(&&ToolReply::CheckpointTaken { job, cut }));
    let noted = shell.rank_replies.iter().filter(|(_, _, id, r)| *id == 2 && *r == LocalReply::Noted).count();
    assert_eq!(noted, 2, "each report is answered");
    // Status from either node: each rank's node and last checkpoint.
    tool(&mut sim, n[1], 3, ToolRequest::Status { job: Some(job) });
    shell.run(&mut sim, Duration::from_secs(10), |s| s.ended(n[1], 3));
    let Some(ToolReply::Jobs { jobs }) = shell.on(n[1], 3).last().copied() else { panic!("{:?}", shell.on(n[1], 3)) };
    for (rank, r) in jobs[0].ranks.iter().enumerate() {
        let rank = rank as u32;
        assert_eq!(r.node, Some(sim.addr(at[rank as usize])));
        assert_eq!(r.checkpoints.last, Some(ckpt(1, rank)));
        assert!(r.checkpoints.recoveries.is_empty());
    }
}

#[test]
fn a_checkpoint_of_an_unknown_or_finished_job_says_so_and_a_stray_report_is_refused() {
    let t0 = Instant::now();
    let (mut sim, n) = net_of(2, 1, t0);
    let mut shell = SimShell::new(Some(Duration::from_millis(10)));
    let nope = JobId(crate::id::Id::hash("nope"));
    tool(&mut sim, n[1], 1, ToolRequest::Checkpoint { job: nope });
    shell.run(&mut sim, Duration::from_secs(10), |s| s.ended(n[1], 1));
    let error = |s: &SimShell, node, conn| match s.on(node, conn).last() {
        Some(ToolReply::Error { message }) => message.clone(),
        other => panic!("{other:?}"),
    };
    assert!(error(&shell, n[1], 1).contains(&format!("no job {nope} in the network")));
    // A job that ran to its end.
    let xml = JobDescription::run("/bin/prog", vec![], 1).to_xml();
    tool(&mut sim, n[0], 2, ToolRequest::Submit { nonce: 2, xml, base_dir: "/h".into(), watch: true });
    shell.run(&mut sim, Duration::from_secs(30), |s| s.ended(n[0], 2));
    let job = submitted(&shell, n[0], 2);
    tool(&mut sim, n[0], 3, ToolRequest::Checkpoint { job });
    shell.run(&mut sim, Duration::from_secs(10), |s| s.ended(n[0], 3));
    assert_eq!(error(&shell, n[0], 3), format!("job {job} has no running rank to checkpoint: it is over"));
    // A report on a connection that serves no rank running here.
    local(&mut sim, n[0], 7, 9, LocalRequest::Checkpointed { ckpt: ckpt(1, 7), request: 0 });
    shell.run(&mut sim, Duration::from_secs(1), |_| false);
    assert!(shell.rank_replies.iter().any(|(_, conn, id, r)| (*conn, *id) == (conn_of(7), 9)
        && *r == LocalReply::Failed { error: crate::local::LocalError::Refused }));
}

/// postcard encodes variants by index: the checkpoint request and replies
/// come after every older one, and a rank's status carries its checkpoints.
#[test]
fn golden_bytes_pin_the_checkpoint_request_and_replies() {
    let job = JobId(crate::id::Id::ZERO);
    let mut want = vec![11u8];
    want.extend([0u8; 20]);
    assert_eq!(postcard::to_allocvec(&ToolRequest::Checkpoint { job }).unwrap(), want);
    let asked = ToolReply::CheckpointAsked { job, ranks: vec![2] };
    let mut want = vec![20u8];
    want.extend([0u8; 20]);
    want.extend([1, 2]);
    assert_eq!(postcard::to_allocvec(&asked).unwrap(), want);
    let cut = CutInfo { epoch: 1, unix_ms: 2, stored_bytes: 3, raw_bytes: 4, ranks: 5 };
    let taken = ToolReply::CheckpointTaken { job, cut };
    let mut want = vec![21u8];
    want.extend([0u8; 20]);
    want.extend([1, 2, 3, 4, 5]);
    assert_eq!(postcard::to_allocvec(&taken).unwrap(), want);
    assert!(!asked.ends_request() && taken.ends_request());
    let mut want = vec![12u8];
    want.extend([0u8; 20]);
    want.extend([3, 0]);
    let migrate = ToolRequest::Migrate { job, rank: 3, to: None };
    assert_eq!(postcard::to_allocvec(&migrate).unwrap(), want);
    let to = NodeAddr::loopback(5, 7400);
    let moved = postcard::to_allocvec(&ToolRequest::Migrate { job, rank: 3, to: Some(to) }).unwrap();
    assert_eq!(moved[..23], [&[12u8][..], &[0u8; 20], &[3, 1]].concat(), "Some(to) after the rank");
    assert!(migrate.about_a_job() && migrate.streams());
    let from = NodeAddr::loopback(2, 7000);
    let migrated = ToolReply::Migrated { job, rank: 3, from, to: None, epoch: 4 };
    let bytes = postcard::to_allocvec(&migrated).unwrap();
    assert_eq!(bytes[..22], [&[22u8][..], &[0u8; 20], &[3]].concat());
    assert_eq!(bytes.last(), Some(&4));
    assert!(migrated.ends_request());
    assert!(ToolRequest::Checkpoint { job }.about_a_job() && ToolRequest::Checkpoint { job }.streams());
    let secret = crate::auth::SecretKey::from_seed([7; 32]);
    assert!(ToolRequest::Checkpoint { job }.sign(&secret, 1, 2, Vec::new()).streams(), "signed, it still streams");
    let rank = crate::node::control::RankStatus {
        rank: 1,
        node: None,
        started: true,
        exit: None,
        checkpoints: crate::ckpt::RankCheckpoints { last: Some(ckpt(1, 0)), recoveries: vec![], recovered: 0 },
    };
    let bytes = postcard::to_allocvec(&rank).unwrap();
    assert_eq!(bytes, [1, 0, 1, 0, 1, 1, 0x88, 0x27, 100, 0x90, 0x03, 0, 0]);
}
