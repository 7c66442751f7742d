//! The tables `p2pjob nodes` and `p2pjob top` print.

use std::fmt::Write;

use p2pmp_core::ckpt::{CheckpointInfo, CutInfo};
use p2pmp_core::job::describe_exit;
use p2pmp_core::node::control::{JobStatus, RankStatus};
use p2pmp_jobd::json::{parse_nodes, phase_is_over, phase_name};

/// Every node of the `res:any` lines, one a row.
pub(crate) fn nodes(values: &[String]) -> String {
    let mut out = format!(
        "{:<22} {:<7} {:<8} {:>5} {:>8} {:>9} {:>5} {:>6}  tags and attributes\n",
        "node", "os", "arch", "cores", "mem_mb", "mem_free", "slots", "load"
    );
    for (a, r) in &parse_nodes(values) {
        let attributes = r.extra.iter().map(|(k, v)| format!("{k}={v}"));
        let labels: Vec<String> = r.tags.iter().cloned().chain(attributes).collect();
        let slots = if r.slots_total > 0 { format!("{}/{}", r.slots, r.slots_total) } else { r.slots.to_string() };
        let free = r.mem_free_mb.map_or("-".to_owned(), |m| m.to_string());
        let load = r.load().map_or("-".to_owned(), |l| format!("{l:.2}"));
        let _ = writeln!(
            out,
            "{a:<22} {:<7} {:<8} {:>5} {:>8} {free:>9} {slots:>5} {load:>6}  {}",
            r.os,
            r.arch,
            r.cores,
            r.mem_mb,
            labels.join(",")
        );
    }
    out
}

/// Ranks running and exited. None runs once the job is over: a rank stopped
/// with its job (killed, or a peer failed) has no exit of its own.
pub(crate) fn rank_counts(j: &JobStatus) -> (usize, usize) {
    let over = phase_is_over(j.phase);
    let running = j.ranks.iter().filter(|r| !over && r.started && r.exit.is_none()).count();
    (running, j.ranks.iter().filter(|r| r.exit.is_some()).count())
}

/// Jobs one a row, those not over first; at most `over` of those that are.
pub(crate) fn jobs(jobs: &[JobStatus], over: usize) -> String {
    let mut out =
        format!("{:<12} {:<9} {:>13}  {:<22} {:<20} note\n", "job", "state", "run/exit/all", "held by", "program");
    let (live, done): (Vec<&JobStatus>, Vec<&JobStatus>) = jobs.iter().partition(|j| !phase_is_over(j.phase));
    for j in live.iter().chain(done.iter().take(over)) {
        let (running, exited) = rank_counts(j);
        let id = j.job.to_string();
        let program = j.executable.rsplit('/').next().unwrap_or(&j.executable);
        let note = j.error.as_deref().or(j.waiting.as_deref()).unwrap_or("");
        let counts = format!("{running}/{exited}/{}", j.ranks.len());
        let _ = writeln!(
            out,
            "{:<12} {:<9} {counts:>13}  {:<22} {program:<20} {note}",
            &id[..12],
            phase_name(j.phase),
            j.holder.to_string()
        );
    }
    if done.len() > over {
        let _ = writeln!(out, "({} older finished job(s) not shown)", done.len() - over);
    }
    out
}

/// A wall-clock stamp (ms since the Unix epoch) as an HTTP date (UTC).
pub(crate) fn when(unix_ms: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms))
}

/// A rank's state in words (`over`: its job is).
fn rank_state(r: &RankStatus, over: bool) -> String {
    match (r.exit, r.started, r.node) {
        (Some(code), _, _) => describe_exit(code),
        (None, true, _) if over => "stopped".to_owned(),
        (None, false, _) if over => "not started".to_owned(),
        (None, true, _) => "running".to_owned(),
        (None, false, Some(_)) => "placed".to_owned(),
        (None, false, None) => "waiting".to_owned(),
    }
}

/// A checkpoint file in words: epoch, time, sizes.
fn checkpoint(c: &CheckpointInfo) -> String {
    format!("epoch {} at {}: {} bytes stored, {} bytes raw", c.epoch, when(c.unix_ms), c.stored_bytes, c.raw_bytes)
}

/// A cut in words, as `p2pjob checkpoint` prints it.
pub(crate) fn cut(c: &CutInfo) -> String {
    format!(
        "checkpoint epoch {} taken at {}: {} bytes stored, {} bytes raw, over {} rank(s)",
        c.epoch,
        when(c.unix_ms),
        c.stored_bytes,
        c.raw_bytes,
        c.ranks
    )
}

/// Every rank of a job, one a line: its node, its state, its last checkpoint
/// (or none), then a line per recovery.
pub(crate) fn ranks(j: &JobStatus) -> String {
    let mut out = String::new();
    let over = phase_is_over(j.phase);
    for r in &j.ranks {
        let node = r.node.map_or("-".to_owned(), |n| n.to_string());
        let last = r.checkpoints.last.as_ref().map_or("none".to_owned(), checkpoint);
        let _ = writeln!(out, "  rank {:<4} on {node:<22} {:<10} checkpoint {last}", r.rank, rank_state(r, over));
        let forgotten = (r.checkpoints.recovered as usize).saturating_sub(r.checkpoints.recoveries.len());
        if forgotten > 0 {
            let _ = writeln!(out, "    ({forgotten} earlier recoveries not kept)");
        }
        for rec in &r.checkpoints.recoveries {
            let _ = writeln!(out, "    recovered from epoch {} at {}", rec.epoch, when(rec.unix_ms));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use p2pmp_core::id::Id;
    use p2pmp_core::job::JobId;
    use p2pmp_core::machine::NodeAddr;
    use p2pmp_core::node::control::JobPhase;

    use super::*;

    #[test]
    fn a_node_row_shows_its_tags_and_attributes() {
        let line = "127.0.0.1:7400 os=linux arch=x86_64 cores=2 mem_mb=1024 slots=2 criu=no tags=gpu".to_owned();
        let table = nodes(&[line]);
        let row = table.lines().nth(1).expect("a row");
        assert!(row.starts_with("127.0.0.1:7400") && row.ends_with("gpu,criu=no"), "{table}");
    }

    #[test]
    fn a_rank_without_an_exit_runs_only_while_its_job_does() {
        let a = NodeAddr("127.0.0.1:7400".parse().unwrap());
        let rank =
            |rank, node, started, exit| RankStatus { rank, node, started, exit, checkpoints: Default::default() };
        let mut j = JobStatus {
            job: JobId(Id::ZERO),
            executable: "ring".into(),
            phase: JobPhase::Running,
            ranks: vec![rank(0, Some(a), true, None), rank(1, Some(a), true, Some(0)), rank(2, None, false, None)],
            error: None,
            holder: a,
            waiting: None,
            restarts: Vec::new(),
            moves: Vec::new(),
        };
        let states = |j: &JobStatus| {
            let over = phase_is_over(j.phase);
            j.ranks.iter().map(|r| rank_state(r, over)).collect::<Vec<_>>()
        };
        assert_eq!(rank_counts(&j), (1, 1));
        assert_eq!(states(&j), ["running", "exited with code 0", "waiting"]);
        j.phase = JobPhase::Killed;
        assert_eq!(rank_counts(&j), (0, 1), "none runs once the job is over");
        assert_eq!(states(&j), ["stopped", "exited with code 0", "not started"]);
    }
}
