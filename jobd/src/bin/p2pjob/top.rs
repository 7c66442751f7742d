//! `p2pjob top`: the network's jobs and nodes, asked of the daemon and redrawn
//! every interval until Ctrl-C (one frame with `--once`; JSON lines with `--json`).

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::bail;
use p2pmp_core::node::control::{JobStatus, ToolReply, ToolRequest};
use p2pmp_jobd::Client;
use p2pmp_jobd::json::phase_is_over;
use serde_json::json;

use crate::tables;

/// Finished jobs shown below the others.
const FINISHED_SHOWN: usize = 10;

fn ask(c: &mut Client) -> anyhow::Result<(Vec<String>, Vec<JobStatus>)> {
    let nodes = match c.call(ToolRequest::Nodes, Duration::from_secs(15))? {
        ToolReply::Nodes { nodes } => nodes,
        ToolReply::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer {other:?}"),
    };
    let jobs = match c.call(ToolRequest::Status { job: None }, Duration::from_secs(15))? {
        ToolReply::Jobs { jobs } => jobs,
        ToolReply::Error { message } => bail!("{message}"),
        other => bail!("unexpected answer {other:?}"),
    };
    Ok((nodes, jobs))
}

/// One frame: a summary line, the jobs, the nodes.
fn frame(node: SocketAddr, every: Duration, nodes: &[String], jobs: &[JobStatus]) -> String {
    let live = jobs.iter().filter(|j| !phase_is_over(j.phase)).count();
    let running: usize = jobs.iter().map(|j| tables::rank_counts(j).0).sum();
    format!(
        "p2pmp top: {} node(s), {} job(s) ({live} not over, {running} rank(s) running); asked of {node} every {:.1} s\n\n{}\n{}",
        nodes.len(),
        jobs.len(),
        every.as_secs_f64(),
        tables::jobs(jobs, FINISHED_SHOWN),
        tables::nodes(nodes)
    )
}

pub(crate) fn run(node: SocketAddr, every: Duration, once: bool, json: bool) -> anyhow::Result<()> {
    let mut c = Client::connect(node)?;
    let tty = std::io::stdout().is_terminal();
    loop {
        let (nodes, jobs) = ask(&mut c)?;
        let mut out = std::io::stdout().lock();
        if json {
            let v = json!({"nodes": p2pmp_jobd::json::nodes(&nodes)["nodes"], "jobs": p2pmp_jobd::json::jobs(&jobs)["jobs"]});
            writeln!(out, "{v}")?;
        } else {
            // Home and clear, then the frame at once: no flicker.
            let clear = if tty && !once { "\x1b[H\x1b[2J" } else { "" };
            write!(out, "{clear}{}", frame(node, every, &nodes, &jobs))?;
        }
        out.flush()?;
        drop(out);
        if once {
            return Ok(());
        }
        std::thread::sleep(every);
    }
}
