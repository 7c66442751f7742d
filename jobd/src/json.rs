//! The JSON shapes of what a daemon tells about jobs and nodes, written once:
//! `p2pjob status --json` and `p2pjob nodes --json` print them, and the status
//! page's API (`/api/jobs`, `/api/nodes`) serves them; `p2pjob checkpoint
//! --json` prints a cut.

use p2pmp_core::ckpt::{CheckpointInfo, CutInfo, RankCheckpoints};
use p2pmp_core::job::{JobId, Resources};
use p2pmp_core::node::control::{JobPhase, JobStatus};
use serde_json::{Value, json};

/// The word for a job's phase, as status lines and JSON write it.
pub fn phase_name(p: JobPhase) -> &'static str {
    match p {
        JobPhase::Resolving => "resolving",
        JobPhase::Queued => "queued",
        JobPhase::Placing => "placing",
        JobPhase::Running => "running",
        JobPhase::Done => "done",
        JobPhase::Failed => "failed",
        JobPhase::Killed => "killed",
    }
}

/// Whether a job in this phase is over.
pub fn phase_is_over(p: JobPhase) -> bool {
    matches!(p, JobPhase::Done | JobPhase::Failed | JobPhase::Killed)
}

/// One checkpoint file of a rank.
pub fn checkpoint(c: &CheckpointInfo) -> Value {
    json!({"epoch": c.epoch, "unix_ms": c.unix_ms, "stored_bytes": c.stored_bytes, "raw_bytes": c.raw_bytes})
}

/// What a rank reported of its checkpoints: `checkpoint` (its last one, or
/// null), `recoveries` (the newest ones kept) and `recovered` (how many in all).
fn rank_checkpoints(c: &RankCheckpoints) -> (Value, Value, u32) {
    let recoveries = c.recoveries.iter().map(|r| json!({"epoch": r.epoch, "unix_ms": r.unix_ms})).collect();
    (c.last.as_ref().map_or(Value::Null, checkpoint), Value::Array(recoveries), c.recovered)
}

/// A job's cut, as `p2pjob checkpoint --json` prints it.
pub fn cut(job: JobId, c: &CutInfo) -> Value {
    json!({"job": job.to_string(), "epoch": c.epoch, "unix_ms": c.unix_ms, "stored_bytes": c.stored_bytes,
        "raw_bytes": c.raw_bytes, "ranks": c.ranks})
}

/// One job, as `p2pjob status --json` lists it.
pub fn job(j: &JobStatus) -> Value {
    let ranks: Vec<Value> = j
        .ranks
        .iter()
        .map(|r| {
            let (checkpoint, recoveries, recovered) = rank_checkpoints(&r.checkpoints);
            json!({"rank": r.rank, "node": r.node.map(|n| n.to_string()), "started": r.started, "exit": r.exit,
                "checkpoint": checkpoint, "recoveries": recoveries, "recovered": recovered})
        })
        .collect();
    json!({"job": j.job.to_string(), "holder": j.holder.to_string(), "executable": j.executable,
        "phase": phase_name(j.phase), "waiting": j.waiting, "ranks": ranks, "error": j.error,
        "restarts": j.restarts, "moves": j.moves})
}

/// Every job: `{"jobs": [...]}`.
pub fn jobs(jobs: &[JobStatus]) -> Value {
    json!({"jobs": jobs.iter().map(job).collect::<Vec<_>>()})
}

/// The nodes of `res:any` lines (unparsable ones left out), by address.
pub fn parse_nodes(values: &[String]) -> Vec<(String, Resources)> {
    values.iter().filter_map(|v| Resources::parse_any_value(v).ok()).map(|(a, r)| (a.to_string(), r)).collect()
}

/// One node, as `p2pjob nodes --json` lists it.
pub fn node(addr: &str, r: &Resources) -> Value {
    json!({"addr": addr, "os": r.os, "arch": r.arch, "cores": r.cores, "mem_mb": r.mem_mb,
        "slots": r.slots, "slots_total": r.slots_total, "load": r.load(), "mem_free_mb": r.mem_free_mb,
        "tags": r.tags.iter().collect::<Vec<_>>(), "attributes": r.extra})
}

/// Every node of the `res:any` lines: `{"nodes": [...]}`.
pub fn nodes(values: &[String]) -> Value {
    json!({"nodes": parse_nodes(values).iter().map(|(a, r)| node(a, r)).collect::<Vec<_>>()})
}

#[cfg(test)]
mod tests {
    use p2pmp_core::id::Id;
    use p2pmp_core::machine::NodeAddr;
    use p2pmp_core::node::control::RankStatus;

    use super::*;

    #[test]
    fn a_job_and_a_node_in_json() {
        let a = NodeAddr("127.0.0.1:7400".parse().unwrap());
        let ckpt = CheckpointInfo { epoch: 2, unix_ms: 1_700_000_000_000, stored_bytes: 10, raw_bytes: 30 };
        let mut checkpoints = RankCheckpoints::default();
        checkpoints.written(ckpt);
        checkpoints.recovered(p2pmp_core::ckpt::RecoveryInfo { epoch: 1, unix_ms: 5 });
        let ranks = vec![
            RankStatus { rank: 0, node: Some(a), started: true, exit: Some(-11), checkpoints },
            RankStatus { rank: 1, node: None, started: false, exit: None, checkpoints: RankCheckpoints::default() },
        ];
        let s = JobStatus {
            job: JobId(Id::ZERO),
            executable: "ring".into(),
            phase: JobPhase::Failed,
            ranks,
            error: Some("rank 0 was killed by SIGSEGV".into()),
            holder: a,
            waiting: None,
            restarts: vec!["node 127.0.0.1:7401 holding rank(s) [1] was lost".into()],
            moves: vec!["rank 1 moved off node 127.0.0.1:7401 to node 127.0.0.1:7402, from checkpoint 2".into()],
        };
        let v = jobs(&[s]);
        assert_eq!(v["jobs"][0]["phase"], "failed");
        assert_eq!(v["jobs"][0]["ranks"][0]["node"], "127.0.0.1:7400");
        assert_eq!(v["jobs"][0]["ranks"][0]["exit"], -11);
        assert_eq!(v["jobs"][0]["ranks"][0]["checkpoint"]["stored_bytes"], 10);
        assert_eq!(v["jobs"][0]["ranks"][0]["checkpoint"]["epoch"], 2);
        assert_eq!(v["jobs"][0]["ranks"][0]["recoveries"][0]["epoch"], 1);
        assert_eq!(v["jobs"][0]["ranks"][0]["recovered"], 1);
        assert!(v["jobs"][0]["ranks"][1]["checkpoint"].is_null());
        let c = cut(JobId(Id::ZERO), &CutInfo::of([&ckpt]));
        assert_eq!((c["epoch"].as_u64(), c["ranks"].as_u64(), c["raw_bytes"].as_u64()), (Some(2), Some(1), Some(30)));
        assert_eq!(v["jobs"][0]["job"], "0".repeat(40));
        assert_eq!(v["jobs"][0]["restarts"][0], "node 127.0.0.1:7401 holding rank(s) [1] was lost");
        assert_eq!(
            v["jobs"][0]["moves"][0],
            "rank 1 moved off node 127.0.0.1:7401 to node 127.0.0.1:7402, from checkpoint 2"
        );
        let r =
            Resources { os: "linux".into(), slots: 2, slots_total: 4, load_milli: Some(1500), ..Resources::default() };
        let line = r.any_value(a);
        let v = nodes(&[line, "garbage".into()]);
        assert_eq!(v["nodes"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            (v["nodes"][0]["addr"].as_str(), v["nodes"][0]["load"].as_f64()),
            (Some("127.0.0.1:7400"), Some(1.5))
        );
        assert!(phase_is_over(JobPhase::Killed) && !phase_is_over(JobPhase::Queued));
    }
}
