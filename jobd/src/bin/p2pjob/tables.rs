//! The tables `p2pjob nodes` and `p2pjob top` print.

use std::fmt::Write;

use p2pmp_core::node::control::JobStatus;
use p2pmp_jobd::json::{parse_nodes, phase_is_over, phase_name};

/// Every node of the `res:any` lines, one a row.
pub(crate) fn nodes(values: &[String]) -> String {
    let mut out = format!(
        "{:<22} {:<7} {:<8} {:>5} {:>8} {:>9} {:>5} {:>6}  tags\n",
        "node", "os", "arch", "cores", "mem_mb", "mem_free", "slots", "load"
    );
    for (a, r) in &parse_nodes(values) {
        let tags: Vec<&str> = r.tags.iter().map(String::as_str).collect();
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
            tags.join(",")
        );
    }
    out
}

/// Ranks running and exited.
pub(crate) fn rank_counts(j: &JobStatus) -> (usize, usize) {
    let running = j.ranks.iter().filter(|r| r.started && r.exit.is_none()).count();
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
