//! `p2pjob checkpoint JOB`: ask a running job's ranks for a coordinated
//! checkpoint, print how many the request reached and (unless `--no-wait`) the
//! cut they took.

use std::time::Duration;

use p2pmp_core::job::JobId;
use p2pmp_core::node::control::{ToolReply, ToolRequest};
use p2pmp_jobd::Client;
use serde_json::json;

use crate::tables;

/// Asks for a checkpoint of `job` and prints how many ranks it reached, then
/// (with `wait`) the cut once it is taken.
pub(crate) fn ask(c: &mut Client, job: JobId, wait: bool, json: bool) -> anyhow::Result<()> {
    let id = c.send(ToolRequest::Checkpoint { job })?;
    // The first answer comes at once (from the job's node, maybe through
    // another); the cut comes at the ranks' next safe point, however late.
    let mut limit = Some(Duration::from_secs(20));
    loop {
        let (rid, reply, _) = c.next(limit)?;
        if rid != id {
            continue;
        }
        match reply {
            ToolReply::CheckpointAsked { ranks, .. } => {
                if json {
                    println!("{}", json!({"job": job.to_string(), "asked": ranks}));
                } else {
                    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
                    println!("checkpoint of job {job} asked of {} rank(s): {}", ranks.len(), list.join(", "));
                }
                if !wait {
                    return Ok(());
                }
                limit = None;
            }
            ToolReply::CheckpointTaken { cut, .. } => {
                if json {
                    println!("{}", p2pmp_jobd::json::cut(job, &cut));
                } else {
                    println!("{}", tables::cut(&cut));
                }
                return Ok(());
            }
            ToolReply::Error { message } => anyhow::bail!("{message}"),
            other => anyhow::bail!("unexpected answer {other:?}"),
        }
    }
}
