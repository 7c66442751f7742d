//! `p2pjob checkpoint JOB`: ask a running job's ranks for a coordinated
//! checkpoint, print how many the request reached and (unless `--no-wait`) the
//! cut they took; `p2pjob migrate JOB RANK`: move a rank off its node through
//! such a checkpoint.

use std::time::Duration;

use p2pmp_core::job::JobId;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::{ToolReply, ToolRequest};
use p2pmp_jobd::Client;
use serde_json::json;

use crate::tables;

/// Follows the answers to request `id`: `on` gets each, and says when it is
/// the last (with its result). The first comes within 20 s (from the job's
/// node, maybe through another); the rest come at the ranks' next safe
/// point, however late.
fn follow(c: &mut Client, id: u64, mut on: impl FnMut(ToolReply) -> anyhow::Result<bool>) -> anyhow::Result<()> {
    let mut limit = Some(Duration::from_secs(20));
    loop {
        let (rid, reply, _) = c.next(limit)?;
        if rid != id {
            continue;
        }
        limit = None;
        if let ToolReply::Error { message } = reply {
            anyhow::bail!("{message}");
        }
        if on(reply)? {
            return Ok(());
        }
    }
}

/// Asks for a checkpoint of `job` and prints how many ranks it reached, then
/// (with `wait`) the cut once it is taken.
pub(crate) fn ask(c: &mut Client, job: JobId, wait: bool, json: bool) -> anyhow::Result<()> {
    let id = c.send(ToolRequest::Checkpoint { job })?;
    follow(c, id, |reply| match reply {
        ToolReply::CheckpointAsked { ranks, .. } => {
            if json {
                println!("{}", json!({"job": job.to_string(), "asked": ranks}));
            } else if !ranks.is_empty() {
                let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
                println!("checkpoint of job {job} asked of {} rank(s): {}", ranks.len(), list.join(", "));
            }
            // A request that reached no rank fails next, saying why.
            Ok(!wait && !ranks.is_empty())
        }
        ToolReply::CheckpointTaken { cut, .. } => {
            if json {
                println!("{}", p2pmp_jobd::json::cut(job, &cut));
            } else {
                println!("{}", tables::cut(&cut));
            }
            Ok(true)
        }
        other => anyhow::bail!("unexpected answer {other:?}"),
    })
}

/// Asks to move `rank` of `job` off its node (to node `to`, if named);
/// prints the ranks the checkpoint reached, then where the rank moved from.
pub(crate) fn migrate(c: &mut Client, job: JobId, rank: u32, to: Option<NodeAddr>, json: bool) -> anyhow::Result<()> {
    let id = c.send(ToolRequest::Migrate { job, rank, to })?;
    follow(c, id, |reply| match reply {
        ToolReply::CheckpointAsked { ranks, .. } => {
            if !json {
                println!("moving rank {rank} of job {job}: checkpoint asked of {} rank(s)", ranks.len());
            }
            Ok(false)
        }
        ToolReply::Moved { from, to, epoch, .. } => {
            if json {
                let (from, to) = (from.to_string(), to.to_string());
                let line = json!({"job": job.to_string(), "rank": rank, "from": from, "to": to, "epoch": epoch, "alone": true});
                println!("{line}");
            } else {
                println!(
                    "rank {rank} of job {job} moved off node {from} to node {to}, resuming from checkpoint {epoch}; \
                     the other ranks went on"
                );
            }
            Ok(true)
        }
        ToolReply::Migrated { from, to, epoch, .. } => {
            if json {
                let (from, to) = (from.to_string(), to.map(|t| t.to_string()));
                let line = json!({"job": job.to_string(), "rank": rank, "from": from, "to": to, "epoch": epoch, "alone": false});
                println!("{line}");
            } else {
                let toward = to.map_or_else(String::new, |t| format!(" (asked to go to node {t})"));
                println!(
                    "rank {rank} of job {job} moves off node {from}{toward}: the job restarts from checkpoint {epoch}"
                );
            }
            Ok(true)
        }
        other => anyhow::bail!("unexpected answer {other:?}"),
    })
}
