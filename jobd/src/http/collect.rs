//! Keeps the page's [`View`] current: one connection to the daemon's control
//! socket asks for the nodes, every job, the ring and the zones (a daemon
//! answers one of the two, as its overlay is Chord or CAN) every [`POLL`], and
//! watches jobs (as `p2pjob wait` does) so progress and output show at once.
//! The documents are published at most every [`PUBLISH_GAP`]. When the daemon
//! cannot be reached the page says so, and the connection is tried again.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use p2pmp_core::job::JobId;
use p2pmp_core::node::control::{ToolReply, ToolRequest};
use tokio::sync::watch;
use tokio::time::Instant;

use super::view::{Docs, View, Watch};
use crate::client::AsyncClient;

/// How often the nodes, the jobs, the ring and the zones are asked for.
pub(crate) const POLL: Duration = Duration::from_millis(1000);
/// Shortest time between two publications of the documents.
const PUBLISH_GAP: Duration = Duration::from_millis(200);
/// How long to wait before connecting again to a daemon that went away.
const RETRY: Duration = Duration::from_secs(1);
/// Watches open at once (each replays its job's output first).
const MAX_WATCHES: usize = 32;

/// What a request id was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Nodes,
    Jobs,
    Ring,
    Zones,
    Watch(JobId),
}

fn unix_ms() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs until the task is dropped (the server stops).
pub(crate) async fn run(control: SocketAddr, mut view: View, docs: watch::Sender<Arc<Docs>>) {
    loop {
        let why = match AsyncClient::connect(control).await {
            Ok(client) => session(client, &mut view, &docs).await,
            Err(e) => e,
        };
        view.error = Some(format!("{why:#}"));
        view.watches_lost();
        docs.send_replace(Arc::new(view.docs()));
        tokio::time::sleep(RETRY).await;
    }
}

/// One connection: returns why it ended.
async fn session(mut c: AsyncClient, view: &mut View, docs: &watch::Sender<Arc<Docs>>) -> anyhow::Error {
    let mut asked: BTreeMap<u64, Asked> = BTreeMap::new();
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut publish_at: Option<Instant> = None;
    view.error = None;
    loop {
        let publish = async {
            match publish_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = poll.tick() => {
                for (req, kind) in [(ToolRequest::Nodes, Asked::Nodes), (ToolRequest::Status { job: None }, Asked::Jobs),
                    (ToolRequest::Ring, Asked::Ring), (ToolRequest::Zones, Asked::Zones)] {
                    if !asked.values().any(|k| *k == kind) {
                        match c.send(req).await {
                            Ok(id) => asked.insert(id, kind),
                            Err(e) => return e,
                        };
                    }
                }
            }
            reply = c.next() => {
                let (id, reply, payload) = match reply {
                    Ok(r) => r,
                    Err(e) => return e,
                };
                let Some(&kind) = asked.get(&id) else { continue };
                let ends = reply.ends_request();
                if ends {
                    asked.remove(&id);
                }
                match (kind, reply) {
                    (Asked::Nodes, ToolReply::Nodes { nodes }) => view.set_nodes(nodes),
                    (Asked::Jobs, ToolReply::Jobs { jobs }) => view.set_jobs(jobs, unix_ms()),
                    (Asked::Ring, reply @ ToolReply::Ring { .. }) => view.set_ring(&reply),
                    (Asked::Zones, reply @ ToolReply::Zones { .. }) => view.set_zones(reply),
                    (Asked::Watch(job), reply) => {
                        view.on_watch(job, reply, &payload, unix_ms());
                        if ends {
                            view.set_watch(job, Watch::Done);
                        }
                    }
                    // An error answer (no overlay yet, ...): asked again next time.
                    _ => {}
                }
                for job in view.due_watches(MAX_WATCHES) {
                    match c.send(ToolRequest::Watch { job }).await {
                        Ok(id) => asked.insert(id, Asked::Watch(job)),
                        Err(e) => return e,
                    };
                    view.set_watch(job, Watch::Open);
                }
                publish_at.get_or_insert_with(|| Instant::now() + PUBLISH_GAP);
            }
            _ = publish => {
                publish_at = None;
                docs.send_replace(Arc::new(view.docs()));
            }
        }
    }
}
